"""`PromptLayout`: a prompt's positions kept as O(items) segments.

A prompt's positions are a function of its layout (docs/design.md): text
runs, and per item its grid and time scale. The layout is built once, from
the token ids or from placeholder ranges, and then produces the positions of
any token range without computing the rest. `PositionTracker` keeps the same
rows in its pool.
"""

from __future__ import annotations

import attrs
import numpy as np

from .config import MRopeConfig
from .inputs import EMPTY_OUT, Items, as_config, as_index, as_ranges, as_token_ids, layout_error
from .kernels import layout_check as check
from .kernels import layout_codes as C
from .kernels.layout_build import NUM_STATE, S_MAX, S_NUM_ROWS, build_from_ranges, build_from_tokens
from .kernels.layout_fill import fill_positions

__all__ = ["PromptLayout", "build_rows_from_tokens", "build_rows_from_ranges", "estimate_rows"]


def _new_table(capacity: int) -> tuple[np.ndarray, np.ndarray]:
    return np.empty((capacity, C.NUM_COLS), np.int64), np.empty((capacity, C.NUM_SCALE_COLS), np.float32)


def estimate_rows(config: MRopeConfig, items: Items) -> int:
    """Layout rows a prompt needs: exact without audio-in-video (a row per
    grid, text runs between and after; audio clips need none), an estimate
    with it (per block the two bos/eos rows and a row per chunk of either
    stream, frames standing for video chunks). Builders still count, so an
    underestimate costs a second build, never a wrong layout."""
    num_videos = items.video_grid.shape[0]
    rows = 2 * (items.image_grid.shape[0] + num_videos) + 1
    if items.use_audio_in_video and num_videos:
        # Python ints: numpy arithmetic on a few elements costs microseconds
        frames = sum(items.video_grid[:, 0].tolist())
        audio_tokens = sum(((f - 1) // 2 + 1 - 2) // 2 + 1 for f in items.audio_lengths.tolist())
        rows += 4 * num_videos + 2 * (frames + audio_tokens // config.audio_chunk_positions + num_videos)
    return rows


def build_rows_from_tokens(config: MRopeConfig, ids: np.ndarray, items: Items, rows=None, scales=None):
    """Run the token-scan builder into `rows`, or into a table of its own when
    `rows` is too small (or not given).

    Returns (rows, scales, num_rows, max_position). Raises ValueError on bad input."""
    state = np.empty(NUM_STATE, np.int64)
    if rows is None:
        rows, scales = _new_table(estimate_rows(config, items))
    while True:
        code, a, b, c = build_from_tokens(
            rows, scales, state, EMPTY_OUT, ids, config.kernel_params, items.image_grid,
            items.video_grid, items.video_sp, items.audio_lengths, items.use_audio_in_video,
        )  # fmt: skip
        if code:
            raise layout_error(code, a, b, c, config, items, ids=ids)
        if state[S_NUM_ROWS] <= rows.shape[0]:
            return rows, scales, int(state[S_NUM_ROWS]), int(state[S_MAX])
        rows, scales = _new_table(int(state[S_NUM_ROWS]))


class Ranges:
    """Normalised placeholder ranges of one prompt."""

    __slots__ = ("image", "video", "audio")

    def __init__(self, items: Items, image_ranges, video_ranges, audio_ranges):
        self.image = as_ranges(image_ranges, "image_ranges")
        self.video = as_ranges(video_ranges, "video_ranges")
        self.audio = as_ranges(audio_ranges, "audio_ranges")
        if self.image.shape[0] != items.image_grid.shape[0]:
            raise ValueError(
                f"image_ranges: expected one range per image_grid_thw row ({items.image_grid.shape[0]}), "
                f"got {self.image.shape[0]}"
            )
        if self.video.shape[0] != items.video_grid.shape[0]:
            raise ValueError(
                f"video_ranges: expected one range per video_grid_thw row ({items.video_grid.shape[0]}), "
                f"got {self.video.shape[0]}"
            )
        tracks = self.audio.shape[0] + (self.video.shape[0] if items.use_audio_in_video else 0)
        if tracks != items.audio_lengths.shape[0]:
            what = f"{self.audio.shape[0]} audio ranges" + (
                f" + {self.video.shape[0]} video tracks" if items.use_audio_in_video else ""
            )
            raise ValueError(f"audio_feature_lengths: expected {tracks} lengths ({what}), got {items.audio_lengths.shape[0]}")

    def by_modality(self):
        return {C.MOD_IMAGE: self.image, C.MOD_VIDEO: self.video, C.MOD_AUDIO: self.audio}


def build_rows_from_ranges(config: MRopeConfig, num_tokens: int, items: Items, ranges: Ranges, rows=None, scales=None):
    """Run the range builder (no token reads); same return as build_rows_from_tokens."""
    state = np.empty(NUM_STATE, np.int64)
    if rows is None:
        rows, scales = _new_table(estimate_rows(config, items))
    while True:
        code, a, b, c = build_from_ranges(
            rows, scales, state, EMPTY_OUT, num_tokens, config.kernel_params,
            ranges.image, items.image_grid, ranges.video, items.video_grid, items.video_sp,
            ranges.audio, items.audio_lengths, items.use_audio_in_video,
        )  # fmt: skip
        if code:
            raise layout_error(code, a, b, c, config, items, ranges=ranges.by_modality(), num_tokens=num_tokens)
        if state[S_NUM_ROWS] <= rows.shape[0]:
            return rows, scales, int(state[S_NUM_ROWS]), int(state[S_MAX])
        rows, scales = _new_table(int(state[S_NUM_ROWS]))


_CHECK_MESSAGES = {
    check.CHECK_EMPTY: "expected at least one row",
    check.CHECK_TILING: "expected rows that tile the prompt in order (each starting where the last ended)",
    check.CHECK_LENGTH: "expected rows of positive length ending exactly at num_tokens",
    check.CHECK_KIND: "expected kinds LINEAR, CONST or GRID",
    check.CHECK_GRID: "expected a grid row with positive t, h, w, its tokens inside the grid and a 0/1 scaled flag",
    check.CHECK_SCALE: "expected finite, non-negative time scales keeping temporal positions below 2**31",
    check.CHECK_BASE: "expected positions in [0, 2**62]",
}


def _checked_table(value, name: str, dtype, width: int) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != 2 or value.shape[1] != width:
        what = f"array of dtype {value.dtype} and shape {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
        raise TypeError(f"{name}: expected a {np.dtype(dtype).name} array of shape (num_rows, {width}), got {what}")
    table = np.array(value, dtype=dtype, order="C")  # a private copy: nobody else can change it
    table.setflags(write=False)
    return table


@attrs.frozen(eq=False)
class PromptLayout:
    """A prompt's positions as segments: ``rows`` [num_rows, NUM_COLS] int64 and
    ``scales`` [num_rows, 2] float32 (see kernels/layout_codes.py).

    Built by `from_tokens` or `from_ranges`; a layout constructed directly
    (e.g. deserialised in another process) is checked in O(rows) before use,
    since the kernels that read it run without bounds checks. The tables are
    private read-only copies."""

    rows: np.ndarray = attrs.field(converter=lambda v: _checked_table(v, "rows", np.int64, C.NUM_COLS))
    scales: np.ndarray = attrs.field(converter=lambda v: _checked_table(v, "scales", np.float32, C.NUM_SCALE_COLS))
    num_tokens: int = attrs.field(converter=lambda v: as_index(v, "num_tokens", minimum=1))
    delta: int = attrs.field(converter=lambda v: as_index(v, "delta", minimum=-(2**62)))

    def __attrs_post_init__(self) -> None:
        if self.scales.shape[0] != self.rows.shape[0]:
            raise ValueError(f"scales: expected one row per layout row ({self.rows.shape[0]}), got {self.scales.shape[0]}")
        code, row, top = check.check_layout(self.rows, self.scales, self.num_tokens)
        if code:
            raise ValueError(f"rows[{row}]: {_CHECK_MESSAGES[code]}")
        if self.delta != top + 1 - self.num_tokens:
            raise ValueError(
                f"delta: expected max position + 1 - num_tokens = {top + 1 - self.num_tokens} for these rows, got {self.delta}"
            )

    @property
    def num_rows(self) -> int:
        return self.rows.shape[0]

    @property
    def max_position(self) -> int:
        return self.delta + self.num_tokens - 1

    @classmethod
    def from_tokens(
        cls, config, token_ids, *, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
        audio_feature_lengths=None, use_audio_in_video=False,
    ) -> "PromptLayout":  # fmt: skip
        """Scan the token ids once (same inputs as `prompt_positions`)."""
        config = as_config(config)
        ids = as_token_ids(token_ids)
        items = Items.normalize(config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video)
        rows, scales, n, top = build_rows_from_tokens(config, ids, items)
        return cls(rows[:n], scales[:n], ids.shape[0], top + 1 - ids.shape[0])

    @classmethod
    def from_ranges(
        cls, config, num_tokens, *, image_ranges=None, image_grid_thw=None, video_ranges=None,
        video_grid_thw=None, second_per_grid_ts=None, audio_ranges=None, audio_feature_lengths=None,
        use_audio_in_video=False,
    ) -> "PromptLayout":  # fmt: skip
        """Build from placeholder ranges, never reading a token: O(items).

        Each range is ``(offset, length)`` of one item's placeholder tokens (an
        (n, 2) array, or objects with ``.offset``/``.length``), in prompt order
        per modality, matching the grid rows. For an Omni audio-in-video video
        the range is its interleave of ``n_video + n_audio`` tokens, with
        vision_start, audio_start just before and audio_end, vision_end just
        after. `audio_feature_lengths` lists audio clips and (with
        `use_audio_in_video`) video tracks in prompt order."""
        config = as_config(config)
        num_tokens = as_index(num_tokens, "num_tokens", minimum=1)
        items = Items.normalize(config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video)
        ranges = Ranges(items, image_ranges, video_ranges, audio_ranges)
        rows, scales, n, top = build_rows_from_ranges(config, num_tokens, items, ranges)
        return cls(rows[:n], scales[:n], num_tokens, top + 1 - num_tokens)

    def positions(self, start: int = 0, end: int | None = None) -> np.ndarray:
        """Positions of tokens [start, end) as a new (3, end - start) int64 array."""
        start, end = self._check_range(start, end)
        out = np.empty((3, end - start), np.int64)
        if end > start:
            fill_positions(out, 0, self.rows, self.scales, 0, self.num_rows, start, end)
        return out

    def write_positions(self, out: np.ndarray, out_offset: int, start: int, end: int) -> None:
        """Write positions of tokens [start, end) into out[:, out_offset:] in place."""
        start, end = self._check_range(start, end)
        if not isinstance(out, np.ndarray) or out.dtype != np.int64 or out.ndim != 2 or out.shape[0] != 3:
            raise TypeError(f"out: expected an int64 numpy array of shape (3, n), got {type(out).__name__}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out: expected a writable C-contiguous array")
        out_offset = as_index(out_offset, "out_offset")
        if out_offset + (end - start) > out.shape[1]:
            raise ValueError(
                f"out_offset: expected room for {end - start} columns from {out_offset} in out of width {out.shape[1]}"
            )
        if end > start:
            fill_positions(out, out_offset, self.rows, self.scales, 0, self.num_rows, start, end)

    def _check_range(self, start, end) -> tuple[int, int]:
        start = as_index(start, "start")
        end = self.num_tokens if end is None else as_index(end, "end")
        if not start <= end <= self.num_tokens:
            raise ValueError(f"end: expected start <= end <= num_tokens ({self.num_tokens}), got start={start}, end={end}")
        return start, end
