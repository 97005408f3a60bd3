"""The Triton kernels of `RopeState` (device/rope_state.py): positions made on the device.

Importing this module imports triton; `rope_state` imports it only when a
`RopeState` is built, so the rest of the package never needs triton.

State the kernels read (all int32, on the device):
- `records` [max_num_reqs, NUM_SLOT_COLS]: per slot, its first pool row, its
  layout rows, the tokens they cover, its delta and its EVS override;
- `pool` [rows, NUM_DEVICE_COLS]: every request's device rows (device/rows.py),
  then its tau table, in one block per request;
- `arena`: the dense EVS overrides, [num_dims, length] each, flattened.

Per token, `_token_positions` finds its layout row by a binary search over
the slot's rows (sorted by COL_TOK_START, the first at 0) and applies that
row's kind: one clearly separated block per KIND_*. `NUM_DIMS` (3, or 4 for
HunYuan-VL) is a compile-time constant: a 3-axis state's kernels hold no
code for a fourth row, and a 4-axis state's add HunYuan-VL's XD_GRID rows and
the fourth store. Integer arithmetic
only: the float products of tau were made at admission. Every load stays
inside what admission wrote, whatever the step's arguments hold: a slot
outside [0, max_num_reqs) writes nothing, tokens outside the prompt never
read a row's tau table, and no store goes past the positions buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..kernels import layout_codes as C
from . import rows as D

# Triton reads module-level integers only when they are constexpr: so these are this module's
# constexpr copies (TL_ + the name) of kernels/layout_codes.py's and device/rows.py's one definitions
# (tests/test_constants.py checks that each equals its original).
TL_COL_TOK_START = tl.constexpr(C.COL_TOK_START)
TL_COL_KIND = tl.constexpr(C.COL_KIND)
TL_COL_BASE = tl.constexpr(C.COL_BASE)
TL_COL_GRID_OFFSET = tl.constexpr(C.COL_GRID_OFFSET)
TL_COL_H = tl.constexpr(C.COL_H)
TL_COL_W = tl.constexpr(C.COL_W)
TL_KIND_LINEAR = tl.constexpr(C.KIND_LINEAR)
TL_KIND_CONST = tl.constexpr(C.KIND_CONST)
TL_KIND_GRID = tl.constexpr(C.KIND_GRID)
TL_KIND_GRID_RAW = tl.constexpr(C.KIND_GRID_RAW)
TL_KIND_XD_GRID = tl.constexpr(C.KIND_XD_GRID)
TL_COL_ORDINAL = tl.constexpr(C.COL_ORDINAL)
TL_KIND_GRID_BITS = tl.constexpr(C.KIND_GRID_BITS)
TL_KIND_CANVAS = tl.constexpr(C.KIND_CANVAS)
TL_COL_CANVAS_TOP = tl.constexpr(C.COL_CANVAS_TOP)
TL_COL_CANVAS_LEFT = tl.constexpr(C.COL_CANVAS_LEFT)
TL_DCOL_BITS_LO = tl.constexpr(D.DCOL_BITS_LO)
TL_DCOL_BITS_HI = tl.constexpr(D.DCOL_BITS_HI)
TL_DCOL_TAU_STEP = tl.constexpr(D.DCOL_TAU_STEP)
TL_DCOL_TAU_AT = tl.constexpr(D.DCOL_TAU_AT)
TL_WIDTH = tl.constexpr(D.NUM_DEVICE_COLS)
TL_S_ROW_START = tl.constexpr(D.S_ROW_START)
TL_S_NUM_ROWS = tl.constexpr(D.S_NUM_ROWS)
TL_S_PROMPT_LEN = tl.constexpr(D.S_PROMPT_LEN)
TL_S_DELTA = tl.constexpr(D.S_DELTA)
TL_S_OVERRIDE_AT = tl.constexpr(D.S_OVERRIDE_AT)
TL_S_OVERRIDE_LEN = tl.constexpr(D.S_OVERRIDE_LEN)
TL_SLOT_WIDTH = tl.constexpr(D.NUM_SLOT_COLS)


# up to this many layout rows, _find_rows reads every first token at once (its own constant, not a copy)
FEW_ROWS = tl.constexpr(16)


@triton.jit
def _find_rows(pool_ptr, row_start, num_rows, tok):
    """Per token, the last of the slot's rows whose first token is <= tok.
    Up to FEW_ROWS rows (most prompts), their first tokens are read as
    scalars in one round of independent loads and counted, since the rows
    are sorted and the first starts at 0: a binary search would wait for
    log2(rows) loads in a row. Beyond that, a branch-free binary search;
    every load lies inside the slot's rows."""
    lo = tl.zeros_like(tok) + row_start
    if num_rows <= FEW_ROWS:
        for k in tl.static_range(1, FEW_ROWS):
            start = tl.load(pool_ptr + (row_start + k) * TL_WIDTH + TL_COL_TOK_START, mask=k < num_rows, other=0)
            lo += ((k < num_rows) & (start <= tok)).to(lo.dtype)
    else:
        size = num_rows
        while size > 1:
            half = size // 2
            mid = lo + half
            start = tl.load(pool_ptr + mid * TL_WIDTH + TL_COL_TOK_START)
            lo = tl.where(start <= tok, mid, lo)
            size = size - half
    return lo


