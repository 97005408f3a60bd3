"""The functions `install()` puts in place of SGLang 0.5's (plugin.py says where).

Processor side: the ``get_rope_index*`` drop-ins build each prompt's
`PromptLayout`, return its positions as SGLang's functions do, and remember
the layout with the tensor they returned; ``MultimodalProcessorOutput.
from_dict`` then sends ``layout.to_bytes()`` in ``mrope_positions``, as a
1-D uint8 tensor (the field SGLang already carries across processes), in
place of the (3, L) positions.

Scheduler side: a request whose ``mrope_positions`` is such a layout is
admitted into the model runner's `BatchPositions` the first time a batch
holds its ``req_to_token`` row (a row's generation, which SGLang bumps at
every allocation, tells a new request from a running one, for the whole
batch at once); each batch's positions are then one call. A batch with a
request the adapter cannot serve (a family this package does not know, or
positions SGLang made some other way) goes to SGLang's own code.
"""

from __future__ import annotations

import contextlib
import copy
import threading

import numpy as np
import torch

from ..core.inputs import READY_FLAGS
from ..core.layout import PromptLayout
from ..families import FAMILIES
from ..kernels.batch_rows import FOREIGN, SERVED, unseen_row
from . import rope_index
from .batch import BatchPositions, usual_ints
from .request_state import concat_layouts, extend_session, read_layout
from .rope_args import as_result, counts_arg, flag_arg, floats_arg, grid_arg, input_ids_arg

__all__ = [
    "layout_tensor", "is_layout_tensor", "layout_of_tensor", "RunnerState", "layout_for_positions", "merged",
    "sglang_positions", "with_saved_positions",
]  # fmt: skip

_last = threading.local()  # the layout of the last drop-in call in this thread, and its positions' storage


def layout_tensor(layout: PromptLayout) -> torch.Tensor:
    """``layout.to_bytes()`` as a 1-D uint8 tensor (what travels in ``mrope_positions``)."""
    return torch.frombuffer(bytearray(layout.to_bytes()), dtype=torch.uint8)


def is_layout_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.ndim == 1


def layout_of_tensor(value) -> PromptLayout:
    return PromptLayout.from_bytes(value.numpy().tobytes())


def _remember(layout: PromptLayout | None, positions: torch.Tensor | None) -> None:
    _last.layout = layout
    _last.key = (positions.data_ptr(), positions.shape[-1]) if layout is not None else None


def _with_layout(function, layout_of):
    """A drop-in that builds the one-row prompt's layout first, returns its
    positions in SGLang's shapes and remembers it (for `from_dict`); any other
    call (a padded batch, text alone, bad input) takes the plain drop-in."""

    def drop_in(*args, semantics=None, **kwargs):
        _remember(None, None)
        try:
            layout = layout_of(*args, semantics=semantics, **kwargs)
        except (TypeError, ValueError, KeyError):  # the plain drop-in names what is wrong
            layout = None
        if layout is None:
            return function(*args, semantics=semantics, **kwargs)
        input_ids = _input_ids_of(function, args, kwargs)
        floats = layout.config.family == "qwen3_omni"  # SGLang's Omni positions and delta are float32
        dtype, delta_dtype = (torch.float32, torch.float32) if floats else (input_ids.dtype, torch.int64)
        positions = layout.positions().reshape(layout.num_dims, 1, layout.num_tokens)
        result = as_result(positions, np.array([layout.delta], np.int64), input_ids, dtype, delta_dtype)
        _remember(layout, result[0])
        return result

    drop_in.__name__ = function.__name__
    drop_in.__doc__ = function.__doc__
    return drop_in


def _input_ids_of(function, args, kwargs) -> torch.Tensor:
    if "input_ids" in kwargs:
        return kwargs["input_ids"]
    position = {"get_rope_index": 6, "get_rope_index_qwen3_omni": 5}.get(function.__name__, 0)
    return args[position]


def _qwen_layout(*args, semantics=None, **kwargs):
    names = (
        "spatial_merge_size", "image_token_id", "video_token_id", "vision_start_token_id", "model_type",
        "tokens_per_second", "input_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts",
    )  # fmt: skip
    bound = dict(zip(names, args))
    bound.update({name: kwargs.pop(name) for name in names if name in kwargs})
    return _layout(
        rope_index.qwen_config(
            bound["spatial_merge_size"], bound["image_token_id"], bound["video_token_id"],
            bound["vision_start_token_id"], bound["model_type"], bound.get("tokens_per_second"), kwargs,
            rope_index.check_semantics(semantics),
        ),
        bound.get("input_ids"), bound.get("image_grid_thw"), bound.get("video_grid_thw"),
        bound.get("second_per_grid_ts"), kwargs.get("audio_seqlens"),
        flag_arg(kwargs.get("use_audio_in_video", False)),
    )  # fmt: skip


def _omni_layout(*args, semantics=None, **kwargs):
    args = args[:4] + ("qwen3_omni_moe",) + args[4:]
    return _qwen_layout(*args, semantics=semantics, **kwargs)


