"""The grouping key of a record read from its Kafka record key (``key_from: kafka``).

``key_format`` says how the key's bytes are written, and so how they become the key's
text (the text a key field's string would be):

* ``string`` (the default): UTF-8 text, which is the key (Kafka's ``StringSerializer``);
* ``long``: an 8-byte big-endian signed integer (``LongSerializer``), keyed by its
  decimal text (``"1234"``, ``"-5"``);
* ``int``: a 4-byte big-endian signed integer (``IntegerSerializer``), likewise;
* ``bytes``: any bytes (``ByteArraySerializer``, a hash, an Avro key), keyed by their
  lowercase hexadecimal text.

In ``simulate`` and the library, where there are no record bytes, a record's key is the
value it stands for: a string, an integer (``long`` and ``int``), or the hexadecimal text
of the bytes (``bytes``). A record without a key, with one its format does not read, or
with a key text over the size limit is a
:class:`~window_operator.rejections.RecordRejected` with its reason.
"""

from __future__ import annotations

from typing import Final, Literal

from window_operator.rejections import RecordRejected, show
from window_operator.results import ErrorCode

__all__ = [
    "KEY_FORMATS",
    "NO_RECORD_KEY",
    "KeyFormat",
    "kafka_key_bytes",
    "kafka_key_text",
    "kafka_key_value",
]

#: How the Kafka record keys of an input are written (see the module doc).
KeyFormat = Literal["string", "long", "int", "bytes"]
KEY_FORMATS: Final[tuple[KeyFormat, ...]] = ("string", "long", "int", "bytes")

#: Why a record is rejected when the job groups by the Kafka record key and it has none.
NO_RECORD_KEY: Final = (
    "the record has no Kafka key, which is its grouping key with key_from: kafka "
    "(in simulate: the line's kafka_key)"
)

#: The size in bytes and the serializer of each integer format.
_INTEGERS: Final = {"long": (8, "LongSerializer"), "int": (4, "IntegerSerializer")}


def kafka_key_text(key: object, max_bytes: int, key_format: KeyFormat = "string") -> str:
    """The grouping key of a record whose Kafka key is ``key`` (bytes; in ``simulate``
    and the library the value it stands for; ``None``: none), read as ``key_format``, or
    raise a rejection."""
    if key is None:
        raise RecordRejected(ErrorCode.MISSING_KEY, NO_RECORD_KEY)
    if key_format == "string":
        text = _string(key)
    elif key_format == "bytes":
        text = _hex(key)
    else:
        text = _integer(key, key_format)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise RecordRejected(
            ErrorCode.BAD_KEY, "the Kafka record key is not valid Unicode (a lone surrogate)"
        ) from None
    if size > max_bytes:
        what = "key's hexadecimal text" if key_format == "bytes" else "key"
        raise RecordRejected(
            ErrorCode.BAD_KEY, f"the Kafka record {what} is {size} bytes; the limit is {max_bytes}"
        )
    return text


def kafka_key_bytes(value: object, key_format: KeyFormat) -> bytes | None:
    """The record key bytes a producer of ``key_format`` writes for ``value`` (what
    ``simulate`` reads as the key: see the module doc); ``None`` if it is none of them."""
    try:
        if key_format == "string" and isinstance(value, str):
            return value.encode("utf-8")
        if key_format == "bytes" and isinstance(value, str):
            return bytes.fromhex(value)
        if key_format in _INTEGERS and isinstance(value, int) and not isinstance(value, bool):
            size = _INTEGERS[key_format][0]
            return value.to_bytes(size, "big", signed=True)
    except (UnicodeEncodeError, ValueError, OverflowError):
        return None
    return None


def kafka_key_value(key: bytes, key_format: KeyFormat) -> str | int | None:
    """The value record key bytes ``key`` stand for in ``key_format``, as ``simulate``
    reads a line's ``kafka_key`` (``None``: the format does not read them)."""
    if key_format == "bytes":
        return key.hex()
    if key_format == "string":
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if len(key) != _INTEGERS[key_format][0]:
        return None
    return int.from_bytes(key, "big", signed=True)


def _string(key: object) -> str:
    if isinstance(key, bytes):
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordRejected(
                ErrorCode.BAD_KEY,
                f"the Kafka record key is not UTF-8 text: {key[:64]!r} (input.key_format "
                "reads other keys: long, int or bytes)",
            ) from None
    if isinstance(key, str):
        return key
    hint = " (input.key_format long or int reads integer keys)" if isinstance(key, int) else ""
    raise RecordRejected(
        ErrorCode.BAD_KEY, f"a Kafka record key is text (a string), got {show(key)}{hint}"
    )


def _hex(key: object) -> str:
    if isinstance(key, bytes):
        return key.hex()
    if isinstance(key, str):
        try:
            return bytes.fromhex(key).hex()
        except ValueError:
            pass
    raise RecordRejected(
        ErrorCode.BAD_KEY,
        f"a Kafka record key of key_format bytes is given as hexadecimal text, got {show(key)}",
    )


def _integer(key: object, key_format: KeyFormat) -> str:
    size, serializer = _INTEGERS[key_format]
    if isinstance(key, bytes):
        if len(key) != size:
            raise RecordRejected(
                ErrorCode.BAD_KEY,
                f"the Kafka record key is {len(key)} bytes: key_format {key_format} reads "
                f"{size} ({serializer}); got {key[:64]!r}",
            )
        return str(int.from_bytes(key, "big", signed=True))
    if isinstance(key, int) and not isinstance(key, bool):
        if -(1 << (8 * size - 1)) <= key < 1 << (8 * size - 1):
            return str(key)
        raise RecordRejected(
            ErrorCode.BAD_KEY,
            f"the Kafka record key {key} does not fit key_format {key_format} ({size} "
            "signed bytes)",
        )
    if isinstance(key, float) and abs(key) >= 1 << 63:  # JSON's integers beyond 64 bits
        raise RecordRejected(
            ErrorCode.BAD_KEY,
            f"the Kafka record key {int(key)} does not fit key_format {key_format} ({size} "
            "signed bytes)",
        )
    raise RecordRejected(
        ErrorCode.BAD_KEY,
        f"a Kafka record key of key_format {key_format} is an integer, got {show(key)}",
    )
