"""EVS video pruning (vLLM's ``--video-pruning-rate``) as layout rows.

vLLM 0.33 lays a pruned video out with only K placeholders (the tokens it
will keep), before the vision encoder has chosen which ones: Qwen2.5-VL as
``vision_start``, K video tokens, ``vision_end``; Qwen3-VL as its usual
per-frame text and ``vision_start``/``vision_end`` pairs, all K tokens in
frame 0's run and the later frames' runs empty. The retention mask (one bit
per token of the unpruned t*h'*w' grid, frame-major) comes once the encoder
has run.

Our rule (the default): pruning deletes tokens. The pruned prompt is the
unpruned prompt with the dropped tokens removed, and every token left keeps
its unpruned position; for Qwen3-VL the span's tokens are the frames in
order, each with its own kept tokens (the order in which vLLM hands the
model its embeddings). Positions never depend on how prefill is chunked,
and nothing already computed changes. In layout terms, `delete_tokens`
splits the unpruned layout's rows around the deleted tokens: text rows keep
their bases, and a video's grid row becomes GRID_BITS rows that carry the
retention mask itself (192 bits a row), or one GRID row per run of kept
tokens where that takes fewer rows: the state grows with the mask's bits,
never with a table of positions.

Under ``semantics="vllm-0.33"``, a Qwen2.5-VL prompt with one video and no
item after it takes vLLM 0.33's recompute result instead, which does not
depend on chunking there: ``second_per_grid_ts`` truncated to an integer,
and text from ``vision_end`` on at the video's base + w'. Elsewhere vLLM's
result depends on chunk boundaries and our rule applies
(docs/semantics.md, "EVS").
"""

from __future__ import annotations

import bisect
import itertools

import numpy as np
import torch

from ..core.inputs import EMPTY_RANGES, Items, as_config, as_grid, as_token_ids, describe, tensor_values
from ..core.layout import PromptLayout
from ..core.ranges import Ranges
from ..kernels import layout_codes as C
from ..kernels.pruned_rows import split_rows

__all__ = ["PendingPrune", "PrunedPrompt", "delete_tokens"]

PRUNABLE = ("qwen2_5_vl", "qwen3_vl")
# The most tokens the videos' unpruned grids may hold in all: the unpruned prompt's keep mask (and a Qwen3-VL
# video's is_embed mask) take a byte a token, so a wild grid would allocate without limit (MemoryError) before
# anything refused it. A million-token context pruned at rate 0.9 unprunes to 10M tokens.
MAX_UNPRUNED_TOKENS = 1 << 24


def delete_tokens(layout: PromptLayout, keep) -> PromptLayout:
    """`layout` with the tokens where `keep` is False removed, each kept token
    at its old position. A row keeps its kind where its kept tokens form few
    runs (one row per run, its base or grid offset moved to the run's start);
    a grid row whose kept tokens are scattered becomes GRID_BITS rows, the
    mask itself at 192 bits a row, with runs of whole windows as GRID rows.
    So the rows grow with the mask's bits (divided by 192) or its runs,
    whichever is fewer, never with the tokens."""
    keep = np.asarray(keep)
    if keep.dtype != np.bool_ or keep.shape != (layout.num_tokens,):
        raise ValueError(f"keep: expected a bool array of shape ({layout.num_tokens},), got {describe(keep)}")
    rows, scales = _deleted_rows(layout, keep)
    return _layout(layout.config, rows, scales)


