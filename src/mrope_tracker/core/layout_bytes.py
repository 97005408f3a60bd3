"""`PromptLayout.to_bytes` / `from_bytes`: a layout as bytes, with a format version and a checksum.

Format version 3, all little-endian (docs/design.md, "Layouts as bytes"):

    header   magic b"MRLY", version (uint8), 3 zero bytes, num_tokens, delta,
             num_rows (int64 each), config_length (uint32)        36 bytes
    rows     num_rows x NUM_COLS int64
    scales   num_rows x NUM_SCALE_COLS float32
    config   config_length bytes: the config's fields that are not None, as
             UTF-8 JSON (none for a layout of unknown origin)
    crc32    zlib.crc32 of every byte before it (uint32)

A CRC-32 detects every change of up to 32 consecutive bits (every single-bit
flip among them), so a buffer damaged in transit or storage is refused
rather than read as another, valid-looking layout. It is an integrity check,
not an authentication: whoever can write a buffer can write its checksum
too, which is why the rows are still checked in O(rows) like any layout's,
and the config like any config. Versions 1 and 2 (written before the
checksum) are refused: a layout is rebuilt, not stored for long.
"""

from __future__ import annotations

import json
import struct
import zlib

import attrs
import numpy as np

from ..kernels import layout_codes as C
from .config import MRopeConfig

__all__ = ["VERSION", "read", "write"]

MAGIC = b"MRLY"
VERSION = 3
_HEADER = struct.Struct("<4sB3xqqqI")
_CRC = struct.Struct("<I")
_ROW_BYTES = 8 * C.NUM_COLS + 4 * C.NUM_SCALE_COLS


def write(rows: np.ndarray, scales: np.ndarray, num_tokens: int, delta: int, config: MRopeConfig | None) -> bytes:
    """The buffer of a layout's checked tables, counts and config."""
    recorded = b""
    if config is not None:
        # None fields are left out: the constructor's default for each is None
        fields = attrs.asdict(config, filter=lambda field, value: field.init and value is not None)
        recorded = json.dumps(fields, separators=(",", ":")).encode()
    body = b"".join(
        (
            _HEADER.pack(MAGIC, VERSION, num_tokens, delta, rows.shape[0], len(recorded)),
            rows.astype("<i8").tobytes(),
            scales.astype("<f4").tobytes(),
            recorded,
        )
    )
    return body + _CRC.pack(zlib.crc32(body))


def read(data) -> tuple[np.ndarray, np.ndarray, int, int, MRopeConfig | None]:
    """(rows, scales, num_tokens, delta, config) of a buffer `write` made; any
    other buffer is a ValueError naming `data` (the rows are not checked here:
    the layout's constructor does)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    least = _HEADER.size + _CRC.size
    if len(data) < least:
        raise ValueError(f"data: expected a serialised PromptLayout of at least {least} bytes, got {len(data)}")
    magic, version, num_tokens, delta, num_rows, config_length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"data: expected a PromptLayout buffer (magic {MAGIC!r}), got magic {magic!r}")
    if version != VERSION:
        raise ValueError(
            f"data: expected PromptLayout format version {VERSION}, got version {version} (versions 1 and 2, "
            "written without a checksum, are no longer read: rebuild the layout)"
        )
    end = _HEADER.size + num_rows * _ROW_BYTES
    if num_rows < 1 or len(data) != end + config_length + _CRC.size:
        raise ValueError(
            f"data: expected {_HEADER.size} + num_rows x {_ROW_BYTES} + config + {_CRC.size} bytes for the "
            f"{num_rows} rows and {config_length} config bytes it announces, got {len(data)}"
        )
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc != zlib.crc32(memoryview(data)[: -_CRC.size]):
        raise ValueError(
            "data: expected a buffer PromptLayout.to_bytes wrote, got one whose checksum does not match its "
            "contents (changed or damaged after it was written)"
        )
    split = _HEADER.size + num_rows * 8 * C.NUM_COLS
    rows = np.frombuffer(data, "<i8", num_rows * C.NUM_COLS, _HEADER.size).reshape(num_rows, C.NUM_COLS)
    scales = np.frombuffer(data, "<f4", num_rows * C.NUM_SCALE_COLS, split).reshape(num_rows, C.NUM_SCALE_COLS)
    config = _read_config(data[end : end + config_length]) if config_length else None
    return rows.astype(np.int64), scales.astype(np.float32), num_tokens, delta, config


def _read_config(recorded: bytes) -> MRopeConfig:
    """The config a buffer records, checked as any config is (family, model type, fields)."""
    try:
        fields = json.loads(recorded.decode())
        if not isinstance(fields, dict):
            raise TypeError(f"a JSON object, got {type(fields).__name__}")
        return MRopeConfig(**fields)
    except (ValueError, TypeError, RecursionError) as exc:  # JSON and UTF-8 errors are ValueErrors; deep nesting
        raise ValueError(
            f"data: expected the config the layout was built under, got one that cannot be read ({exc})"
        ) from None
