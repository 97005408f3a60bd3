"""A request's position state in SGLang's shapes: O(items), not O(tokens).

SGLang 0.5 keeps ``MultimodalInputs.mrope_positions``, an int64 (3, L)
tensor (24 bytes a prompt token), with ``mrope_position_delta``, from the
processor to the end of the request. Here the processor builds a
`PromptLayout` (a few rows per image, video frame or text run) and sends
``layout.to_bytes()`` across processes; the scheduler reads it back with
`read_layout` and hands it to `BatchPositions.admit`.

Sessions: SGLang extends a saved request with the reply it generated, any
appended text and a new turn whose processor placed its own tokens from 0.
Its rule (``Req._extend_session_image_inputs``): keep the saved positions of
the prompt's first ``prefix_len`` tokens, continue with text positions from
their largest + 1 over the tokens the saved positions do not cover, and
shift the new turn's positions to start after those. `extend_session`
builds that as a layout, from the rows, in O(rows).
"""

from __future__ import annotations

import numpy as np

from ..core.config import MRopeConfig
from ..core.inputs import as_index
from ..core.layout import PromptLayout
from ..kernels import layout_codes as C

__all__ = ["read_layout", "text_layout", "extend_session", "concat_layouts", "mrope_positions_nbytes"]

# kinds whose three coordinates all carry the row's base: a shift of every
# position moves only COL_BASE (GRID_RAW, XD_GRID and CANVAS place H and W
# apart from it, and no SGLang family uses them)
_SHIFTABLE = (C.KIND_LINEAR, C.KIND_CONST, C.KIND_GRID, C.KIND_GRID_BITS)


def read_layout(value, config: MRopeConfig | None = None) -> PromptLayout:
    """A `PromptLayout` from what a processor sent: the layout itself or its
    ``to_bytes()``. With `config`, a layout built under another config (family,
    ids or semantics preset) is refused."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            value = PromptLayout.from_bytes(value)
        except ValueError as exc:  # ("data: ..." names from_bytes' argument: here it is the layout)
            raise ValueError(f"layout: {exc}") from None
    elif not isinstance(value, PromptLayout):
        raise TypeError(f"layout: expected a PromptLayout or its to_bytes(), got {type(value).__name__}")
    if config is not None and not isinstance(config, MRopeConfig):
        raise TypeError(f"config: expected an MRopeConfig or None, got {type(config).__name__}")
    if config is not None and value.config is not None and value.config != config:
        raise ValueError(
            f"layout: built under {value.config.family!r} / {value.config.semantics!r}, expected this engine's "
            f"{config.family!r} / {config.semantics!r} config"
        )
    return value


def text_layout(config: MRopeConfig, num_tokens: int) -> PromptLayout:
    """A prompt without items: every token at its index (delta 0), one row."""
    return PromptLayout.from_ranges(config, as_index(num_tokens, "num_tokens", minimum=1))


def _table(num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((num_rows, C.NUM_COLS), np.int64), np.zeros((num_rows, C.NUM_SCALE_COLS), np.float32)


def _check_shiftable(layout: PromptLayout, name: str, rows: np.ndarray) -> None:
    kinds = rows[:, C.COL_KIND]
    bad = np.flatnonzero(~np.isin(kinds, _SHIFTABLE))
    if bad.size:
        family = layout.config.family if layout.config is not None else "unknown"
        raise ValueError(
            f"{name}: expected rows of kind LINEAR, CONST, GRID or GRID_BITS (what SGLang's families use), got kind "
            f"{int(kinds[bad[0]])} at row {int(bad[0])} ({family} family)"
        )


def _kept_rows(saved: PromptLayout, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The saved layout's rows for its first `keep` tokens (the last one cut)."""
    starts = saved.rows[:, C.COL_TOK_START]
    n = int(np.searchsorted(starts, keep, side="left"))
    rows = np.array(saved.rows[:n])
    scales = np.array(saved.scales[:n])
    if n:
        last = rows[n - 1]
        end = int(last[C.COL_TOK_START] + last[C.COL_TOK_LEN])
        if end > keep:
            if last[C.COL_KIND] == C.KIND_GRID_BITS:
                raise ValueError(
                    f"prompt_len: the session keeps {keep} saved tokens, which cuts a pruned video's row; expected a "
                    "cut outside pruned videos"
                )
            last[C.COL_TOK_LEN] = keep - int(last[C.COL_TOK_START])
    return rows, scales


