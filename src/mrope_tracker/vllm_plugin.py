"""Moved to `mrope_tracker.vllm.plugin`; this path stays for existing imports and plugin entry points."""

import sys

from .vllm import plugin as _moved

sys.modules[__name__] = _moved
