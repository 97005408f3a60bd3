"""Moved to `mrope_tracker.core.canvas`; this path stays for existing imports (the same module object)."""

import sys

from .core import canvas as _moved

sys.modules[__name__] = _moved