def extend_session(saved: PromptLayout | None, prompt_len: int, turn: PromptLayout) -> PromptLayout:
    """The layout of a session request's whole prompt, `prompt_len` tokens:
    the saved request's layout (`saved`, None for none) for the tokens it
    covers, text for the tokens between (its reply, appended text), and the
    new turn's layout (`turn`, covering the last ``turn.num_tokens`` tokens)
    after them, each part starting one past the largest position before it.
    O(rows); the inputs are left as they are."""
    if not isinstance(turn, PromptLayout):
        raise TypeError(f"turn: expected a PromptLayout, got {type(turn).__name__}")
    if saved is not None and not isinstance(saved, PromptLayout):
        raise TypeError(f"saved: expected a PromptLayout or None, got {type(saved).__name__}")
    prompt_len = as_index(prompt_len, "prompt_len", minimum=1)
    if prompt_len < turn.num_tokens:
        raise ValueError(f"prompt_len: expected at least the new turn's {turn.num_tokens} tokens, got {prompt_len}")
    config = turn.config
    if saved is not None and saved.config is not None and config is not None and saved.config != config:
        raise ValueError(
            f"saved: built under {saved.config.family!r} / {saved.config.semantics!r}, the new turn under "
            f"{config.family!r} / {config.semantics!r}; expected one config"
        )
    _check_shiftable(turn, "turn", turn.rows)
    prefix_len = prompt_len - turn.num_tokens
    keep = 0 if saved is None else min(prefix_len, saved.num_tokens)
    kept, kept_scales = _kept_rows(saved, keep) if keep else _table(0)
    next_position = 0
    if keep:
        # the largest kept position: the checked build of the kept rows alone reports it
        prefix = PromptLayout.from_rows(None, np.ascontiguousarray(kept), np.ascontiguousarray(kept_scales), keep)
        next_position = prefix.max_position + 1
    gap = prefix_len - keep
    rows, scales = _table(kept.shape[0] + (1 if gap else 0) + turn.num_rows)
    rows[: kept.shape[0]] = kept
    scales[: kept.shape[0]] = kept_scales
    at = kept.shape[0]
    if gap:
        rows[at, C.COL_TOK_START] = keep
        rows[at, C.COL_TOK_LEN] = gap
        rows[at, C.COL_KIND] = C.KIND_LINEAR
        rows[at, C.COL_BASE] = next_position
        at += 1
    rows[at:] = turn.rows
    scales[at:] = turn.scales
    rows[at:, C.COL_TOK_START] += prefix_len
    rows[at:, C.COL_BASE] += next_position + gap
    return PromptLayout.from_rows(config, rows, scales, prompt_len)


def concat_layouts(first: PromptLayout, second: PromptLayout) -> PromptLayout:
    """The layout of `first`'s positions followed by `second`'s, each as it is
    (what ``MultimodalInputs.merge`` makes of two (3, L) tables: a
    concatenation, no shift). O(rows); the inputs are left as they are."""
    for name, layout in (("first", first), ("second", second)):
        if not isinstance(layout, PromptLayout):
            raise TypeError(f"{name}: expected a PromptLayout, got {type(layout).__name__}")
    config = first.config if first.config is not None else second.config
    if first.config is not None and second.config is not None and first.config != second.config:
        raise ValueError(
            f"second: built under {second.config.family!r} / {second.config.semantics!r}, the first under "
            f"{first.config.family!r} / {first.config.semantics!r}; expected one config"
        )
    rows = np.concatenate([first.rows, second.rows])
    scales = np.concatenate([first.scales, second.scales])
    rows[first.num_rows :, C.COL_TOK_START] += first.num_tokens  # positions stay; tokens move
    return PromptLayout.from_rows(config, rows, scales, first.num_tokens + second.num_tokens)


def mrope_positions_nbytes(num_tokens: int) -> int:
    """What SGLang 0.5 keeps for a request instead: its (3, L) int64 positions."""
    return 3 * 8 * as_index(num_tokens, "num_tokens")
