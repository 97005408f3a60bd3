"""transformers' own ``get_rope_index`` as a benchmark baseline, without weights.

In transformers 4.x each VL model's ``get_rope_index`` is a method that
reads nothing but ``self.config`` (the token ids, the merge size, and for
Qwen2.5-VL the vision config's ``tokens_per_second``). We call the method
unbound on a stand-in whose ``config`` carries those values from our
`MRopeConfig`, so no model, weight or config file is needed. Inputs are
given as the model receives them from its processor: a (1, L) int64 tensor
of ids and int64 grid tensors, built once outside the timed call.

Covered: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V/4.5V. `available()` says
whether transformers can be imported; the prompt suite skips this baseline
when it cannot.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable

import numpy as np
import torch

from mrope_tracker import MRopeConfig

# family -> (module under transformers.models, model class)
_MODELS = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLModel"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLModel"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLModel"),
    "glm4v": ("glm4v", "Glm4vModel"),
}


def available() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def version() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


def _stand_in(config: MRopeConfig):
    """(the model class, an object with the `config` its get_rope_index reads)."""
    module_name, class_name = _MODELS[config.family]
    modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    vision = types.SimpleNamespace(
        spatial_merge_size=config.spatial_merge_size,
        tokens_per_second=config.tokens_per_second,
    )
    hf_config = types.SimpleNamespace(
        vision_config=vision,
        image_token_id=config.image_token_id,
        video_token_id=config.video_token_id,
        vision_start_token_id=config.vision_start_token_id,
        vision_end_token_id=config.vision_end_token_id,
        # GLM brackets its videos; transformers names begin/end_of_image image_start/end
        image_start_token_id=config.vision_start_token_id,
        image_end_token_id=config.vision_end_token_id,
        video_start_token_id=config.video_start_token_id,
        video_end_token_id=config.video_end_token_id,
    )
    return getattr(modeling, class_name), types.SimpleNamespace(config=hf_config)


def rope_index_call(config: MRopeConfig, token_ids, kwargs: dict) -> Callable[[], tuple]:
    """A no-argument call of transformers' get_rope_index on one prompt,
    with its tensors prepared; it returns ((3, 1, L) positions, (1, 1) delta)."""
    model_cls, stub = _stand_in(config)
    ids = torch.as_tensor(np.asarray(token_ids, dtype=np.int64)).reshape(1, -1)
    images = kwargs.get("image_grid_thw")
    videos = kwargs.get("video_grid_thw")
    images = None if images is None else torch.as_tensor(np.asarray(images, dtype=np.int64))
    videos = None if videos is None else torch.as_tensor(np.asarray(videos, dtype=np.int64))
    if config.family == "qwen2_5_vl":
        sp = kwargs.get("second_per_grid_ts")
        sp = None if sp is None else torch.as_tensor(np.asarray(sp, dtype=np.float32))
        return lambda: model_cls.get_rope_index(stub, ids, images, videos, second_per_grid_ts=sp)
    return lambda: model_cls.get_rope_index(stub, ids, images, videos)


def positions(config: MRopeConfig, token_ids, kwargs: dict) -> tuple[np.ndarray, int]:
    """transformers' (3, L) positions and delta for one prompt, as numpy and int."""
    out, delta = rope_index_call(config, token_ids, kwargs)()
    return out[:, 0, :].numpy(), int(delta.reshape(-1)[0])
