"""Results and rejected records waiting to be handed over (the seed's ``getResult``)."""

from __future__ import annotations

from typing import Generic, TypeVar

from window_operator.results import ErrorRecord

__all__ = ["OutputBuffer"]

R = TypeVar("R")


class OutputBuffer(Generic[R]):
    """Result batches (of the operator's result type) and error records, in emission order."""

    __slots__ = ("errors", "results")

    def __init__(self) -> None:
        self.results: list[R] = []
        self.errors: list[ErrorRecord] = []

    def emit(self, batch: R) -> None:
        """Queue one result batch."""
        self.results.append(batch)

    def reject(self, error: ErrorRecord) -> None:
        """Queue one rejected record."""
        self.errors.append(error)

    def take_results(self) -> list[R]:
        """Hand over (and forget) the queued result batches."""
        out, self.results = self.results, []
        return out

    def take_errors(self) -> list[ErrorRecord]:
        """Hand over (and forget) the queued error records."""
        out, self.errors = self.errors, []
        return out
