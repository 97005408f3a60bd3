"""The per-token position rules shared by every kernel.

- tau(f): a frame's temporal index;
- writers for the three segment kinds (see layout_codes): their inner loops
  run over a whole text run or frame, so LLVM can vectorise them, and no
  division happens per token (a frame's H and W rows are written a grid
  row at a time).
"""

import numpy as np

from . import layout_codes as C
from .jit_options import inner, tiny


@inner
def temporal_index(frame, mode, sp, r):
    """tau(f) under a row's tau mode (layout_codes.TAU_*): the frame index;
    trunc((float32(f) * sp) * r) with both products rounded to float32, the
    order and precision torch uses (transformers, vLLM 0.8-0.9); or the
    float64 product of the float32 sp, as vLLM 0.33 computes it; or
    f * float32(sp * r), transformers 5's order."""
    if mode == C.TAU_FRAME:
        return np.int64(frame)
    if mode == C.TAU_F32:
        prod = np.float32(np.float32(frame) * sp)
        return np.int64(np.float32(prod * r))
    if mode == C.TAU_F32_RATE:
        return np.int64(np.float32(np.float32(frame) * np.float32(sp * r)))
    return np.int64(np.float64(frame) * (np.float64(sp) * np.float64(r)))


@tiny
def video_sp_of(video_sp, n):
    """second_per_grid_ts of video n; families without a time scale pass none
    (their tau mode never reads it)."""
    return video_sp[n] if n < video_sp.shape[0] else np.float32(1)


@inner
def block_end(s, t, h, w, mode, sp, r, next_rule):
    """(largest position, next base) of a whole (t', h', w') block at base s:
    the next base is one past the largest position (R-max), or s + max(h', w')
    (R-hw, transformers 5)."""
    top = s + max(temporal_index(t - 1, mode, sp, r), h - 1, w - 1)
    return top, (s + max(h, w) if next_rule == C.NEXT_HW else top + 1)


