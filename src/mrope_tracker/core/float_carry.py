"""SGLang 0.5's Qwen3-Omni positions as layout rows (the `float_carry` switch).

SGLang 0.5.23 positions Qwen3-Omni prompts with transformers' float32 rule
(`get_rope_index_qwen3_omni` in sglang/srt/layers/rotary_embedding/
mrope_rope_index.py) and truncates the result to int64 at prefill. A video
whose frame times f * sp * r are fractional leaves a fraction in the running
base, which every later position carries; float32 rounding can then skip an
integer where a sum crosses a power of two (docs/semantics.md, S1).

The integer builders have already checked the prompt; this module takes its
items in token order and re-derives every position with the same float32
operations, in the same order, as that rule:

* per item, from the running base B (0, or 1 + the maximum of the previous
  item's last piece): text at B + k, then B += its length; the bos token(s)
  at B + k, then the content base s = B + bos length; the content; the eos
  token(s) at E + k with E = 1 + the maximum of the content's last piece;
* images and videos: (s + tau(f), s + i, s + j) with tau(f) = (f * sp) * r;
* audio: s + k;
* audio in video (two bos and two eos tokens): the video and audio positions
  merged by their T values (a video token first on a tie), written into the
  block's slots in that order whatever the tokens are; the last piece is the
  run of whichever stream outlasted the other;
* text after the last item from 1 + the maximum of its eos.

Every sum is rounded to float32 and every position truncated to an integer.
The result is emitted as LINEAR rows (split where rounding skips an integer)
and, for vision tokens, CANVAS rows with the identity stretch: one per frame
(T constant, H = top + i, W = left + j), split by grid row where rounding
moves H or W within the frame. Rows grow with frames, not tokens, except
in the rare frames that need splitting.
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels import layout_codes as C
from .inputs import Items

__all__ = ["check_brackets", "needs_rows", "rows_from_ranges", "rows_from_tokens", "INTEGER_LIMIT"]

# Below this, a prompt without fractions in float32 gives the integer rule's
# positions exactly (every float32 sum of integers is exact there).
INTEGER_LIMIT = 2**23

_F32 = np.float32
_ONE = np.float32(1)

AUDIO, VISION, AUDIO_IN_VIDEO = 0, 1, 2


class _Item:
    """One item's content span and what places it."""

    __slots__ = ("kind", "start", "length", "t", "h", "w", "sp", "num_audio")

    def __init__(self, kind, start, length, t=1, h=1, w=1, sp=None, num_audio=0):
        self.kind, self.start, self.length = kind, int(start), int(length)
        self.t, self.h, self.w, self.sp, self.num_audio = int(t), int(h), int(w), sp, int(num_audio)

    @property
    def brackets(self) -> int:
        """bos (and eos) tokens around the content: two for audio in video."""
        return 2 if self.kind == AUDIO_IN_VIDEO else 1


def needs_rows(items: Items, rate: float, num_tokens: int | None = None) -> bool:
    """Whether the float32 rule can differ from the integer one on these items:
    some video frame time (f * sp) * r is fractional in float32, or a video
    carries its audio (the rule merges the block by value, whatever its
    layout). Otherwise every value is a whole number, and below INTEGER_LIMIT
    the kernels' integer positions are the rule's. Given the prompt's
    `num_tokens` (items not yet checked against it), at most that many frames
    of a video are read: a video of more frames cannot fit, and the builder
    then names it."""
    if items.use_audio_in_video and items.video_grid.shape[0]:
        return True
    r = _F32(rate)
    for (t, _, _), sp in zip(items.video_grid.tolist(), items.video_sp.tolist()):
        if not math.isfinite(sp):  # (unchecked here: the builder's item check names it)
            return False
        frames = t if num_tokens is None else min(t, num_tokens)
        times = (np.arange(frames, dtype=_F32) * _F32(sp)) * r
        if (times != np.floor(times)).any():
            return True
    return False


# --------------------------------------------------------------------------
# Items in token order
# --------------------------------------------------------------------------


