"""Message Store key layouts: the seed's key matrix, the choice among them, and the
encoding of messages to and from their keys and values.
"""

from __future__ import annotations

import enum
import struct

import numpy as np
import numpy.typing as npt

from window_operator.config import JoinConfig
from window_operator.join.common import EMPTY, IntArray, ObjArray, obj_array

__all__ = [
    "LARGE_WINDOW_MS",
    "MSG_TAG",
    "StoreLayout",
    "choose_layout",
    "decode_message",
    "encode_messages",
]

#: ``auto`` stores a time join with equal fields key-first when ``hi - lo`` exceeds
#: this. A time-first deep lookup seeks once per merged time range and reads every key's
#: messages in it; a key-first one seeks once per join key and reads only that key's.
#: A seek costs about as much as reading a few dozen entries, so time-first wins while a
#: window holds few messages per key -- short windows; at a minute and more the window of
#: a busy stream holds enough that per-key seeks are cheaper.
LARGE_WINDOW_MS = 60_000

#: The side tag byte that starts every Message Store key, by side.
MSG_TAG = (b"L", b"R")
_I64x2 = struct.Struct(">qq")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_U64x2 = struct.Struct(">QQ")
_BIAS = 1 << 63
_SIGN = np.uint64(1 << 63)


class StoreLayout(enum.StrEnum):
    """Message Store key layouts (after the seed's key matrix)."""

    TS_OFFSET = "ts_offset"
    FIELDS_TS_OFFSET = "fields_ts_offset"
    TS_FIELDS_OFFSET = "ts_fields_offset"
    FIELDS_OFFSET = "fields_offset"

    @property
    def key_first(self) -> bool:
        """Whether keys start with the equal fields (expiry is then per prefix)."""
        return self in (StoreLayout.FIELDS_TS_OFFSET, StoreLayout.FIELDS_OFFSET)


def choose_layout(join: JoinConfig) -> StoreLayout:
    """The Message Store layout of a join (``join.store``, or the seed's matrix for auto).

    Rows joins use ``<equal_flds><offset>``. Time joins without equal fields use
    ``<timestamp><offset>``; with equal fields, windows wider than
    :data:`LARGE_WINDOW_MS` use ``<equal_flds><timestamp><offset>`` and narrower ones
    ``<timestamp><equal_flds><offset>``. Raises :class:`ValueError` for a time layout
    asked of a rows join.
    """
    if join.rows is not None:
        if join.store not in ("auto",):
            raise ValueError(
                f"rows joins store messages as <equal_flds><offset>; use store: auto "
                f"(got {join.store})"
            )
        return StoreLayout.FIELDS_OFFSET
    if join.store != "auto":
        return StoreLayout(join.store)
    if not join.on:
        return StoreLayout.TS_OFFSET
    bounds = join.bounds
    assert bounds is not None
    if bounds[1] - bounds[0] > LARGE_WINDOW_MS:
        return StoreLayout.FIELDS_TS_OFFSET
    return StoreLayout.TS_FIELDS_OFFSET


def _u64_be(values: IntArray) -> npt.NDArray[np.uint64]:
    """Signed int64 as the order-preserving unsigned pattern of :func:`encode_i64`."""
    flipped: npt.NDArray[np.uint64] = values.astype(np.int64).view(np.uint64) ^ _SIGN
    return flipped


def _i64_keys(*columns: IntArray) -> list[bytes]:
    """Row ``i`` of the columns as concatenated :func:`encode_i64` bytes."""
    width = 8 * len(columns)
    buf = np.column_stack([_u64_be(c) for c in columns]).astype(">u8").tobytes()
    return [buf[i : i + width] for i in range(0, len(buf), width)]


def _pair_headers(ts: IntArray, pos: IntArray) -> list[bytes]:
    """``>qq`` (ts, position) per row: the value prefix of the ``fields_offset`` layout."""
    buf = np.column_stack([ts, pos]).astype(">i8").tobytes()
    return [buf[i : i + 16] for i in range(0, len(buf), 16)]


def encode_messages(
    layout: StoreLayout,
    tag: bytes,
    encoded: list[bytes],
    kids: IntArray,
    ts: IntArray,
    pos: IntArray,
    seqs: IntArray,
    recs: ObjArray,
) -> tuple[list[bytes], list[bytes]]:
    """Message Store keys and values of messages, in key order.

    ``encoded[kid]`` are the encoded equal fields of a join key; ``seqs`` (arrival
    sequence numbers) are only read by the ``fields_offset`` layout.
    """
    # The encodings preserve order, so sorting the columns sorts the keys.
    rank = EMPTY
    if layout is not StoreLayout.TS_OFFSET:
        ukids, inv = np.unique(kids, return_inverse=True)
        rank = np.argsort(np.argsort(obj_array([encoded[k] for k in ukids.tolist()])))[inv]
    if layout is StoreLayout.TS_OFFSET:
        order = np.lexsort((pos, ts))
    elif layout is StoreLayout.FIELDS_TS_OFFSET:
        order = np.lexsort((pos, ts, rank))
    elif layout is StoreLayout.TS_FIELDS_OFFSET:
        order = np.lexsort((pos, rank, ts))
    else:
        order = np.lexsort((seqs, rank))
    kids, ts, pos = kids[order], ts[order], pos[order]
    fields = [encoded[k] for k in kids.tolist()]
    values: list[bytes] = recs[order].tolist()
    if layout is StoreLayout.TS_OFFSET:
        keys = [tag + k for k in _i64_keys(ts, pos)]
        values = [_U32.pack(len(f)) + f + r for f, r in zip(fields, values, strict=True)]
    elif layout is StoreLayout.FIELDS_TS_OFFSET:
        keys = [tag + f + k for f, k in zip(fields, _i64_keys(ts, pos), strict=True)]
    elif layout is StoreLayout.TS_FIELDS_OFFSET:
        keys = [
            tag + t + f + o for t, f, o in zip(_i64_keys(ts), fields, _i64_keys(pos), strict=True)
        ]
    else:
        keys = [tag + f + s for f, s in zip(fields, _i64_keys(seqs[order]), strict=True)]
        values = [h + r for h, r in zip(_pair_headers(ts, pos), values, strict=True)]
    return keys, values


def decode_message(layout: StoreLayout, key: bytes, value: bytes) -> tuple[bytes, int, int, bytes]:
    """``(encoded equal fields, ts, position, record JSON)`` of a stored message."""
    if layout is StoreLayout.FIELDS_TS_OFFSET:
        t, p = _U64x2.unpack_from(key, len(key) - 16)
        return key[1:-16], t - _BIAS, p - _BIAS, value
    if layout is StoreLayout.TS_FIELDS_OFFSET:
        (t,) = _U64.unpack_from(key, 1)
        (p,) = _U64.unpack_from(key, len(key) - 8)
        return key[9:-8], t - _BIAS, p - _BIAS, value
    if layout is StoreLayout.TS_OFFSET:
        t, p = _U64x2.unpack_from(key, 1)
        (flen,) = _U32.unpack_from(value, 0)
        return value[4 : 4 + flen], t - _BIAS, p - _BIAS, value[4 + flen :]
    t, p = _I64x2.unpack_from(value, 0)
    return key[1:-8], t, p, value[16:]
