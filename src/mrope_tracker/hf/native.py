"""The installed transformers' own ``get_rope_index``, run without a model.

Every family's ``get_rope_index`` reads only ``self.config`` (and, for the
Omni thinkers and the transformers 5 VL models, a few helper methods and
``self.spatial_merge_size``). `rope_index` builds the family's real
transformers config class from a config dict and calls the method unbound on
a small stand-in that carries those, so no weight is ever created. It serves
as the oracle of the drop-in tests and as the baseline of the ``hf``
benchmark suite, on either transformers line:

- 4.x: ``get_rope_index(input_ids, image_grid_thw, video_grid_thw, ...)``;
- 5.x VL models: the same plus ``mm_token_type_ids``, which the processors
  return with the ids; `rope_index` makes them with `hf.mm_token_type_ids`.

`config_dict` writes an `MRopeConfig`'s values as a published-style config
dict, for callers that have no config file.
"""

from __future__ import annotations

import functools
import importlib
import json
import types
from collections.abc import Callable

import numpy as np
import torch

from ..core.config import MRopeConfig
from ..families import FAMILIES

__all__ = ["available", "config_dict", "prepare", "rope_index", "supported_model_types"]

# model_type -> (module under transformers.models, class owning get_rope_index, config class, nested key or None)
_MODELS = {
    model_type: (*classes, family.model_types[model_type] or None)
    for family in FAMILIES.values()
    for model_type, classes in family.transformers_classes.items()
}
_HELPERS = ("get_llm_pos_ids_for_vision", "get_chunked_index", "get_vision_position_ids")


def available() -> bool:
    """Whether transformers can be imported."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def supported_model_types() -> list[str]:
    """The model types the installed transformers has a get_rope_index for."""
    out = []
    for model_type, (module, *_rest) in _MODELS.items():
        try:
            importlib.import_module(f"transformers.models.{module}.modeling_{module}")
        except ImportError:
            continue
        out.append(model_type)
    return out


def config_dict(config: MRopeConfig) -> dict:
    """`config`'s values as a published config.json would hold them (ids at
    the top level or in the thinker; numbers that are integers as ints), as
    its family writes them (`Family.config_dict`)."""
    write = config.spec.config_dict
    if write is None:
        raise ValueError(f"config.family: expected a family with a transformers config, got {config.family!r}")
    return write(config)


@functools.lru_cache(maxsize=32)
def _stand_in(config_json: str):
    """(model class, an object holding what its get_rope_index reads)."""
    from transformers.utils import logging as hf_logging

    config = json.loads(config_json)
    model_type = config.get("model_type")
    if model_type not in _MODELS:
        raise ValueError(f"config.model_type: expected one of {sorted(_MODELS)}, got {model_type!r}")
    module_name, model_name, config_name, nested = _MODELS[model_type]
    try:
        modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
        configuration = importlib.import_module(f"transformers.models.{module_name}.configuration_{module_name}")
    except ImportError as exc:
        raise ValueError(f"config.model_type: the installed transformers has no {module_name} ({exc})") from None
    source = config[nested] if nested else config
    source = {k: v for k, v in source.items() if not k.startswith("_")}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # trimmed configs make rope validation chatty
    try:
        hf_config = getattr(configuration, config_name)(**source)
    finally:
        hf_logging.set_verbosity(verbosity)
    model_cls = getattr(modeling, model_name)
    stub = types.SimpleNamespace(config=hf_config, spatial_merge_size=hf_config.vision_config.spatial_merge_size)
    for helper in _HELPERS:
        if hasattr(model_cls, helper):
            setattr(stub, helper, types.MethodType(getattr(model_cls, helper), stub))
    return model_cls, stub


def _tensor(value, dtype, width: int | None = None):
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value
    tensor = torch.as_tensor(np.asarray(value, dtype=dtype))
    return tensor.reshape(-1, width) if width is not None else tensor


def rope_index(config, input_ids, image_grid_thw=None, video_grid_thw=None, attention_mask=None, **kwargs):
    """The installed transformers' ``get_rope_index`` on a batch:
    ``((3, B, L), (B, 1))``, exactly as it returns them.

    `config`: a config dict (published-style) or an `MRopeConfig` (through
    `config_dict`). Arguments as `hf.get_rope_index` takes them
    (`second_per_grid_ts`, `audio_feature_lengths`, `use_audio_in_video`,
    `mm_token_type_ids` by keyword); array-likes become the tensors the
    processors make (int64 ids, grids and lengths, float32
    second_per_grid_ts), tensors pass as they are. None stays None, so the
    Omni thinkers see what they are given (their model passes a mask).
    `mm_token_type_ids` is made from the ids for transformers 5 when None."""
    return prepare(config, input_ids, image_grid_thw, video_grid_thw, attention_mask, **kwargs)()


def prepare(
    config,
    input_ids,
    image_grid_thw=None,
    video_grid_thw=None,
    attention_mask=None,
    *,
    second_per_grid_ts=None,
    audio_feature_lengths=None,
    use_audio_in_video: bool = False,
    mm_token_type_ids=None,
) -> Callable[[], tuple]:
    """`rope_index` as a call with no arguments: the stand-in and the tensors
    are made once, the call runs transformers' method alone (for timing)."""
    if isinstance(config, MRopeConfig):
        config = config_dict(config)
    model_cls, stub = _stand_in(json.dumps(config, sort_keys=True))
    method = model_cls.get_rope_index
    ids = _tensor(input_ids, np.int64)
    mask = _tensor(attention_mask, np.int64)
    images = _tensor(image_grid_thw, np.int64, 3)
    videos = _tensor(video_grid_thw, np.int64, 3)
    sp = _tensor(second_per_grid_ts, np.float32)
    params = method.__code__.co_varnames[: method.__code__.co_argcount]
    if "audio_seqlens" in params:  # the Omni thinkers (both lines)
        audio = _tensor(audio_feature_lengths, np.int64)
        av = bool(use_audio_in_video)
        return lambda: method(
            stub, ids, images, videos, mask, use_audio_in_video=av, audio_seqlens=audio, second_per_grids=sp
        )
    kwargs = {"attention_mask": mask}
    if "second_per_grid_ts" in params:
        kwargs["second_per_grid_ts"] = sp
    elif sp is not None:
        raise ValueError(f"second_per_grid_ts: {config.get('model_type')} takes none, got {second_per_grid_ts!r}")
    if "mm_token_type_ids" in params:  # transformers 5
        if mm_token_type_ids is None:
            from .drop_in import mm_token_type_ids as make_types

            mm_token_type_ids = make_types(config, ids)
        kwargs["mm_token_type_ids"] = _tensor(mm_token_type_ids, np.int64)
    return lambda: method(stub, ids, image_grid_thw=images, video_grid_thw=videos, **kwargs)
