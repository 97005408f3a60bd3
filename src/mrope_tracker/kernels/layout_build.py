"""Kernels that turn a prompt's multimodal items into a layout table.

Two front ends share the emitters of layout_emit.py:
- `build_from_tokens` (here) scans the token ids once, finds every placeholder
  run and checks it against the grids (the form that needs nothing but
  tokens), one helper per kind of item;
- `build_from_ranges` (layout_ranges.py) takes each item's (offset, length),
  as engines already hold them, and never reads a token: O(items) (plus one
  row per run of an Omni audio-in-video interleave).

Both read a family's switches from the packed config (layout_codes.P_*):
which tokens open items, whether video frames are blocks of their own (and
bracketed by begin/end-of-video tokens), the temporal rule, the next-base
rule, how audio-in-video pairs and eos behave, and whether images are
raw-index grids (Isaac) or XD grids between two extra tokens (HunYuan-VL).
Errors are never raised: `build_from_tokens` returns FAILED and leaves
(code, a, b, c, d) in the state's S_ERROR slots (d: the frame of a per-frame
video); the item helpers return them as tuples.

`build_from_tokens` is also `prompt_positions`' kernel (core/positions.py):
given a zero-row table it writes the positions into `out` as it scans, and
returns the prompt's delta. It is called from Python with canonical arrays
only (int64 and float32, C-contiguous, writable), so numba compiles it once
for every caller but the transformers batch kernel (hf_batch.py, whose `out`
is a strided view). It keeps the GIL: a short prompt is over in about a
microsecond, where releasing and retaking the GIL would cost a good part of
that, and the GIL is what makes `prompt_positions`' module-level state safe.
A separate entry around it cost a cold compile 1.6-2.5 s of CPU, numba
optimising the builder's whole linked closure once more (docs/benchmarks.md).
"""

import numpy as np

