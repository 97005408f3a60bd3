"""`install()`: SGLang 0.5 computes positions through this package.

What it patches (`FUNCTIONS`, `METHODS`; tests/data/sglang-0.5.23-api.json
records them from the 0.5.23 wheel):

- ``mrope_rope_index.get_rope_index*``: the drop-ins of rope_index.py.
  ``MRotaryEmbedding``'s static methods of those names import them from that
  module at every call, so the processors reach the drop-ins; they are
  checked, not replaced.
- with ``batch=True`` (the default): ``MultimodalProcessorOutput.from_dict``
  sends each prompt's layout instead of its (3, L) positions;
  ``ForwardBatch._compute_mrope_positions`` and
  ``compute_spec_mrope_positions`` make each batch's positions with one
  `BatchPositions` call; ``Req._extend_session_image_inputs`` composes
  session layouts; ``extend_mrope_positions_for_retracted_request`` leaves a
  layout as it is (tokens past the prompt need no stored positions);
  ``MultimodalInputs.merge`` concatenates two layouts as SGLang concatenates
  two (3, L) tables (beside SGLang's own table, a layout merges as its
  positions); ``Scheduler._maybe_compute_mrope_positions``, which the
  scheduler runs on every multimodal request it receives, turns the (3, L)
  positions a processor made (SGLang 0.5.23's processors build
  ``MultimodalProcessorOutput`` directly, and some never call
  ``get_rope_index*``) into the layout the installed drop-ins build for the
  same prompt, where that layout's positions equal them (`hooks.
  layout_for_positions`); where they differ the request keeps SGLang's
  positions and its batches take SGLang's path.

Before anything changes, every target is imported and its parameters
compared with SGLang 0.5.23's; a difference raises RuntimeError naming it,
and nothing is patched. `uninstall()` puts SGLang's functions back.
MROPE_TRACKER_SGLANG=0 turns `install()` into a no-op (for launchers that
call it unconditionally, such as ``python -m mrope_tracker.sglang.launch_server``).
"""

from __future__ import annotations

import importlib
import inspect
import os

import numpy as np
import torch

from . import hooks
from .rope_index import check_semantics

__all__ = ["FUNCTIONS", "METHODS", "install", "uninstall", "installed"]

ROPE_INDEX = "sglang.srt.layers.rotary_embedding.mrope_rope_index"
MROPE = "sglang.srt.layers.rotary_embedding.mrope"
FORWARD = "sglang.srt.model_executor.forward_batch_info"
SCHEDULE = "sglang.srt.managers.schedule_batch"
MM_UTILS = "sglang.srt.managers.mm_utils"
SCHEDULER = "sglang.srt.managers.scheduler"
_QWEN = (
    "spatial_merge_size", "image_token_id", "video_token_id", "vision_start_token_id", "model_type",
    "tokens_per_second", "input_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts", "**kwargs",
)  # fmt: skip
_OMNI = tuple(name for name in _QWEN if name != "model_type")
_GLM = ("input_ids", "hf_config", "image_grid_thw", "video_grid_thw", "attention_mask", "**kwargs")
_ERNIE = ("input_ids", "hf_config", "image_grid_thw", "video_grid_thw", "**kwargs")
# (module, function name, SGLang 0.5.23's parameters, patched with batch=False too)
FUNCTIONS = (
    (ROPE_INDEX, "get_rope_index", _QWEN, True),
    (ROPE_INDEX, "get_rope_index_qwen3_omni", _OMNI, True),
    (ROPE_INDEX, "get_rope_index_glm4v", _GLM, True),
    (ROPE_INDEX, "get_rope_index_ernie45", _ERNIE, True),
    (MM_UTILS, "extend_mrope_positions_for_retracted_request", ("mrope_positions", "output_ids_len"), False),
)
# (module, class, method, parameters without self, patched): the static wrappers are checked only
METHODS = (
    (MROPE, "MRotaryEmbedding", "get_rope_index", _QWEN, None),
    (MROPE, "MRotaryEmbedding", "get_rope_index_qwen3_omni", _OMNI, None),
    (MROPE, "MRotaryEmbedding", "get_rope_index_glm4v", _GLM, None),
    (MROPE, "MRotaryEmbedding", "get_rope_index_ernie45", _ERNIE, None),
    (FORWARD, "ForwardBatch", "_compute_mrope_positions", ("model_runner", "batch"), "instance"),
    (FORWARD, "ForwardBatch", "compute_spec_mrope_positions", ("model_runner", "batch", "seq_positions"), "instance"),
    (SCHEDULE, "Req", "_extend_session_image_inputs", ("image_inputs",), "instance"),
    (SCHEDULE, "MultimodalProcessorOutput", "from_dict", ("d",), "static"),
    (SCHEDULE, "MultimodalInputs", "merge", ("other",), "instance"),
    (SCHEDULER, "Scheduler", "_maybe_compute_mrope_positions", ("req",), "instance"),
)
ENV_SWITCH = "MROPE_TRACKER_SGLANG"
_ORIGINAL = "mrope_tracker_original"
_patched: list[tuple[object, str, object]] = []  # (owner, name, SGLang's own), for uninstall


