"""Kernels that turn a prompt's multimodal items into a layout table.

Two front ends share the emitters of layout_emit.py:
- `build_from_tokens` scans the token ids once, finds every placeholder run
  and checks it against the grids (the form that needs nothing but tokens);
- `build_from_ranges` takes each item's (offset, length), as engines already
  hold them, and never reads a token: O(items) (plus one row per run of an
  Omni audio-in-video interleave).

Both read a family's switches from the packed config (layout_codes.P_*):
which tokens open items, whether video frames are blocks of their own (and
bracketed by begin/end-of-video tokens), the temporal rule, the next-base
rule, how audio-in-video pairs and eos behave, and whether images are
raw-index grids (Isaac) or XD grids between two extra tokens (HunYuan-VL).
Errors are returned as (code, a, b, c, d), never raised; d is the frame of
a per-frame video.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import helper, tiny
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
    av_run,
    av_tau_merge,
    av_vllm_shifted,
    check_items,
    check_run,
    emit_checked_grid,
    emit_frame,
    emit_grid,
    emit_raw_grid,
    emit_xd_image,
    flush_text,
    grid_tokens,
    next_special,
    reset,
    scan_item,
    xd_image_tokens,
)
from .position_rules import video_sp_of


@tiny
def _run_end(ids, start, stop, token):
    """First index in [start, stop) whose token is not `token` (stop if none)."""
    bad = check_run(ids, start, stop, token)
    return stop if bad < 0 else bad


@tiny
def _next_frame(state, video_grid, n):
    """Count one frame of video n; the video is done after its t frames."""
    f = state[S_FRAME] + 1
    state[S_FRAMES_SEEN] += 1
    if f == video_grid[n, 0]:
        state[S_COUNT + C.MOD_VIDEO] = n + 1
        f = 0
    state[S_FRAME] = f


@tiny
def _scan_interleave(rows, scales, state, out, ids, pos, emit, s, t, h, w, mode, sp, r, num_audio, video_id, audio_id):
    """Walk an interleave from token `pos`: maximal runs of video or audio
    tokens, emitted (when `emit`) by identity. Returns (video tokens, audio
    tokens, next token, largest position of the last run)."""
    num_tokens = ids.shape[0]
    num_video = t * h * w
    k_video = np.int64(0)
    k_audio = np.int64(0)
    last_top = s
    while pos < num_tokens:
        tok = ids[pos]
        if tok == video_id:
            end = _run_end(ids, pos, min(num_tokens, pos + num_video - k_video + 1), video_id)
            if emit and k_video + end - pos <= num_video:
                last_top = av_run(
                    rows, scales, state, out, pos, np.int64(0), k_video, end - pos, s, t, h, w, mode, sp, r
                )
            k_video += end - pos
        elif tok == audio_id:
            end = _run_end(ids, pos, min(num_tokens, pos + num_audio - k_audio + 1), audio_id)
            if emit and k_audio + end - pos <= num_audio:
                last_top = av_run(
                    rows, scales, state, out, pos, np.int64(1), k_audio, end - pos, s, t, h, w, mode, sp, r
                )
            k_audio += end - pos
        else:
            break
        if k_video > num_video or k_audio > num_audio:
            break
        pos = end
    return k_video, k_audio, pos, last_top


@helper
def build_from_tokens(
    rows, scales, state, out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video
):
    """Scan `ids` once and emit the layout. Returns (code, a, b, c, d)."""
    num_tokens = ids.shape[0]
    reset(state, image_grid.shape[0], video_grid.shape[0], audio_tokens.shape[0])
    res = check_items(params, image_grid, video_grid, video_sp, audio_tokens)
    if res[0] != C.OK:
        return res[0], res[1], res[2], res[3], 0
    merge = np.int64(params[C.P_MERGE])
    tmerge = np.int64(params[C.P_VIDEO_T_MERGE])
    image_id = np.int64(params[C.P_IMAGE])
    video_id = np.int64(params[C.P_VIDEO])
    audio_id = np.int64(params[C.P_AUDIO])
    vision_start = np.int64(params[C.P_VISION_START])
    audio_start = np.int64(params[C.P_AUDIO_START])
    audio_end = np.int64(params[C.P_AUDIO_END])
    vision_end = np.int64(params[C.P_VISION_END])
    video_open = np.int64(params[C.P_VIDEO_OPEN])
    video_close = np.int64(params[C.P_VIDEO_CLOSE])
    frames = params[C.P_FRAMES] != 0
    mode = np.int64(params[C.P_TAU_MODE])
    r = np.float32(params[C.P_SCALE_R])
    pair = np.int64(params[C.P_AV_PAIR])
    eos_rule = np.int64(params[C.P_AV_EOS])
    next_rule = np.int64(params[C.P_NEXT_RULE])
    shift = params[C.P_AV_SHIFT] != 0
    merge_tau = params[C.P_AV_MERGE] != 0
    chunk = np.int64(params[C.P_CHUNK])
    raw = params[C.P_RAW_SPATIAL] != 0
    xd = params[C.P_XD_IMAGES] != 0
    ordinal_base = np.int64(params[C.P_ORDINAL_BASE])
    tail = np.int64(-1)  # raw: where text after the last item resumes (its T + 1)
    av = use_audio_in_video and audio_id >= 0
    bracketed = video_open >= 0
    # the tokens that can open an item (or a bracket); -1 matches nothing.
    # Bracketed: the image token inside a bracket is the video's (GLM frames,
    # ERNIE's whole block); a video token of its own (ERNIE as transformers 5
    # lays it out) is a video wherever it sits.
    if bracketed:
        s_a, s_b, s_c, s_d = image_id, video_open, video_close, video_id
    else:
        s_a, s_b, s_c, s_d = image_id, video_id, audio_id, vision_start if av else np.int64(-1)
    in_video = False
    i = np.int64(0)
    while True:
        i = next_special(ids, i, s_a, s_b, s_c, s_d)
        if i >= num_tokens:
            break
        tok = ids[i]
        if bracketed and (tok == video_open or tok == video_close):
            n = state[S_COUNT + C.MOD_VIDEO]
            if tok == video_open and in_video or state[S_FRAME] != 0:
                # a bracket inside a bracket, or one that closes (or reopens) mid-video
                return C.ERR_VIDEO_OPEN, n, i, state[S_FRAME], 0
            in_video = tok == video_open
            i += 1
        elif frames and (tok == video_id or (bracketed and tok == image_id and in_video)):
            n = state[S_COUNT + C.MOD_VIDEO]
            if n >= state[S_TOTAL + C.MOD_VIDEO]:
                return C.ERR_EXTRA_ITEM, C.MOD_VIDEO, i, 0, 0
            _, h, w, size = grid_tokens(video_grid, n, merge, tmerge, num_tokens)
            size = h * w if size <= num_tokens else size
            bad, missing = scan_item(ids, i, size, tok)
            if bad >= 0:
                return C.ERR_PLACEHOLDER_SHORT, C.MOD_VIDEO, n, bad, state[S_FRAME]
            if missing > 0:
                return C.ERR_CUT_OFF, C.MOD_VIDEO, n, missing, state[S_FRAME]
            flush_text(rows, scales, state, out, i)
            emit_frame(rows, scales, state, out, i, h, w)
            _next_frame(state, video_grid, n)
            i += size
        elif tok == image_id or (tok == video_id and not av):
            m = C.MOD_IMAGE if tok == image_id and not in_video else C.MOD_VIDEO
            grids = image_grid if m == C.MOD_IMAGE else video_grid
            n = state[S_COUNT + m]
            if n >= state[S_TOTAL + m]:
                return C.ERR_EXTRA_ITEM, m, i, 0, 0
            t, h, w, size = grid_tokens(grids, n, merge, tmerge if m == C.MOD_VIDEO else np.int64(1), num_tokens)
            if xd:  # (xd families have no videos)
                size = xd_image_tokens(h, w, size, num_tokens)
            if i + size > num_tokens:  # cut off (a foreign token before the end is reported first)
                bad, missing = scan_item(ids, i, size, tok)
                if bad >= 0:
                    return C.ERR_PLACEHOLDER_SHORT, m, n, bad, 0
                return C.ERR_CUT_OFF, m, n, missing, 0
            flush_text(rows, scales, state, out, i)
            if xd:
                bad = check_run(ids, i, i + size, tok)
                if bad >= 0:
                    return C.ERR_PLACEHOLDER_SHORT, m, n, bad, 0
                if i + size < num_tokens and ids[i + size] == tok:  # one run, as transformers groups them
                    return C.ERR_XD_RUN, n, i, 0, 0
                emit_xd_image(rows, scales, state, out, i, h, w, ordinal_base + n)
                state[S_COUNT + m] = n + 1
                i += size
                continue
            if raw and m == C.MOD_IMAGE:
                bad = check_run(ids, i, i + size, tok)
                if bad >= 0:
                    return C.ERR_PLACEHOLDER_SHORT, m, n, bad, 0
                tail = emit_raw_grid(rows, scales, state, out, i, t, h, w) + 1
                state[S_COUNT + m] = n + 1
                i += size
                continue
            if m == C.MOD_IMAGE:  # images are never time-scaled
                item_mode, item_sp, item_r = np.int64(C.TAU_FRAME), np.float32(1), np.float32(1)
            else:
                item_mode, item_sp, item_r = mode, video_sp_of(video_sp, n), r
            bad = emit_checked_grid(
                rows, scales, state, out, ids, i, t, h, w, item_mode, item_sp, item_r, next_rule, tok
            )
            if bad >= 0:
                return C.ERR_PLACEHOLDER_SHORT, m, n, bad, 0
            state[S_COUNT + m] = n + 1
            i += size
        elif tok == video_id:  # a video outside an audio-in-video block
            return C.ERR_AV_NOT_IN_BLOCK, state[S_COUNT + C.MOD_VIDEO], i, 0, 0
        elif tok == audio_id:
            # Standalone audio continues the text positions, so it needs no
            # row of its own: only its token count is checked.
            n = state[S_COUNT + C.MOD_AUDIO]
            if n >= state[S_TOTAL + C.MOD_AUDIO]:
                return C.ERR_EXTRA_ITEM, C.MOD_AUDIO, i, 0, 0
            size = audio_tokens[n]
            bad, missing = scan_item(ids, i, size, audio_id)
            if bad >= 0:
                return C.ERR_PLACEHOLDER_SHORT, C.MOD_AUDIO, n, bad, 0
            if missing > 0:
                return C.ERR_CUT_OFF, C.MOD_AUDIO, n, missing, 0
            state[S_COUNT + C.MOD_AUDIO] = n + 1
            i += size
        elif i + 2 < num_tokens and ids[i + 1] == audio_start and (ids[i + 2] == video_id or ids[i + 2] == audio_id):
            # vision_start audio_start <video or audio>: an audio-in-video block
            n = state[S_COUNT + C.MOD_VIDEO]
            if n >= state[S_TOTAL + C.MOD_VIDEO]:
                return C.ERR_EXTRA_ITEM, C.MOD_VIDEO, i + 2, 0, 0
            a = state[S_COUNT + C.MOD_AUDIO]
            if a >= state[S_TOTAL + C.MOD_AUDIO]:
                return C.ERR_AV_NO_AUDIO, n, 0, 0, 0
            t, h, w, size = grid_tokens(video_grid, n, merge, tmerge, num_tokens)
            num_audio = audio_tokens[a]
            missing = i + 2 + size + num_audio + 2 - num_tokens
            if missing > 0:
                return C.ERR_AV_CUT_OFF, n, missing, 0, 0
            flush_text(rows, scales, state, out, i)
            sp = video_sp[n]
            s = 0 if shift else av_open(rows, scales, state, out, i, pair)  # shifted: runs emitted below
            by_identity = not (shift or merge_tau)  # else the positions come from the counts alone
            k_video, k_audio, pos, last_top = _scan_interleave(
                rows,
                scales,
                state,
                out,
                ids,
                i + 2,
                by_identity,
                s,
                t,
                h,
                w,
                mode,
                sp,
                r,
                num_audio,
                video_id,
                audio_id,
            )
            if k_video != size or k_audio != num_audio:
                return C.ERR_AV_COUNT, n, k_video, k_audio, num_audio
            if ids[pos] != audio_end:
                return C.ERR_AV_BAD_TOKEN, n, pos, audio_end, 0
            if ids[pos + 1] != vision_end:
                return C.ERR_AV_BAD_TOKEN, n, pos + 1, vision_end, 0
            if shift:
                av_vllm_shifted(rows, scales, state, out, i, t, h, w, mode, sp, r, num_audio, chunk)
            else:
                if merge_tau:
                    av_tau_merge(rows, scales, state, out, i + 2, s, t, h, w, mode, sp, r, num_audio)
                top = av_block_top(s, t, h, w, num_audio, mode, sp, r)
                av_close(rows, scales, state, out, pos, (top if eos_rule else last_top) + 1, pair, top)
            state[S_COUNT + C.MOD_VIDEO] = n + 1
            state[S_COUNT + C.MOD_AUDIO] = a + 1
            i = pos + 2
        else:  # a vision_start that opens no interleave: text
            i += 1
    if in_video or state[S_FRAME] != 0:
        return C.ERR_VIDEO_OPEN, state[S_COUNT + C.MOD_VIDEO], num_tokens, state[S_FRAME], 0
    if tail >= 0:
        state[S_BASE] = tail
    flush_text(rows, scales, state, out, num_tokens)
    for m in range(3):
        if state[S_COUNT + m] < state[S_TOTAL + m]:
            return C.ERR_MISSING_ITEMS, m, state[S_COUNT + m], state[S_TOTAL + m], 0
    return C.OK, 0, 0, 0, 0


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
    merge = np.int64(params[C.P_MERGE])
    tmerge = np.int64(params[C.P_VIDEO_T_MERGE])
    frames = params[C.P_FRAMES] != 0
    mode = np.int64(params[C.P_TAU_MODE])
    r = np.float32(params[C.P_SCALE_R])
    pair = np.int64(params[C.P_AV_PAIR])
    eos_rule = np.int64(params[C.P_AV_EOS])
    next_rule = np.int64(params[C.P_NEXT_RULE])
    shift = params[C.P_AV_SHIFT] != 0
    merge_tau = params[C.P_AV_MERGE] != 0
    chunk = np.int64(params[C.P_CHUNK])
    raw = params[C.P_RAW_SPATIAL] != 0
    xd = params[C.P_XD_IMAGES] != 0
    tail = np.int64(-1)  # raw: where text after the last item resumes (its T + 1)
    av_mode = use_audio_in_video and params[C.P_AUDIO] >= 0
    state[S_TOTAL + C.MOD_AUDIO] = audio_ranges.shape[0]
    audio_used = 0  # audio token counts consumed (clips and video tracks)
    prev_end = 0
    while True:
        # the next item in prompt order: the smallest offset among the three heads
        m = -1
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
        if m < 0:
            break
        n = state[S_COUNT + m]
        k = state[S_FRAMES_SEEN] if m == C.MOD_VIDEO and frames else n  # the range's index
        rng = image_ranges if m == C.MOD_IMAGE else video_ranges if m == C.MOD_VIDEO else audio_ranges
        offset = rng[k, 0]
        length = rng[k, 1]
        if offset < 0 or length < 0:
            return C.ERR_RANGE_NEGATIVE, m, k, min(offset, length), 0
        if offset > num_tokens or length > num_tokens:  # before any sum can overflow
            return C.ERR_RANGE_OUT, m, k, offset + min(length, num_tokens), 0
        av = m == C.MOD_VIDEO and av_mode
        lead = 2 if av else 0  # vision_start, audio_start before; audio_end, vision_end after
        if offset - lead < prev_end:
            if av and offset - lead < 0:
                return C.ERR_AV_RANGE_CONTEXT, n, offset, 0, 0
            return C.ERR_RANGE_OVERLAP, m, k, prev_end, 0
        if offset + length + lead > num_tokens:
            if av and offset + length <= num_tokens:
                return C.ERR_AV_RANGE_CONTEXT, n, offset, 0, 0
            return C.ERR_RANGE_OUT, m, k, offset + length, 0
        if m == C.MOD_AUDIO:
            expected = audio_tokens[audio_used]
            if length != expected:
                return C.ERR_RANGE_LENGTH, m, k, expected, 0
            audio_used += 1  # text-like positions: no row of its own
            state[S_COUNT + m] = n + 1
        elif m == C.MOD_VIDEO and frames:
            _, h, w, size = grid_tokens(video_grid, n, merge, tmerge, num_tokens)
            size = h * w if size <= num_tokens else size
            if length != size:
                return C.ERR_RANGE_LENGTH, m, k, size, state[S_FRAME]
            flush_text(rows, scales, state, out, offset)
            emit_frame(rows, scales, state, out, offset, h, w)
            _next_frame(state, video_grid, n)
        elif av:
            t, h, w, size = grid_tokens(video_grid, n, merge, tmerge, num_tokens)
            num_audio = audio_tokens[audio_used]
            if length != size + num_audio:
                return C.ERR_RANGE_LENGTH, m, k, size + num_audio, 0
            r0 = av_bounds[n]
            r1 = av_bounds[n + 1]
            sp = video_sp[n]
            flush_text(rows, scales, state, out, offset - 2)
            if shift:
                av_vllm_shifted(rows, scales, state, out, offset - 2, t, h, w, mode, sp, r, num_audio, chunk)
            else:
                s = av_open(rows, scales, state, out, offset - 2, pair)
                if merge_tau:
                    tok = av_tau_merge(rows, scales, state, out, offset, s, t, h, w, mode, sp, r, num_audio)
                    last_top = s  # unused: the eos follows the whole block
                else:
                    last_top, tok = av_emit_runs(
                        rows, scales, state, out, offset, av_runs, r0, r1, s, t, h, w, mode, sp, r
                    )
                top = av_block_top(s, t, h, w, num_audio, mode, sp, r)
                av_close(rows, scales, state, out, tok, (top if eos_rule else last_top) + 1, pair, top)
            audio_used += 1
            state[S_COUNT + m] = n + 1
        else:
            grids = image_grid if m == C.MOD_IMAGE else video_grid
            t, h, w, size = grid_tokens(grids, n, merge, tmerge if m == C.MOD_VIDEO else np.int64(1), num_tokens)
            if xd:
                size = xd_image_tokens(h, w, size, num_tokens)
            if length != size:
                return C.ERR_RANGE_LENGTH, m, k, size, 0
            flush_text(rows, scales, state, out, offset)
            if xd:
                emit_xd_image(rows, scales, state, out, offset, h, w, np.int64(params[C.P_ORDINAL_BASE]) + n)
            elif raw and m == C.MOD_IMAGE:
                tail = emit_raw_grid(rows, scales, state, out, offset, t, h, w) + 1
            elif m == C.MOD_IMAGE:
                emit_grid(
                    rows,
                    scales,
                    state,
                    out,
                    offset,
                    t,
                    h,
                    w,
                    np.int64(C.TAU_FRAME),
                    np.float32(1),
                    np.float32(1),
                    next_rule,
                )
            else:
                emit_grid(rows, scales, state, out, offset, t, h, w, mode, video_sp_of(video_sp, n), r, next_rule)
            state[S_COUNT + m] = n + 1
        prev_end = offset + length + lead
    if tail >= 0:
        state[S_BASE] = tail
    flush_text(rows, scales, state, out, num_tokens)
    return C.OK, 0, 0, 0, 0
