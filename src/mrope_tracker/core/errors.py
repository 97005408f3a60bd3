"""Messages for the layout builders' error codes.

Kernels never raise: they return (code, a, b, c, d) (layout_codes.ERR_*),
and `layout_error` turns that into the ValueError the user sees, naming the
argument, what was expected and what came. It runs only on the error path,
so it may look at the token ids again (to measure a placeholder run, say).
Each code has one small message function in `_MESSAGES`; what the meaning
of (a, b, c, d) is for a code is stated where the kernel returns it.
"""

from __future__ import annotations

import attrs
import numpy as np

from ..kernels import layout_codes as C
from .config import MRopeConfig
from .inputs import MODALITY_NAMES, Items, count_items

_GRID_NAMES = {C.MOD_IMAGE: "image_grid_thw", C.MOD_VIDEO: "video_grid_thw", C.MOD_AUDIO: "audio_feature_lengths"}


def _grid_text(grids: np.ndarray, n: int) -> str:
    return str(tuple(int(v) for v in grids[n])) if n < grids.shape[0] else "?"


def _run_bounds(ids: np.ndarray, index: int, token: int) -> tuple[int, int]:
    """[start, end) of the run of `token` that holds or ends just before `index`."""
    start = index
    while start > 0 and ids[start - 1] == token:
        start -= 1
    end = index
    while end < ids.shape[0] and ids[end] == token:
        end += 1
    return start, end


def _merge_hint(found: int, expected: int, merge: int) -> str:
    if merge > 1 and found == expected * merge * merge:
        return (
            f" (that is {merge}x{merge} times too many: grids are (t, h, w) in patches BEFORE the spatial merge; "
            "this one looks like it was passed after merging)"
        )
    return ""