def _deleted_rows(layout: PromptLayout, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`delete_tokens`' tables (rows with their token starts renumbered, scales), from a checked `keep`:
    the kernel counts the rows, then writes them into tables of that size."""
    if not (keep.flags.c_contiguous and keep.flags.writeable):  # the kernel's one signature
        keep = keep.copy()
    num_rows = split_rows(layout.rows, layout.scales, keep, _NO_ROWS, _NO_SCALES, False)
    if num_rows == 0:
        raise ValueError("keep: expected at least one token kept, got none")
    rows = np.empty((num_rows, C.NUM_COLS), np.int64)
    scales = np.empty((num_rows, C.NUM_SCALE_COLS), np.float32)
    split_rows(layout.rows, layout.scales, keep, rows, scales, True)
    return rows, scales


_NO_ROWS = np.empty((0, C.NUM_COLS), np.int64)
_NO_SCALES = np.empty((0, C.NUM_SCALE_COLS), np.float32)


def _layout(config, rows: np.ndarray, scales: np.ndarray) -> PromptLayout:
    """The layout of tables of our own (C-contiguous), its token count their rows' lengths. They go in
    read-only, as every layout's tables reach the layout check: one compiled signature of it, not two."""
    num_tokens = int(rows[-1, C.COL_TOK_START] + rows[-1, C.COL_TOK_LEN])
    rows, scales = np.ascontiguousarray(rows), np.ascontiguousarray(scales)
    rows.setflags(write=False)
    scales.setflags(write=False)
    return PromptLayout.from_rows(config, rows, scales, num_tokens)


class PrunedPrompt:
    """A prompt whose videos vLLM pruned, read once at admission.

    `token_ids` is the pruned prompt as vLLM lays it out, `video_grid_thw`
    the videos' unpruned grids. It reads the ids once (numpy, O(tokens):
    where the videos' kept tokens and the images' tokens sit) and builds the
    unpruned prompt's layout rows from those ranges with the builder from
    ranges, as `RopeState` admits any request (so a worker warmed for
    `RopeState` has every kernel EVS calls); it keeps those rows and where
    each video's grid tokens sit: O(items + frames), no token ids.
    `layout(masks)` gives the pruned prompt's layout once the retention
    masks are known. Tokens [`video_starts[k]`, `video_ends[k]`)
    of the pruned prompt are those whose positions video k's mask decides;
    every other token's position is known at admission.
    """

    def __init__(self, config, token_ids, *, video_grid_thw, image_grid_thw=None, second_per_grid_ts=None) -> None:
        config = as_config(config)
        if config.family not in PRUNABLE:
            raise ValueError(f"config.family: expected one of {', '.join(PRUNABLE)} (EVS), got {config.family!r}")
        ids = as_token_ids(token_ids)
        grid = None if video_grid_thw is None else as_grid(video_grid_thw, "video_grid_thw")
        if grid is None or grid.shape[0] == 0:
            raise ValueError(f"video_grid_thw: expected an (n, 3) grid with n >= 1, got {describe(video_grid_thw)}")
        m = config.spatial_merge_size
        grids = grid.tolist()  # (a few videos: Python ints check them faster than array operations, and never overflow)
        if any(t <= 0 or h <= 0 or w <= 0 or h % m or w % m for t, h, w in grids):
            raise ValueError(f"video_grid_thw: expected positive t, h, w with h, w divisible by {m}, got {grids}")
        unpruned = sum(t * (h // m) * (w // m) for t, h, w in grids)
        if unpruned > MAX_UNPRUNED_TOKENS:
            raise ValueError(
                f"video_grid_thw: expected grids of at most {MAX_UNPRUNED_TOKENS} tokens in all (unpruned), got "
                f"{unpruned}"
            )
        self.config = config
        self.num_tokens = int(ids.shape[0])
        self.frame_sizes = [(h // m) * (w // m) for _, h, w in grids]
        self.num_frames = [t for t, _, _ in grids]
        self.video_starts, self.video_ends, self.num_kept, self._grid_spans, moves = self._unpruned(ids)
        for k, (kept, t, size) in enumerate(zip(self.num_kept, self.num_frames, self.frame_sizes)):
            if kept > t * size:
                raise ValueError(
                    f"token_ids: video {k} holds {kept} video tokens from index {self.video_starts[k]}, more than "
                    f"its unpruned grid's {t * size} (video_grid_thw[{k}])"
                )
        self._full = self._unpruned_layout(ids, moves, image_grid_thw, grid, second_per_grid_ts)
        self._vllm_recompute = (
            config.semantics == "vllm-0.33"
            and config.family == "qwen2_5_vl"
            and len(self.num_frames) == 1
            and not (ids[self.video_starts[0] :] == config.image_token_id).any()  # no image after the video
        )

    def _unpruned(self, ids: np.ndarray):
        """Per video: the start and end of the tokens whose positions its mask
        decides and its kept count (pruned prompt), and the (start, length) of
        its grid runs (unpruned prompt); then where the unpruned prompt's
        tokens move: (pruned index, tokens gained before it) pairs, in order.
        No unpruned id is made: the layout comes from ranges."""
        video = self.config.video_token_id
        per_frame = self.config.family == "qwen3_vl"
        is_video = ids == video
        starts, ends, kept, spans, moves = [], [], [], [], []
        at = shift = 0
        for k, (t, size) in enumerate(zip(self.num_frames, self.frame_sizes)):
            first = at + int(is_video[at:].argmax()) if at < ids.shape[0] else at  # (a bool argmax stops at a True)
            if first == ids.shape[0] or not is_video[first]:
                raise ValueError(f"video_grid_thw: expected {len(self.num_frames)} videos in token_ids, found {k}")
            run = int(is_video[first:].argmin()) or ids.shape[0] - first  # 0: video tokens to the end
            starts.append(first)
            kept.append(run)
            if not per_frame:
                spans.append([(first + shift, t * size)])
                moves.append((first + run, t * size - run))
                shift += t * size - run
                at = first + run
                ends.append(at)
                continue
            # Qwen3-VL: frame 0's run holds every kept token; frames 1.. are empty start/end pairs
            frame_spans = [(first + shift, size)]
            moves.append((first + run, size - run))
            shift += size - run
            at = first + run
            pairs = np.flatnonzero(
                (ids[at:-1] == self.config.vision_start_token_id) & (ids[at + 1 :] == self.config.vision_end_token_id)
            )
            if pairs.shape[0] < t - 1:
                raise ValueError(
                    f"token_ids: expected video {k} to have {t} frames, frame 0 with the kept tokens and the others "
                    f"an empty vision_start, vision_end pair, found {1 + pairs.shape[0]}"
                )
            for p in (at + pairs[: t - 1] + 1).tolist():  # each later frame's vision_end: its grid goes before it
                frame_spans.append((p + shift, size))
                moves.append((p, size))
                shift += size
                at = p
            # the frames' text moves with the split of the kept tokens; the last vision_end does not
            ends.append(at)
            spans.append(frame_spans)
        if is_video[at:].any():
            extra = at + int(np.flatnonzero(is_video[at:])[0])
            raise ValueError(
                f"token_ids: expected {len(self.num_frames)} pruned videos, got another video token at index {extra}"
            )
        return starts, ends, kept, spans, moves

    def _unpruned_layout(self, ids, moves, image_grid_thw, video_grid, second_per_grid_ts) -> PromptLayout:
        """The unpruned prompt's layout from its items' ranges, with the builder
        from ranges that admits every other request (so the EVS path never
        needs the builder from tokens): the videos' grid runs are known, the
        images' are their token runs, moved as `moves` say."""
        config = self.config
        items = Items.normalize(config, image_grid_thw, video_grid, second_per_grid_ts, None, False)
        image_at = np.flatnonzero(ids == config.image_token_id)
        image = EMPTY_RANGES
        if image_at.shape[0] or items.image_grid.shape[0]:
            image = _image_ranges(config, items.image_grid, image_at)
            # into the unpruned prompt (no video's grid lands inside an image's run); a few moves: Python ints
            at = [index for index, _ in moves]
            shift_before = list(itertools.accumulate((gained for _, gained in moves), initial=0))
            for k, offset in enumerate(image[:, 0].tolist()):
                image[k, 0] += shift_before[bisect.bisect_right(at, offset)]
        video_masks = None
        if config.spec.video_blocks == "frames":  # a range over the frames and the text between; is_embed: the frames
            video, video_masks = [], []
            for frames in self._grid_spans:
                start, (last, size) = frames[0][0], frames[-1]
                mask = np.zeros(last + size - start, np.bool_)
                for offset, length in frames:
                    mask[offset - start : offset - start + length] = True
                video.append((start, mask.shape[0]))
                video_masks.append(mask)
        else:
            video = [frames[0] for frames in self._grid_spans]
        ranges = Ranges.from_rows(
            config,
            items,
            image,
            None,
            np.array(video, np.int64),
            video_masks,
            EMPTY_RANGES,
            None,
            second_per_grid_ts=second_per_grid_ts,
        )
        num_unpruned = self.num_tokens + sum(gained for _, gained in moves)
        return PromptLayout.from_normalized(config, num_unpruned, items, ranges)

    def checked_mask(self, k: int, mask) -> np.ndarray:
        """Video k's mask, checked, as a bool array of our own."""
        return _checked_mask(mask, k, self.num_frames[k] * self.frame_sizes[k], self.num_kept[k])

    def checked_masks(self, retention_masks) -> tuple[np.ndarray, ...]:
        """One checked mask per video, as arrays of our own."""
        if not isinstance(retention_masks, (list, tuple)) or len(retention_masks) != len(self.num_frames):
            raise ValueError(
                f"retention_masks: expected a list of {len(self.num_frames)} masks (one per video), "
                f"got {describe(retention_masks)}"
            )
        return tuple(self.checked_mask(k, mask) for k, mask in enumerate(retention_masks))

    def keep(self, retention_masks) -> np.ndarray:
        """Which tokens of the unpruned prompt survive, from one mask per video."""
        keep = np.ones(self._full.num_tokens, np.bool_)
        for k, mask in enumerate(self.checked_masks(retention_masks)):
            done = 0
            for start, length in self._grid_spans[k]:
                keep[start : start + length] = mask[done : done + length]
                done += length
        return keep

    def layout(self, retention_masks) -> PromptLayout:
        """The pruned prompt's layout (our rule, or vLLM 0.33's recompute where
        that applies, see the module docstring)."""
        rows, scales = _deleted_rows(self._full, self.keep(retention_masks))
        if self._vllm_recompute:
            _vllm_recompute(rows, scales, self.video_starts[0], self.video_starts[0] + self.num_kept[0])
        layout = _layout(self.config, rows, scales)
        if layout.num_tokens != self.num_tokens:  # _checked_mask counted every video's kept tokens
            raise RuntimeError(f"evs: expected {self.num_tokens} tokens after pruning, got {layout.num_tokens}")
        return layout

    def stand_in_mask(self, k: int) -> np.ndarray:
        """A mask keeping video k's first kept-count tokens: it stands in for a
        mask still to come (the tokens it decides must not be scheduled)."""
        mask = np.zeros(self.num_frames[k] * self.frame_sizes[k], np.bool_)
        mask[: self.num_kept[k]] = True
        return mask

    @property
    def num_videos(self) -> int:
        return len(self.num_frames)

    @property
    def grid_spans(self) -> list[list[tuple[int, int]]]:
        """Per video, the (start, length) of its grid runs in the unpruned
        prompt: one run (Qwen2.5-VL) or one per frame (Qwen3-VL)."""
        return [list(spans) for spans in self._grid_spans]


def _image_ranges(config, image_grid: np.ndarray, image_at: np.ndarray) -> np.ndarray:
    """(offset, length) of each image's tokens in the pruned prompt, from where
    its image tokens sit (`image_at`, increasing): image k takes the next t*h'*w' of them, which
    must be one run, and none may be left over (the rule the builder from
    tokens applies: transformers' scan for the next image token)."""
    m = config.spatial_merge_size
    sizes = [t * (h // m) * (w // m) for t, h, w in image_grid.tolist()]
    out = np.empty((len(sizes), 2), np.int64)
    used = 0
    for k, size in enumerate(sizes):
        if size < 1:  # (the builders' own item check would name it, but only after this reads the runs)
            raise ValueError(
                f"image_grid_thw[{k}]: expected t >= 1 and h, w >= spatial_merge_size ({m}), "
                f"got {image_grid[k].tolist()}"
            )
        if used + size > image_at.shape[0]:
            raise ValueError(
                f"token_ids: expected image {k}'s {size} tokens (image_grid_thw[{k}]) after the {used} before it, "
                f"got {image_at.shape[0] - used}"
            )
        if image_at[used + size - 1] - image_at[used] != size - 1:
            raise ValueError(
                f"token_ids: expected image {k}'s {size} tokens (image_grid_thw[{k}]) in one run from index "
                f"{int(image_at[used])}, got other tokens among them"
            )
        out[k] = image_at[used], size
        used += size
    if used != image_at.shape[0]:
        raise ValueError(
            f"token_ids: expected {used} image tokens (image_grid_thw: {len(sizes)} images), got {image_at.shape[0]}"
        )
    return out


def _checked_mask(mask, k: int, size: int, kept: int) -> np.ndarray:
    name = f"retention_masks[{k}]"
    if isinstance(mask, torch.Tensor):  # possibly on a device (a meta tensor, which holds no values: refused)
        mask = tensor_values(mask, name)
    try:
        array = np.asarray(mask)
    except (ValueError, TypeError):  # ragged nested lists and the like
        array = None
    if array is None or array.ndim != 1 or array.shape[0] != size or array.dtype.kind not in "biu":
        raise ValueError(f"{name}: expected a 1-D bool or 0/1 array of {size} entries (t*h'*w'), got {describe(mask)}")
    if array.dtype != np.bool_:
        if ((array != 0) & (array != 1)).any():
            raise ValueError(f"{name}: expected 0/1 entries, got values {np.unique(array)[:4].tolist()}")
        array = array != 0
    else:
        array = array.copy()  # ours: a caller who reuses the buffer changes nothing kept
    if int(np.count_nonzero(array)) != kept:
        raise ValueError(
            f"{name}: expected {kept} kept tokens (the video's placeholders in token_ids), "
            f"got {int(np.count_nonzero(array))}"
        )
    return array


def _vllm_recompute(rows: np.ndarray, scales: np.ndarray, video_start: int, video_end: int) -> None:
    """vLLM 0.33's Qwen2.5-VL recompute of a one-video prompt whose video
    tokens are [video_start, video_end), applied to its pruned tables in
    place: the video's time scale truncated to an integer, and every token
    from `video_end` (its vision_end) on at the video's base + w', counting
    up by one."""
    # the rows tile the tokens in order: the video's rows and those after it are two slices
    lo, hi = np.searchsorted(rows[:, C.COL_TOK_START], (video_start, video_end)).tolist()
    scales[lo:hi, C.SCALE_SP] = np.trunc(scales[lo:hi, C.SCALE_SP])
    base = int(rows[lo, C.COL_BASE])
    if rows[lo, C.COL_KIND] == C.KIND_GRID_BITS:
        width = int(rows[lo, C.COL_BITS_SHAPE] >> C.BITS_SIDE) & ((1 << C.BITS_SIDE) - 1)
    else:
        width = int(rows[lo, C.COL_W])
    rows[hi:, C.COL_BASE] = base + width + rows[hi:, C.COL_TOK_START] - video_end


class PendingPrune:
    """A pruned prompt and the masks known so far (None: still to come).
    `with_mask` returns a new one, so a refused mask changes nothing."""

    def __init__(self, prompt: PrunedPrompt, retention_masks=None) -> None:
        self.prompt = prompt
        if retention_masks is None:
            self.masks = (None,) * prompt.num_videos
        else:
            self.masks = prompt.checked_masks(retention_masks)  # copies: the caller's buffers are not kept

    def with_mask(self, video_index, mask) -> PendingPrune:
        if isinstance(video_index, bool) or not isinstance(video_index, (int, np.integer)):
            raise TypeError(f"video_index: expected an int, got {describe(video_index)}")
        if not 0 <= video_index < self.prompt.num_videos:
            raise ValueError(f"video_index: expected a video in [0, {self.prompt.num_videos}), got {video_index}")
        if self.masks[video_index] is not None:
            raise ValueError(f"video_index: video {video_index}'s retention mask was given already")
        k = int(video_index)
        checked = self.prompt.checked_mask(k, mask)
        updated = PendingPrune(self.prompt)
        updated.masks = self.masks[:k] + (checked,) + self.masks[k + 1 :]
        return updated

    def spans(self) -> list[tuple[int, tuple[int, int]]]:
        """(video, (start, end)) of every video whose mask is still to come."""
        return [
            (k, (self.prompt.video_starts[k], self.prompt.video_ends[k]))
            for k, mask in enumerate(self.masks)
            if mask is None
        ]

    def layout(self) -> PromptLayout:
        masks = [self.prompt.stand_in_mask(k) if m is None else m for k, m in enumerate(self.masks)]
        return self.prompt.layout(masks)