@triton.jit
def _row_positions(pool_ptr, row_start, row, tok, valid, NUM_DIMS: tl.constexpr):
    """(T, H, W, X) of prompt tokens `tok` in pool rows `row`, int32 (admission
    refused positions past int32, as vLLM's int32 table does); `valid`
    masks the lanes whose token lies in the prompt (only they read a table).
    X, the fourth axis, is T except in an XD_GRID row (4-axis states only)."""
    at = pool_ptr + row * TL_WIDTH
    kind = tl.load(at + TL_COL_KIND)
    n = tok - tl.load(at + TL_COL_TOK_START)
    base = tl.load(at + TL_COL_BASE)

    # TL_KIND_LINEAR: base + n on the three rows (text, audio, decode-like runs)
    t = base + n
    h = t
    w = t

    # TL_KIND_CONST: every token at base (Omni's shared bos/eos pair)
    is_const = kind == TL_KIND_CONST
    t = tl.where(is_const, base, t)
    h = tl.where(is_const, base, h)
    w = tl.where(is_const, base, w)

    # TL_KIND_GRID: token g of a (t', h', w') grid at (base + tau(f), base + i, base + j);
    # TL_KIND_GRID_RAW: the same at (base + tau(f), i, j) (Isaac);
    # TL_KIND_GRID_BITS: the kept tokens of a pruned grid, token n at the n-th set bit of the row's word
    is_raw = kind == TL_KIND_GRID_RAW
    is_bits = kind == TL_KIND_GRID_BITS
    is_grid = (kind == TL_KIND_GRID) | is_raw | is_bits
    reads_grid = is_grid
    if NUM_DIMS > 3:  # TL_KIND_XD_GRID reads the same grid columns (w' + 1 wide, t' = 1)
        is_xd = kind == TL_KIND_XD_GRID
        reads_grid = is_grid | is_xd
    grid_h = tl.where(reads_grid, tl.load(at + TL_COL_H), 1)
    grid_w = tl.where(reads_grid, tl.load(at + TL_COL_W), 1)
    g = tl.load(at + TL_COL_GRID_OFFSET) + n
    if tl.max(is_bits.to(tl.int32), axis=0) > 0:
        g = tl.where(is_bits, g - n + _select_bit(at, n), g)
    hw = grid_h * grid_w
    f = g // hw
    rem = g - f * hw
    i = rem // grid_w
    j = rem - i * grid_w
    step = tl.load(at + TL_DCOL_TAU_STEP)
    from_table = is_grid & valid & (step < 0)
    table = pool_ptr + row_start * TL_WIDTH + tl.load(at + TL_DCOL_TAU_AT) + f
    tau = tl.where(from_table, tl.load(table, mask=from_table, other=0), f * step)
    hw_base = tl.where(is_raw, 0, base)
    t = tl.where(is_grid, base + tau, t)
    h = tl.where(is_grid, hw_base + i, h)
    w = tl.where(is_grid, hw_base + j, w)

    # TL_KIND_CANVAS (MiniCPM-V 4.7): cell (i, j) of an h' x w' grid at T = base,
    # (top + s_h(i), left + s_w(j)); the step column says s: 0 (a run at one
    # point), the identity (1), or TAU_FROM_TABLE: the row's h' + w'
    # coordinates, stretched at admission by the CPU kernels' float32 rule
    is_canvas = kind == TL_KIND_CANVAS
    if tl.max(is_canvas.to(tl.int32), axis=0) > 0:
        canvas_h = tl.where(is_canvas, tl.load(at + TL_COL_H), 1)
        canvas_w = tl.where(is_canvas, tl.load(at + TL_COL_W), 1)
        cell = tl.load(at + TL_COL_GRID_OFFSET) + n
        ci = cell // canvas_w
        cj = cell - ci * canvas_w
        stretched = is_canvas & valid & (step < 0)
        coords = pool_ptr + row_start * TL_WIDTH + tl.load(at + TL_DCOL_TAU_AT)
        si = tl.where(stretched, tl.load(coords + ci, mask=stretched, other=0), ci * step)
        sj = tl.where(stretched, tl.load(coords + canvas_h + cj, mask=stretched, other=0), cj * step)
        top = tl.load(at + TL_COL_CANVAS_TOP)
        left = tl.load(at + TL_COL_CANVAS_LEFT)
        t = tl.where(is_canvas, base, t)
        h = tl.where(is_canvas, top + si, h)
        w = tl.where(is_canvas, left + sj, w)

    # a 3-axis kind repeats T on the fourth axis, as the CPU writers do;
    # TL_KIND_XD_GRID (HunYuan-VL): (base + n, j, i, ordinal)
    x = t
    if NUM_DIMS > 3:
        ordinal = tl.load(at + TL_COL_ORDINAL)
        h = tl.where(is_xd, j, h)
        w = tl.where(is_xd, i, w)
        x = tl.where(is_xd, ordinal, x)
    return t, h, w, x


