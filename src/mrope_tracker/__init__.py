"""mrope_tracker: exact, incremental M-RoPE positions for multimodal LLM serving."""

from .config import SUPPORTED_MODEL_TYPES, MRopeConfig

__all__ = ["MRopeConfig", "SUPPORTED_MODEL_TYPES"]