from . import layout_codes as C
from .jit_options import helper_with_gil, tiny
from .layout_emit import (
    NUM_STATE,
    S_BASE,
    S_COUNT,
    S_ERROR,
    S_FRAME,
    S_FRAMES_SEEN,
    S_MAX,
    S_TOTAL,
    av_block_top,
    av_close,
    av_open,
    av_run,
    av_tau_merge,
    av_vllm_shifted,
    check_items,
    check_run,
    emit_checked_grid,
    emit_frame,
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

# build_from_tokens' return on an error (deltas are at least -len(ids), so never this).
FAILED = -(2**62)
# The builder's state for the callers that want positions only (prompt_positions, SGLang's drop-ins), shared by
# all: the builder keeps the GIL for its whole run and calls no Python (a free-threaded build would need one per
# thread; none is supported yet).
SCRATCH = np.empty(NUM_STATE, np.int64)


@tiny
def _run_end(ids, start, stop, token):
    """First index in [start, stop) whose token is not `token` (stop if none)."""
    bad = check_run(ids, start, stop, token)
    return stop if bad < 0 else bad


@tiny
def next_frame(state, video_grid, n):
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


@tiny
def _frame_item(rows, scales, state, out, ids, i, tok, video_grid, merge, tmerge):
    """One frame of a per-frame video from token i (its placeholder `tok`).
    Returns (code, a, b, c, d, the token after it)."""
    num_tokens = ids.shape[0]
    n = state[S_COUNT + C.MOD_VIDEO]
    if n >= state[S_TOTAL + C.MOD_VIDEO]:
        return C.ERR_EXTRA_ITEM, C.MOD_VIDEO, i, 0, 0, i
    _, h, w, size = grid_tokens(video_grid, n, merge, tmerge, num_tokens)
    size = h * w if size <= num_tokens else size
    bad, missing = scan_item(ids, i, size, tok)
    if bad >= 0:
        return C.ERR_PLACEHOLDER_SHORT, C.MOD_VIDEO, n, bad, state[S_FRAME], i
    if missing > 0:
        return C.ERR_CUT_OFF, C.MOD_VIDEO, n, missing, state[S_FRAME], i
    flush_text(rows, scales, state, out, i)
    emit_frame(rows, scales, state, out, i, h, w)
    next_frame(state, video_grid, n)
    return C.OK, 0, 0, 0, 0, i + size


@tiny
def _grid_item(rows, scales, state, out, ids, i, tok, m, params, image_grid, video_grid, video_sp, tail):
    """One image or whole video (modality m) from token i: a grid, a raw grid
    (Isaac's images) or an XD image (HunYuan-VL). Returns (code, a, b, c, d,
    the token after it, where raw text resumes: `tail` or this image's)."""
    num_tokens = ids.shape[0]
    grids = image_grid if m == C.MOD_IMAGE else video_grid
    n = state[S_COUNT + m]
    if n >= state[S_TOTAL + m]:
        return C.ERR_EXTRA_ITEM, m, i, 0, 0, i, tail
    merge = np.int64(params[C.P_MERGE])
    tmerge = np.int64(params[C.P_VIDEO_T_MERGE]) if m == C.MOD_VIDEO else np.int64(1)
    t, h, w, size = grid_tokens(grids, n, merge, tmerge, num_tokens)
    xd = params[C.P_XD_IMAGES] != 0
    if xd:  # (xd families have no videos)
        size = xd_image_tokens(h, w, size, num_tokens)
    if i + size > num_tokens:  # cut off (a foreign token before the end is reported first)
        bad, missing = scan_item(ids, i, size, tok)
        if bad >= 0:
            return C.ERR_PLACEHOLDER_SHORT, m, n, bad, 0, i, tail
        return C.ERR_CUT_OFF, m, n, missing, 0, i, tail
    flush_text(rows, scales, state, out, i)
    if xd or (params[C.P_RAW_SPATIAL] != 0 and m == C.MOD_IMAGE):
        bad = check_run(ids, i, i + size, tok)
        if bad >= 0:
            return C.ERR_PLACEHOLDER_SHORT, m, n, bad, 0, i, tail
        if xd:
            if i + size < num_tokens and ids[i + size] == tok:  # one run, as transformers groups them
                return C.ERR_XD_RUN, n, i, 0, 0, i, tail
            emit_xd_image(rows, scales, state, out, i, h, w, np.int64(params[C.P_ORDINAL_BASE]) + n)
        else:
            tail = emit_raw_grid(rows, scales, state, out, i, t, h, w) + 1
        state[S_COUNT + m] = n + 1
        return C.OK, 0, 0, 0, 0, i + size, tail
    if m == C.MOD_IMAGE:  # images are never time-scaled
        item_mode, item_sp, item_r = np.int64(C.TAU_FRAME), np.float32(1), np.float32(1)
    else:
        item_mode = np.int64(params[C.P_TAU_MODE])
        item_sp, item_r = video_sp_of(video_sp, n), np.float32(params[C.P_SCALE_R])
    next_rule = np.int64(params[C.P_NEXT_RULE])
    bad = emit_checked_grid(rows, scales, state, out, ids, i, t, h, w, item_mode, item_sp, item_r, next_rule, tok)
    if bad >= 0:
        return C.ERR_PLACEHOLDER_SHORT, m, n, bad, 0, i, tail
    state[S_COUNT + m] = n + 1
    return C.OK, 0, 0, 0, 0, i + size, tail


@tiny
def _audio_item(state, ids, i, audio_tokens, audio_id):
    """A standalone audio clip from token i. It continues the text positions,
    so it needs no row of its own: only its token count is checked.
    Returns (code, a, b, c, d, the token after it)."""
    n = state[S_COUNT + C.MOD_AUDIO]
    if n >= state[S_TOTAL + C.MOD_AUDIO]:
        return C.ERR_EXTRA_ITEM, C.MOD_AUDIO, i, 0, 0, i
    size = audio_tokens[n]
    bad, missing = scan_item(ids, i, size, audio_id)
    if bad >= 0:
        return C.ERR_PLACEHOLDER_SHORT, C.MOD_AUDIO, n, bad, 0, i
    if missing > 0:
        return C.ERR_CUT_OFF, C.MOD_AUDIO, n, missing, 0, i
    state[S_COUNT + C.MOD_AUDIO] = n + 1
    return C.OK, 0, 0, 0, 0, i + size


@tiny
def _av_block(rows, scales, state, out, ids, i, params, video_grid, video_sp, audio_tokens):
    """An audio-in-video block, vision_start audio_start <video or audio> ...
    audio_end vision_end, from token i. Returns (code, a, b, c, d, the token after it)."""
    num_tokens = ids.shape[0]
    n = state[S_COUNT + C.MOD_VIDEO]
    if n >= state[S_TOTAL + C.MOD_VIDEO]:
        return C.ERR_EXTRA_ITEM, C.MOD_VIDEO, i + 2, 0, 0, i
    a = state[S_COUNT + C.MOD_AUDIO]
    if a >= state[S_TOTAL + C.MOD_AUDIO]:
        return C.ERR_AV_NO_AUDIO, n, 0, 0, 0, i
    merge = np.int64(params[C.P_MERGE])
    t, h, w, size = grid_tokens(video_grid, n, merge, np.int64(params[C.P_VIDEO_T_MERGE]), num_tokens)
    num_audio = audio_tokens[a]
    missing = i + 2 + size + num_audio + 2 - num_tokens
    if missing > 0:
        return C.ERR_AV_CUT_OFF, n, missing, 0, 0, i
    mode = np.int64(params[C.P_TAU_MODE])
    r = np.float32(params[C.P_SCALE_R])
    pair = np.int64(params[C.P_AV_PAIR])
    shift = params[C.P_AV_SHIFT] != 0
    merge_tau = params[C.P_AV_MERGE] != 0
    flush_text(rows, scales, state, out, i)
    sp = video_sp[n]
    s = 0 if shift else av_open(rows, scales, state, out, i, pair)  # shifted: runs emitted below
    by_identity = not (shift or merge_tau)  # else the positions come from the counts alone
    video_id = np.int64(params[C.P_VIDEO])
    audio_id = np.int64(params[C.P_AUDIO])
    k_video, k_audio, pos, last_top = _scan_interleave(
        rows, scales, state, out, ids, i + 2, by_identity, s, t, h, w, mode, sp, r, num_audio, video_id, audio_id
    )
    if k_video != size or k_audio != num_audio:
        return C.ERR_AV_COUNT, n, k_video, k_audio, num_audio, i
    audio_end = np.int64(params[C.P_AUDIO_END])
    if ids[pos] != audio_end:
        return C.ERR_AV_BAD_TOKEN, n, pos, audio_end, 0, i
    vision_end = np.int64(params[C.P_VISION_END])
    if ids[pos + 1] != vision_end:
        return C.ERR_AV_BAD_TOKEN, n, pos + 1, vision_end, 0, i
    if shift:
        chunk = np.int64(params[C.P_CHUNK])
        av_vllm_shifted(rows, scales, state, out, i, t, h, w, mode, sp, r, num_audio, chunk)
    else:
        if merge_tau:
            av_tau_merge(rows, scales, state, out, i + 2, s, t, h, w, mode, sp, r, num_audio)
        top = av_block_top(s, t, h, w, num_audio, mode, sp, r)
        eos_rule = np.int64(params[C.P_AV_EOS])
        av_close(rows, scales, state, out, pos, (top if eos_rule else last_top) + 1, pair, top)
    state[S_COUNT + C.MOD_VIDEO] = n + 1
    state[S_COUNT + C.MOD_AUDIO] = a + 1
    return C.OK, 0, 0, 0, 0, pos + 2


@tiny
def _failed(state, code, a, b, c, d):
    """Leave (code, a, b, c, d) in the state for the caller's message; returns FAILED."""
    state[S_ERROR] = code
    state[S_ERROR + 1] = a
    state[S_ERROR + 2] = b
    state[S_ERROR + 3] = c
    state[S_ERROR + 4] = d
    return np.int64(FAILED)


@tiny
def _finish(rows, scales, state, out, num_tokens, tail):
    """The text after the last item, then every item given consumed. Returns (code, a, b, c, d)."""
    if tail >= 0:
        state[S_BASE] = tail
    flush_text(rows, scales, state, out, num_tokens)
    for m in range(3):
        if state[S_COUNT + m] < state[S_TOTAL + m]:
            return C.ERR_MISSING_ITEMS, m, state[S_COUNT + m], state[S_TOTAL + m], 0
    return C.OK, 0, 0, 0, 0


@helper_with_gil
def build_from_tokens(
    rows, scales, state, out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video
):
    """Scan `ids` once and emit the layout (and the positions, where `out`
    has columns). Returns the prompt's delta (max position + 1 - len(ids)),
    or FAILED with the error in the state's S_ERROR slots."""
    num_tokens = ids.shape[0]
    reset(state, image_grid.shape[0], video_grid.shape[0], audio_tokens.shape[0])
    # one exit for every error (one inlined _failed: numba inlines a `tiny` body once per call site)
    code, a, b, c = check_items(params, image_grid, video_grid, video_sp, audio_tokens)
    d = np.int64(0)
    image_id = np.int64(params[C.P_IMAGE])
    video_id = np.int64(params[C.P_VIDEO])
    audio_id = np.int64(params[C.P_AUDIO])
    vision_start = np.int64(params[C.P_VISION_START])
    audio_start = np.int64(params[C.P_AUDIO_START])
    video_open = np.int64(params[C.P_VIDEO_OPEN])
    video_close = np.int64(params[C.P_VIDEO_CLOSE])
    frames = params[C.P_FRAMES] != 0
    after_start = params[C.P_AFTER_START] != 0  # (never with brackets or audio: presets of the Qwen-VL lines)
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
    while code == C.OK:
        i = next_special(ids, i, s_a, s_b, s_c, s_d)
        if i >= num_tokens:
            if in_video or state[S_FRAME] != 0:
                code, a, b, c, d = C.ERR_VIDEO_OPEN, state[S_COUNT + C.MOD_VIDEO], num_tokens, state[S_FRAME], 0
            else:
                code, a, b, c, d = _finish(rows, scales, state, out, num_tokens, tail)
            break
        tok = ids[i]
        if after_start and (tok == image_id or tok == video_id) and (i == 0 or ids[i - 1] != vision_start):
            m = C.MOD_IMAGE if tok == image_id else C.MOD_VIDEO
            code, a, b, c, d = C.ERR_NO_VISION_START, m, state[S_COUNT + m], i, state[S_FRAME]
        elif bracketed and (tok == video_open or tok == video_close):
            if tok == video_open and in_video or state[S_FRAME] != 0:
                # a bracket inside a bracket, or one that closes (or reopens) mid-video
                code, a, b, c, d = C.ERR_VIDEO_OPEN, state[S_COUNT + C.MOD_VIDEO], i, state[S_FRAME], 0
            in_video = tok == video_open
            i += 1
        elif frames and (tok == video_id or (bracketed and tok == image_id and in_video)):
            merge = np.int64(params[C.P_MERGE])
            tmerge = np.int64(params[C.P_VIDEO_T_MERGE])
            code, a, b, c, d, i = _frame_item(rows, scales, state, out, ids, i, tok, video_grid, merge, tmerge)
        elif tok == image_id or (tok == video_id and not av):
            m = C.MOD_IMAGE if tok == image_id and not in_video else C.MOD_VIDEO
            code, a, b, c, d, i, tail = _grid_item(
                rows, scales, state, out, ids, i, tok, m, params, image_grid, video_grid, video_sp, tail
            )
        elif tok == video_id:  # a video outside an audio-in-video block
            code, a, b, c, d = C.ERR_AV_NOT_IN_BLOCK, state[S_COUNT + C.MOD_VIDEO], i, 0, 0
        elif tok == audio_id:
            code, a, b, c, d, i = _audio_item(state, ids, i, audio_tokens, audio_id)
        elif i + 2 < num_tokens and ids[i + 1] == audio_start and (ids[i + 2] == video_id or ids[i + 2] == audio_id):
            code, a, b, c, d, i = _av_block(
                rows, scales, state, out, ids, i, params, video_grid, video_sp, audio_tokens
            )
        else:  # a vision_start that opens no interleave: text
            i += 1
    if code != C.OK:
        return _failed(state, code, a, b, c, d)
    return state[S_MAX] + 1 - num_tokens


def error_of(state) -> tuple:
    """(code, a, b, c, d) that `build_from_tokens` left in `state` with FAILED, as Python ints."""
    return tuple(int(x) for x in state[S_ERROR : S_ERROR + 5])