@triton.jit
def _select_bit(at, n):
    """Per lane, the index of the n-th set bit (from 0) of the 64-bit mask word
    that GRID_BITS row `at` keeps in two int32 columns; a lane of another
    kind gets whatever its columns say, and is not used."""
    lo = tl.load(at + TL_DCOL_BITS_LO)
    hi = tl.load(at + TL_DCOL_BITS_HI)
    seen = tl.zeros_like(n)
    found = tl.zeros_like(n) - 1
    for b in tl.static_range(32):
        bit = (lo >> b) & 1
        found = tl.where((bit == 1) & (seen == n) & (found < 0), b, found)
        seen += bit
    for b in tl.static_range(32):
        bit = (hi >> b) & 1
        found = tl.where((bit == 1) & (seen == n) & (found < 0), b + 32, found)
        seen += bit
    return tl.maximum(found, 0)


@triton.jit
def _slot_record(records_ptr, slot):
    """The slot's record, read once per program (a loop over token blocks
    would otherwise wait for these loads again in every block)."""
    rec = records_ptr + slot * TL_SLOT_WIDTH
    return (
        tl.load(rec + TL_S_ROW_START),
        tl.load(rec + TL_S_NUM_ROWS),
        tl.load(rec + TL_S_PROMPT_LEN),
        tl.load(rec + TL_S_DELTA),
        tl.load(rec + TL_S_OVERRIDE_AT),
        tl.load(rec + TL_S_OVERRIDE_LEN),
    )


