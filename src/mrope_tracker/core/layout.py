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

from ..kernels import layout_check as check
from ..kernels import layout_codes as C
from ..kernels.layout_build import FAILED, build_from_tokens, error_of
from ..kernels.layout_emit import NUM_STATE, S_MAX, S_ROWS_EMITTED
from ..kernels.layout_fill import fill_positions
from ..kernels.layout_ranges import build_from_ranges
from . import float_carry, layout_bytes
from .config import MRopeConfig
from .errors import layout_error
from .inputs import EMPTY_OUT, Items, as_config, as_index, as_token_ids, describe
from .ranges import Ranges

__all__ = ["PromptLayout", "build_rows_from_tokens", "build_rows_from_ranges", "estimate_rows"]


def _new_table(capacity: int) -> tuple[np.ndarray, np.ndarray]:
    return np.empty((capacity, C.NUM_COLS), np.int64), np.empty((capacity, C.NUM_SCALE_COLS), np.float32)


# the most rows an estimate asks for: a larger prompt (tens of thousands of frames) is counted by a first build,
# and a wild estimate (a request about to be refused) allocates nothing large
_MAX_ESTIMATE = 1 << 16


def estimate_rows(config: MRopeConfig, items: Items, ranges: Ranges | None = None) -> int:
    """Layout rows a prompt needs (`_row_estimate`), at most `_MAX_ESTIMATE`."""
    # (at least one row: a negative audio length, which the builder then names, must not size the table)
    return max(1, min(_row_estimate(config, items, ranges), _MAX_ESTIMATE))