@inner
def grid_range_max(k0, k1, h, w, tau_last):
    """Largest offset over the three rows among grid tokens k0 .. k1-1, where
    tau_last is the temporal index of the frame of token k1-1."""
    hw = h * w
    best = tau_last
    if (k1 - 1) // hw > k0 // hw:
        best = max(best, h - 1)
    else:
        best = max(best, ((k1 - 1) % hw) // w)
    if (k1 - 1) // w > k0 // w:
        best = max(best, w - 1)
    else:
        best = max(best, (k1 - 1) % w)
    return best


# Every writer takes 1-D views of the output rows and indexes them from 0:
# an index numba cannot prove non-negative gets a wraparound branch per
# access, which stops LLVM from vectorising (several times slower).


@tiny
def write_linear(out, col, first, count):
    """first, first+1, ... on every row (text, audio, decode tokens)."""
    _write_linear_thw(out, col, first, count)
    if out.shape[0] > 3:  # 4-axis families
        repeat_t(out, col, count)


@tiny
def _write_linear_thw(out, col, first, count):
    """first, first+1, ... on the T, H and W rows."""
    t_row = out[0, col : col + count]
    h_row = out[1, col : col + count]
    w_row = out[2, col : col + count]
    for n in range(count):
        t_row[n] = first + n
        h_row[n] = first + n
        w_row[n] = first + n


@tiny
def write_const(out, col, value, count):
    out[:, col : col + count] = value


# _repeat_forward doubles the block it copies up to this many tokens, then
# copies blocks of that length: a source that stays in L1 cache.
_COPY_BLOCK = 1024


# Grid rows narrower than this have their H row counted out token by token.
_NARROW = 4


@inner
def _write_hw_rows(out, col, base, offset, count, w, h_axis, w_axis):
    """H and W rows of grid tokens offset .. offset+count-1 within one frame,
    into out[h_axis] and out[w_axis] (1 and 2, or an XD_GRID row's axes).

    H is one constant run per grid row (counted out token by token when the
    rows are narrower than _NARROW). W repeats with period w: its first
    w tokens are counted out, then copied forward by _repeat_forward (a few
    long vectorised copies, whatever the width). A row index per token (a
    division, or a float reciprocal's int64 conversion, which AVX2 cannot
    vectorise) cost several times more (docs/benchmarks.md, "Measurements
    behind design choices")."""
    i = offset // w
    j = offset - i * w
    h_all = out[h_axis, col : col + count]
    w_all = out[w_axis, col : col + count]
    period = min(w, count)
    w_pos = base + j
    for n in range(period):
        w_all[n] = w_pos
        w_pos = base if w_pos == base + w - 1 else w_pos + 1
    _repeat_forward(w_all, np.int64(0), period, count)
    if w < _NARROW:  # rows of a token or three: one counted pass, not a loop per row
        h_pos = base + i
        left = w - j
        for n in range(count):
            h_all[n] = h_pos
            left -= 1
            if left == 0:
                left = w
                h_pos += 1
        return
    done = 0
    while done < count:
        run = min(w - j, count - done)
        h_row = h_all[done : done + run]
        for n in range(run):
            h_row[n] = base + i
        done += run
        j = 0
        i += 1


@inner
def _repeat_forward(row, start, done, count):
    """row[start:done] holds whole periods (frames, or a W row's grid row):
    repeat them up to `count`, in a few long vectorised copies rather than
    one short loop per period. The block
    copied doubles while it is short, then stays at _COPY_BLOCK tokens or
    more, so that its reads hit L1 rather than what the last copies wrote."""
    period = done - start
    while done < count:
        run = min(period, count - done)
        src = row[start : start + run]
        dst = row[done : done + run]
        for n in range(run):
            dst[n] = src[n]
        done += run
        if period < _COPY_BLOCK:
            period = done - start


@inner
def write_grid(out, col, base, hw_base, g0, count, h, w, scaled, sp, r):
    """Grid tokens g0 .. g0+count-1 of a (t', h', w') block at `base`:
    (base + tau(f), hw_base + i, hw_base + j), where hw_base is the base
    (GRID rows) or 0 (GRID_RAW rows).

    T is one constant run per frame. H and W repeat from frame to frame, so
    they are written for the first full frame and copied to the others, one
    row after the other (one store stream at a time, faster than frame by
    frame on long videos)."""
    hw = h * w
    frame = g0 // hw
    offset = g0 - frame * hw
    # T row
    done = 0
    first = offset
    while done < count:
        run = min(hw - first, count - done)
        value = base + temporal_index(frame, scaled, sp, r)
        t_row = out[0, col + done : col + done + run]
        for n in range(run):
            t_row[n] = value
        done += run
        frame += 1
        first = 0
    write_grid_hw(out, col, hw_base, g0, count, h, w)


@inner
def write_grid_hw(out, col, base, g0, count, h, w):
    """The H and W rows of write_grid."""
    hw = h * w
    offset = g0 - (g0 // hw) * hw
    # the (possibly partial) first frame, then a template frame repeated
    head = min(count, hw - offset)
    one, two = np.int64(1), np.int64(2)
    _write_hw_rows(out, col, base, offset, head, w, one, two)
    if head == count:
        return
    size = min(hw, count - head)
    _write_hw_rows(out, col + head, base, np.int64(0), size, w, one, two)
    _repeat_forward(out[1, col : col + count], head, head + size, count)
    _repeat_forward(out[2, col : col + count], head, head + size, count)


# The writers for axes past the third (4-axis families) are scalar loops
# over (axis, token) pairs in one flat loop: LLVM neither vectorises nor
# unrolls them. Every kernel that writes positions carries their code, and
# numba optimises and code-generates it again in each of them (see
# jit_options), so a vectorised loop here cost the 3-axis families' cold
# start more than the 4-axis family gains at run time.


@tiny
def repeat_t(out, col, count):
    """Axes past the third repeat T (a 3-axis kind in a wider output)."""
    d = 3
    n = 0
    for _ in range(count * (out.shape[0] - 3)):
        out[d, col + n] = out[0, col + n]
        n += 1
        if n == count:
            n = 0
            d += 1


@tiny
def write_xd_grid(out, col, first, g0, count, w, ordinal):
    """Tokens g0 .. g0+count-1 of an XD_GRID row whose rows are w tokens wide
    (the newline column included), the first at sequence position `first`:
    first + n on every axis but the last three, then the raw column j, the
    raw row i and `ordinal` (HunYuan-VL; with three axes, only those three).
    The grid is a single frame: the grid writers' row helper writes (i, j)."""
    num_dims = out.shape[0]
    lead = num_dims - 3
    d = 0
    n = 0
    for _ in range(count * (lead + 1)):  # the leading axes, then the ordinal's
        if d < lead:
            out[d, col + n] = first + n
        else:
            out[num_dims - 1, col + n] = ordinal
        n += 1
        if n == count:
            n = 0
            d += 1
    _write_hw_rows(out, col, np.int64(0), g0, count, w, num_dims - 2, num_dims - 3)


@inner
def write_segment(out, col, n0, count, kind, base, grid_offset, h, w, scaled, sp, r):
    """Tokens n0 .. n0+count-1 of one layout row, into out[:, col:col+count].
    `scaled` is a GRID row's tau mode, an XD_GRID row's ordinal."""
    if kind == C.KIND_CONST:
        write_const(out, col, base, count)
        return
    if kind == C.KIND_XD_GRID:
        write_xd_grid(out, col, base + n0, grid_offset + n0, count, w, scaled)
        return
    if kind == C.KIND_LINEAR:
        _write_linear_thw(out, col, base + n0, count)
    elif kind == C.KIND_GRID:
        write_grid(out, col, base, base, grid_offset + n0, count, h, w, scaled, sp, r)
    else:  # KIND_GRID_RAW
        write_grid(out, col, base, np.int64(0), grid_offset + n0, count, h, w, scaled, sp, r)
    if out.shape[0] > 3:  # a 3-axis kind in a wider output: T again (one call site)
        repeat_t(out, col, count)


@inner
def bits_shape(shape):
    """(h', w', tau mode) packed in a GRID_BITS row's COL_BITS_SHAPE."""
    side = (np.int64(1) << C.BITS_SIDE) - 1
    return shape & side, (shape >> C.BITS_SIDE) & side, shape >> (2 * C.BITS_SIDE)


@inner
def write_bits(out, col, rows, r, n0, count, sp, rate):
    """Kept tokens n0 .. n0+count-1 of GRID_BITS row r, into out[:, col:col+count]:
    kept token n is the grid token of the row's n-th set mask bit. A row holds
    at most BITS_PER_ROW bits, so the walk is short and needs no popcount."""
    base = rows[r, C.COL_BASE]
    g0 = rows[r, C.COL_GRID_OFFSET]
    h, w, mode = bits_shape(rows[r, C.COL_BITS_SHAPE])
    hw = h * w
    seen = 0
    done = 0
    for k in range(C.BITS_WORDS):
        word = rows[r, C.COL_BITS_WORDS + k]
        for b in range(64):
            if (word >> b) & 1:
                if seen >= n0:
                    g = g0 + 64 * k + b
                    frame = g // hw
                    rest = g - frame * hw
                    i = rest // w
                    out[0, col + done] = base + temporal_index(frame, mode, sp, rate)
                    out[1, col + done] = base + i
                    out[2, col + done] = base + rest - i * w
                    done += 1
                    if done == count:
                        return
                seen += 1


@inner
def write_t_checked(out, ids, col, base, t, hw, token, scaled, sp, r):
    """The T row of a whole (t', h', w') block placed at column `col`, written
    in the same pass that checks its tokens: returns True if any of
    ids[col:col + t'h'w'] is not `token` (one read of the ids, not two)."""
    # The bits of every id that differ from `token`, OR-ed together: no
    # branch and no compare per token, so LLVM vectorises it.
    differ = np.int64(0)
    for frame in range(t):
        start = col + frame * hw
        value = base + temporal_index(frame, scaled, sp, r)
        t_row = out[0, start : start + hw]
        run = ids[start : start + hw]
        for n in range(hw):
            t_row[n] = value
            differ |= run[n] ^ token
    return differ != 0


@inner
def canvas_coordinate(i, size, extent):
    """round(torch.linspace(0, extent - 1, size)[i]) (float32, half to even),
    as torch's CPU kernel computes it: the step (extent - 1) / (size - 1) in
    float32, from the start for the first half, back from the end for the
    rest. Exhaustively equal to torch's for sizes 2..119 and extents 1..479
    (tests/test_canvas_reference.py)."""
    if size == 1:
        return np.int64(0)
    one = np.float32(1.0)
    last = extent - one
    step = last / (np.float32(size) - one)
    if i < size // 2:
        value = step * np.float32(i)
    else:
        value = last - step * np.float32(size - 1 - i)
    return np.int64(np.rint(value))


@inner
def write_canvas(out, col, rows, r, n0, count, extent_h, extent_w):
    """Tokens n0 .. n0+count-1 of CANVAS row r, into out[:, col:col+count]."""
    t = rows[r, C.COL_BASE]
    top = rows[r, C.COL_CANVAS_TOP]
    left = rows[r, C.COL_CANVAS_LEFT]
    h = rows[r, C.COL_H]
    w = rows[r, C.COL_W]
    g = rows[r, C.COL_GRID_OFFSET] + n0
    i = g // w
    j = g - i * w
    hi = top + canvas_coordinate(i, h, extent_h)
    for n in range(count):
        out[0, col + n] = t
        out[1, col + n] = hi
        out[2, col + n] = left + canvas_coordinate(j, w, extent_w)
        j += 1
        if j == w:
            j = 0
            i += 1
            if i < h:
                hi = top + canvas_coordinate(i, h, extent_h)
    for d in range(3, out.shape[0]):
        for n in range(count):
            out[d, col + n] = t