def _hf_layout(input_ids, hf_config, image_grid_thw, video_grid_thw, attention_mask=None, semantics=None, **kwargs):
    if attention_mask is not None and not bool((attention_mask == 1).all()):
        return None  # a padded batch: no one prompt to keep
    config = rope_index.hf_config_of(hf_config, rope_index.check_semantics(semantics))
    return _layout(config, input_ids, image_grid_thw, video_grid_thw, None, None, False)


def _layout(config, input_ids, images, videos, times, audio, use_av) -> PromptLayout | None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.shape[0] != 1:
        return None
    if images is None and videos is None:
        return None  # SGLang keeps no positions for these
    if not config.spec.scaled_time:
        times = None
    return PromptLayout.from_tokens(
        config,
        input_ids_arg(input_ids)[0],
        image_grid_thw=grid_arg(images, "image_grid_thw"),
        video_grid_thw=grid_arg(videos, "video_grid_thw"),
        second_per_grid_ts=floats_arg(times),
        audio_feature_lengths=counts_arg(audio),
        use_audio_in_video=use_av,
    )


DROP_INS = {
    "get_rope_index": _with_layout(rope_index.get_rope_index, _qwen_layout),
    "get_rope_index_qwen3_omni": _with_layout(rope_index.get_rope_index_qwen3_omni, _omni_layout),
    "get_rope_index_glm4v": _with_layout(rope_index.get_rope_index_glm4v, _hf_layout),
    "get_rope_index_ernie45": _with_layout(rope_index.get_rope_index_ernie45, _hf_layout),
}


def take_layout(positions) -> PromptLayout | None:
    """The layout the last drop-in built, when `positions` are its positions (or a view of them)."""
    key = getattr(_last, "key", None)
    if key is None or not isinstance(positions, torch.Tensor) or positions.ndim < 2:
        return None
    if (positions.data_ptr(), positions.shape[-1]) != key:
        return None
    layout, _last.layout, _last.key = _last.layout, None, None
    return layout


class RunnerState:
    """What the adapter keeps per SGLang model runner: its `BatchPositions`
    (made at the first layout, under that layout's config), the generation of
    each ``req_to_token`` row it admitted, and the rows it cannot serve."""

    def __init__(self, max_num_reqs: int, max_num_tokens: int, device) -> None:
        self.max_num_reqs = max_num_reqs
        self.max_num_tokens = max_num_tokens
        self.device = device
        self.engine: BatchPositions | None = None
        self.generation = np.full(max_num_reqs + 1, -1, np.int64)
        self.foreign = np.zeros(max_num_reqs + 1, bool)
        # SGLang's req_generation, its numpy view and its storage when viewed (a view costs more than the test)
        self._live: tuple = (None, None, (0, 0))

    def serves(self, rows, live, reqs) -> np.ndarray | None:
        """Admit the batch's new requests; the batch's rows as an int64 array
        when the adapter serves every request of the batch, else None.
        `rows` are the batch's ``req_to_token`` rows (``req_pool_indices_cpu``),
        `live` SGLang's generation of every row (``req_generation``, a CPU
        tensor). A batch with no new request (most of them) takes one kernel
        pass (`unseen_row`); any other goes through `_admit_new`."""
        array = usual_ints(rows)
        table = self._live_view(live)
        if array is not None and table is not None:
            code = unseen_row(array, table, self.generation, self.foreign)
            if code == SERVED:
                return array if self.engine is not None else None
            if code == FOREIGN:
                return None
        rows = np.asarray(rows, dtype=np.int64)
        return rows if self._admit_new(rows, live[torch.from_numpy(rows)].numpy(), reqs) else None

    def _live_view(self, live) -> np.ndarray | None:
        """`_live_generations(live)`, kept while `live` is the same tensor on the same storage (SGLang bumps
        its entries in place; a tensor whose storage moved is viewed again)."""
        seen, table, storage = self._live
        if seen is live and (live.data_ptr(), live.numel()) == storage:
            return table
        table = _live_generations(live)
        if table is not None:
            self._live = (live, table, (live.data_ptr(), table.shape[0]))
        return table

    def _admit_new(self, rows: np.ndarray, generations: np.ndarray, reqs) -> bool:
        """Admit the batch's new requests (rows whose generation changed);
        True when the adapter serves every request of the batch. Layouts go
        first: the first one makes the engine that text requests need."""
        new = np.flatnonzero(generations != self.generation[rows]).tolist()
        new.sort(key=lambda k: reqs[k].multimodal_inputs is None)
        for k in new:
            if self._admit(int(rows[k]), reqs[k]):  # undecided rows are tried again at the next batch
                self.generation[rows[k]] = generations[k]
        return self.engine is not None and not self.foreign[rows].any()

    def _admit(self, row: int, req) -> bool:
        """Admit one request; False when it cannot be decided yet (text before any layout)."""
        mm = req.multimodal_inputs
        positions = None if mm is None else mm.mrope_positions
        self.foreign[row] = True
        if positions is None:
            if mm is None and self.engine is None:
                return False  # the engine is made by the first layout; SGLang serves text until then
            if mm is not None:
                return True  # multimodal inputs without positions: SGLang's own business
            self.engine.admit(row, num_tokens=max(1, len(req.origin_input_ids)))
        elif is_layout_tensor(positions):
            layout = layout_of_tensor(positions)
            if self.engine is None:
                if layout.config is None or layout.config.family not in FAMILIES:
                    return True
                self.engine = BatchPositions(
                    layout.config,
                    max_num_reqs=self.max_num_reqs,
                    max_num_tokens=self.max_num_tokens,
                    device=self.device,
                )
            self.engine.admit(row, read_layout(layout, self.engine.config))
        else:
            return True  # (3, L) positions SGLang made itself
        self.foreign[row] = False
        return True