def _row_estimate(config: MRopeConfig, items: Items, ranges: Ranges | None) -> int:
    """Layout rows a prompt needs: exact without audio-in-video (a row per
    grid or frame, text runs between and after; audio clips need none), an
    estimate with it (per block the two bos/eos rows and a row per run, or a
    row per chunk of either stream when the runs are not known yet). Builders
    still count, so an underestimate costs a second build, never a wrong layout."""
    num_videos = items.video_grid.shape[0]
    blocks = items.image_grid.shape[0] + num_videos
    if num_videos and config.spec.video_blocks == "frames":
        blocks += sum(items.video_grid[:, 0].tolist()) - num_videos
    rows = 2 * blocks + 1
    if items.use_audio_in_video and num_videos:
        if ranges is not None and ranges.av_runs.shape[0]:
            return rows + 4 * num_videos + ranges.av_runs.shape[0]
        # Python ints: numpy arithmetic on a few elements costs microseconds
        frames = sum(items.video_grid[:, 0].tolist())
        chunk = config.audio_chunk_positions or 1
        rows += 4 * num_videos + 2 * (frames + sum(items.audio_tokens.tolist()) // chunk + num_videos)
    return rows


def _float_rows(config: MRopeConfig, items: Items, state: np.ndarray) -> bool:
    """Under SGLang 0.5's float32 rule (`float_carry`), whether a checked prompt
    needs rows of its own (core/float_carry.py) rather than the integer ones."""
    return state[S_MAX] >= float_carry.INTEGER_LIMIT or float_carry.needs_rows(items, config.tokens_per_second)


def build_rows_from_tokens(config: MRopeConfig, ids: np.ndarray, items: Items, rows=None, scales=None):
    """Run the token-scan builder into `rows`, or into a table of its own when
    `rows` is too small (or not given).

    Returns (rows, scales, num_rows, max_position). Raises ValueError on bad input."""
    state = np.empty(NUM_STATE, np.int64)
    if rows is None:
        rows, scales = _new_table(estimate_rows(config, items))
    while True:
        if build_from_tokens(rows, scales, state, EMPTY_OUT, ids, config.kernel_params, *items.kernel_args) == FAILED:
            raise layout_error(*error_of(state), config, items, ids=ids)
        if config.float_carry and _float_rows(config, items, state):  # placed by SGLang 0.5's float32 rule
            return float_carry.rows_from_tokens(config, ids, items)
        if config.float_carry:  # the integer rows are the rule's; it still reads every item's brackets
            float_carry.check_brackets(config, ids, items)
        if state[S_ROWS_EMITTED] <= rows.shape[0]:
            return rows, scales, int(state[S_ROWS_EMITTED]), int(state[S_MAX])
        rows, scales = _new_table(int(state[S_ROWS_EMITTED]))


def build_rows_from_ranges(config: MRopeConfig, num_tokens: int, items: Items, ranges: Ranges, rows=None, scales=None):
    """Run the range builder (no token reads); same return as build_rows_from_tokens."""
    state = np.empty(NUM_STATE, np.int64)
    if rows is None:
        rows, scales = _new_table(estimate_rows(config, items, ranges))
    while True:
        code, a, b, c, d = build_from_ranges(
            rows,
            scales,
            state,
            None,  # no positions written: compiled without the position rules (kernels/layout_emit.py)
            num_tokens,
            config.kernel_params,
            ranges.image,
            items.image_grid,
            ranges.video,
            items.video_grid,
            items.video_sp,
            ranges.audio,
            items.audio_tokens,
            ranges.av_runs,
            ranges.av_bounds,
            items.use_audio_in_video,
        )
        if code:
            raise layout_error(code, a, b, c, d, config, items, ranges=ranges.by_modality(), num_tokens=num_tokens)
        if config.float_carry and _float_rows(config, items, state):  # placed by SGLang 0.5's float32 rule
            return float_carry.rows_from_ranges(config, num_tokens, items, ranges)
        if state[S_ROWS_EMITTED] <= rows.shape[0]:
            ranges.check_inside(num_tokens)  # the builder saw the embedding runs alone, not a range's tail
            return rows, scales, int(state[S_ROWS_EMITTED]), int(state[S_MAX])
        rows, scales = _new_table(int(state[S_ROWS_EMITTED]))


def check_ranges_against_tokens(config: MRopeConfig, items: Items, ranges: Ranges, token_ids) -> None:
    """Verify every range against the prompt's tokens (the checked range form):
    a mismatch names the item, the expected count and the found count."""
    ids = as_token_ids(token_ids)
    frame_token = config.image_token_id if config.spec.video_brackets else config.video_token_id
    # ERNIE's bracketed whole-block videos: the image token (vLLM's remote-code
    # layout) or a video token of its own (transformers 5's)
    if config.spec.video_brackets and config.spec.video_blocks == "block" and config.video_token_id is not None:
        frame_token = (config.image_token_id, config.video_token_id)

    def count(offset, length, token):
        if isinstance(token, tuple):
            return max(count(offset, length, one) for one in token)
        return int(np.count_nonzero(ids[offset : offset + length] == token))

    def check(name, k, offset, length, token, what):
        if token is None:  # an id nobody published (openPangu-VL)
            field = "image_token_id" if what == "image" else f"{what}_token_id"
            raise ValueError(
                f"token_ids: {name}[{k}] cannot be checked against the tokens, {config.family}'s {field} is unknown "
                f"(the config gives none); set {field}, or leave token_ids out"
            )
        if offset + length > ids.shape[0]:
            raise ValueError(
                f"{name}[{k}]: expected {length} {what} tokens from token_ids[{offset}], "
                f"got a prompt of {ids.shape[0]} tokens"
            )
        found = count(offset, length, token)
        if found != length:
            raise ValueError(
                f"{name}[{k}]: expected {length} {what} tokens ({token}) from token_ids[{offset}], found {found}"
            )

    for k, (offset, length) in enumerate(ranges.image.tolist()):
        check("image_ranges", k, offset, length, config.image_token_id, "image")
    for k, (offset, length) in enumerate(ranges.audio.tolist()):
        check("audio_ranges", k, offset, length, config.audio_token_id, "audio")
    if not items.use_audio_in_video:
        name = "video frame ranges" if config.spec.video_blocks == "frames" else "video_ranges"
        for k, (offset, length) in enumerate(ranges.video.tolist()):
            check(name, k, offset, length, frame_token, "video")
        return
    m = config.spatial_merge_size
    for k, (offset, length) in enumerate(ranges.video.tolist()):
        t, h, w = (int(v) for v in items.video_grid[k])
        video = count(offset, length, config.video_token_id)
        audio = count(offset, length, config.audio_token_id)
        if video != t * (h // m) * (w // m) or video + audio != length:
            raise ValueError(
                f"video_ranges[{k}]: expected an interleave of {t * (h // m) * (w // m)} video and "
                f"{length - t * (h // m) * (w // m)} audio tokens from token_ids[{offset}], found {video} video and "
                f"{audio} audio"
            )
        r0, r1 = int(ranges.av_bounds[k]), int(ranges.av_bounds[k + 1])
        if r1 > r0:  # the layout the interleave convention rebuilt must be the prompt's own
            block = ids[offset : offset + length] == config.audio_token_id
            edges = np.flatnonzero(np.diff(block.view(np.int8), prepend=-1, append=-1))
            found = list(zip(block[edges[:-1]].astype(int).tolist(), np.diff(edges).tolist()))
            expected = [tuple(run) for run in ranges.av_runs[r0:r1].tolist()]
            if found != expected:
                q = next(i for i, (a, b) in enumerate(zip(found + [None], expected + [None])) if a != b)
                raise ValueError(
                    f"video_ranges[{k}]: the interleave convention lays the block out as (kind, count) runs "
                    f"{expected[q : q + 3]}... from run {q}, but token_ids hold {found[q : q + 3]}... (kind 0 "
                    "video, 1 audio)"
                )


_CHECK_MESSAGES = {
    check.CHECK_EMPTY: "expected at least one row",
    check.CHECK_TILING: "expected rows that tile the prompt in order (each starting where the last ended)",
    check.CHECK_LENGTH: "expected rows of positive length ending exactly at num_tokens",
    check.CHECK_KIND: "expected kinds LINEAR, CONST, GRID, GRID_RAW, GRID_BITS, XD_GRID or CANVAS",
    check.CHECK_GRID: (
        "expected a grid row with positive t, h, w, its tokens inside the grid and a known tau mode (GRID_BITS: a "
        "valid packed shape and as many set mask bits as tokens; XD_GRID: t 1, w at least 2, a non-negative ordinal; "
        "CANVAS: h, w at most num_tokens)"
    ),
    check.CHECK_SCALE: (
        "expected finite, non-negative time scales keeping temporal positions below 2**31 (CANVAS: whole extents "
        "in [1, 2**24))"
    ),
    check.CHECK_BASE: "expected positions in [0, 2**62]",
}


def _checked_table(value, name: str, dtype, width: int) -> np.ndarray:
    if type(value) is np.ndarray and value.dtype is dtype and value.ndim == 2 and value.shape[1] == width:
        # the builders' tables (every layout they make comes here): a plain array's copy is a plain array
        table = value.copy()
        view = table.view()
        view.flags.writeable = False
        return view
    if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != 2 or value.shape[1] != width:
        what = (
            f"array of dtype {value.dtype} and shape {value.shape}"
            if isinstance(value, np.ndarray)
            else type(value).__name__
        )
        raise TypeError(f"{name}: expected a {np.dtype(dtype).name} array of shape (num_rows, {width}), got {what}")
    table = np.array(value, dtype=dtype, order="C")  # a private copy: nobody else can change it
    return _read_only_view(table)


def _read_only_view(table: np.ndarray) -> np.ndarray:
    """A read-only view of `table`, whose own `base` (the table) stays writable.

    The layout hands `fill_positions` the writable table: numba compiles a
    kernel once per argument type, read-only arrays being a type of their
    own, and the tracker's step kernel already calls the fill with its
    writable pool. One signature instead of two saves a compilation of the
    fill and the segment writers it inlines, a noticeable part of a cold
    start."""
    view = table.view()
    view.setflags(write=False)
    return view


_ROWS_DTYPE, _SCALES_DTYPE = np.dtype(np.int64), np.dtype(np.float32)


def _rows_table(value) -> np.ndarray:
    return _checked_table(value, "rows", _ROWS_DTYPE, C.NUM_COLS)


def _scales_table(value) -> np.ndarray:
    return _checked_table(value, "scales", _SCALES_DTYPE, C.NUM_SCALE_COLS)


def _num_tokens(value) -> int:
    if type(value) is int and 1 <= value <= 2**62:  # the builders' counts: no call
        return value
    return as_index(value, "num_tokens", minimum=1)


def _delta(value) -> int:
    if type(value) is int and -(2**62) <= value <= 2**62:
        return value
    return as_index(value, "delta", minimum=-(2**62))


def _check_config(layout, field, value) -> None:
    if value is not None and type(value) is not MRopeConfig:
        raise TypeError(f"config: expected the MRopeConfig the layout was built under, or None, got {describe(value)}")


def _check_rows(layout: PromptLayout, field, value) -> None:
    """The O(rows) check of the tables (the kernels that read them run
    without bounds checks), run once all fields are set; `delta` must be
    the one the rows reach."""
    if layout.scales.shape[0] != layout.rows.shape[0]:
        raise ValueError(
            f"scales: expected one row per layout row ({layout.rows.shape[0]}), got {layout.scales.shape[0]}"
        )
    code, row, top = check.check_layout(layout.rows, layout.scales, layout.num_tokens)
    if code:
        raise ValueError(f"rows[{row}]: {_CHECK_MESSAGES[code]}")
    if value != top + 1 - layout.num_tokens:
        raise ValueError(
            f"delta: expected max position + 1 - num_tokens = {top + 1 - layout.num_tokens} for these rows, got {value}"
        )


@attrs.frozen(eq=False)
class PromptLayout:
    """A prompt's positions as segments: ``rows`` [num_rows, NUM_COLS] int64 and
    ``scales`` [num_rows, 2] float32 (see kernels/layout_codes.py).

    Built by a classmethod per source (`from_tokens`, `from_ranges`,
    `from_rows`, `from_bytes`), each ending in the one constructor: it takes
    private read-only copies of the tables and checks them in O(rows), since
    the kernels that read them run without bounds checks. A layout
    constructed directly (e.g. from tables another process sent) is checked
    the same way.

    ``config`` is the `MRopeConfig` the layout was built under (kept through
    `to_bytes` and pickling), so that a tracker can refuse a layout built for
    another model or semantics preset; None for a layout of unknown origin
    (constructed from its tables without one)."""

    rows: np.ndarray = attrs.field(converter=_rows_table)
    scales: np.ndarray = attrs.field(converter=_scales_table)
    num_tokens: int = attrs.field(converter=_num_tokens)
    delta: int = attrs.field(converter=_delta, validator=_check_rows)
    config: MRopeConfig | None = attrs.field(default=None, kw_only=True, validator=_check_config)

    @property
    def _fill_rows(self) -> np.ndarray:
        return self.rows.base  # the private writable table behind the read-only view (see _read_only_view)

    @property
    def _fill_scales(self) -> np.ndarray:
        return self.scales.base

    def to_bytes(self) -> bytes:
        """A compact, O(rows) serialisation (for sending a layout built in a
        front-end process to a worker), with a format version and a checksum;
        `from_bytes` reads it back, checked (docs/design.md, "Layouts as bytes")."""
        return layout_bytes.write(self.rows, self.scales, self.num_tokens, self.delta, self.config)

    @classmethod
    def from_bytes(cls, data) -> PromptLayout:
        """The layout `to_bytes` wrote. A buffer it did not write (truncated,
        changed in any bit, of another format version, foreign) is a
        ValueError naming `data`; the rows are checked like any layout's."""
        rows, scales, num_tokens, delta, config = layout_bytes.read(data)
        try:
            return cls(rows, scales, num_tokens, delta, config=config)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data: expected a consistent layout, got {exc}") from None

    def __reduce__(self):
        # through from_bytes, so an unpickled layout is checked like any other
        return (PromptLayout.from_bytes, (self.to_bytes(),))

    @classmethod
    def from_rows(cls, config, rows: np.ndarray, scales: np.ndarray, num_tokens: int) -> PromptLayout:
        """A layout from rows made by hand (e.g. split around deleted tokens,
        `mrope_tracker.evs`), under `config` (None: of unknown origin, as a
        layout constructed directly), its delta taken from the rows.
        `rows` and `scales` are C-contiguous int64 / float32 tables."""
        config = None if config is None else as_config(config)
        num_tokens = as_index(num_tokens, "num_tokens", minimum=1)
        if (
            not isinstance(rows, np.ndarray)
            or rows.dtype != np.int64
            or rows.ndim != 2
            or rows.shape[1] != C.NUM_COLS
            or not rows.flags.c_contiguous
        ):
            raise TypeError(f"rows: expected a C-contiguous int64 array of shape (num_rows, {C.NUM_COLS})")
        if (
            not isinstance(scales, np.ndarray)
            or scales.dtype != np.float32
            or scales.shape != (rows.shape[0], C.NUM_SCALE_COLS)
            or not scales.flags.c_contiguous
        ):
            raise TypeError(f"scales: expected a C-contiguous float32 array of shape ({rows.shape[0]}, 2)")
        # read-only views: the check's one compiled signature is for a layout's own (read-only) tables
        code, row, top = check.check_layout(_read_only_view(rows), _read_only_view(scales), num_tokens)
        if code:
            raise ValueError(f"rows[{row}]: {_CHECK_MESSAGES[code]}")
        return cls(rows, scales, num_tokens, top + 1 - num_tokens, config=config)

    @property
    def num_rows(self) -> int:
        return self.rows.shape[0]

    @property
    def max_position(self) -> int:
        return self.delta + self.num_tokens - 1

    @classmethod
    def from_tokens(
        cls,
        config,
        token_ids,
        *,
        image_grid_thw=None,
        video_grid_thw=None,
        second_per_grid_ts=None,
        audio_feature_lengths=None,
        use_audio_in_video=False,
    ) -> PromptLayout:
        """Scan the token ids once (same inputs as `prompt_positions`)."""
        config = as_config(config)
        ids = as_token_ids(token_ids)
        items = Items.normalize(
            config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
        rows, scales, n, top = build_rows_from_tokens(config, ids, items)
        return cls(rows[:n], scales[:n], ids.shape[0], top + 1 - ids.shape[0], config=config)

    @classmethod
    def from_ranges(
        cls,
        config,
        num_tokens,
        *,
        image_ranges=None,
        image_grid_thw=None,
        video_ranges=None,
        video_grid_thw=None,
        second_per_grid_ts=None,
        audio_ranges=None,
        audio_feature_lengths=None,
        use_audio_in_video=False,
        interleave="transformers",
        token_ids=None,
    ) -> PromptLayout:
        """Build from placeholder ranges, never reading a token: O(items).

        Each range is ``(offset, length)`` or ``(offset, length, is_embed)``
        of one item (an (n, 2) array, or objects with ``.offset``,
        ``.length`` and optionally ``.is_embed``), in prompt order per
        modality, matching the grid rows. For Qwen3-VL and GLM a video's range
        may span its frames and the text between them: `is_embed` (bool list,
        array or tensor) marks the frames' tokens. For an Omni audio-in-video
        video the range is its interleave of ``n_video + n_audio`` tokens, with
        vision_start, audio_start just before and audio_end, vision_end just
        after; `interleave` says how it was laid out: "transformers" (the
        default: transformers' processor), "vllm" (vLLM's processor), or one
        explicit list of (kind, count) runs per video, kind "video" or
        "audio". `audio_feature_lengths` lists audio clips and (with
        `use_audio_in_video`) video tracks in prompt order. With `token_ids`,
        every range is also verified against the tokens (O(tokens))."""
        config = as_config(config)
        num_tokens = as_index(num_tokens, "num_tokens", minimum=1)
        items = Items.normalize(
            config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
        ranges = Ranges(config, items, image_ranges, video_ranges, audio_ranges, interleave, second_per_grid_ts)
        rows, scales, n, top = build_rows_from_ranges(config, num_tokens, items, ranges)
        if token_ids is not None:
            check_ranges_against_tokens(config, items, ranges, token_ids)
        return cls(rows[:n], scales[:n], num_tokens, top + 1 - num_tokens, config=config)

    @classmethod
    def from_normalized(cls, config: MRopeConfig, num_tokens: int, items: Items, ranges: Ranges) -> PromptLayout:
        """`from_ranges` for inputs already checked and converted: an `MRopeConfig`,
        a prompt length >= 1, and the `Items` and `Ranges` made for them under
        that config (as `features.read_features` makes them from vLLM's features)."""
        rows, scales, n, top = build_rows_from_ranges(config, num_tokens, items, ranges)
        return cls(rows[:n], scales[:n], num_tokens, top + 1 - num_tokens, config=config)

    @property
    def num_dims(self) -> int:
        """Rows of the positions: the config's `num_dims` (3 for M-RoPE, 4 for
        HunYuan-VL), and 3 for a layout of unknown origin."""
        return 3 if self.config is None else self.config.num_dims

    def positions(self, start: int = 0, end: int | None = None) -> np.ndarray:
        """Positions of tokens [start, end) as a new (num_dims, end - start) int64 array."""
        start, end = self._check_range(start, end)
        out = np.empty((self.num_dims, end - start), np.int64)
        if end > start:
            fill_positions(out, 0, self._fill_rows, self._fill_scales, 0, self.num_rows, start, end)
        return out

    def write_positions(self, out: np.ndarray, out_offset: int, start: int, end: int) -> None:
        """Write positions of tokens [start, end) into out[:, out_offset:] in place;
        `out` has num_dims rows."""
        start, end = self._check_range(start, end)
        rows = self.num_dims
        if not isinstance(out, np.ndarray) or out.dtype != np.int64 or out.ndim != 2:
            raise TypeError(f"out: expected an int64 numpy array of shape ({rows}, n), got {type(out).__name__}")
        if out.shape[0] != rows:
            raise TypeError(
                f"out: expected {rows} rows (the layout's num_dims, {self.config.family if self.config else 'unknown'}"
                f" family), got shape {out.shape}"
            )
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out: expected a writable C-contiguous array")
        out_offset = as_index(out_offset, "out_offset")
        if out_offset + (end - start) > out.shape[1]:
            raise ValueError(
                f"out_offset: expected room for {end - start} columns from {out_offset} in out of width {out.shape[1]}"
            )
        if end > start:
            fill_positions(out, out_offset, self._fill_rows, self._fill_scales, 0, self.num_rows, start, end)

    def _check_range(self, start, end) -> tuple[int, int]:
        start = as_index(start, "start")
        end = self.num_tokens if end is None else as_index(end, "end")
        if not start <= end <= self.num_tokens:
            raise ValueError(
                f"end: expected start <= end <= num_tokens ({self.num_tokens}), got start={start}, end={end}"
            )
        return start, end
