"""Kernels behind `mrope_tracker.hf.get_rope_index`: a padded batch in one call.

`batch_kernel` positions every row of a (B, L) batch with the layout builder
(`layout_build.build_from_tokens`), the rows' items taken in batch order from the
concatenated grids, and writes the (num_dims, B, L) result with the padding value;
`float_batch` computes Qwen3-Omni's float32 positions for chosen rows the
way transformers computes them (`float_row`). Which tokens a row keeps is a
rule on the attention mask (`KEEP_*`), read here so that no (B, L) bool
array is made in Python. Inputs are validated by `mrope_tracker.hf`.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import jit, tiny
from .layout_build import FAILED, build_from_tokens
from .layout_emit import NUM_STATE, S_COUNT, S_ERROR, S_MAX

ERR_EMPTY_ROW = -1  # a row with no kept token (transformers cannot position it either)
ERR_FLOAT_LAYOUT = -2  # a row the float path cannot follow (brackets missing, items short)

KEEP_ONE, KEEP_NONZERO, KEEP_ALL = 0, 1, 2  # which tokens a row keeps: mask == 1, mask != 0, every one


@jit
def _kept(mask, b, j, keep_rule) -> bool:
    return keep_rule == KEEP_ALL or (mask[b, j] == 1 if keep_rule == KEEP_ONE else mask[b, j] != 0)


@jit
def _gather(ids, mask, b, keep_rule, row_ids):
    """Row b's kept tokens: (count, first, one past the last, the ids). A row
    kept in one piece (left or right padding) is a slice of `ids`, else they
    are copied into `row_ids`."""
    width = ids.shape[1]
    if keep_rule == KEEP_ALL:
        return width, 0, width, ids[b]
    n = 0
    if keep_rule == KEEP_ONE:  # (branch-free counts: these loops vectorise)
        for j in range(width):
            n += mask[b, j] == 1
    else:
        for j in range(width):
            n += mask[b, j] != 0
    if n == 0:
        return 0, 0, 0, ids[b, :0]
    lo = 0
    while not _kept(mask, b, lo, keep_rule):
        lo += 1
    hi = width
    while not _kept(mask, b, hi - 1, keep_rule):
        hi -= 1
    if hi - lo == n:
        return n, lo, hi, ids[b, lo:hi]
    k = 0
    for j in range(lo, hi):
        if _kept(mask, b, j, keep_rule):
            row_ids[k] = ids[b, j]
            k += 1
    return n, lo, hi, row_ids[:n]


@jit
def _scatter(out, b, row_out, n, lo, hi, mask, keep_rule, fill):
    """Write a row's positions into ``out[:, b]``, `fill` where nothing is kept."""
    for r in range(out.shape[0]):
        if hi - lo == n:
            out[r, b, :lo] = fill
            out[r, b, lo:hi] = row_out[r]
            out[r, b, hi:] = fill
        else:
            k = 0
            for j in range(out.shape[2]):
                if _kept(mask, b, j, keep_rule):
                    out[r, b, j] = row_out[r, k]
                    k += 1
                else:
                    out[r, b, j] = fill


WRITE_NONE, WRITE_INT, WRITE_FLOAT = 0, 1, 2  # what batch_kernel writes


