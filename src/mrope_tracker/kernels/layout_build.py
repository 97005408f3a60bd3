"""Kernels that turn a prompt's multimodal items into a layout table.

Two front ends share the emitters below:
- `build_from_tokens` scans the token ids once, finds every placeholder run
  and checks it against the grids (the form that needs nothing but tokens);
- `build_from_ranges` takes each item's (offset, length), as engines already
  hold them, and never reads a token: O(items) (plus one row per chunk of an
  Omni audio-in-video interleave).

Both emit each segment (see layout_codes) two ways, either or both:
- as a row of a caller-owned `rows`/`scales` table (the layout). When the
  table is too short the builders keep counting, and the caller grows it and
  runs again;
- as positions written straight into `out` (3, L), when `out` has columns:
  `prompt_positions` uses this with a zero-row table, so it allocates nothing.

Running state lives in a small int64 `state` array, because numba functions
cannot update a caller's scalars. Errors are returned as (code, a, b, c),
never raised. Rules: spec §1.3-§1.5, §2.1-§2.3, §6.2-§6.3.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import helper, jit
from .position_rules import grid_range_max, temporal_index, write_linear, write_segment

# state array slots
S_NUM_ROWS = 0  # rows emitted (or counted, past the table's capacity)
S_BASE = 1  # position of the next text token
S_MAX = 2  # largest position emitted so far
S_TEXT_START = 3  # first token of the pending text run
S_COUNT = 4  # 3 slots: items consumed per modality
S_TOTAL = 7  # 3 slots: items given per modality
NUM_STATE = 10

_TAU_LIMIT = 2**31


@jit
def audio_token_count(num_mel_frames):
    """Qwen2.5-Omni audio tokens for F mel frames (conv stride 2, pool stride 2), spec §2.3."""
    return ((num_mel_frames - 1) // 2 + 1 - 2) // 2 + 1


@helper
def _reset(state, num_images, num_videos, num_audio):
    state[S_NUM_ROWS] = 0
    state[S_BASE] = 0
    state[S_MAX] = -1
    state[S_TEXT_START] = 0
    for m in range(3):
        state[S_COUNT + m] = 0
    state[S_TOTAL + C.MOD_IMAGE] = num_images
    state[S_TOTAL + C.MOD_VIDEO] = num_videos
    state[S_TOTAL + C.MOD_AUDIO] = num_audio


@helper
def _push_row(rows, scales, state, out, tok_start, tok_len, kind, base, grid_offset, t, h, w, scaled, sp, r):
    """Emit one segment: write its positions into `out` (when it has columns),
    and append it to the table, extending the previous row when it continues
    it exactly."""
    if tok_len <= 0:
        return
    if out.shape[1] > 0:
        write_segment(out, tok_start, 0, tok_len, kind, base, grid_offset, h, w, scaled, sp, r)
    n = state[S_NUM_ROWS]
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
    state[S_NUM_ROWS] = n + 1


@helper
def _flush_text(rows, scales, state, out, upto):
    """Emit the pending text run [text_start, upto) at consecutive positions."""
    st = state[S_TEXT_START]
    if upto > st:
        base = state[S_BASE]
        _push_row(rows, scales, state, out, st, upto - st, C.KIND_LINEAR, base, 0, 0, 0, 0, 0, np.float32(0), np.float32(0))
        state[S_BASE] = base + (upto - st)
        state[S_MAX] = max(state[S_MAX], base + (upto - st) - 1)
    state[S_TEXT_START] = upto


@helper
def _emit_grid(rows, scales, state, out, tok_start, t, h, w, scaled, sp, r):
    """A whole vision block at the current base; the next base follows R-max (spec §1.4)."""
    s = state[S_BASE]
    _push_row(rows, scales, state, out, tok_start, t * h * w, C.KIND_GRID, s, 0, t, h, w, scaled, sp, r)
    top = s + max(temporal_index(t - 1, scaled, sp, r), h - 1, w - 1)
    state[S_MAX] = max(state[S_MAX], top)
    state[S_BASE] = top + 1
    state[S_TEXT_START] = tok_start + t * h * w


@helper
def _emit_item_grid(rows, scales, state, out, tok_start, modality, n, t, h, w, scaled, video_sp, r):
    """Image or plain video `n` as a whole block: images are never time-scaled."""
    if modality == C.MOD_IMAGE:
        _emit_grid(rows, scales, state, out, tok_start, t, h, w, 0, np.float32(1), np.float32(1))
    else:
        _emit_grid(rows, scales, state, out, tok_start, t, h, w, scaled, video_sp[n], r)


@helper
def _next_video_split(k, c, num_video, hw, chunk, scaled, sp, r):
    """transformers' chunk walker (spec §2.3): given a chunk that starts at video
    token k with the walker's counter at c, return the first later token whose
    temporal index reaches c * chunk (or num_video when none does)."""
    q = k + 1
    if q >= num_video:
        return num_video
    f = q // hw
    if temporal_index(f, scaled, sp, r) >= c * chunk:
        return q
    f += 1
    num_frames = num_video // hw
    while f < num_frames:
        if temporal_index(f, scaled, sp, r) >= c * chunk:
            return f * hw
        f += 1
    return num_video


_BLOCK = 256  # tokens checked per branch-free block
_NEAR = 8  # tokens checked one by one before the blocks start


@helper
def _check_run(ids, start, stop, token):
    """Index of the first token in [start, stop) that is not `token`, or -1.
    Blocks are checked without branches (vectorised); only a failing block
    is searched token by token."""
    for block in range(start, stop, _BLOCK):
        seg = ids[block : min(block + _BLOCK, stop)]  # 0-based: no wraparound checks
        mismatch = False
        for k in range(seg.shape[0]):
            mismatch |= seg[k] != token
        if mismatch:
            for k in range(seg.shape[0]):
                if seg[k] != token:
                    return block + k
    return -1


@helper
def _next_special(ids, start, a, b, c, d):
    """Index of the first token at or after `start` equal to a, b, c or d
    (or len(ids)); text is skipped a branch-free block at a time."""
    num_tokens = ids.shape[0]
    # Items are often a few tokens apart (vision_end, vision_start): look
    # there first, one token at a time, before scanning whole blocks.
    near = ids[start : min(start + _NEAR, num_tokens)]
    for k in range(near.shape[0]):
        tok = near[k]
        if tok == a or tok == b or tok == c or tok == d:
            return start + k
    start += near.shape[0]
    for block in range(start, num_tokens, _BLOCK):
        seg = ids[block : min(block + _BLOCK, num_tokens)]
        hit = False
        for k in range(seg.shape[0]):
            tok = seg[k]
            hit |= (tok == a) | (tok == b) | (tok == c) | (tok == d)
        if hit:
            for k in range(seg.shape[0]):
                tok = seg[k]
                if tok == a or tok == b or tok == c or tok == d:
                    return block + k
    return num_tokens


@helper
def _emit_audio_in_video(rows, scales, state, out, ids, check, bos, t, h, w, sp, r, num_audio, chunk, video_id, audio_id):
    """An Omni audio-in-video block whose vision_bos sits at token `bos`:
    vision_bos audio_bos [interleaved chunks] audio_eos vision_eos (spec §2.3, §6.3).

    bos pair at b, content from s = b + 1 (video (s+tau, s+i, s+j), audio s+a),
    chunks in transformers' order, eos pair at 1 + max(last chunk). When `check`
    is set the token ids are verified; returns (token index, expected id) of
    the first mismatch, or (-1, 0)."""
    b = state[S_BASE]
    _push_row(rows, scales, state, out, bos, 2, C.KIND_CONST, b, 0, 0, 0, 0, 0, np.float32(0), np.float32(0))
    s = b + 1
    hw = h * w
    num_video = t * hw
    num_audio_chunks = (num_audio + chunk - 1) // chunk
    tok = bos + 2
    k = 0  # next video token
    c = 1  # the walker's chunk counter
    j = 0
    last_top = 0
    while k < num_video or j < num_audio_chunks:
        if k < num_video:
            k_end = _next_video_split(k, c, num_video, hw, chunk, 1, sp, r)
            if k_end < num_video:
                c += 1
            if check:
                bad = _check_run(ids, tok, tok + k_end - k, video_id)
                if bad >= 0:
                    return bad, video_id
            _push_row(rows, scales, state, out, tok, k_end - k, C.KIND_GRID, s, k, t, h, w, 1, sp, r)
            last_top = s + grid_range_max(k, k_end, h, w, temporal_index((k_end - 1) // hw, 1, sp, r))
            tok += k_end - k
            k = k_end
        if j < num_audio_chunks:
            a0 = j * chunk
            a1 = min(a0 + chunk, num_audio)
            if check:
                bad = _check_run(ids, tok, tok + a1 - a0, audio_id)
                if bad >= 0:
                    return bad, audio_id
            _push_row(rows, scales, state, out, tok, a1 - a0, C.KIND_LINEAR, s + a0, 0, 0, 0, 0, 0, np.float32(0), np.float32(0))
            last_top = s + a1 - 1
            tok += a1 - a0
        j += 1
    block_top = max(s + max(temporal_index(t - 1, 1, sp, r), h - 1, w - 1), s + num_audio - 1)
    e = last_top + 1
    _push_row(rows, scales, state, out, tok, 2, C.KIND_CONST, e, 0, 0, 0, 0, 0, np.float32(0), np.float32(0))
    state[S_MAX] = max(state[S_MAX], block_top, e)
    state[S_BASE] = e + 1
    state[S_TEXT_START] = tok + 2
    return -1, 0


@helper
def _check_grids(grids, modality, merge):
    """Every dimension positive, h and w divisible by the merge size, images t == 1."""
    for n in range(grids.shape[0]):
        for col in range(3):
            if grids[n, col] <= 0:
                return C.ERR_GRID_DIM, modality, n, col
        for col in range(1, 3):
            if grids[n, col] % merge != 0:
                return C.ERR_GRID_MERGE, modality, n, col
        if modality == C.MOD_IMAGE and grids[n, 0] != 1:
            return C.ERR_IMAGE_T, n, grids[n, 0], 0
    return C.OK, 0, 0, 0


@helper
def _grid_tokens(grids, n, merge, limit):
    """t' h' w' and their product, or a product of limit + 1 when it exceeds limit
    (so huge grids cannot overflow int64)."""
    t = grids[n, 0]
    h = grids[n, 1] // merge
    w = grids[n, 2] // merge
    if t > limit or h > limit or w > limit or h * w > limit or t * h * w > limit:
        return t, h, w, limit + 1
    return t, h, w, t * h * w


@helper
def check_items(params, image_grid, video_grid, video_sp, audio_lengths):
    """Validate grids, second_per_grid_ts and audio lengths before any row is built."""
    merge = np.int64(params[C.P_MERGE])
    res = _check_grids(image_grid, C.MOD_IMAGE, merge)
    if res[0] != C.OK:
        return res
    res = _check_grids(video_grid, C.MOD_VIDEO, merge)
    if res[0] != C.OK:
        return res
    r = np.float32(params[C.P_SCALE_R])
    for n in range(video_sp.shape[0]):
        sp = video_sp[n]
        if not (sp >= 0) or sp == np.inf:
            return C.ERR_SP_VALUE, n, 0, 0
        t = video_grid[n, 0]
        # tau is monotone in f; bound it before it can reach int64 conversion.
        if np.float32(np.float32(np.float32(t - 1) * sp) * r) >= _TAU_LIMIT:
            return C.ERR_TAU_OVERFLOW, n, 0, 0
    for n in range(audio_lengths.shape[0]):
        if audio_token_count(audio_lengths[n]) < 1:
            return C.ERR_AUDIO_SHORT, n, audio_lengths[n], 0
    return C.OK, 0, 0, 0


@helper
def _scan_item(ids, start, size, token):
    """Check a placeholder run of `size` tokens from `start`: returns
    (first foreign token index or -1, tokens missing past the prompt's end)."""
    num_tokens = ids.shape[0]
    bad = _check_run(ids, start, min(start + size, num_tokens), token)
    return bad, max(start + size - num_tokens, 0)


@helper
def build_from_tokens(rows, scales, state, out, ids, params, image_grid, video_grid, video_sp, audio_lengths, use_audio_in_video):
    """Scan `ids` once and emit the layout. Returns (code, a, b, c)."""
    num_tokens = ids.shape[0]
    _reset(state, image_grid.shape[0], video_grid.shape[0], audio_lengths.shape[0])
    res = check_items(params, image_grid, video_grid, video_sp, audio_lengths)
    if res[0] != C.OK:
        return res
    merge = np.int64(params[C.P_MERGE])
    image_id = np.int64(params[C.P_IMAGE])
    video_id = np.int64(params[C.P_VIDEO])
    omni = np.int64(params[C.P_FAMILY]) == C.FAMILY_QWEN2_5_OMNI
    audio_id = np.int64(params[C.P_AUDIO]) if omni else image_id
    av = omni and use_audio_in_video
    vision_start = np.int64(params[C.P_VISION_START])
    audio_start = np.int64(params[C.P_AUDIO_START])
    audio_end = np.int64(params[C.P_AUDIO_END])
    vision_end = np.int64(params[C.P_VISION_END])
    scaled = np.int64(params[C.P_SCALED])
    chunk = np.int64(params[C.P_CHUNK])
    r = np.float32(params[C.P_SCALE_R])
    # the tokens that can open an item; vision_start only opens interleaves
    opener = vision_start if av else image_id
    i = 0
    while True:
        i = _next_special(ids, i, image_id, video_id, audio_id, opener)
        if i >= num_tokens:
            break
        tok = ids[i]
        if tok == image_id or (tok == video_id and not av):
            m = C.MOD_IMAGE if tok == image_id else C.MOD_VIDEO
            grids = image_grid if m == C.MOD_IMAGE else video_grid
            n = state[S_COUNT + m]
            if n >= state[S_TOTAL + m]:
                return C.ERR_EXTRA_ITEM, m, i, 0
            t, h, w, size = _grid_tokens(grids, n, merge, num_tokens)
            bad, missing = _scan_item(ids, i, size, tok)
            if bad >= 0:
                return C.ERR_PLACEHOLDER_SHORT, m, n, bad
            if missing > 0:
                return C.ERR_CUT_OFF, m, n, missing
            _flush_text(rows, scales, state, out, i)
            _emit_item_grid(rows, scales, state, out, i, m, n, t, h, w, scaled, video_sp, r)
            state[S_COUNT + m] = n + 1
            i += size
        elif tok == video_id:  # a video outside an audio-in-video block
            return C.ERR_AV_NOT_IN_BLOCK, state[S_COUNT + C.MOD_VIDEO], i, 0
        elif tok == audio_id:
            # Standalone audio continues the text positions (spec §2.3), so it
            # needs no row of its own: only its token count is checked.
            n = state[S_COUNT + C.MOD_AUDIO]
            if n >= state[S_TOTAL + C.MOD_AUDIO]:
                return C.ERR_EXTRA_ITEM, C.MOD_AUDIO, i, 0
            size = audio_token_count(audio_lengths[n])
            bad, missing = _scan_item(ids, i, size, audio_id)
            if bad >= 0:
                return C.ERR_PLACEHOLDER_SHORT, C.MOD_AUDIO, n, bad
            if missing > 0:
                return C.ERR_CUT_OFF, C.MOD_AUDIO, n, missing
            state[S_COUNT + C.MOD_AUDIO] = n + 1
            i += size
        elif i + 2 < num_tokens and ids[i + 1] == audio_start and ids[i + 2] == video_id:
            # vision_start audio_start video...: an audio-in-video block. An
            # interleave always opens with a video chunk (tau(0) = 0 < chunk).
            n = state[S_COUNT + C.MOD_VIDEO]
            if n >= state[S_TOTAL + C.MOD_VIDEO]:
                return C.ERR_EXTRA_ITEM, C.MOD_VIDEO, i + 2, 0
            a = state[S_COUNT + C.MOD_AUDIO]
            if a >= state[S_TOTAL + C.MOD_AUDIO]:
                return C.ERR_AV_NO_AUDIO, n, 0, 0
            t, h, w, size = _grid_tokens(video_grid, n, merge, num_tokens)
            num_audio = audio_token_count(audio_lengths[a])
            missing = i + 2 + size + num_audio + 2 - num_tokens
            if missing > 0:
                return C.ERR_AV_CUT_OFF, n, missing, 0
            _flush_text(rows, scales, state, out, i)
            bad, want = _emit_audio_in_video(
                rows, scales, state, out, ids, True, i, t, h, w, video_sp[n], r, num_audio, chunk, video_id, audio_id
            )
            if bad >= 0:
                return C.ERR_AV_BAD_TOKEN, n, bad, want
            end = i + 2 + size + num_audio
            if ids[end] != audio_end:
                return C.ERR_AV_BAD_TOKEN, n, end, audio_end
            if ids[end + 1] != vision_end:
                return C.ERR_AV_BAD_TOKEN, n, end + 1, vision_end
            state[S_COUNT + C.MOD_VIDEO] = n + 1
            state[S_COUNT + C.MOD_AUDIO] = a + 1
            i = end + 2
        else:  # a vision_start that opens no interleave: text
            i += 1
    _flush_text(rows, scales, state, out, num_tokens)
    for m in range(3):
        if state[S_COUNT + m] < state[S_TOTAL + m]:
            return C.ERR_MISSING_ITEMS, m, state[S_COUNT + m], state[S_TOTAL + m]
    return C.OK, 0, 0, 0


@helper
def build_from_ranges(
    rows, scales, state, out, num_tokens, params,
    image_ranges, image_grid, video_ranges, video_grid, video_sp,
    audio_ranges, audio_lengths, use_audio_in_video,
):  # fmt: skip
    """Emit the layout from each item's (offset, length) without reading tokens.

    Offsets are the first placeholder token of an item; for an Omni
    audio-in-video block, the first token of its interleave (its vision_bos and
    audio_bos sit just before, its audio_eos and vision_eos just after).
    Items of one modality are in prompt order, matching their grids;
    audio_lengths holds standalone clips and video tracks in prompt order (the
    wrapper checks every count). Returns (code, a, b, c)."""
    _reset(state, image_grid.shape[0], video_grid.shape[0], audio_lengths.shape[0])
    res = check_items(params, image_grid, video_grid, video_sp, audio_lengths)
    if res[0] != C.OK:
        return res
    merge = np.int64(params[C.P_MERGE])
    scaled = np.int64(params[C.P_SCALED])
    chunk = np.int64(params[C.P_CHUNK])
    r = np.float32(params[C.P_SCALE_R])
    av_mode = np.int64(params[C.P_FAMILY]) == C.FAMILY_QWEN2_5_OMNI and use_audio_in_video
    no_ids = state[:0]  # same type as token ids; never read when check is False
    # ranges consumed / given per modality (the wrapper matched them to grids)
    state[S_TOTAL + C.MOD_AUDIO] = audio_ranges.shape[0]
    audio_used = 0  # audio lengths consumed (clips and video tracks)
    prev_end = 0
    while True:
        # the next item in prompt order: the smallest offset among the three heads
        m = -1
        best = 0
        for mod in range(3):
            if state[S_COUNT + mod] < state[S_TOTAL + mod]:
                rng = image_ranges if mod == C.MOD_IMAGE else video_ranges if mod == C.MOD_VIDEO else audio_ranges
                off = rng[state[S_COUNT + mod], 0]
                if m < 0 or off < best:
                    m = mod
                    best = off
        if m < 0:
            break
        n = state[S_COUNT + m]
        rng = image_ranges if m == C.MOD_IMAGE else video_ranges if m == C.MOD_VIDEO else audio_ranges
        offset = rng[n, 0]
        length = rng[n, 1]
        if offset < 0 or length < 0:
            return C.ERR_RANGE_NEGATIVE, m, n, min(offset, length)
        if offset > num_tokens or length > num_tokens:  # before any sum can overflow
            return C.ERR_RANGE_OUT, m, n, offset + min(length, num_tokens)
        av = m == C.MOD_VIDEO and av_mode
        lead = 2 if av else 0  # vision_start, audio_start before; audio_end, vision_end after
        if offset - lead < prev_end:
            if av and offset - lead < 0:
                return C.ERR_AV_RANGE_CONTEXT, n, offset, 0
            return C.ERR_RANGE_OVERLAP, m, n, prev_end
        if offset + length + lead > num_tokens:
            if av and offset + length <= num_tokens:
                return C.ERR_AV_RANGE_CONTEXT, n, offset, 0
            return C.ERR_RANGE_OUT, m, n, offset + length
        if m == C.MOD_AUDIO:
            expected = audio_token_count(audio_lengths[audio_used])
            if length != expected:
                return C.ERR_RANGE_LENGTH, m, n, expected
            audio_used += 1  # text-like positions: no row of its own
        elif av:
            t, h, w, size = _grid_tokens(video_grid, n, merge, num_tokens)
            num_audio = audio_token_count(audio_lengths[audio_used])
            if length != size + num_audio:
                return C.ERR_RANGE_LENGTH, m, n, size + num_audio
            _flush_text(rows, scales, state, out, offset - 2)
            _emit_audio_in_video(
                rows, scales, state, out, no_ids, False, offset - 2, t, h, w, video_sp[n], r, num_audio, chunk, 0, 0
            )
            audio_used += 1
        else:
            grids = image_grid if m == C.MOD_IMAGE else video_grid
            t, h, w, size = _grid_tokens(grids, n, merge, num_tokens)
            if length != size:
                return C.ERR_RANGE_LENGTH, m, n, size
            _flush_text(rows, scales, state, out, offset)
            _emit_item_grid(rows, scales, state, out, offset, m, n, t, h, w, scaled, video_sp, r)
        state[S_COUNT + m] = n + 1
        prev_end = offset + length + lead
    _flush_text(rows, scales, state, out, num_tokens)
    return C.OK, 0, 0, 0


@helper
def text_positions(out, ids, params):
    """Fast path for prompts given no multimodal inputs: positions 0 .. L-1 on
    every row. Returns -1, or 0 (writing nothing) when a placeholder token is
    present: the caller forgot its grids, and the full builder reports it."""
    image_id = np.int64(params[C.P_IMAGE])
    video_id = np.int64(params[C.P_VIDEO])
    audio_id = np.int64(params[C.P_AUDIO]) if np.int64(params[C.P_FAMILY]) == C.FAMILY_QWEN2_5_OMNI else image_id
    found = False
    for i in range(ids.shape[0]):
        tok = ids[i]
        found |= (tok == image_id) | (tok == video_id) | (tok == audio_id)
    if found:
        return 0
    write_linear(out, 0, 0, ids.shape[0])
    return -1