def _params(function) -> tuple[str, ...]:
    names = []
    for p in inspect.signature(function).parameters.values():
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        names.append(prefix + p.name)
    return tuple(name for name in names if name != "self")


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise RuntimeError(
            f"mrope_tracker.sglang.install: cannot import {name} ({exc}); it patches SGLang 0.5"
        ) from exc


def _check(where: str, current, expected) -> object:
    if current is None:
        raise RuntimeError(f"mrope_tracker.sglang.install: {where} is missing; it patches SGLang 0.5.23's")
    original = getattr(current, _ORIGINAL, current)
    params = _params(original)
    if params != tuple(expected):
        raise RuntimeError(
            f"mrope_tracker.sglang.install: {where} takes {params}, not SGLang 0.5.23's {tuple(expected)}"
        )
    return original


def _targets(batch: bool) -> list[tuple[object, str, object, str | None]]:
    """(owner, name, SGLang's function, how to patch) for every target, all checked first."""
    found = []
    for module_name, name, expected, always in FUNCTIONS:
        module = _module(module_name)
        original = _check(f"{module_name}.{name}", getattr(module, name, None), expected)
        if always or batch:
            found.append((module, name, original, "function"))
    for module_name, class_name, name, expected, how in METHODS:
        cls = getattr(_module(module_name), class_name, None)
        if cls is None:
            raise RuntimeError(f"mrope_tracker.sglang.install: {module_name}.{class_name} is missing")
        original = _check(f"{module_name}.{class_name}.{name}", cls.__dict__.get(name), expected)
        if how is not None and batch:
            found.append((cls, name, original.__func__ if isinstance(original, staticmethod) else original, how))
    return found


def installed() -> bool:
    return bool(_patched)


def install(*, semantics: str | None = None, batch: bool = True) -> bool:
    """Patch SGLang 0.5's call sites (see the module docstring); False when
    already installed or switched off (MROPE_TRACKER_SGLANG=0)."""
    semantics = check_semantics(semantics)
    if not isinstance(batch, bool):
        raise TypeError(f"batch: expected True or False, got {batch!r}")
    if os.environ.get(ENV_SWITCH, "1") == "0" or _patched:
        return False
    targets = _targets(batch)  # raises before anything changes
    for owner, name, original, how in targets:
        replacement = _replacement(name, original, semantics)
        setattr(replacement, _ORIGINAL, original)
        if how == "static":
            replacement = staticmethod(replacement)
        _patched.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else original))
        setattr(owner, name, replacement)
    return True


def uninstall() -> bool:
    """Put SGLang's own functions back; False when nothing was installed."""
    if not _patched:
        return False
    while _patched:
        owner, name, original = _patched.pop()
        setattr(owner, name, original)
    return True


def _replacement(name: str, original, semantics: str):
    if name in hooks.DROP_INS:
        drop_in = hooks.DROP_INS[name]

        def get_rope_index(*args, **kwargs):
            return drop_in(*args, semantics=semantics, **kwargs)

        get_rope_index.__name__ = name
        get_rope_index.__doc__ = drop_in.__doc__
        return get_rope_index
    return {
        "extend_mrope_positions_for_retracted_request": _retracted,
        "from_dict": _from_dict,
        "_compute_mrope_positions": _compute_mrope_positions,
        "compute_spec_mrope_positions": _compute_spec_mrope_positions,
        "_extend_session_image_inputs": _extend_session_image_inputs,
        "merge": _merge,
        "_maybe_compute_mrope_positions": _maybe_compute_mrope_positions,
    }[name](original)


def _retracted(original):
    def extend_mrope_positions_for_retracted_request(mrope_positions, output_ids_len):
        if hooks.is_layout_tensor(mrope_positions):
            return mrope_positions  # tokens past the prompt sit at index + delta: nothing to store
        return original(mrope_positions, output_ids_len)

    return extend_mrope_positions_for_retracted_request


def _from_dict(original):
    def from_dict(d):
        output = original(d)
        layout = hooks.take_layout(output.mrope_positions)
        if layout is not None:
            output.mrope_positions = hooks.layout_tensor(layout)
        return output

    return from_dict


