"""`patch(model)`: a loaded transformers model computes its M-RoPE positions
with `mrope_tracker.hf.get_rope_index`, in place, until undone.

The replacement takes the model's own ``get_rope_index`` signature (each
family and transformers line has its own: Qwen2.5-VL's ``second_per_grid_ts``,
the Omni thinkers' positional ``use_audio_in_video, audio_seqlens,
second_per_grids``, transformers 5's ``mm_token_type_ids`` and ``**kwargs``),
binds the call as the original would, and maps the arguments to ours.
"""

from __future__ import annotations

import inspect

import torch

from ..core.config import SUPPORTED_MODEL_TYPES, MRopeConfig
from ..families import SEMANTICS
from .drop_in import get_rope_index
from .versions import default_semantics, installed_convention

__all__ = ["Patch", "patch"]


# transformers' argument names -> ours
_ARGUMENTS = {
    "input_ids": "input_ids",
    "image_grid_thw": "image_grid_thw",
    "video_grid_thw": "video_grid_thw",
    "attention_mask": "attention_mask",
    "second_per_grid_ts": "second_per_grid_ts",
    "second_per_grids": "second_per_grid_ts",
    "audio_seqlens": "audio_feature_lengths",
    "use_audio_in_video": "use_audio_in_video",
    "mm_token_type_ids": "mm_token_type_ids",
}


class Patch:
    """What `patch` changed: `undo()` (or calling it, or leaving a ``with``
    block) puts every patched module's own ``get_rope_index`` back."""

    def __init__(self, entries: list[tuple[object, str, object]]) -> None:
        self._entries = entries  # (module, dotted name, what its __dict__ held, or _MISSING)

    @property
    def modules(self) -> list[str]:
        """Dotted names of the patched modules ("" for the model itself)."""
        return [name for _, name, _ in self._entries]

    def undo(self) -> None:
        for module, _, previous in reversed(self._entries):
            if previous is _MISSING:
                module.__dict__.pop("get_rope_index", None)
            else:
                module.__dict__["get_rope_index"] = previous
        self._entries = []

    __call__ = undo

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


_MISSING = object()


def _candidates(model):
    """(dotted name, module) of the model and its submodules."""
    if isinstance(model, torch.nn.Module):
        yield from model.named_modules()
        return
    seen = set()
    stack = [("", model)]
    while stack:
        name, obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield name, obj
        for attr in ("model", "thinker"):
            sub = getattr(obj, attr, None)
            if sub is not None:
                stack.append((f"{name}.{attr}" if name else attr, sub))


def _model_type(module) -> str | None:
    config = getattr(module, "config", None)
    return getattr(config, "model_type", None) if config is not None else None


def patch(model, *, semantics: str | None = None) -> Patch:
    """Replace a loaded transformers model's ``get_rope_index`` with
    `get_rope_index` here, in place, on every module that owns one and whose
    config is a supported model type (``model.model`` of a Qwen2-VL
    ForConditionalGeneration, the thinker of an Omni model; an Omni talker
    keeps its own). Returns a `Patch`: ``undo()``, call it, or use it as a
    context manager.

    `semantics` picks the position rules (default: the installed
    transformers' preset); the batch convention is always the installed
    transformers line's, since the model's own code consumes the result.
    Raises ValueError for a model with no supported module.
    """
    if semantics is not None and semantics not in SEMANTICS:
        raise ValueError(f"semantics: expected one of {', '.join(SEMANTICS)}, got {semantics!r}")
    convention = installed_convention()
    entries = []
    found_types = []
    for name, module in _candidates(model):
        own = getattr(type(module), "get_rope_index", None)
        if not callable(own):
            continue
        model_type = _model_type(module)
        found_types.append(model_type)
        if model_type not in SUPPORTED_MODEL_TYPES:
            continue
        cfg = MRopeConfig.from_hf_config(
            module.config, semantics=default_semantics() if semantics is None else semantics
        )
        previous = module.__dict__.get("get_rope_index", _MISSING)
        module.__dict__["get_rope_index"] = _replacement(cfg, convention, inspect.signature(own))
        entries.append((module, name, previous))
    if not entries:
        what = type(model).__name__
        seen = (
            f" (modules with a get_rope_index: model types {sorted(set(map(str, found_types)))})" if found_types else ""
        )
        raise ValueError(
            f"model: expected a transformers model of a supported family ({', '.join(sorted(SUPPORTED_MODEL_TYPES))}) "
            f"with a get_rope_index, got {what}{seen}"
        )
    return Patch(entries)


def _replacement(cfg: MRopeConfig, convention: str, signature: inspect.Signature):
    """A function with transformers' own signature (minus self) that calls ours."""
    params = list(signature.parameters.values())[1:]  # drop self
    bound_signature = signature.replace(parameters=params)

    def get_rope_index_patched(*args, **kwargs):
        bound = bound_signature.bind(*args, **kwargs)
        ours = {}
        for name, value in bound.arguments.items():
            if name in _ARGUMENTS:
                ours[_ARGUMENTS[name]] = value
            elif bound_signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                for key, extra in value.items():  # transformers 5 passes its model kwargs through
                    if key in _ARGUMENTS and _ARGUMENTS[key] not in ours:
                        ours[_ARGUMENTS[key]] = extra
        ids = ours.pop("input_ids", None)
        if ids is None:
            raise ValueError("input_ids: expected the token ids (get_rope_index needs them), got None")
        use_av = ours.pop("use_audio_in_video", False)
        return get_rope_index(
            cfg, ids, use_audio_in_video=bool(use_av) if use_av is not None else False, convention=convention, **ours
        )

    get_rope_index_patched.__signature__ = bound_signature
    get_rope_index_patched.__doc__ = f"mrope_tracker.hf.get_rope_index ({cfg.family}, {cfg.semantics}), patched in."
    return get_rope_index_patched