def _live_generations(live) -> np.ndarray | None:
    """SGLang's row generations (an int64 CPU tensor) as the numpy view `unseen_row` takes; None otherwise."""
    try:
        table = live.numpy()  # (raises for another device, or what is not a tensor)
    except (AttributeError, TypeError, RuntimeError):
        return None
    if table.dtype != np.int64 or table.ndim != 1 or table.flags.num & READY_FLAGS != READY_FLAGS:
        return None
    return table


def session_layout(req, turn_positions) -> PromptLayout | None:
    """The layout of a session request's whole prompt (None when the saved
    request holds SGLang's own positions: SGLang's code composes those)."""
    saved = None if req.multimodal_inputs is None else req.multimodal_inputs.mrope_positions
    if saved is not None and not is_layout_tensor(saved):
        return None
    saved = None if saved is None else layout_of_tensor(saved)
    return extend_session(saved, len(req.origin_input_ids), layout_of_tensor(turn_positions))


def layout_for_positions(processor, input_ids, mm_items, positions) -> PromptLayout | None:
    """The layout of positions some other code made (a processor that never
    called ``get_rope_index*``: Qwen-VL's image-only path from item offsets,
    its cached prompt templates, positions the HF processor returned), when
    this package makes the same: the scheduler's processor computes the
    prompt's positions again through the installed drop-ins, and the layout
    they built is kept only where its positions equal `positions` (as prefill
    casts them to int64). None where they differ or nothing was built."""
    if processor is None or not isinstance(positions, torch.Tensor) or positions.ndim != 2:
        return None
    _remember(None, None)
    try:
        again, _ = processor.compute_mrope_positions(input_ids, mm_items)
    except Exception:  # noqa: BLE001 (SGLang's own positions stand; the batch takes SGLang's path)
        return None
    layout = take_layout(again)
    if layout is None or layout.num_tokens != positions.shape[-1]:
        return None
    mine = torch.from_numpy(layout.positions())
    return layout if torch.equal(mine, positions.to(device="cpu", dtype=torch.int64)) else None


def merged(mine, theirs):
    """What ``MultimodalInputs.merge`` should hold when either side is a
    layout: the two layouts' concatenation (SGLang concatenates the two (3, L)
    tables as they are), or, beside SGLang's own positions, the layout's
    positions, so that SGLang concatenates tables. Returns (mine, theirs) to
    merge, and the layout tensor to keep (None: SGLang's result stands)."""
    if is_layout_tensor(mine) and is_layout_tensor(theirs):
        return None, None, layout_tensor(concat_layouts(layout_of_tensor(mine), layout_of_tensor(theirs)))
    if is_layout_tensor(mine):
        mine = torch.from_numpy(layout_of_tensor(mine).positions())
    if is_layout_tensor(theirs):
        theirs = torch.from_numpy(layout_of_tensor(theirs).positions())
    return mine, theirs, None


@contextlib.contextmanager
def sglang_positions(mm_inputs):
    """For SGLang's own code on a batch the adapter does not serve (a request
    it cannot serve beside ones it holds layouts for): each layout as its
    (3, L) int64 positions while that code runs, the layout put back after.
    O(tokens) of the requests held as layouts, in such batches only."""
    swapped = []
    for mm in mm_inputs:
        if mm is not None and is_layout_tensor(mm.mrope_positions):
            swapped.append((mm, mm.mrope_positions))
            mm.mrope_positions = torch.from_numpy(layout_of_tensor(mm.mrope_positions).positions())
    try:
        yield
    finally:
        for mm, layout in swapped:
            mm.mrope_positions = layout


def with_saved_positions(req) -> None:
    """Before SGLang composes a session turn that holds its own (3, L)
    positions: a saved layout becomes its positions, on a copy of the saved
    inputs (SGLang copies them too: a branch leaves its parent as it was)."""
    mm = req.multimodal_inputs
    if mm is not None and is_layout_tensor(mm.mrope_positions):
        mm = copy.copy(mm)
        mm.mrope_positions = torch.from_numpy(layout_of_tensor(mm.mrope_positions).positions())
        req.multimodal_inputs = mm
