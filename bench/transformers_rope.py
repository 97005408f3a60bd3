"""transformers' own ``get_rope_index`` as a benchmark baseline, without weights.

Each family's ``get_rope_index`` is called unbound on a stand-in that holds
its real transformers config class, built from our `MRopeConfig`
(`mrope_tracker.hf.native`), so no model, weight or config file is needed.
Inputs are given as the model receives them from its processor: a (1, L)
int64 tensor of ids, int64 grid tensors and, on transformers 5.x, the
``mm_token_type_ids`` its processors return, built once outside the timed
call. Either line works: 4.57 covers Qwen2-VL, Qwen2.5-VL, Qwen3-VL and
GLM-4.1V/4.5V here; 5.24 adds PaddleOCR-VL, ERNIE-4.5-VL, GLM-OCR and Cohere
Compass.

`available()` says whether transformers can be imported, `implements(config)`
whether the installed line has the family's ``get_rope_index``; the prompt
suite leaves this baseline out where either says no. transformers' positions
follow its own line's rules: compare them with ours under `semantics(config)`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import attrs
import numpy as np

from mrope_tracker import MRopeConfig, hf
from mrope_tracker.hf import native as hf_native


def available() -> bool:
    return hf_native.available()


def version() -> str | None:
    return hf.installed_transformers() if available() else None


@functools.lru_cache(maxsize=1)
def _installed_types() -> frozenset:
    return frozenset(hf_native.supported_model_types()) if available() else frozenset()


def implements(config: MRopeConfig) -> bool:
    """Whether the installed transformers has a get_rope_index for `config`'s family."""
    return bool(set(config.spec.transformers_classes) & _installed_types())


def semantics(config: MRopeConfig) -> MRopeConfig:
    """`config` under the installed transformers' preset (its positions are that line's)."""
    return attrs.evolve(config, semantics=hf.default_semantics())


def rope_index_call(config: MRopeConfig, token_ids, kwargs: dict) -> Callable[[], tuple]:
    """A no-argument call of transformers' get_rope_index on one prompt,
    with its tensors prepared; it returns ((3, 1, L) positions, (1, 1) delta)."""
    ids = np.asarray(token_ids, dtype=np.int64).reshape(1, -1)
    sp = kwargs.get("second_per_grid_ts") if config.spec.scaled_time else None
    return hf_native.prepare(
        config,
        ids,
        kwargs.get("image_grid_thw"),
        kwargs.get("video_grid_thw"),
        second_per_grid_ts=sp,
    )


def positions(config: MRopeConfig, token_ids, kwargs: dict) -> tuple[np.ndarray, int]:
    """transformers' (3, L) positions and delta for one prompt, as numpy and int."""
    out, delta = rope_index_call(config, token_ids, kwargs)()
    return out[:, 0, :].numpy(), int(delta.reshape(-1)[0])
