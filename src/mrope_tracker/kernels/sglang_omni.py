"""SGLang 0.5's Qwen3-Omni positions in one call (the `float_carry` switch).

SGLang positions Qwen3-Omni prompts with transformers' float32 rule and
truncates every position to int64 at prefill (docs/semantics.md, S1).
`float_row` (hf_batch.py) is that rule, token by token.

`omni_checked_positions` is the drop-in's one pass over the tokens: it
checks the prompt, follows the float32 rule and writes each position
truncated, as it goes. It accepts only prompts that the integer builder
(`layout_build.build_from_tokens`) accepts and that `float_row` can follow,
and then writes trunc(`float_row`'s positions): the items pass the
builder's own item checks (`check_items`), text holds no placeholder token,
every block's placeholders are its item's kind and count (an
audio-in-video block: video and audio tokens, the video's count of video
tokens, with `use_audio_in_video`), and every item given is used. Anything
else (errors, and the rare layouts only the two separate passes follow) is
refused with -1, and the caller takes `omni_truncated_positions`' route:
the integer scan, `float_row`, then the floor, which names what is wrong.
"""

import numpy as np

from . import layout_codes as C
from .hf_batch import float_row, merge_av, same_on_three, truncate_position
from .jit_options import helper, inner, jit, tiny
from .layout_emit import check_items

_ONE = np.float32(1)
_ZERO = np.float32(0)
_NONE = np.float32(-1)


@jit
def omni_truncated_positions(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video):
    """Write trunc(float32 position) of every token into `out` (3, L) float32
    (SGLang's dtype for these positions, whole numbers as prefill casts them).
    Returns the largest truncated position, or -1 where the row is not laid
    out as the float rule reads it (an item without its bos or eos token, or
    items short): the caller then takes the checked route, which names the
    problem. The prompt has been checked by the integer builder first."""
    top = float_row(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video)
    if top < 0:
        return np.int64(-1)
    n = ids.shape[0]
    for d in range(3):
        for k in range(n):
            # positions are >= 0: truncation is the floor; whole numbers go back to float32 exactly
            out[d, k] = np.floor(out[d, k])
    return np.int64(top)  # truncation is monotone: the largest truncated position is trunc(top)


# Loops index 1-D views from 0: an index numba cannot prove non-negative
# gets a wraparound branch per access, which stops LLVM from vectorising
# (as in position_rules.py). The entry runs without numba's runtime
# (`helper`), so a view costs no reference count.


@inner
def _text_run(out, start, count, base):
    """`same_on_three`, truncated, compiled once: the pass writes text, bos and eos runs from five places, and
    numba would inline a `tiny` body at each."""
    same_on_three(out, start, count, base, True)


@tiny
def _has(ids, start, stop, a, b, c):
    """Whether a token in [start, stop) is a, b or c (branch-free, so it vectorises)."""
    run = ids[start:stop]
    found = False
    for k in range(run.shape[0]):
        tok = run[k]
        found |= (tok == a) | (tok == b) | (tok == c)
    return found


@tiny
def _all(ids, start, stop, token):
    """Whether every token in [start, stop) is `token` (branch-free)."""
    run = ids[start:stop]
    differ = np.int64(0)
    for k in range(run.shape[0]):
        differ |= run[k] ^ token
    return differ == 0


@tiny
def _grid(out, c, base, t, hh, ww, sp, r):
    """A (t, hh, ww) grid from token c, `float_row`'s values truncated: frame
    f at base + float32(float32(f * sp) * r), row i at base + i, column j at
    base + j. The H and W rows of every frame are the first frame's, copied.
    Returns the largest untruncated position of its last frame."""
    size = hh * ww
    h_first = out[1, c : c + size]
    w_first = out[2, c : c + size]
    for i in range(hh):
        fh = truncate_position(np.float32(i) + base)
        h_row = h_first[i * ww : i * ww + ww]
        w_row = w_first[i * ww : i * ww + ww]
        for j in range(ww):
            h_row[j] = fh
            w_row[j] = truncate_position(np.float32(j) + base)
    top_hw = max(np.float32(hh - 1) + base, np.float32(ww - 1) + base)
    last = _NONE
    for f in range(t):
        vt = (np.float32(f) * sp) * r + base
        ft = truncate_position(vt)
        start = c + f * size
        t_row = out[0, start : start + size]
        for k in range(size):
            t_row[k] = ft
        if f:
            h_row = out[1, start : start + size]
            w_row = out[2, start : start + size]
            for k in range(size):
                h_row[k] = h_first[k]
                w_row[k] = w_first[k]
        last = max(last, vt, top_hw)
    return last


