"""Messages for the layout builders' error codes.

Kernels never raise: they return (code, a, b, c, d) (layout_codes.ERR_*),
and `layout_error` turns that into the ValueError the user sees, naming the
argument, what was expected and what came. It runs only on the error path,
so it may look at the token ids again (to measure a placeholder run, say).
"""

from __future__ import annotations

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


def layout_error(
    code, a, b, c, d, config: MRopeConfig, items: Items, ids=None, ranges=None, num_tokens=None
) -> Exception:
    """The exception for a builder kernel's error code."""
    mod = MODALITY_NAMES.get(a, "?")
    grids = {C.MOD_IMAGE: items.image_grid, C.MOD_VIDEO: items.video_grid}
    m = config.spatial_merge_size
    per_frame = config.spec.video_blocks == "frames"
    placeholder = {
        C.MOD_IMAGE: config.image_token_id,
        C.MOD_VIDEO: config.image_token_id if config.spec.video_brackets else config.video_token_id,
        C.MOD_AUDIO: config.audio_token_id,
    }

    def item_text(modality, n, frame=0):
        if modality == C.MOD_AUDIO:
            if n < items.audio_lengths.shape[0]:
                return f"audio_feature_lengths[{n}] = {int(items.audio_lengths[n])}"
            return "audio"
        text = f"{_GRID_NAMES[modality]}[{n}] = {_grid_text(grids[modality], n)}"
        return f"{text}, frame {frame}," if modality == C.MOD_VIDEO and per_frame else text

    def expected_tokens(modality, n):
        if modality == C.MOD_AUDIO:
            return int(items.audio_tokens[n])
        t, h, w = (int(v) for v in grids[modality][n])
        if config.spec.xd_images:  # h' rows of w' + 1 tokens, an extra token either side
            return (h // m) * (w // m + 1) + 2
        if modality == C.MOD_VIDEO:
            t //= config.temporal_merge_size or 1
        return (h // m) * (w // m) * (1 if modality == C.MOD_VIDEO and per_frame else t)

    if code == C.ERR_GRID_DIM:
        return ValueError(f"{_GRID_NAMES[a]}[{b}]: expected positive (t, h, w), got {_grid_text(grids[a], b)}")
    if code == C.ERR_GRID_MERGE:
        return ValueError(
            f"{_GRID_NAMES[a]}[{b}]: expected h and w divisible by spatial_merge_size {m}, got "
            f"{_grid_text(grids[a], b)} (grids are (t, h, w) in patches before the merge, as the processor gives them)"
        )
    if code == C.ERR_VIDEO_T_MERGE:
        return ValueError(
            f"video_grid_thw[{a}]: expected a frame count t divisible by temporal_merge_size "
            f"{config.temporal_merge_size} ({config.family}: the processor sends whole frame groups; an odd count "
            f"would give more placeholder tokens than the position grid has), got {_grid_text(items.video_grid, a)}"
        )
    if code == C.ERR_IMAGE_T:
        return ValueError(f"image_grid_thw[{a}]: expected t == 1 for an image, got {_grid_text(items.image_grid, a)}")
    if code == C.ERR_SP_VALUE:
        return ValueError(f"second_per_grid_ts[{a}]: expected a finite number >= 0, got {float(items.video_sp[a])}")
    if code == C.ERR_TAU_OVERFLOW:
        return ValueError(
            f"second_per_grid_ts[{a}]: expected temporal positions below 2**31, got {float(items.video_sp[a])} s per "
            f"grid x {config.tokens_per_second} x {int(items.video_grid[a, 0]) - 1} frames"
        )
    if code == C.ERR_AUDIO_SHORT:
        length = int(items.audio_lengths[a]) if a < items.audio_lengths.shape[0] else "?"
        return ValueError(
            f"audio_feature_lengths[{a}]: expected enough mel frames for at least one audio token, got {length} "
            f"({b} tokens)"
        )
    if code == C.ERR_XD_RUN:
        start, end = _run_bounds(ids, b, config.image_token_id)
        return ValueError(
            f"token_ids: {item_text(C.MOD_IMAGE, a)} expects {expected_tokens(C.MOD_IMAGE, a)} image tokens "
            f"({config.image_token_id}) from token_ids[{b}], but the run token_ids[{start}:{end}] holds {end - start}: "
            f"{config.family} images are runs of their own, with text (their start and end tokens) between them"
        )
    if code == C.ERR_PLACEHOLDER_SHORT:
        start, _ = _run_bounds(ids, c, placeholder[a])
        return ValueError(
            f"token_ids: {item_text(a, b, d)} expects {expected_tokens(a, b)} {mod} tokens ({placeholder[a]}) from "
            f"token_ids[{start}], but found {c - start}: token_ids[{c}] = {int(ids[c])} interrupts them"
        )
    if code == C.ERR_CUT_OFF:
        return ValueError(
            f"token_ids: {item_text(a, b, d)} expects {expected_tokens(a, b)} {mod} tokens, but they are cut off "
            f"by the end of the prompt ({c} tokens missing)"
        )
    if code == C.ERR_EXTRA_ITEM:  # token scan only: the range form matches counts before building
        start, end = _run_bounds(ids, b, int(ids[b]))
        n_given = count_items(items, a)
        hint = ""
        if start < b and n_given:  # the run continues past the last item that took part of it
            hint = _merge_hint(end - start, expected_tokens(a, n_given - 1), m) if a != C.MOD_AUDIO else ""
            hint = f"; the run token_ids[{start}:{end}] holds {end - start} {mod} tokens" + hint
        return ValueError(
            f"token_ids: more {mod} placeholders than {_GRID_NAMES[a]} describes ({n_given} given); "
            f"an extra one starts at token_ids[{b}]{hint}"
        )
    if code == C.ERR_MISSING_ITEMS:  # token scan only
        if placeholder.get(a, 0) is None:  # an id nobody published (openPangu-VL)
            name = "image_token_id" if a == C.MOD_IMAGE else "video_token_id" if a == C.MOD_VIDEO else "audio_token_id"
            return ValueError(
                f"{name}: unknown for {config.family} (the config gives none), so token_ids cannot show where its "
                f"{c} {mod} items sit; set {name} in the config, or give placeholder ranges instead "
                "(PromptLayout.from_ranges, PositionTracker.add_request_from_ranges, mrope_tracker.vllm)"
            )
        return ValueError(f"{_GRID_NAMES[a]}: got {c} {mod} entries but token_ids hold only {b} {mod} items")
    if code == C.ERR_AV_NOT_IN_BLOCK:
        return ValueError(
            f"token_ids: use_audio_in_video=True expects every video as vision_start audio_start <interleave> "
            f"audio_end vision_end, but video {a} starts at token_ids[{b}] without that prefix"
        )
    if code == C.ERR_AV_NO_AUDIO:
        return ValueError(
            f"audio_feature_lengths: video {a} carries its audio (use_audio_in_video=True) but no audio length is left "
            f"(got {items.audio_tokens.shape[0]})"
        )
    if code == C.ERR_AV_COUNT:
        t, h, w = (int(v) for v in items.video_grid[a])
        return ValueError(
            f"token_ids: the audio-in-video block of video_grid_thw[{a}] = {(t, h, w)} expects "
            f"{t * (h // m) * (w // m)} video and {d} audio tokens in its interleave (in any order), but found "
            f"{b} video and {c} audio tokens"
        )
    if code == C.ERR_AV_BAD_TOKEN:
        return ValueError(
            f"token_ids: the audio-in-video block of video {a} expects token {c} at token_ids[{b}], got {int(ids[b])}"
        )
    if code == C.ERR_AV_CUT_OFF:
        return ValueError(
            f"token_ids: the audio-in-video block of video {a} is cut off by the end of the prompt ({b} tokens missing)"
        )
    if code == C.ERR_VIDEO_OPEN:
        where = f"token_ids[{b}]" if b < (ids.shape[0] if ids is not None else 0) else "the end of the prompt"
        if a >= items.video_grid.shape[0]:
            return ValueError(
                f"token_ids: a begin/end-of-video bracket at {where} holds no video of video_grid_thw "
                f"({items.video_grid.shape[0]} given) or is left open"
            )
        return ValueError(
            f"token_ids: video_grid_thw[{a}] = {_grid_text(items.video_grid, a)} expects all its frames inside one "
            f"begin/end-of-video pair, but {where} opens or closes a bracket after {c} frames"
        )
    name = f"{mod}_ranges"
    if code == C.ERR_RANGE_NEGATIVE:
        return ValueError(f"{name}[{b}]: expected a non-negative offset and length, got {c}")
    if code == C.ERR_RANGE_OVERLAP:
        return ValueError(
            f"{name}[{b}]: expected ranges in prompt order that do not overlap (next free token {c}), "
            f"got {tuple(int(v) for v in ranges[a][b])}"
        )
    if code == C.ERR_RANGE_OUT:
        return ValueError(
            f"{name}[{b}]: expected a range inside the prompt's {num_tokens} tokens, got one ending at {c}"
        )
    if code == C.ERR_RANGE_LENGTH:
        what = f"frame {d} of the video" if a == C.MOD_VIDEO and per_frame else "its item"
        return ValueError(f"{name}[{b}]: expected length {c} for {what}, got {int(ranges[a][b][1])}")
    if code == C.ERR_AV_RANGE_CONTEXT:
        return ValueError(
            f"video_ranges[{a}]: an audio-in-video interleave needs vision_start, audio_start before it and audio_end, "
            f"vision_end after it inside the prompt's {num_tokens} tokens, got offset {b}"
        )
    raise AssertionError(f"unknown layout error code {code}")  # internal invariant
