"""The range front end of the layout builder: `build_from_ranges`.

It takes each item's (offset, length), as engines already hold them, and
never reads a token: O(items) (plus one row per run of an Omni
audio-in-video interleave). It shares the emitters of layout_emit.py with
the token front end (layout_build.py) and reads the same switches of the
packed config. Errors are returned as (code, a, b, c, d), never raised.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import helper, inner, tiny
from .layout_build import next_frame
from .layout_emit import (
    S_BASE,
    S_COUNT,
    S_FRAME,
    S_FRAMES_SEEN,
    S_TOTAL,
    av_block_top,
    av_close,
    av_emit_runs,
    av_open,
    av_tau_merge,
    av_vllm_shifted,
    check_items,
    emit_frame,
    emit_grid,
    emit_raw_grid,
    emit_xd_image,
    flush_text,
    grid_tokens,
    reset,
    xd_image_tokens,
)
from .position_rules import video_sp_of


@tiny
def _next_modality(state, frames, image_ranges, video_ranges, audio_ranges):
    """The modality of the next item in prompt order (the smallest offset among
    the three heads), or -1 when every item is placed."""
    m = np.int64(-1)
    best = 0
    for mod in range(3):
        if mod == C.MOD_VIDEO and frames:
            k = state[S_FRAMES_SEEN]
            if k < video_ranges.shape[0] and (m < 0 or video_ranges[k, 0] < best):
                m = mod
                best = video_ranges[k, 0]
        elif state[S_COUNT + mod] < state[S_TOTAL + mod]:
            rng = image_ranges if mod == C.MOD_IMAGE else video_ranges if mod == C.MOD_VIDEO else audio_ranges
            off = rng[state[S_COUNT + mod], 0]
            if m < 0 or off < best:
                m = mod
                best = off
    return m


@tiny
def _check_range(m, n, k, offset, length, av, num_tokens, prev_end):
    """(code, a, b, c) for range k (item n of modality m): inside the prompt,
    after the previous item, with an audio-in-video block's two tokens of
    context (`av`) on either side."""
    if offset < 0 or length < 0:
        return C.ERR_RANGE_NEGATIVE, m, k, min(offset, length)
    if offset > num_tokens or length > num_tokens:  # before any sum can overflow
        return C.ERR_RANGE_OUT, m, k, offset + min(length, num_tokens)
    lead = 2 if av else 0  # vision_start, audio_start before; audio_end, vision_end after
    if offset - lead < prev_end:
        if av and offset - lead < 0:
            return C.ERR_AV_RANGE_CONTEXT, n, offset, 0
        return C.ERR_RANGE_OVERLAP, m, k, prev_end
    if offset + length + lead > num_tokens:
        if av and offset + length <= num_tokens:
            return C.ERR_AV_RANGE_CONTEXT, n, offset, 0
        return C.ERR_RANGE_OUT, m, k, offset + length
    return C.OK, 0, 0, 0


@tiny
def _av_range(
    rows, scales, state, out, num_tokens, offset, length, n, k, params, video_grid, video_sp, num_audio, runs, av_bounds
):
    """Audio-in-video block n (range k), its interleave at [offset, offset +
    length) laid out as runs[av_bounds[n]:av_bounds[n + 1]] (kind, count), its
    bos pair just before and its eos pair just after. Returns (code, a, b, c)."""
    merge = np.int64(params[C.P_MERGE])
    t, h, w, size = grid_tokens(video_grid, n, merge, np.int64(params[C.P_VIDEO_T_MERGE]), num_tokens)
    if length != size + num_audio:
        return C.ERR_RANGE_LENGTH, C.MOD_VIDEO, k, size + num_audio
    mode = np.int64(params[C.P_TAU_MODE])
    r = np.float32(params[C.P_SCALE_R])
    sp = video_sp[n]
    flush_text(rows, scales, state, out, offset - 2)
    if params[C.P_AV_SHIFT] != 0:
        chunk = np.int64(params[C.P_CHUNK])
        av_vllm_shifted(rows, scales, state, out, offset - 2, t, h, w, mode, sp, r, num_audio, chunk)
        return C.OK, 0, 0, 0
    pair = np.int64(params[C.P_AV_PAIR])
    s = av_open(rows, scales, state, out, offset - 2, pair)
    if params[C.P_AV_MERGE] != 0:
        tok = av_tau_merge(rows, scales, state, out, offset, s, t, h, w, mode, sp, r, num_audio)
        last_top = s  # unused: the eos follows the whole block
    else:
        last_top, tok = av_emit_runs(
            rows, scales, state, out, offset, runs, av_bounds[n], av_bounds[n + 1], s, t, h, w, mode, sp, r
        )
    top = av_block_top(s, t, h, w, num_audio, mode, sp, r)
    eos_rule = np.int64(params[C.P_AV_EOS])
    av_close(rows, scales, state, out, tok, (top if eos_rule else last_top) + 1, pair, top)
    return C.OK, 0, 0, 0


@tiny
def _grid_range(rows, scales, state, out, num_tokens, offset, length, m, n, k, params, grids, video_sp):
    """Image or (whole) video n of modality m at [offset, offset + length): a
    grid, a raw grid (Isaac's images) or an XD image (HunYuan-VL). Returns
    (code, a, b, c, where raw text resumes or -1)."""
    tmerge = np.int64(params[C.P_VIDEO_T_MERGE]) if m == C.MOD_VIDEO else np.int64(1)
    t, h, w, size = grid_tokens(grids, n, np.int64(params[C.P_MERGE]), tmerge, num_tokens)
    xd = params[C.P_XD_IMAGES] != 0
    if xd:
        size = xd_image_tokens(h, w, size, num_tokens)
    if length != size:
        return C.ERR_RANGE_LENGTH, m, k, size, np.int64(-1)
    flush_text(rows, scales, state, out, offset)
    next_rule = np.int64(params[C.P_NEXT_RULE])
    if xd:
        emit_xd_image(rows, scales, state, out, offset, h, w, np.int64(params[C.P_ORDINAL_BASE]) + n)
    elif params[C.P_RAW_SPATIAL] != 0 and m == C.MOD_IMAGE:
        return C.OK, 0, 0, 0, emit_raw_grid(rows, scales, state, out, offset, t, h, w) + 1
    elif m == C.MOD_IMAGE:
        one = np.float32(1)
        emit_grid(rows, scales, state, out, offset, t, h, w, np.int64(C.TAU_FRAME), one, one, next_rule)
    else:
        mode = np.int64(params[C.P_TAU_MODE])
        r = np.float32(params[C.P_SCALE_R])
        emit_grid(rows, scales, state, out, offset, t, h, w, mode, video_sp_of(video_sp, n), r, next_rule)
    return C.OK, 0, 0, 0, np.int64(-1)


@tiny
def _frame_range(rows, scales, state, out, num_tokens, offset, length, n, k, params, video_grid):
    """Frame range k of per-frame video n. Returns (code, a, b, c, d)."""
    merge = np.int64(params[C.P_MERGE])
    _, h, w, size = grid_tokens(video_grid, n, merge, np.int64(params[C.P_VIDEO_T_MERGE]), num_tokens)
    size = h * w if size <= num_tokens else size
    if length != size:
        return C.ERR_RANGE_LENGTH, C.MOD_VIDEO, k, size, state[S_FRAME]
    flush_text(rows, scales, state, out, offset)
    emit_frame(rows, scales, state, out, offset, h, w)
    next_frame(state, video_grid, n)
    return C.OK, 0, 0, 0, 0


@inner
def _place_range(
    rows, scales, state, out, num_tokens, offset, length, m, n, k, av, frames, params, image_grid, video_grid,
    video_sp, audio_tokens, audio_used, av_runs, av_bounds,
):  # fmt: skip
    """Item n of modality m (range k) at [offset, offset + length), checked
    range in hand; `audio_used` audio token counts consumed before it.
    Returns (code, a, b, c, d, where raw text resumes or -1)."""
    no_tail = np.int64(-1)
    if m == C.MOD_AUDIO:
        expected = audio_tokens[audio_used]
        if length != expected:
            return C.ERR_RANGE_LENGTH, m, k, expected, 0, no_tail
        state[S_COUNT + m] = n + 1  # text-like positions: no row of its own
        return C.OK, 0, 0, 0, 0, no_tail
    if m == C.MOD_VIDEO and frames:
        code, a, b, c, d = _frame_range(rows, scales, state, out, num_tokens, offset, length, n, k, params, video_grid)
        return code, a, b, c, d, no_tail
    if av:
        code, a, b, c = _av_range(
            rows, scales, state, out, num_tokens, offset, length, n, k, params, video_grid, video_sp,
            audio_tokens[audio_used], av_runs, av_bounds,
        )  # fmt: skip
        raw_tail = no_tail
    else:
        grids = image_grid if m == C.MOD_IMAGE else video_grid
        code, a, b, c, raw_tail = _grid_range(
            rows, scales, state, out, num_tokens, offset, length, m, n, k, params, grids, video_sp
        )
    if code == C.OK:
        state[S_COUNT + m] = n + 1
    return code, a, b, c, 0, raw_tail


@helper
def build_from_ranges(
    rows,
    scales,
    state,
    out,
    num_tokens,
    params,
    image_ranges,
    image_grid,
    video_ranges,
    video_grid,
    video_sp,
    audio_ranges,
    audio_tokens,
    av_runs,
    av_bounds,
    use_audio_in_video,
):
    """Emit the layout from each item's (offset, length) without reading tokens.

    Offsets are the first placeholder token of an item; for a per-frame video,
    `video_ranges` holds one range per frame, in order; for an audio-in-video
    block, the first token of its interleave (its bos pair sits just before,
    its eos pair just after), laid out as `av_runs[av_bounds[n]:av_bounds[n+1]]`
    (kind, count). Items of one modality are in prompt order, matching their
    grids; audio_tokens holds standalone clips and video tracks in prompt
    order (the wrapper checks every count). Returns (code, a, b, c, d)."""
    reset(state, image_grid.shape[0], video_grid.shape[0], audio_tokens.shape[0])
    res = check_items(params, image_grid, video_grid, video_sp, audio_tokens)
    if res[0] != C.OK:
        return res[0], res[1], res[2], res[3], 0
    frames = params[C.P_FRAMES] != 0
    tail = np.int64(-1)  # raw: where text after the last item resumes (its T + 1)
    av_mode = use_audio_in_video and params[C.P_AUDIO] >= 0
    state[S_TOTAL + C.MOD_AUDIO] = audio_ranges.shape[0]
    audio_used = np.int64(0)  # audio token counts consumed (clips and video tracks)
    prev_end = 0
    while True:
        m = _next_modality(state, frames, image_ranges, video_ranges, audio_ranges)
        if m < 0:
            break
        n = state[S_COUNT + m]
        k = state[S_FRAMES_SEEN] if m == C.MOD_VIDEO and frames else n  # the range's index
        rng = image_ranges if m == C.MOD_IMAGE else video_ranges if m == C.MOD_VIDEO else audio_ranges
        offset = rng[k, 0]
        length = rng[k, 1]
        av = m == C.MOD_VIDEO and av_mode
        code, a, b, c = _check_range(m, n, k, offset, length, av, num_tokens, prev_end)
        if code != C.OK:
            return code, a, b, c, 0
        code, a, b, c, d, raw_tail = _place_range(
            rows, scales, state, out, num_tokens, offset, length, m, n, k, av, frames, params, image_grid,
            video_grid, video_sp, audio_tokens, audio_used, av_runs, av_bounds,
        )  # fmt: skip
        if code != C.OK:
            return code, a, b, c, d
        if raw_tail >= 0:
            tail = raw_tail
        if m == C.MOD_AUDIO or av:
            audio_used += 1
        prev_end = offset + length + (2 if av else 0)
    if tail >= 0:
        state[S_BASE] = tail
    flush_text(rows, scales, state, out, num_tokens)
    return C.OK, 0, 0, 0, 0