def _runner_state(model_runner) -> hooks.RunnerState:
    state = getattr(model_runner, "mrope_tracker_state", None)
    if state is None:
        pool = model_runner.req_to_token_pool
        args = getattr(model_runner, "server_args", None)
        prefill = getattr(args, "max_prefill_tokens", None) or 16384
        chunk = getattr(args, "chunked_prefill_size", None) or 0
        # a mixed batch: a prefill chunk and every running request's decode (draft) tokens
        tokens = max(prefill, chunk) + 16 * pool.size
        state = hooks.RunnerState(pool.size, tokens, model_runner.device)
        model_runner.mrope_tracker_state = state
    return state


def _served(model_runner, batch) -> tuple[hooks.RunnerState, np.ndarray] | None:
    """The runner's state and the batch's rows (int64) when the adapter serves the whole batch, else None."""
    state = _runner_state(model_runner)
    rows = state.serves(batch.req_pool_indices_cpu, model_runner.req_to_token_pool.req_generation, batch.reqs)
    return None if rows is None else (state, rows)


def _mm_inputs(batch) -> list:
    inputs = getattr(batch, "multimodal_inputs", None)
    return list(inputs) if inputs is not None else [req.multimodal_inputs for req in batch.reqs]


def _compute_mrope_positions(original):
    def compute(self, model_runner, batch):
        served = _served(model_runner, batch)
        mode = self.forward_mode
        if served is None or not (mode.is_decode() or mode.is_extend()):
            with hooks.sglang_positions(_mm_inputs(batch)):  # SGLang's code reads (3, L) tables
                return original(self, model_runner, batch)
        state, rows = served
        if mode.is_decode():
            self.mrope_positions = state.engine.positions(rows, seq_lens=self.seq_lens_cpu)
        else:
            self.mrope_positions = state.engine.positions(
                rows, prefix_lens=batch.prefix_lens, extend_lens=batch.extend_lens
            )

    return compute


def _compute_spec_mrope_positions(original):
    def compute(self, model_runner, batch, seq_positions=None):
        served = _served(model_runner, batch)
        if served is None:
            return original(self, model_runner, batch, seq_positions)
        state = served[0]
        positions = batch.spec_info.positions if seq_positions is None else seq_positions
        self.mrope_positions = state.engine.positions(self.req_pool_indices, spec_positions=positions)

    return compute


def _extend_session_image_inputs(original):
    def extend(self, image_inputs):
        turn = image_inputs.mrope_positions
        if not hooks.is_layout_tensor(turn):  # SGLang composes its own tables: a saved layout joins as positions
            hooks.with_saved_positions(self)
            return original(self, image_inputs)
        layout = hooks.session_layout(self, turn)
        if layout is None:  # the saved turn holds SGLang's positions: give it ours as positions too
            image_inputs.mrope_positions = torch.from_numpy(hooks.layout_of_tensor(turn).positions())
            return original(self, image_inputs)
        image_inputs.mrope_positions = None  # SGLang merges the items; the positions are ours
        original(self, image_inputs)
        self.multimodal_inputs.mrope_positions = hooks.layout_tensor(layout)
        self.multimodal_inputs.mrope_position_delta = torch.tensor([[layout.delta]], dtype=torch.int64)

    return extend


def _merge(original):
    def merge(self, other):
        mine, theirs = self.mrope_positions, other.mrope_positions
        if mine is None or theirs is None or not (hooks.is_layout_tensor(mine) or hooks.is_layout_tensor(theirs)):
            return original(self, other)  # (SGLang keeps self's positions when either side has none)
        self.mrope_positions, other.mrope_positions, layout = hooks.merged(mine, theirs)
        try:
            original(self, other)
        finally:
            other.mrope_positions = theirs  # the merged-in inputs are left as they came
        if layout is not None:
            self.mrope_positions = layout

    return merge


def _maybe_compute_mrope_positions(original):
    def maybe_compute(self, req):
        original(self, req)  # positions a request came without: computed through the drop-ins
        mm = req.multimodal_inputs
        positions = None if mm is None else mm.mrope_positions
        if positions is None or hooks.is_layout_tensor(positions):
            return
        processor = getattr(self, "_mm_processor", None)
        # the prompt as the processor saw it: padding has put each item's pad value in place of its tokens
        ids = getattr(req, "origin_input_ids_unpadded", None) or req.origin_input_ids
        layout = hooks.layout_for_positions(processor, ids, mm.mm_items, positions)
        if layout is not None:
            mm.mrope_positions = hooks.layout_tensor(layout)
            mm.mrope_position_delta = torch.tensor([[layout.delta]], dtype=torch.int64)

    return maybe_compute
