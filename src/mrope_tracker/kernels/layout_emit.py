"""Emitters shared by the layout builders (layout_build.py).

A builder walks a prompt's items in token order and emits segments (see
layout_codes) two ways, either or both:
- as a row of a caller-owned `rows`/`scales` table (the layout). When the
  table is too short the emitters keep counting, and the caller grows it and
  runs again;
- as positions written straight into `out` (3, L), when `out` has columns:
  `prompt_positions` uses this with a zero-row table, so it allocates nothing.
  `out` may also be None (the range builder, which never writes positions):
  numba then prunes the writing branch at compile time, so that builder's
  emitters compile without the position rules (a cold compile's seconds).

Running state lives in a small int64 `state` array, because numba functions
cannot update a caller's scalars. Nothing here knows a model family: the
builders pass the switches they read from the packed config.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import inner, tiny
from .position_rules import block_end, grid_range_max, temporal_index, write_grid_hw, write_segment, write_t_checked

TAU_LIMIT = 0.999 * 2.0**31  # tau bound, with room for float32 rounding

# Constants passed to other kernels go through np.int64(...): a bare literal
# (0, or a module constant such as C.KIND_GRID) makes numba compile the callee
# once more for that literal value, which multiplied the cold compile time.
# state array slots
S_ROWS_EMITTED = 0  # rows emitted (or counted, past the table's capacity)
S_BASE = 1  # position of the next text token
S_MAX = 2  # largest position emitted so far
S_TEXT_START = 3  # first token of the pending text run
S_COUNT = 4  # 3 slots: items consumed per modality (videos: whole videos)
S_TOTAL = 7  # 3 slots: items given per modality
S_FRAME = 10  # per-frame videos: frames of the current video consumed
S_FRAMES_SEEN = 11  # per-frame videos: frame ranges / runs consumed in all
S_ERROR = 12  # 5 slots: the token builder's (code, a, b, c, d) when it returns FAILED
NUM_STATE = 17

_F32_ZERO = np.float32(0)


@tiny
def reset(state, num_images, num_videos, num_audio):
    state[S_ROWS_EMITTED] = 0
    state[S_BASE] = 0
    state[S_MAX] = -1
    state[S_TEXT_START] = 0
    for m in range(3):
        state[S_COUNT + m] = 0
    state[S_TOTAL + C.MOD_IMAGE] = num_images
    state[S_TOTAL + C.MOD_VIDEO] = num_videos
    state[S_TOTAL + C.MOD_AUDIO] = num_audio
    state[S_FRAME] = 0
    state[S_FRAMES_SEEN] = 0


@inner
def push_row(rows, scales, state, out, tok_start, tok_len, kind, base, grid_offset, t, h, w, scaled, sp, r):
    """Emit one segment: write its positions into `out` (when it has columns),
    and append it to the table, extending the previous row when it continues
    it exactly."""
    if tok_len <= 0:
        return
    if out is not None and out.shape[1] > 0:  # (None: pruned when numba compiles, see the module's docstring)
        write_segment(out, tok_start, np.int64(0), tok_len, kind, base, grid_offset, h, w, scaled, sp, r)
    n = state[S_ROWS_EMITTED]
    if 0 < n <= rows.shape[0]:
        p = n - 1
        if rows[p, C.COL_KIND] == kind and rows[p, C.COL_TOK_START] + rows[p, C.COL_TOK_LEN] == tok_start:
            if kind == C.KIND_LINEAR and rows[p, C.COL_BASE] + rows[p, C.COL_TOK_LEN] == base:
                rows[p, C.COL_TOK_LEN] += tok_len
                return
            if (
                kind == C.KIND_GRID
                and rows[p, C.COL_BASE] == base
                and rows[p, C.COL_GRID_OFFSET] + rows[p, C.COL_TOK_LEN] == grid_offset
                and rows[p, C.COL_T] == t
                and rows[p, C.COL_H] == h
                and rows[p, C.COL_W] == w
                and rows[p, C.COL_SCALED] == scaled
                and scales[p, C.SCALE_SP] == sp
                and scales[p, C.SCALE_R] == r
            ):
                rows[p, C.COL_TOK_LEN] += tok_len
                return
    if n < rows.shape[0]:
        rows[n, C.COL_TOK_START] = tok_start
        rows[n, C.COL_TOK_LEN] = tok_len
        rows[n, C.COL_KIND] = kind
        rows[n, C.COL_BASE] = base
        rows[n, C.COL_GRID_OFFSET] = grid_offset
        rows[n, C.COL_T] = t
        rows[n, C.COL_H] = h
        rows[n, C.COL_W] = w
        rows[n, C.COL_SCALED] = scaled
        scales[n, C.SCALE_SP] = sp
        scales[n, C.SCALE_R] = r
    state[S_ROWS_EMITTED] = n + 1


@tiny
def _push_linear(rows, scales, state, out, tok_start, tok_len, base):
    z = np.int64(0)
    push_row(
        rows, scales, state, out, tok_start, tok_len, np.int64(C.KIND_LINEAR), base, z, z, z, z, z, _F32_ZERO, _F32_ZERO
    )


@tiny
def _push_pair(rows, scales, state, out, tok_start, pair, base):
    """An audio-in-video bos or eos pair: both at `base` (shared) or at base, base + 1."""
    z = np.int64(0)
    kind = np.int64(C.KIND_CONST) if pair == 0 else np.int64(C.KIND_LINEAR)
    push_row(rows, scales, state, out, tok_start, np.int64(2), kind, base, z, z, z, z, z, _F32_ZERO, _F32_ZERO)


@inner
def flush_text(rows, scales, state, out, upto):
    """Emit the pending text run [text_start, upto) at consecutive positions."""
    st = state[S_TEXT_START]
    if upto > st:
        base = state[S_BASE]
        _push_linear(rows, scales, state, out, st, upto - st, base)
        state[S_BASE] = base + (upto - st)
        state[S_MAX] = max(state[S_MAX], base + (upto - st) - 1)
    state[S_TEXT_START] = upto


@tiny
def _close_block(state, tok_start, s, t, h, w, mode, sp, r, next_rule):
    """Advance the state past a whole block placed at base s. The next base
    is one past the block's largest position (R-max), or s + max(h', w')
    (R-hw)."""
    top, state[S_BASE] = block_end(s, t, h, w, mode, sp, r, next_rule)
    state[S_MAX] = max(state[S_MAX], top)
    state[S_TEXT_START] = tok_start + t * h * w


@inner
def emit_grid(rows, scales, state, out, tok_start, t, h, w, mode, sp, r, next_rule):
    """A whole (t', h', w') block at the current base."""
    s = state[S_BASE]
    push_row(
        rows, scales, state, out, tok_start, t * h * w, np.int64(C.KIND_GRID), s, np.int64(0), t, h, w, mode, sp, r
    )
    _close_block(state, tok_start, s, t, h, w, mode, sp, r, next_rule)


@tiny
def emit_checked_grid(rows, scales, state, out, ids, tok_start, t, h, w, mode, sp, r, next_rule, token):
    """`emit_grid` for a block whose t'h'w' placeholder tokens (all within
    `ids`) are not checked yet. Returns the index of the first that is not
    `token`, or -1 once the block is emitted.

    Where only positions are written (no table, as for `prompt_positions`),
    the check rides in the pass that writes the T row: one read of the ids
    instead of two. Otherwise the run is checked first, in a pass of its own."""
    size = t * h * w
    if out.shape[1] == 0 or rows.shape[0] != 0:
        bad = check_run(ids, tok_start, tok_start + size, token)
        if bad < 0:
            emit_grid(rows, scales, state, out, tok_start, t, h, w, mode, sp, r, next_rule)
        return bad
    s = state[S_BASE]
    if write_t_checked(out, ids, tok_start, s, t, h * w, token, mode, sp, r):
        return check_run(ids, tok_start, tok_start + size, token)
    write_grid_hw(out, tok_start, s, np.int64(0), size, h, w)
    state[S_ROWS_EMITTED] += 1  # as push_row counts a row past a table's capacity
    _close_block(state, tok_start, s, t, h, w, mode, sp, r, next_rule)
    return np.int64(-1)


@tiny
def emit_raw_grid(rows, scales, state, out, tok_start, t, h, w):
    """A whole (t', h', w') image block at the current base s whose H and W
    are the raw row and column (GRID_RAW): tokens at (s + f, i, j). The next
    base is one past the block's largest position. Returns the last T."""
    s = state[S_BASE]
    one = np.float32(1)
    push_row(
        rows, scales, state, out, tok_start, t * h * w, np.int64(C.KIND_GRID_RAW), s, np.int64(0), t, h, w,
        np.int64(C.TAU_FRAME), one, one,
    )  # fmt: skip
    top = max(s + t - 1, max(h, w) - 1)
    state[S_MAX] = max(state[S_MAX], top)
    state[S_BASE] = top + 1
    state[S_TEXT_START] = tok_start + t * h * w
    return s + t - 1


@tiny
def emit_xd_image(rows, scales, state, out, tok_start, h, w, ordinal):
    """A HunYuan-VL image from its first token: one extra token, the XD_GRID
    of h' rows of w' + 1 tokens (the last a newline), one extra token. Every
    token keeps its sequence position on the leading axes; the grid's last
    three axes are (j, i, ordinal). The extra tokens are text."""
    flush_text(rows, scales, state, out, tok_start + 1)
    s = state[S_BASE]
    width = w + 1
    size = h * width
    one = np.float32(1)
    push_row(
        rows, scales, state, out, tok_start + 1, size, np.int64(C.KIND_XD_GRID), s, np.int64(0), np.int64(1), h,
        width, ordinal, one, one,
    )  # fmt: skip
    state[S_MAX] = max(state[S_MAX], s + size - 1, w, h - 1, ordinal)
    state[S_BASE] = s + size
    state[S_TEXT_START] = tok_start + 1 + size


@tiny
def xd_image_tokens(h, w, size, limit):
    """Tokens of a HunYuan-VL image of h' x w' (grid_tokens' size h'w'): its
    h'(w' + 1) grid tokens and the two extra ones, or limit + 1 past limit."""
    return size if size > limit else min(h * (w + 1) + 2, limit + 1)


@tiny
def emit_frame(rows, scales, state, out, tok_start, h, w):
    """One video frame of a per-frame family: its own tau = 0 block."""
    one = np.int64(1)
    emit_grid(
        rows,
        scales,
        state,
        out,
        tok_start,
        one,
        h,
        w,
        np.int64(C.TAU_FRAME),
        np.float32(1),
        np.float32(1),
        np.int64(C.NEXT_MAX),
    )


# --- audio in video -----------------------------------------------------------
# A block `vision_start audio_start [interleave] audio_end vision_end`. Every
# token of the interleave takes the position of what it is (docs/semantics.md):
# the k-th video token is token k of the grid at (s + tau(f), s + i, s + j), the
# k-th audio token sits at s + k. The bos pair sits at b (shared) or b, b + 1
# (consecutive), with s just after it; the eos pair at e = 1 + the largest
# position of the block's last run (or of the whole block), shared or e, e + 1.


@tiny
def av_open(rows, scales, state, out, bos_tok, pair):
    """Emit the bos pair at the current base; returns s, the content base."""
    b = state[S_BASE]
    _push_pair(rows, scales, state, out, bos_tok, pair, b)
    state[S_MAX] = max(state[S_MAX], b + pair)
    return b + 1 + pair


@inner
def av_run(rows, scales, state, out, tok, is_audio, k0, count, s, t, h, w, mode, sp, r):
    """Emit `count` interleave tokens from `tok`: audio tokens k0.. (is_audio
    1) or video tokens k0.. of the grid (0). Returns the largest position
    among them."""
    if is_audio != 0:
        _push_linear(rows, scales, state, out, tok, count, s + k0)
        return s + k0 + count - 1
    push_row(rows, scales, state, out, tok, count, np.int64(C.KIND_GRID), s, k0, t, h, w, mode, sp, r)
    return s + grid_range_max(k0, k0 + count, h, w, temporal_index((k0 + count - 1) // (h * w), mode, sp, r))


@tiny
def av_block_top(s, t, h, w, num_audio, mode, sp, r):
    """Largest position of a block's content (video grid and audio)."""
    return max(s + max(temporal_index(t - 1, mode, sp, r), h - 1, w - 1), s + num_audio - 1)


@tiny
def av_close(rows, scales, state, out, eos_tok, e, pair, block_top):
    """Emit the eos pair at e; text resumes after it."""
    _push_pair(rows, scales, state, out, eos_tok, pair, e)
    state[S_MAX] = max(state[S_MAX], block_top, e + pair)
    state[S_BASE] = e + 1 + pair
    state[S_TEXT_START] = eos_tok + 2


@tiny
def av_emit_runs(rows, scales, state, out, tok, runs, r0, r1, s, t, h, w, mode, sp, r):
    """Emit interleave runs[r0:r1] (kind, count) from token `tok`. Returns
    (largest position of the last run, next token)."""
    k_video = np.int64(0)
    k_audio = np.int64(0)
    last_top = s
    for q in range(r0, r1):
        count = runs[q, 1]
        if runs[q, 0] == 0:
            last_top = av_run(rows, scales, state, out, tok, np.int64(0), k_video, count, s, t, h, w, mode, sp, r)
            k_video += count
        else:
            last_top = av_run(rows, scales, state, out, tok, np.int64(1), k_audio, count, s, t, h, w, mode, sp, r)
            k_audio += count
        tok += count
    return last_top, tok


@tiny
def av_vllm_shifted(rows, scales, state, out, bos_tok, t, h, w, mode, sp, r, num_audio, chunk):
    """vLLM 0.33's Qwen2.5-Omni audio-in-video (its D5 and D6 behaviours).

    Its position generator walks the chunks that hold frames (frame f in
    chunk tau(f) // chunk, empty chunks skipped), each giving its frames and
    then up to `chunk` audio positions, leftover audio last, all from
    s = b + 1. Those positions land from audio_start on, one token early,
    whatever the prompt's own layout; every token after them (the last
    interleave token, audio_end, vision_end, ...) continues as text from
    1 + the block's maximum. vision_start is plain text at b."""
    flush_text(rows, scales, state, out, bos_tok + 1)
    s = state[S_BASE]
    tok = bos_tok + 1
    hw = h * w
    audio_done = np.int64(0)
    f = np.int64(0)
    while f < t:
        c = temporal_index(f, mode, sp, r) // chunk
        f0 = f
        while f < t and temporal_index(f, mode, sp, r) // chunk == c:
            f += 1
        av_run(rows, scales, state, out, tok, np.int64(0), f0 * hw, (f - f0) * hw, s, t, h, w, mode, sp, r)
        tok += (f - f0) * hw
        take = min(chunk, num_audio - audio_done)
        if take > 0:
            av_run(rows, scales, state, out, tok, np.int64(1), audio_done, take, s, t, h, w, mode, sp, r)
            tok += take
            audio_done += take
    if num_audio > audio_done:
        av_run(rows, scales, state, out, tok, np.int64(1), audio_done, num_audio - audio_done, s, t, h, w, mode, sp, r)
    top = av_block_top(s, t, h, w, num_audio, mode, sp, r)
    state[S_MAX] = max(state[S_MAX], top)
    state[S_BASE] = top + 1
    state[S_TEXT_START] = bos_tok + 1 + t * hw + num_audio


@tiny
def av_tau_merge(rows, scales, state, out, tok, s, t, h, w, mode, sp, r, num_audio):
    """vLLM 0.33's Qwen3-Omni audio-in-video positions (its D8): a merge of the
    frames' truncated temporal indices with the audio indices (frame f goes
    before audio token a when tau(f) <= a), written from token `tok` whatever
    the prompt's own layout (which its processor merged on untruncated times).
    Returns the next token."""
    hw = h * w
    done = np.int64(0)
    for f in range(t):
        before = min(num_audio, max(temporal_index(f, mode, sp, r), 0))
        if before > done:
            av_run(rows, scales, state, out, tok, np.int64(1), done, before - done, s, t, h, w, mode, sp, r)
            tok += before - done
            done = before
        av_run(rows, scales, state, out, tok, np.int64(0), f * hw, hw, s, t, h, w, mode, sp, r)
        tok += hw
    if num_audio > done:
        av_run(rows, scales, state, out, tok, np.int64(1), done, num_audio - done, s, t, h, w, mode, sp, r)
        tok += num_audio - done
    return tok


_BLOCK = 256  # tokens checked per branch-free block
_NEAR = 8  # tokens next_special checks one by one before its blocks start
_FIRST_BLOCK = 32  # next_special's first block; the blocks then double, up to _BLOCK


@inner
def check_run(ids, start, stop, token):
    """Index of the first token in [start, stop) that is not `token`, or -1.
    Blocks are checked without branches (vectorised); only a failing block
    is searched token by token."""
    for block in range(start, stop, _BLOCK):
        seg = ids[block : min(block + _BLOCK, stop)]  # 0-based: no wraparound checks
        differ = np.int64(0)  # as in position_rules.write_t_checked
        for k in range(seg.shape[0]):
            differ |= seg[k] ^ token
        if differ != 0:
            for k in range(seg.shape[0]):
                if seg[k] != token:
                    return block + k
    return -1


@inner
def next_special(ids, start, a, b, c, d):
    """Index of the first token at or after `start` equal to a, b, c or d (or
    len(ids)). A negative target is how callers say "no such token" (an
    absent audio token, say): it matches nothing, and a negative token id in
    a prompt is text, as in the reference and in transformers.

    Text is skipped a block at a time without branches: a token is a
    candidate when it lies between the smallest and the largest target, one
    unsigned compare (a model's placeholder and bracket tokens sit within a
    few ids of each other), and only a block holding a candidate is searched
    token by token. The blocks start small and double: items are often a few
    dozen tokens apart, and a first block of 256 tokens cost more than the
    writes of a one-image prompt (docs/benchmarks.md, "Measurements behind
    design choices")."""
    num_tokens = ids.shape[0]
    hi = max(max(a, b), max(c, d))
    if hi < 0:
        return num_tokens
    # absent targets take the largest's value, so that they match nothing of their own
    a = hi if a < 0 else a
    b = hi if b < 0 else b
    c = hi if c < 0 else c
    d = hi if d < 0 else d
    lo = min(min(a, b), min(c, d))
    # Items are often a few tokens apart (vision_end, vision_start): look
    # there first, one token at a time, before scanning whole blocks.
    near = ids[start : min(start + _NEAR, num_tokens)]
    for k in range(near.shape[0]):
        tok = near[k]
        if tok == a or tok == b or tok == c or tok == d:
            return start + k
    block = start + near.shape[0]
    size = np.int64(_FIRST_BLOCK)
    # unsigned, so that the difference wraps instead of overflowing
    lo_bits = np.uint64(lo)
    span = np.uint64(hi - lo)
    while block < num_tokens:
        seg = ids[block : min(block + size, num_tokens)]
        candidate = False
        for k in range(seg.shape[0]):
            candidate |= np.uint64(seg[k]) - lo_bits <= span
        if candidate:
            for k in range(seg.shape[0]):
                tok = seg[k]
                if tok == a or tok == b or tok == c or tok == d:
                    return block + k
        block += seg.shape[0]
        size = min(2 * size, np.int64(_BLOCK))
    return num_tokens


@inner
def _check_grids(grids, modality, merge, tmerge):
    """Every dimension positive, h and w divisible by the merge size, images
    t == 1, video t divisible by the temporal merge size."""
    for n in range(grids.shape[0]):
        for col in range(3):
            if grids[n, col] <= 0:
                return C.ERR_GRID_DIM, modality, n, col
        for col in range(1, 3):
            if grids[n, col] % merge != 0:
                return C.ERR_GRID_MERGE, modality, n, col
        if modality == C.MOD_IMAGE and grids[n, 0] != 1:
            return C.ERR_IMAGE_T, n, grids[n, 0], 0
        if grids[n, 0] % tmerge != 0:
            return C.ERR_VIDEO_T_MERGE, n, grids[n, 0], 0
    return C.OK, 0, 0, 0


@tiny
def grid_tokens(grids, n, merge, tmerge, limit):
    """t' h' w' and their product, or a product of limit + 1 when it exceeds limit
    (so huge grids cannot overflow int64). `tmerge` divides t (1 for images)."""
    t = grids[n, 0] // tmerge
    h = grids[n, 1] // merge
    w = grids[n, 2] // merge
    if t > limit or h > limit or w > limit or h * w > limit or t * h * w > limit:
        return t, h, w, limit + 1
    return t, h, w, t * h * w


@inner
def check_items(params, image_grid, video_grid, video_sp, audio_tokens):
    """Validate grids, second_per_grid_ts and audio token counts before any row is built."""
    merge = np.int64(params[C.P_MERGE])
    res = _check_grids(image_grid, C.MOD_IMAGE, merge, np.int64(1))
    if res[0] != C.OK:
        return res
    res = _check_grids(video_grid, C.MOD_VIDEO, merge, np.int64(params[C.P_VIDEO_T_MERGE]))
    if res[0] != C.OK:
        return res
    r = params[C.P_SCALE_R]
    for n in range(video_sp.shape[0]):
        sp = video_sp[n]
        if not (sp >= 0) or sp == np.inf:
            return C.ERR_SP_VALUE, n, 0, 0
        # tau is monotone in f; bound it before it can reach int64 conversion
        # (the float64 product, with room for float32 rounding above it)
        if np.float64(video_grid[n, 0] - 1) * np.float64(sp) * r >= TAU_LIMIT:
            return C.ERR_TAU_OVERFLOW, n, 0, 0
    for n in range(audio_tokens.shape[0]):
        if audio_tokens[n] < 1:
            return C.ERR_AUDIO_SHORT, n, audio_tokens[n], 0
    return C.OK, 0, 0, 0


@tiny
def scan_item(ids, start, size, token):
    """Check a placeholder run of `size` tokens from `start`: returns
    (first foreign token index or -1, tokens missing past the prompt's end)."""
    num_tokens = ids.shape[0]
    bad = check_run(ids, start, min(start + size, num_tokens), token)
    return bad, max(start + size - num_tokens, 0)
