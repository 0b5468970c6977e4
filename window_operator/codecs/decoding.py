"""The contract of input payload decoders: message values in, records out, failures as data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

from window_operator.results import ErrorCode

__all__ = ["DECODE_FAILED", "NULL_PAYLOAD", "PayloadDecoder"]

NULL_PAYLOAD: Final = "null payload (a tombstone): there is no record to decode"


class _Failed:
    """The type of :data:`DECODE_FAILED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DECODE_FAILED"


#: Stands in the records returned by :meth:`PayloadDecoder.decode` for a failed payload.
DECODE_FAILED: Final[Any] = _Failed()


class PayloadDecoder(Protocol):
    """Parses message values into records; a failure is data, never an exception."""

    @property
    def error_code(self) -> ErrorCode:
        """The code of the error records made from this decoder's failures."""
        ...

    def decode(self, payloads: Sequence[bytes | None]) -> tuple[list[Any], list[tuple[int, str]]]:
        """Parse ``payloads`` one by one.

        Returns one record per payload (:data:`DECODE_FAILED` for each failure) and the
        ``(index, reason)`` of the failures in index order.
        """
        ...