@attrs.frozen
class _Failure:
    """What a message may look at: the config, the items, and the ids or ranges the builder read."""

    config: MRopeConfig
    items: Items
    ids: np.ndarray | None
    ranges: object
    num_tokens: int | None

    @property
    def merge(self) -> int:
        return self.config.spatial_merge_size

    @property
    def per_frame(self) -> bool:
        return self.config.spec.video_blocks == "frames"

    def grids(self, modality: int) -> np.ndarray:
        return self.items.image_grid if modality == C.MOD_IMAGE else self.items.video_grid

    def placeholder(self, modality: int):
        spec = self.config.spec
        if modality == C.MOD_IMAGE or (modality == C.MOD_VIDEO and spec.video_brackets):
            return self.config.image_token_id
        return self.config.video_token_id if modality == C.MOD_VIDEO else self.config.audio_token_id

    def item_text(self, modality: int, n: int, frame: int = 0) -> str:
        if modality == C.MOD_AUDIO:
            lengths = self.items.audio_lengths
            return f"audio_feature_lengths[{n}] = {int(lengths[n])}" if n < lengths.shape[0] else "audio"
        text = f"{_GRID_NAMES[modality]}[{n}] = {_grid_text(self.grids(modality), n)}"
        return f"{text}, frame {frame}," if modality == C.MOD_VIDEO and self.per_frame else text

    def expected_tokens(self, modality: int, n: int) -> int:
        if modality == C.MOD_AUDIO:
            return int(self.items.audio_tokens[n])
        t, h, w = (int(v) for v in self.grids(modality)[n])
        m = self.merge
        if self.config.spec.xd_images:  # h' rows of w' + 1 tokens, an extra token either side
            return (h // m) * (w // m + 1) + 2
        if modality == C.MOD_VIDEO:
            t //= self.config.temporal_merge_size or 1
        return (h // m) * (w // m) * (1 if modality == C.MOD_VIDEO and self.per_frame else t)


def _grid_dim(f: _Failure, a, b, c, d):
    return f"{_GRID_NAMES[a]}[{b}]: expected positive (t, h, w), got {_grid_text(f.grids(a), b)}"


def _grid_merge(f: _Failure, a, b, c, d):
    return (
        f"{_GRID_NAMES[a]}[{b}]: expected h and w divisible by spatial_merge_size {f.merge}, got "
        f"{_grid_text(f.grids(a), b)} (grids are (t, h, w) in patches before the merge, as the processor gives them)"
    )


def _video_t_merge(f: _Failure, a, b, c, d):
    return (
        f"video_grid_thw[{a}]: expected a frame count t divisible by temporal_merge_size "
        f"{f.config.temporal_merge_size} ({f.config.family}: the processor sends whole frame groups; an odd count "
        f"would give more placeholder tokens than the position grid has), got {_grid_text(f.items.video_grid, a)}"
    )


def _image_t(f: _Failure, a, b, c, d):
    return f"image_grid_thw[{a}]: expected t == 1 for an image, got {_grid_text(f.items.image_grid, a)}"


def _sp_value(f: _Failure, a, b, c, d):
    return f"second_per_grid_ts[{a}]: expected a finite number >= 0, got {float(f.items.video_sp[a])}"


def _tau_overflow(f: _Failure, a, b, c, d):
    return (
        f"second_per_grid_ts[{a}]: expected temporal positions below 2**31, got {float(f.items.video_sp[a])} s per "
        f"grid x {f.config.tokens_per_second} x {int(f.items.video_grid[a, 0]) - 1} frames"
    )


def _audio_short(f: _Failure, a, b, c, d):
    length = int(f.items.audio_lengths[a]) if a < f.items.audio_lengths.shape[0] else "?"
    return (
        f"audio_feature_lengths[{a}]: expected enough mel frames for at least one audio token, got {length} "
        f"({b} tokens)"
    )


def _xd_run(f: _Failure, a, b, c, d):
    image_id = f.config.image_token_id
    start, end = _run_bounds(f.ids, b, image_id)
    return (
        f"token_ids: {f.item_text(C.MOD_IMAGE, a)} expects {f.expected_tokens(C.MOD_IMAGE, a)} image tokens "
        f"({image_id}) from token_ids[{b}], but the run token_ids[{start}:{end}] holds {end - start}: "
        f"{f.config.family} images are runs of their own, with text (their start and end tokens) between them"
    )


def _no_vision_start(f: _Failure, a, b, c, d):
    before = f"token_ids[{c - 1}] = {int(f.ids[c - 1])}" if c > 0 else "the prompt's start"
    what = f.item_text(a, b, d) if b < count_items(f.items, a) else f"an extra {MODALITY_NAMES.get(a, '?')} run"
    runs = "run (each frame)" if a == C.MOD_VIDEO and f.per_frame else "run"
    return (
        f"token_ids: {what} starts at token_ids[{c}] after {before}, not after vision_start "
        f"({f.config.vision_start_token_id}); this preset (switch items_after_vision_start) needs one before every "
        f"image and video {runs}: transformers 4.57 and SGLang 0.5 find items by the token after vision_start and "
        f"position a run without one as text (docs/semantics.md, D13)"
    )


def _placeholder_short(f: _Failure, a, b, c, d):
    token = f.placeholder(a)
    start, _ = _run_bounds(f.ids, c, token)
    return (
        f"token_ids: {f.item_text(a, b, d)} expects {f.expected_tokens(a, b)} {MODALITY_NAMES.get(a, '?')} tokens "
        f"({token}) from token_ids[{start}], but found {c - start}: token_ids[{c}] = {int(f.ids[c])} interrupts them"
    )


def _cut_off(f: _Failure, a, b, c, d):
    return (
        f"token_ids: {f.item_text(a, b, d)} expects {f.expected_tokens(a, b)} {MODALITY_NAMES.get(a, '?')} tokens, "
        f"but they are cut off by the end of the prompt ({c} tokens missing)"
    )


def _extra_item(f: _Failure, a, b, c, d):  # token scan only: the range form matches counts before building
    mod = MODALITY_NAMES.get(a, "?")
    start, end = _run_bounds(f.ids, b, int(f.ids[b]))
    n_given = count_items(f.items, a)
    hint = ""
    if start < b and n_given:  # the run continues past the last item that took part of it
        hint = _merge_hint(end - start, f.expected_tokens(a, n_given - 1), f.merge) if a != C.MOD_AUDIO else ""
        hint = f"; the run token_ids[{start}:{end}] holds {end - start} {mod} tokens" + hint
    return (
        f"token_ids: more {mod} placeholders than {_GRID_NAMES[a]} describes ({n_given} given); "
        f"an extra one starts at token_ids[{b}]{hint}"
    )


def _missing_items(f: _Failure, a, b, c, d):  # token scan only
    mod = MODALITY_NAMES.get(a, "?")
    if f.placeholder(a) is None:  # an id nobody published (openPangu-VL)
        name = {C.MOD_IMAGE: "image_token_id", C.MOD_VIDEO: "video_token_id"}.get(a, "audio_token_id")
        return (
            f"{name}: unknown for {f.config.family} (the config gives none), so token_ids cannot show where its "
            f"{c} {mod} items sit; set {name} in the config, or give placeholder ranges instead "
            "(PromptLayout.from_ranges, PositionTracker.add_request_from_ranges, mrope_tracker.vllm)"
        )
    return f"{_GRID_NAMES[a]}: got {c} {mod} entries but token_ids hold only {b} {mod} items"


def _av_not_in_block(f: _Failure, a, b, c, d):
    return (
        f"token_ids: use_audio_in_video=True expects every video as vision_start audio_start <interleave> "
        f"audio_end vision_end, but video {a} starts at token_ids[{b}] without that prefix"
    )


def _av_no_audio(f: _Failure, a, b, c, d):
    return (
        f"audio_feature_lengths: video {a} carries its audio (use_audio_in_video=True) but no audio length is left "
        f"(got {f.items.audio_tokens.shape[0]})"
    )


def _av_count(f: _Failure, a, b, c, d):
    t, h, w = (int(v) for v in f.items.video_grid[a])
    m = f.merge
    return (
        f"token_ids: the audio-in-video block of video_grid_thw[{a}] = {(t, h, w)} expects "
        f"{t * (h // m) * (w // m)} video and {d} audio tokens in its interleave (in any order), but found "
        f"{b} video and {c} audio tokens"
    )


def _av_bad_token(f: _Failure, a, b, c, d):
    return f"token_ids: the audio-in-video block of video {a} expects token {c} at token_ids[{b}], got {int(f.ids[b])}"


def _av_cut_off(f: _Failure, a, b, c, d):
    return f"token_ids: the audio-in-video block of video {a} is cut off by the end of the prompt ({b} tokens missing)"


def _video_open(f: _Failure, a, b, c, d):
    where = f"token_ids[{b}]" if b < (f.ids.shape[0] if f.ids is not None else 0) else "the end of the prompt"
    if a >= f.items.video_grid.shape[0]:
        return (
            f"token_ids: a begin/end-of-video bracket at {where} holds no video of video_grid_thw "
            f"({f.items.video_grid.shape[0]} given) or is left open"
        )
    return (
        f"token_ids: video_grid_thw[{a}] = {_grid_text(f.items.video_grid, a)} expects all its frames inside one "
        f"begin/end-of-video pair, but {where} opens or closes a bracket after {c} frames"
    )


def _range_name(a) -> str:
    return f"{MODALITY_NAMES.get(a, '?')}_ranges"


def _range_negative(f: _Failure, a, b, c, d):
    return f"{_range_name(a)}[{b}]: expected a non-negative offset and length, got {c}"


def _range_overlap(f: _Failure, a, b, c, d):
    return (
        f"{_range_name(a)}[{b}]: expected ranges in prompt order that do not overlap (next free token {c}), "
        f"got {tuple(int(v) for v in f.ranges[a][b])}"
    )


def _range_out(f: _Failure, a, b, c, d):
    return f"{_range_name(a)}[{b}]: expected a range inside the prompt's {f.num_tokens} tokens, got one ending at {c}"


def _range_length(f: _Failure, a, b, c, d):
    what = f"frame {d} of the video" if a == C.MOD_VIDEO and f.per_frame else "its item"
    return f"{_range_name(a)}[{b}]: expected length {c} for {what}, got {int(f.ranges[a][b][1])}"


def _av_range_context(f: _Failure, a, b, c, d):
    return (
        f"video_ranges[{a}]: an audio-in-video interleave needs vision_start, audio_start before it and audio_end, "
        f"vision_end after it inside the prompt's {f.num_tokens} tokens, got offset {b}"
    )


_MESSAGES = {
    C.ERR_GRID_DIM: _grid_dim,
    C.ERR_GRID_MERGE: _grid_merge,
    C.ERR_VIDEO_T_MERGE: _video_t_merge,
    C.ERR_IMAGE_T: _image_t,
    C.ERR_SP_VALUE: _sp_value,
    C.ERR_TAU_OVERFLOW: _tau_overflow,
    C.ERR_AUDIO_SHORT: _audio_short,
    C.ERR_XD_RUN: _xd_run,
    C.ERR_NO_VISION_START: _no_vision_start,
    C.ERR_PLACEHOLDER_SHORT: _placeholder_short,
    C.ERR_CUT_OFF: _cut_off,
    C.ERR_EXTRA_ITEM: _extra_item,
    C.ERR_MISSING_ITEMS: _missing_items,
    C.ERR_AV_NOT_IN_BLOCK: _av_not_in_block,
    C.ERR_AV_NO_AUDIO: _av_no_audio,
    C.ERR_AV_COUNT: _av_count,
    C.ERR_AV_BAD_TOKEN: _av_bad_token,
    C.ERR_AV_CUT_OFF: _av_cut_off,
    C.ERR_VIDEO_OPEN: _video_open,
    C.ERR_RANGE_NEGATIVE: _range_negative,
    C.ERR_RANGE_OVERLAP: _range_overlap,
    C.ERR_RANGE_OUT: _range_out,
    C.ERR_RANGE_LENGTH: _range_length,
    C.ERR_AV_RANGE_CONTEXT: _av_range_context,
}


def layout_error(
    code, a, b, c, d, config: MRopeConfig, items: Items, ids=None, ranges=None, num_tokens=None
) -> Exception:
    """The ValueError for a builder kernel's error code (a RuntimeError for a code with no message: a bug here)."""
    message = _MESSAGES.get(int(code))
    if message is None:
        return RuntimeError(f"mrope_tracker: the layout builder returned error code {code}, which has no message")
    return ValueError(message(_Failure(config, items, ids, ranges, num_tokens), int(a), int(b), int(c), int(d)))


def check_all_used(used, images: np.ndarray, videos: np.ndarray, audio: np.ndarray) -> None:
    """After a batch took its rows' items in batch order (the batch kernel's final `starts` row: images, videos
    and audio tracks used), a ValueError naming the first argument with items no row used."""
    used = used.tolist()
    if used == [images.shape[0], videos.shape[0], audio.shape[0]]:
        return
    for name, n, total in (
        ("image_grid_thw", used[0], images.shape[0]),
        ("video_grid_thw", used[1], videos.shape[0]),
        ("audio_feature_lengths", used[2], audio.shape[0]),
    ):
        if n != total:
            raise ValueError(f"{name}: expected one entry per item in input_ids ({int(n)}), got {int(total)}")