@jit
def batch_kernel(
    out, deltas, float_out, float_deltas, kept, starts, ids, mask, keep_rule, fill, padded_delta, params,
    image_grid, video_grid, video_sp, audio_tokens, use_av, write,
):  # fmt: skip
    """Positions of every row of a padded batch, in one call.

    Row b's kept tokens (by `keep_rule` on ``mask[b]``) are positioned by the
    prompt builder with the items that remain (images, videos and audio
    tracks are consumed in batch order). `write` says where the result goes:
    WRITE_INT into the int64 ``out[:, b]`` and ``deltas[b]`` (max + 1 minus
    the kept tokens, or minus the row width with `padded_delta`);
    WRITE_FLOAT, once the builder has checked the row, Qwen3-Omni's float32
    positions (`float_row`) into ``float_out[:, b]`` and ``float_deltas[b]``;
    WRITE_NONE nowhere. Columns not kept get `fill`. ``kept[b]`` is the kept
    tokens, ``starts[b]`` the first image, video and audio item of row b
    (``starts[B]``: all items consumed). Returns (row, code, a, b, c, d):
    row == B when every row was positioned, else the row that failed and the
    builder's error code (ERR_FLOAT_LAYOUT: the float path could not follow
    the row)."""
    num_rows, width = ids.shape
    num_dims = out.shape[0]
    row_ids = np.empty(width, np.int64)
    buf = np.empty(num_dims * width, np.int64)
    float_buf = np.empty(3 * width if write == WRITE_FLOAT else 0, np.float32)
    # XD images (HunYuan-VL): transformers numbers them across the whole
    # batch, so each row's first ordinal is the images before it
    row_params = params.copy()
    state = np.empty(NUM_STATE, np.int64)
    no_rows = state[:0].reshape((0, C.NUM_COLS))  # positions only: no layout table
    no_scales = video_sp[:0].reshape((0, C.NUM_SCALE_COLS))
    p_image = 0
    p_video = 0
    p_audio = 0
    for b in range(num_rows + 1):
        starts[b, 0] = p_image
        starts[b, 1] = p_video
        starts[b, 2] = p_audio
        if b == num_rows:
            break
        n, lo, hi, row = _gather(ids, mask, b, keep_rule, row_ids)
        if n == 0:
            return b, ERR_EMPTY_ROW, 0, 0, 0, 0
        m = n if write == WRITE_INT else 0
        # a row kept in one piece is written straight into the batch's output
        direct = write == WRITE_INT and hi - lo == n
        row_out = out[:, b, lo:hi] if direct else buf[: num_dims * m].reshape((num_dims, m))
        row_params[C.P_ORDINAL_BASE] = p_image
        built = build_from_tokens(
            no_rows, no_scales, state, row_out, row, row_params, image_grid[p_image:], video_grid[p_video:],
            video_sp[p_video:], audio_tokens[p_audio:], use_av,
        )  # fmt: skip
        # Items left over are the next rows' items, not an error here.
        code = state[S_ERROR] if built == FAILED else C.OK
        if code != C.OK and code != C.ERR_MISSING_ITEMS:
            return b, code, state[S_ERROR + 1], state[S_ERROR + 2], state[S_ERROR + 3], state[S_ERROR + 4]
        i0, v0, a0 = p_image, p_video, p_audio
        p_image += state[S_COUNT + C.MOD_IMAGE]
        p_video += state[S_COUNT + C.MOD_VIDEO]
        p_audio += state[S_COUNT + C.MOD_AUDIO]
        kept[b] = n
        deltas[b] = state[S_MAX] + 1 - n + (n - width if padded_delta else 0)
        if direct:
            out[:, b, :lo] = fill
            out[:, b, hi:] = fill
        elif write == WRITE_INT:
            _scatter(out, b, row_out, n, lo, hi, mask, keep_rule, fill)
        elif write == WRITE_FLOAT:
            float_row_out = float_buf[: 3 * n].reshape((3, n))
            top = float_row(
                float_row_out, row, params, image_grid[i0:p_image], video_grid[v0:p_video], video_sp[v0:p_video],
                audio_tokens[a0:p_audio], use_av,
            )  # fmt: skip
            if top < 0:
                return b, ERR_FLOAT_LAYOUT, 0, 0, 0, 0
            float_deltas[b] = (top + _F32_ONE) - np.float32(n)
            _scatter(float_out, b, float_row_out, n, lo, hi, mask, keep_rule, np.float32(fill))
    return num_rows, 0, 0, 0, 0, 0


# Qwen3-Omni's float32 positions, as transformers computes them

_F32_ONE = np.float32(1)
_F32_ZERO = np.float32(0)
_F32_NONE = np.float32(-1)  # "no position": the row is not as transformers assumes


@tiny
def truncate_position(value):
    """trunc of a position (>= 0) in float32, as SGLang keeps it: exact, a floored float32 is a float32."""
    return np.float32(np.floor(value))


@tiny
def _kept_value(value, truncate):
    """A float32 position as transformers keeps it, or truncated as SGLang keeps it
    (`truncate` is a constant at every call: the branch folds away)."""
    return truncate_position(value) if truncate else value


# Loops index 1-D views from 0: an index numba cannot prove non-negative gets a
# wraparound branch per access, which stops LLVM from vectorising (as in position_rules.py).


