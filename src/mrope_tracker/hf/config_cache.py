"""Moved to `mrope_tracker.core.config_cache` (the SGLang drop-ins use it too); this path keeps working."""

from ..core.config_cache import parsed_config  # noqa: F401