@triton.jit
def _token_positions(
    pool_ptr, arena_ptr, row_start, num_rows, delta, override_at, override_len, tok, lanes, bound, first_tok, NUM_DIMS
):
    """(T, H, W, X) int64 of tokens `tok` of a slot whose record fields are
    given: the EVS override where it covers them, the layout rows below
    `bound`, index + delta elsewhere. `first_tok` is the smallest token of the
    block (a scalar); X, the fourth axis, is read only when NUM_DIMS > 3.
    The rows' and the override's values are int32 (what admission allows);
    they are widened only at the end, beside the int64 index + delta, so
    that the block's lanes hold half the registers while they are made."""
    t = tl.zeros_like(tok)
    h = t
    w = t
    x = t
    covered = tok < 0  # no lane yet
    if first_tok < bound:  # any prompt token in this block: find their rows
        in_prompt = lanes & (tok >= 0) & (tok < bound)
        row = _find_rows(pool_ptr, row_start, num_rows, tok)
        t, h, w, x = _row_positions(pool_ptr, row_start, row, tok, in_prompt, NUM_DIMS)
        covered = in_prompt
    dense_len = tl.minimum(override_len, bound)
    if first_tok < dense_len:  # EVS: the request's dense positions
        dense = lanes & (tok >= 0) & (tok < dense_len)
        src = arena_ptr + override_at + tok
        t = tl.where(dense, tl.load(src, mask=dense, other=0), t)
        h = tl.where(dense, tl.load(src + override_len, mask=dense, other=0), h)
        w = tl.where(dense, tl.load(src + 2 * override_len, mask=dense, other=0), w)
        if NUM_DIMS > 3:
            x = tl.where(dense, tl.load(src + 3 * override_len, mask=dense, other=0), x)
        covered = covered | dense
    after = tok.to(tl.int64) + delta  # past the prompt: index + delta, in int64 as the CPU tracker
    return (
        tl.where(covered, t.to(tl.int64), after),
        tl.where(covered, h.to(tl.int64), after),
        tl.where(covered, w.to(tl.int64), after),
        tl.where(covered, x.to(tl.int64), after),
    )


@triton.jit
def _store_columns(positions_ptr, positions_stride, column, lanes, t, h, w, x, NUM_DIMS: tl.constexpr):
    out = positions_ptr + column
    tl.store(out, t, mask=lanes)
    tl.store(out + positions_stride, h, mask=lanes)
    tl.store(out + 2 * positions_stride, w, mask=lanes)
    if NUM_DIMS > 3:
        tl.store(out + 3 * positions_stride, x, mask=lanes)


@triton.jit
def _position_lanes(
    positions_ptr, positions_stride, num_columns, pool_ptr, arena_ptr, row_start, num_rows, delta, override_at,
    override_len, bound, num_computed, query_start, query_len, first, LANES: tl.constexpr, NUM_DIMS: tl.constexpr,
):  # fmt: skip
    """The positions of the query's tokens first .. first + LANES - 1 (those inside the query and the buffer)."""
    block = first + tl.arange(0, LANES)
    column = query_start + block
    lanes = (block < query_len) & (column >= 0) & (column < num_columns)
    tok = num_computed + block
    t, h, w, x = _token_positions(
        pool_ptr, arena_ptr, row_start, num_rows, delta, override_at, override_len, tok, lanes, bound,
        num_computed + first, NUM_DIMS,
    )  # fmt: skip
    _store_columns(positions_ptr, positions_stride, column, lanes, t, h, w, x, NUM_DIMS)