@tiny
def _size(grid, merge, limit):
    """(hh, ww, tokens) of a (t, h, w) grid; tokens limit + 1 where it would pass `limit` (no overflow)."""
    t = grid[0]
    hh = grid[1] // merge
    ww = grid[2] // merge
    if t > limit or hh > limit or ww > limit or hh * ww > limit or t * hh * ww > limit:
        return hh, ww, limit + 1
    return hh, ww, t * hh * ww


@tiny
def _supported(params, image_grid, video_grid, video_sp, audio_tokens):
    """Whether the one pass may take this config and these items: the builder's item checks pass, and the
    family reads its items as Qwen3-Omni does (no frame blocks, brackets, temporal merge, raw or XD grids)."""
    if (
        params[C.P_FRAMES] != 0
        or params[C.P_VIDEO_OPEN] >= 0
        or params[C.P_VIDEO_T_MERGE] != 1
        or params[C.P_RAW_SPATIAL] != 0
        or params[C.P_XD_IMAGES] != 0
        or params[C.P_VIDEO] < 0
        or params[C.P_AUDIO] < 0
        or video_sp.shape[0] < video_grid.shape[0]
    ):
        return False
    return check_items(params, image_grid, video_grid, video_sp, audio_tokens)[0] == C.OK


@inner
def _vision(out, ids, c, base, params, image_grid, video_grid, video_sp, n_image, n_video, videos_alone):
    """An image or video block's content from token c, its placeholders
    checked; a video only where `videos_alone` (with use_audio_in_video the
    builder takes a video outside an audio-in-video block for an error).
    Returns (its largest position, its end (-1: refused), images, videos used)."""
    n = ids.shape[0]
    if c >= n:
        return _NONE, -1, n_image, n_video
    tok = ids[c]
    if tok == np.int64(params[C.P_IMAGE]) and n_image < image_grid.shape[0]:
        grid = image_grid[n_image]
        sp = _ZERO
        n_image += 1
    elif tok == np.int64(params[C.P_VIDEO]) and n_video < video_grid.shape[0] and videos_alone:
        grid = video_grid[n_video]
        sp = video_sp[n_video]
        n_video += 1
    else:
        return _NONE, -1, n_image, n_video
    hh, ww, size = _size(grid, np.int64(params[C.P_MERGE]), n)
    end = c + size
    if end >= n or ids[end] != np.int64(params[C.P_VISION_END]) or not _all(ids, c, end, tok):
        return _NONE, -1, n_image, n_video
    return _grid(out, c, base, grid[0], hh, ww, sp, np.float32(params[C.P_SCALE_R])), end, n_image, n_video


@inner
def _av(out, ids, c, base, params, grid, sp, m, top):
    """An audio-in-video block's content from token c: video and audio tokens
    only, the video's count of video tokens, then audio_end vision_end.
    Returns (the largest position of its last piece, its end (-1: refused),
    `top` raised by the merge)."""
    n = ids.shape[0]
    merge = np.int64(params[C.P_MERGE])
    hh, ww, num_video = _size(grid, merge, n)
    end = c + num_video + m
    if end + 1 >= n or ids[end] != np.int64(params[C.P_AUDIO_END]) or ids[end + 1] != np.int64(params[C.P_VISION_END]):
        return _NONE, -1, top
    video_id = np.int64(params[C.P_VIDEO])
    audio_id = np.int64(params[C.P_AUDIO])
    videos = np.int64(0)
    others = np.int64(0)
    for k in range(c, end):  # branch-free counts
        tok = ids[k]
        videos += tok == video_id
        others += (tok != video_id) & (tok != audio_id)
    if videos != num_video or others != 0:
        return _NONE, -1, top
    last, top = merge_av(out, c, base, num_video, hh, ww, sp, np.float32(params[C.P_SCALE_R]), m, top, True)
    return last, end, top


