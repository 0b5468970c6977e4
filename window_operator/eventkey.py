"""The grouping key of a record read from its Kafka record key (``key_from: kafka``).

The key's bytes are UTF-8 text, and that text is the key, as a key field's string is.
A record without a key, or with one that is not UTF-8 text or is over the size limit,
is a :class:`~window_operator.rejections.RecordRejected` with its reason.
"""

from __future__ import annotations

from typing import Final

from window_operator.rejections import RecordRejected, show
from window_operator.results import ErrorCode

__all__ = ["NO_RECORD_KEY", "kafka_key_text"]

#: Why a record is rejected when the job groups by the Kafka record key and it has none.
NO_RECORD_KEY: Final = (
    "the record has no Kafka key, which is its grouping key with key_from: kafka "
    "(in simulate: the line's kafka_key)"
)


def kafka_key_text(key: object, max_bytes: int) -> str:
    """The grouping key of a record whose Kafka key is ``key`` (bytes; a string in
    ``simulate`` and the library; ``None``: none), or raise a rejection."""
    if key is None:
        raise RecordRejected(ErrorCode.MISSING_KEY, NO_RECORD_KEY)
    if isinstance(key, bytes):
        size = len(key)
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordRejected(
                ErrorCode.BAD_KEY, f"the Kafka record key is not UTF-8 text: {key[:64]!r}"
            ) from None
    elif isinstance(key, str):
        text = key
        try:
            size = len(key.encode("utf-8"))
        except UnicodeEncodeError:
            raise RecordRejected(
                ErrorCode.BAD_KEY, "the Kafka record key is not valid Unicode (a lone surrogate)"
            ) from None
    else:
        raise RecordRejected(
            ErrorCode.BAD_KEY, f"a Kafka record key is text (a string), got {show(key)}"
        )
    if size > max_bytes:
        raise RecordRejected(
            ErrorCode.BAD_KEY, f"the Kafka record key is {size} bytes; the limit is {max_bytes}"
        )
    return text