@triton.jit
def prepare_kernel(
    positions_ptr,
    positions_stride,
    num_columns,
    records_ptr,
    pool_ptr,
    arena_ptr,
    max_num_reqs,
    idx_mapping_ptr,
    query_start_loc_ptr,
    prefill_lens_ptr,
    num_computed_tokens_ptr,
    BLOCK_SIZE: tl.constexpr,
    NUM_DIMS: tl.constexpr,
    PROMPT_BLOCK: tl.constexpr,
):
    """One program per batch entry: the positions of its scheduled tokens,
    BLOCK_SIZE at a time. Past the prompt a token is index + delta, a few
    registers a lane; a block with prompt tokens is positioned PROMPT_BLOCK
    lanes at a time (<= BLOCK_SIZE): the layout rows take many registers a
    lane, and a kernel's registers per thread bound how many programs run
    at once (bench/rope_check.py: --registers, --sweep)."""
    batch_idx = tl.program_id(0)
    slot = tl.load(idx_mapping_ptr + batch_idx)
    in_range = (slot >= 0) & (slot < max_num_reqs)
    slot = tl.where(in_range, slot, 0)
    query_start = tl.load(query_start_loc_ptr + batch_idx).to(tl.int64)
    query_len = tl.load(query_start_loc_ptr + batch_idx + 1).to(tl.int64) - query_start
    query_len = tl.where(in_range, query_len, 0)
    num_computed = tl.load(num_computed_tokens_ptr + slot)
    row_start, num_rows, prompt_len, delta, override_at, override_len = _slot_record(records_ptr, slot)
    # the rows cover the tokens of init_prefill_positions; vLLM's prefill_len
    # says where its prefill ends: below both, positions come from the rows
    bound = tl.minimum(prompt_len, tl.load(prefill_lens_ptr + slot))
    # the loops cover only the query's columns inside the buffer, whatever query_start_loc claims
    first = tl.maximum(-query_start, 0)
    last = tl.minimum(query_len, num_columns - query_start)
    first = tl.minimum(first - first % BLOCK_SIZE, tl.maximum(last, 0))
    for i in range(first, last, BLOCK_SIZE):
        if PROMPT_BLOCK == BLOCK_SIZE:  # one pass of the general path, which also makes index + delta
            _position_lanes(
                positions_ptr, positions_stride, num_columns, pool_ptr, arena_ptr, row_start, num_rows, delta,
                override_at, override_len, bound, num_computed, query_start, query_len, i, BLOCK_SIZE, NUM_DIMS,
            )  # fmt: skip
        elif num_computed + i < bound:  # prompt tokens (the EVS override lies inside the prompt too)
            for p in range(i, tl.minimum(i + BLOCK_SIZE, last), PROMPT_BLOCK):
                _position_lanes(
                    positions_ptr, positions_stride, num_columns, pool_ptr, arena_ptr, row_start, num_rows, delta,
                    override_at, override_len, bound, num_computed, query_start, query_len, p, PROMPT_BLOCK, NUM_DIMS,
                )  # fmt: skip
        else:  # every token past the prompt: index + delta
            block = i + tl.arange(0, BLOCK_SIZE)
            column = query_start + block
            lanes = (block < query_len) & (column >= 0) & (column < num_columns)
            after = (num_computed + block).to(tl.int64) + delta
            _store_columns(positions_ptr, positions_stride, column, lanes, after, after, after, after, NUM_DIMS)


@triton.jit(do_not_specialize=["length", "slot"])  # one compile whatever the slot and length
def read_kernel(
    out_ptr, length, records_ptr, pool_ptr, arena_ptr, slot, BLOCK_SIZE: tl.constexpr, NUM_DIMS: tl.constexpr
):
    """A slot's positions of tokens [0, length), as an int32 [NUM_DIMS, length] table."""
    block = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    lanes = block < length
    row_start, num_rows, prompt_len, delta, override_at, override_len = _slot_record(records_ptr, slot)
    t, h, w, x = _token_positions(
        pool_ptr,
        arena_ptr,
        row_start,
        num_rows,
        delta,
        override_at,
        override_len,
        block,
        lanes,
        prompt_len,
        tl.program_id(0) * BLOCK_SIZE,
        NUM_DIMS,
    )
    tl.store(out_ptr + block, t.to(tl.int32), mask=lanes)
    tl.store(out_ptr + length + block, h.to(tl.int32), mask=lanes)
    tl.store(out_ptr + 2 * length + block, w.to(tl.int32), mask=lanes)
    if NUM_DIMS > 3:
        tl.store(out_ptr + 3 * length + block, x.to(tl.int32), mask=lanes)


@triton.jit(do_not_specialize=["headers_at"])
def scatter_kernel(dst_ptr, src_ptr, headers_at, BLOCK_SIZE: tl.constexpr):
    """Staged writes, one program each: header k at src[headers_at + 3k] is
    (destination offset, length, source offset), all written by the host side."""
    header = src_ptr + headers_at + 3 * tl.program_id(0)
    dst = tl.load(header)
    length = tl.load(header + 1)
    src = tl.load(header + 2)
    for i in range(0, length, BLOCK_SIZE):
        block = i + tl.arange(0, BLOCK_SIZE)
        lanes = block < length
        tl.store(dst_ptr + dst + block, tl.load(src_ptr + src + block, mask=lanes), mask=lanes)
