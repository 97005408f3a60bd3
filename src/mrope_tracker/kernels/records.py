"""Decoding plain Python ints from `marshal.dumps(x, 2)` at kernel speed.

Engines hand us lists: token ids, grids, ranges, counts. Turning a list
into numpy costs a Python-level look at every element when bools must be
refused (numpy silently takes True as 1). marshal writes each element's
exact type in one C pass instead: format 2 writes a list or tuple as a type
byte and a 4-byte count, and each int that fits in 32 bits as the byte "i"
and 4 little-endian bytes. Anything else (a bool, a float, a bigger int, a
nested sequence of another length) is another record, and the decoders stop
there so the caller can take its checked path with precise messages.
"""

import marshal

import numpy as np

from .jit_options import helper

_RECORD_INT = 105  # ord("i")
_RECORD_LIST = 91  # ord("[")
_RECORD_TUPLE = 40  # ord("(")

# Whether this Python writes the records above (checked once; else callers
# never use the decoders).
MARSHAL_INTS = (
    marshal.dumps([7, -2], 2) == b"[\x02\x00\x00\x00i\x07\x00\x00\x00i\xfe\xff\xff\xff"
    and marshal.dumps(((1,),), 2) == b"(\x01\x00\x00\x00(\x01\x00\x00\x00i\x01\x00\x00\x00"
)


@helper
def read_int_records(data, out):
    """Decode `marshal.dumps(seq, 2)` of a flat list or tuple of plain ints into `out`.

    Returns -1 when every element was an int record (all of `out` written),
    else the index of the first element that is not, or len(out) when the
    length does not match; the caller then takes its checked path."""
    n = out.shape[0]
    if len(data) != 5 + 5 * n:
        return n
    p = 5
    for k in range(n):
        if data[p] != _RECORD_INT:
            return k
        out[k] = (
            np.int64(data[p + 1]) | (np.int64(data[p + 2]) << 8) | (np.int64(data[p + 3]) << 16)
            | (np.int64(np.int8(data[p + 4])) << 24)
        )  # fmt: skip
        p += 5
    return -1


@helper
def read_int_rows(data, out):
    """Decode `marshal.dumps(rows, 2)` of a list or tuple of equal-length
    lists or tuples of plain ints into the (n, width) `out`. Returns -1 when
    it all matched, else a row index (the caller takes its checked path)."""
    n, width = out.shape
    if len(data) != 5 + n * (5 + 5 * width):
        return n
    p = 5
    for k in range(n):
        kind = data[p]
        count = np.int64(data[p + 1]) | (np.int64(data[p + 2]) << 8) | (np.int64(data[p + 3]) << 16) | (np.int64(data[p + 4]) << 24)
        if (kind != _RECORD_LIST and kind != _RECORD_TUPLE) or count != width:
            return k
        p += 5
        for c in range(width):
            if data[p] != _RECORD_INT:
                return k
            out[k, c] = (
                np.int64(data[p + 1]) | (np.int64(data[p + 2]) << 8) | (np.int64(data[p + 3]) << 16)
                | (np.int64(np.int8(data[p + 4])) << 24)
            )  # fmt: skip
            p += 5
    return -1