class _Supply:
    """Grids, times and audio counts handed out in prompt order."""

    def __init__(self, config, items: Items):
        self.merge = config.spatial_merge_size
        self.images, self.videos = items.image_grid.tolist(), items.video_grid.tolist()
        self.sps, self.audio = items.video_sp.tolist(), items.audio_tokens.tolist()
        self.used = [0, 0, 0]

    def _take(self, slot, values):
        k = self.used[slot]
        self.used[slot] += 1
        return values[k]

    def image(self, start) -> _Item:
        _, h, w = self._take(0, self.images)
        return _Item(VISION, start, (h // self.merge) * (w // self.merge), 1, h // self.merge, w // self.merge, None)

    def video(self, start, with_audio: bool) -> _Item:
        k = self.used[1]
        t, h, w = self._take(1, self.videos)
        h, w, sp = h // self.merge, w // self.merge, _F32(self.sps[k])
        if not with_audio:
            return _Item(VISION, start, t * h * w, t, h, w, sp)
        n_a = self._take(2, self.audio)
        return _Item(AUDIO_IN_VIDEO, start, t * h * w + n_a, t, h, w, sp, n_a)

    def clip(self, start) -> _Item:
        n_a = self._take(2, self.audio)
        return _Item(AUDIO, start, n_a, num_audio=n_a)


def _items_from_tokens(config, ids: np.ndarray, items: Items) -> list[_Item]:
    """The items as the integer builder found them: the next placeholder token
    starts an item, which takes the next grid or audio count of its kind."""
    supply = _Supply(config, items)
    image, video, audio = config.image_token_id, config.video_token_id, config.audio_token_id
    opening = [config.vision_start_token_id, config.audio_start_token_id]
    at = np.flatnonzero((ids == image) | (ids == video) | (ids == audio))
    found, k = [], 0
    while k < at.shape[0]:
        o = int(at[k])
        token = ids[o]
        in_block = token == video or (token == audio and o >= 2 and ids[o - 2 : o].tolist() == opening)
        if items.use_audio_in_video and in_block:
            item = supply.video(o, with_audio=True)
        elif token == audio:
            item = supply.clip(o)
        elif token == image:
            item = supply.image(o)
        else:
            item = supply.video(o, with_audio=False)
        found.append(item)
        k = int(np.searchsorted(at, item.start + item.length))
    _check_brackets(config, ids, found)
    return found


def check_brackets(config, ids: np.ndarray, items: Items) -> None:
    """For a token-form prompt the builder accepted: ValueError naming the first
    item without its bos or eos token (the float32 rule reads them unlooked)."""
    _items_from_tokens(config, ids, items)


def _check_brackets(config, ids: np.ndarray, found: list[_Item]) -> None:
    """The rule takes the token(s) before an item for its bos and after it for
    its eos without looking; require them, as the reference does."""
    length = ids.shape[0]
    for item in found:
        if item.kind == AUDIO_IN_VIDEO:
            continue  # the builder has checked vision_start audio_start ... audio_end vision_end
        end = item.start + item.length
        audio = item.kind == AUDIO
        bos = config.audio_start_token_id if audio else config.vision_start_token_id
        eos = config.audio_end_token_id if audio else config.vision_end_token_id
        got = (int(ids[item.start - 1]) if item.start else None, int(ids[end]) if end < length else None)
        if got != (bos, eos):
            what = "audio" if audio else "vision"
            raise ValueError(
                f"token_ids: the sglang-0.5 preset's Qwen3-Omni rule expects {what}_start ({bos}) before and "
                f"{what}_end ({eos}) after the placeholders at [{item.start}, {end}), got {got[0]} and {got[1]}"
            )


def _items_from_ranges(config, items: Items, ranges) -> list[_Item]:
    """The items of placeholder ranges, in token order; audio counts go to clips
    and (with audio in video) video tracks in prompt order, as given."""
    supply = _Supply(config, items)
    starts = [(int(o), 0, k) for k, o in enumerate(ranges.image[:, 0].tolist())]
    starts += [(int(o), 1, k) for k, o in enumerate(ranges.video[:, 0].tolist())]
    starts += [(int(o), 2, k) for k, o in enumerate(ranges.audio[:, 0].tolist())]
    found = []
    for o, modality, _ in sorted(starts):
        if modality == 0:
            found.append(supply.image(o))
        elif modality == 1:
            found.append(supply.video(o, with_audio=items.use_audio_in_video))
        else:
            found.append(supply.clip(o))
    return found


# --------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------


# Below this, consecutive float32 sums base + k (k an int) truncate to integers
# that rise by 1 or 2 (2 once, where rounding carries the fraction into the
# next integer): a run whose first and last values are n - 1 apart is one row.
_EXACT_STEPS = 2**23


def _at(base, k):
    """base + k rounded to float32, as torch adds an int64 arange to a float32 scalar."""
    return _F32(base + _F32(k))


def _is_one_row(base, k0: int, n: int) -> bool:
    """Whether trunc(base + k), k0 <= k < k0 + n, rises by exactly 1 a token."""
    last = int(_at(base, k0 + n - 1))
    return last - int(_at(base, k0)) == n - 1 and last < _EXACT_STEPS


class _Rows:
    """Rows and scales collected in token order."""

    def __init__(self):
        self.rows: list[list[int]] = []
        self.scales: list[tuple[float, float]] = []
        self.top = -1

    def linear(self, start: int, base, k0: int, n: int) -> None:
        """Tokens start .. start+n-1 at trunc(base + k), k0 <= k < k0 + n, on every
        axis: one LINEAR row per stretch that rises by one a token."""
        if n <= 0:
            return
        if _is_one_row(base, k0, n):
            cuts, firsts = [0, n], [int(_at(base, k0))]
        else:  # rounding skips an integer (or positions past 2**23): find where
            values = (np.arange(k0, k0 + n, dtype=_F32) + _F32(base)).astype(np.int64)
            breaks = (np.flatnonzero(np.diff(values - np.arange(n))) + 1).tolist()
            cuts, firsts = [0, *breaks, n], values[[0, *breaks]].tolist()
        for a, b, first in zip(cuts, cuts[1:], firsts):
            self.rows.append([start + a, b - a, C.KIND_LINEAR, first, 0, 0, 0, 0, 0])
            self.scales.append((0.0, 0.0))
        self.top = max(self.top, int(_at(base, k0 + n - 1)))

    def canvas(self, start, count, t_value, offset, top, left, h, w) -> None:
        row = [0] * C.NUM_COLS
        row[C.COL_TOK_START], row[C.COL_TOK_LEN], row[C.COL_KIND] = start, count, C.KIND_CANVAS
        row[C.COL_BASE], row[C.COL_GRID_OFFSET], row[C.COL_H], row[C.COL_W] = t_value, offset, h, w
        row[C.COL_CANVAS_TOP], row[C.COL_CANVAS_LEFT] = top, left
        self.rows.append(row)
        self.scales.append((float(h), float(w)))  # extents equal to the sides: no stretch

    def frame_part(self, start, g0, g1, t_value, hs: np.ndarray, ws: np.ndarray) -> None:
        """Grid tokens g0 .. g1-1 of one frame (h' = len(hs), w' = len(ws)) from
        token `start`, at T = t_value, H = hs[i], W = ws[j] (int64 arrays)."""
        h, w = hs.shape[0], ws.shape[0]
        tops, lefts = hs - np.arange(h), ws - np.arange(w)
        i0, i1 = g0 // w, (g1 - 1) // w
        self.top = max(self.top, t_value, int(hs[i1]), int(ws[-1] if i1 > i0 else ws[(g1 - 1) % w]))
        if lefts[0] == lefts[-1] and tops[i0] == tops[i1]:  # (each is non-decreasing)
            self.canvas(start, g1 - g0, t_value, g0, int(tops[i0]), int(lefts[0]), h, w)
            return
        for i in range(i0, i1 + 1):  # rounding moved H or W inside this frame: row by row
            a, b = max(g0, i * w), min(g1, (i + 1) * w)
            cuts = [a, *(a + 1 + np.flatnonzero(np.diff(lefts[a - i * w : b - i * w]))).tolist(), b]
            for x, y in zip(cuts, cuts[1:]):
                self.canvas(start + x - g0, y - x, t_value, x, int(tops[i]), int(lefts[x - i * w]), h, w)

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array(self.rows, np.int64).reshape(-1, C.NUM_COLS), np.array(self.scales, np.float32).reshape(
            -1, C.NUM_SCALE_COLS
        )


class _Block:
    """A vision block at float32 base s: T of each frame, and H and W (exact
    rows when rounding moves them inside a frame)."""

    def __init__(self, item: _Item, s, r):
        self.item, self.s = item, s
        times = np.zeros(1, _F32) if item.sp is None else (np.arange(item.t, dtype=_F32) * item.sp) * r
        ts = times + _F32(s)
        self.t_values = ts.astype(np.int64).tolist()
        self.plain = _is_one_row(s, 0, item.h) and _is_one_row(s, 0, item.w)
        self.corner = int(s)  # H of row 0 and W of column 0, where plain
        if not self.plain:
            self.hs = (np.arange(item.h, dtype=_F32) + _F32(s)).astype(np.int64)
            self.ws = (np.arange(item.w, dtype=_F32) + _F32(s)).astype(np.int64)
        self.maximum = max(ts[-1], _at(s, item.h - 1), _at(s, item.w - 1))

    def rows(self, out: _Rows, start: int, g0: int, g1: int) -> None:
        """Rows of grid tokens g0 .. g1-1 (frame-major) from token `start`."""
        item = self.item
        hw = item.h * item.w
        g = g0
        while g < g1:
            f = g // hw
            end = min(g1, (f + 1) * hw)
            t_value = self.t_values[f]
            if self.plain:
                out.canvas(start + g - g0, end - g, t_value, g - f * hw, self.corner, self.corner, item.h, item.w)
            else:
                out.frame_part(start + g - g0, g - f * hw, end - f * hw, t_value, self.hs, self.ws)
            g = end
        if self.plain:
            last = g1 - 1 - ((g1 - 1) // hw) * hw  # the last token's place in its frame
            i, j = last // item.w, (item.w - 1 if g1 - g0 > last % item.w + 1 else last % item.w)
            out.top = max(out.top, self.t_values[(g1 - 1) // hw], self.corner + i, self.corner + j)


def _content(out: _Rows, item: _Item, s, r):
    """Rows of an item's content at float32 base s; returns the maximum of its last piece."""
    if item.kind == AUDIO:
        out.linear(item.start, s, 0, item.length)
        return _at(s, item.length - 1)
    block = _Block(item, s, r)
    if item.kind == VISION:
        block.rows(out, item.start, 0, item.length)
        return block.maximum
    # audio in video: audio token a at s + a; audio tokens before each frame: those below its T
    audio = np.arange(item.num_audio, dtype=_F32) + _F32(s)
    times = (np.arange(item.t, dtype=_F32) * item.sp) * r + _F32(s)
    before = np.searchsorted(audio, times, side="left").tolist()
    hw, tok, a = item.h * item.w, item.start, 0
    for f, upto in enumerate([*before, item.num_audio]):
        if upto > a:
            out.linear(tok, s, a, upto - a)
            tok, a = tok + upto - a, upto
        if f < item.t:
            block.rows(out, tok, f * hw, (f + 1) * hw)
            tok += hw
    return _at(s, item.num_audio - 1) if before[-1] < item.num_audio else block.maximum


def _carry_rows(config, num_tokens: int, found: list[_Item]) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(rows, scales, num_rows, max position) of the items by the float32 rule."""
    r = _F32(config.tokens_per_second)
    out = _Rows()
    st, last = 0, None  # next token; maximum of the last piece (None: nothing placed yet)
    for item in found:
        bos = item.brackets
        base = _F32(0) if last is None else _F32(last + _ONE)
        text = item.start - bos - st
        if text < 0:  # (ranges only: the token form has checked its brackets)
            raise ValueError(
                f"ranges: the sglang-0.5 preset's Qwen3-Omni rule expects {bos} bos token(s) before the item at "
                f"{item.start} and {bos} eos token(s) after the one before it, got {item.start - st} token(s) between"
            )
        if text:
            out.linear(st, base, 0, text)
            base = _at(base, text)
        out.linear(item.start - bos, base, 0, bos)
        eos_base = _F32(_content(out, item, _at(base, bos), r) + _ONE)
        out.linear(item.start + item.length, eos_base, 0, bos)
        st, last = item.start + item.length + bos, _at(eos_base, bos - 1)
    if st < num_tokens:
        out.linear(st, _F32(0) if last is None else _F32(last + _ONE), 0, num_tokens - st)
    rows, scales = out.table()
    return rows, scales, rows.shape[0], out.top


def rows_from_tokens(config, ids: np.ndarray, items: Items) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A checked token-form prompt's rows under the float32 rule (same return as
    `layout.build_rows_from_tokens`). Raises ValueError for an item without its
    bos or eos token."""
    return _carry_rows(config, ids.shape[0], _items_from_tokens(config, ids, items))


def rows_from_ranges(config, num_tokens: int, items: Items, ranges) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A checked range-form prompt's rows under the float32 rule (the bos and eos
    tokens are taken to sit around each range, as the processors lay them)."""
    return _carry_rows(config, num_tokens, _items_from_ranges(config, items, ranges))