@tiny
def same_on_three(out, start, count, base, truncate):
    """Tokens start .. start + count - 1 at base + k on the three rows (text, bos, eos, audio)."""
    t_row = out[0, start : start + count]
    h_row = out[1, start : start + count]
    w_row = out[2, start : start + count]
    for k in range(count):
        value = _kept_value(np.float32(k) + base, truncate)
        t_row[k] = value
        h_row[k] = value
        w_row[k] = value


@tiny
def _float_grid(out, c, base, t, hh, ww, sp, r):
    """A (t, hh, ww) vision grid from token c; frame f at base + float32(float32(f * sp) * r).
    Returns the largest position of its last frame."""
    last = _F32_NONE
    k = c
    for f in range(t):
        vt = (np.float32(f) * sp) * r + base
        for i in range(hh):
            vh = np.float32(i) + base
            for j in range(ww):
                vw = np.float32(j) + base
                out[0, k] = vt
                out[1, k] = vh
                out[2, k] = vw
                k += 1
        last = max(last, vt, vh, np.float32(ww - 1) + base)
    return last


@tiny
def merge_av(out, c, base, num_video, hh, ww, sp, r, m, top, truncate):
    """An audio-in-video block's content from token c: its video and its m
    audio positions merged by value, a video token first when its value is <=
    the audio token's (transformers' rule; SGLang's, truncated). Returns (the
    largest position of the last piece, `top` raised by the merged part),
    both untruncated."""
    v = 0
    a = 0
    k = c
    while v < num_video and a < m:
        vt = (np.float32(v // (hh * ww)) * sp) * r + base
        at = np.float32(a) + base
        if vt <= at:
            vh = np.float32((v // ww) % hh) + base
            vw = np.float32(v % ww) + base
            out[0, k] = _kept_value(vt, truncate)
            out[1, k] = _kept_value(vh, truncate)
            out[2, k] = _kept_value(vw, truncate)
            top = max(top, vt, vh, vw)
            v += 1
        else:
            value = _kept_value(at, truncate)
            out[0, k] = value
            out[1, k] = value
            out[2, k] = value
            top = max(top, at)
            a += 1
        k += 1
    last = _F32_NONE
    while v < num_video:  # the rest of the video: the last piece
        vt = (np.float32(v // (hh * ww)) * sp) * r + base
        vh = np.float32((v // ww) % hh) + base
        vw = np.float32(v % ww) + base
        out[0, k] = _kept_value(vt, truncate)
        out[1, k] = _kept_value(vh, truncate)
        out[2, k] = _kept_value(vw, truncate)
        last = max(last, vt, vh, vw)
        v += 1
        k += 1
    while a < m:  # or the rest of the audio
        at = np.float32(a) + base
        value = _kept_value(at, truncate)
        out[0, k] = value
        out[1, k] = value
        out[2, k] = value
        last = max(last, at)
        a += 1
        k += 1
    return last, top


@tiny
def _float_av(out, ids, c, base, params, grid, sp, m, r, top):
    """An audio-in-video block's content from token c: a video of (t, h, w)
    `grid` and m audio tokens, then audio_end vision_end. Returns (the
    largest position of its last piece, its end (-1: not as transformers
    assumes), `top` raised by the merge)."""
    merge = np.int64(params[C.P_MERGE])
    hh = grid[1] // merge
    ww = grid[2] // merge
    num_video = grid[0] * hh * ww
    end = c + num_video + m
    n = ids.shape[0]
    if end + 1 >= n or ids[end] != np.int64(params[C.P_AUDIO_END]) or ids[end + 1] != np.int64(params[C.P_VISION_END]):
        return _F32_NONE, -1, top
    last, top = merge_av(out, c, base, num_video, hh, ww, sp, r, m, top, False)
    return last, end, top


@tiny
def _float_vision(out, ids, c, base, params, image_grid, video_grid, video_sp, n_image, n_video, r):
    """An image or a video block's content from token c. Returns (its largest
    position, its end (-1: not as transformers assumes), images, videos used)."""
    n = ids.shape[0]
    if c >= n:
        return _F32_NONE, -1, n_image, n_video
    if ids[c] == np.int64(params[C.P_IMAGE]) and n_image < image_grid.shape[0]:
        t, h, w = image_grid[n_image, 0], image_grid[n_image, 1], image_grid[n_image, 2]
        sp = _F32_ZERO
        n_image += 1
    elif ids[c] == np.int64(params[C.P_VIDEO]) and n_video < video_grid.shape[0]:
        t, h, w = video_grid[n_video, 0], video_grid[n_video, 1], video_grid[n_video, 2]
        sp = video_sp[n_video]
        n_video += 1
    else:
        return _F32_NONE, -1, n_image, n_video
    merge = np.int64(params[C.P_MERGE])
    hh = h // merge
    ww = w // merge
    end = c + t * hh * ww
    if end >= n or ids[end] != np.int64(params[C.P_VISION_END]):
        return _F32_NONE, -1, n_image, n_video
    return _float_grid(out, c, base, t, hh, ww, sp, r), end, n_image, n_video


@jit
def float_row(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_av):
    """One row of Qwen3-Omni positions in float32, step by step as transformers
    (4.57 and 5.x) computes them: each item is bos (vision_start, audio_start,
    or both for audio in video), its content at base s, and eos (1 or 2) at 1 +
    the maximum of the last piece appended; video frame f sits at
    s + float32(float32(f * sp) * r), untruncated; an audio-in-video block is
    the merge of its video and audio positions, a video token first when its
    value is <= the audio token's. Every sum is rounded to float32 where
    transformers rounds it. Items are taken in order from the grids given.
    Returns the largest position, or -1 when the row is not laid out as
    transformers assumes (the caller then asks the torch reference, which
    names the problem)."""
    n = ids.shape[0]
    vision_start = np.int64(params[C.P_VISION_START])
    audio_start = np.int64(params[C.P_AUDIO_START])
    audio_end = np.int64(params[C.P_AUDIO_END])
    r = np.float32(params[C.P_SCALE_R])
    n_image = 0
    n_video = 0
    n_audio = 0
    st = 0
    prev_max = _F32_ZERO  # maximum of the last piece appended
    has_prev = False
    top = np.float32(-1)  # the largest position: an eos, the inside of a merge, or trailing text
    while True:
        q = st
        while q < n and ids[q] != vision_start and ids[q] != audio_start:
            q += 1
        if q >= n:
            break
        base = prev_max + _F32_ONE if has_prev else _F32_ZERO
        same_on_three(out, st, q - st, base, False)
        base = base + np.float32(q - st)
        paired = ids[q] == vision_start and q + 1 < n and ids[q + 1] == audio_start
        bos = 2 if paired else 1
        same_on_three(out, q, bos, base, False)
        base = base + np.float32(bos)
        c = q + bos
        eos = 1
        if ids[q] == audio_start:  # an audio clip
            if n_audio >= audio_tokens.shape[0]:
                return np.float32(-1)
            m = audio_tokens[n_audio]
            n_audio += 1
            end = c + m
            if end >= n or ids[end] != audio_end:
                return np.float32(-1)
            same_on_three(out, c, m, base, False)
            last = np.float32(m - 1) + base
        elif paired:  # audio in video: transformers merges by value, whatever the tokens
            if n_video >= video_grid.shape[0] or n_audio >= audio_tokens.shape[0]:
                return np.float32(-1)
            last, end, top = _float_av(
                out, ids, c, base, params, video_grid[n_video], video_sp[n_video], audio_tokens[n_audio], r, top
            )
            if end < 0:
                return np.float32(-1)
            n_video += 1
            n_audio += 1
            eos = 2
        else:  # an image or a video: one block
            last, end, n_image, n_video = _float_vision(
                out, ids, c, base, params, image_grid, video_grid, video_sp, n_image, n_video, r
            )
            if end < 0:
                return np.float32(-1)
        base = last + _F32_ONE
        same_on_three(out, end, eos, base, False)
        prev_max = np.float32(eos - 1) + base
        top = max(top, prev_max)
        has_prev = True
        st = end + eos
    if st < n:
        base = prev_max + _F32_ONE if has_prev else _F32_ZERO
        same_on_three(out, st, n - st, base, False)
        top = max(top, np.float32(n - st - 1) + base)
    return top