@helper
def omni_checked_positions(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video):
    """Check the prompt and write trunc(`float_row`'s float32 positions) of
    every token into `out` (3, L) float32, in one pass. Returns the largest
    truncated position, or -1 where the prompt is refused (the module
    docstring says which): `out` is then partly written."""
    n = ids.shape[0]
    if n == 0 or not _supported(params, image_grid, video_grid, video_sp, audio_tokens):
        return np.int64(-1)
    vision_start = np.int64(params[C.P_VISION_START])
    audio_start = np.int64(params[C.P_AUDIO_START])
    audio_end = np.int64(params[C.P_AUDIO_END])
    image_id = np.int64(params[C.P_IMAGE])
    video_id = np.int64(params[C.P_VIDEO])
    audio_id = np.int64(params[C.P_AUDIO])
    n_image = np.int64(0)  # (int64, not a bare 0: an `inner` callee compiles once per literal argument type)
    n_video = np.int64(0)
    n_audio = np.int64(0)
    st = 0
    prev_max = _ZERO  # maximum of the last piece appended
    has_prev = False
    top = _NONE  # the largest position: an eos, the inside of a merge, or trailing text
    while True:
        q = st
        while q < n and ids[q] != vision_start and ids[q] != audio_start:
            q += 1
        if q >= n:
            break
        # text: no placeholder (the builder would take it for an item)
        if _has(ids, st, q, image_id, video_id, audio_id):
            return np.int64(-1)
        base = prev_max + _ONE if has_prev else _ZERO
        _text_run(out, np.int64(st), np.int64(q - st), base)
        base = base + np.float32(q - st)
        paired = ids[q] == vision_start and q + 1 < n and ids[q + 1] == audio_start
        bos = 2 if paired else 1
        _text_run(out, np.int64(q), np.int64(bos), base)
        base = base + np.float32(bos)
        c = q + bos
        eos = 1
        if ids[q] == audio_start:  # an audio clip
            if n_audio >= audio_tokens.shape[0]:
                return np.int64(-1)
            m = audio_tokens[n_audio]
            n_audio += 1
            end = c + m
            if end >= n or ids[end] != audio_end or not _all(ids, c, end, audio_id):
                return np.int64(-1)
            _text_run(out, np.int64(c), np.int64(m), base)
            last = np.float32(m - 1) + base
        elif paired:  # audio in video: only as the builder reads it, with use_audio_in_video
            if not use_audio_in_video or n_video >= video_grid.shape[0] or n_audio >= audio_tokens.shape[0]:
                return np.int64(-1)
            last, end, top = _av(out, ids, c, base, params, video_grid[n_video], video_sp[n_video],
                                 audio_tokens[n_audio], top)  # fmt: skip
            if end < 0:
                return np.int64(-1)
            n_video += 1
            n_audio += 1
            eos = 2
        else:  # an image or a video: one block
            last, end, n_image, n_video = _vision(
                out, ids, c, base, params, image_grid, video_grid, video_sp, n_image, n_video, not use_audio_in_video
            )
            if end < 0:
                return np.int64(-1)
        base = last + _ONE
        _text_run(out, np.int64(end), np.int64(eos), base)
        prev_max = np.float32(eos - 1) + base
        top = max(top, prev_max)
        has_prev = True
        st = end + eos
    if _has(ids, st, n, image_id, video_id, audio_id):
        return np.int64(-1)
    if n_image != image_grid.shape[0] or n_video != video_grid.shape[0] or n_audio != audio_tokens.shape[0]:
        return np.int64(-1)  # items left over: the builder names them
    if st < n:
        base = prev_max + _ONE if has_prev else _ZERO
        _text_run(out, np.int64(st), np.int64(n - st), base)
        top = max(top, np.float32(n - st - 1) + base)
    return np.int64(top)  # truncation is monotone: the largest truncated position is trunc(top)
