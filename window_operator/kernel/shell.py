"""What every operator forwards to its kernel: its store, clock, positions and outputs.

The operators (time windows, sessions, count windows, the join) subclass
:class:`KernelForwarding` for these and keep only their own logic; the three with one
input of keyed events take their single-record path from :class:`EventOperator`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sized
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

import numpy as np

from stores.rocks import TaskStore
from window_operator.errors import InvalidArgumentError
from window_operator.events import DecodedEvent, RecordDecoder
from window_operator.kernel.checkpoint import JsonValue
from window_operator.kernel.clock import ClockState
from window_operator.kernel.kernel import BEFORE_CHANGE, Decoded, OperatorKernel
from window_operator.kernel.positions import (
    InputPosition,
    check_record_position,
    check_source,
    check_time,
)
from window_operator.kernel.records import StepStats
from window_operator.rejections import show
from window_operator.results import ErrorRecord, ResultBatch, WindowResult

__all__ = [
    "EventOperator",
    "KernelForwarding",
    "ResultColumns",
    "changes",
    "queries",
    "query_bounds",
    "timer",
]

T = TypeVar("T")
P = ParamSpec("P")
RT = TypeVar("RT")


class _HasKernel(Protocol):
    @property
    def kernel(self) -> OperatorKernel[Any]: ...


S = TypeVar("S", bound=_HasKernel)


def changes(method: Callable[Concatenate[S, P], RT]) -> Callable[Concatenate[S, P], RT]:
    """An operator call that changes its state: refused on a closed or failed operator.
    One that raises part-way (a user operation on some value, say) leaves memory
    half-updated, so it fails the operator: every later call raises
    :class:`OperatorFailedError`, and ``close`` closes the store as the last commit
    left it. Errors raised before any change (:data:`BEFORE_CHANGE`) leave it usable.
    Inline, not a context manager: ``add_message`` runs it for every record."""
    name = method.__name__

    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> RT:
        kernel = self.kernel
        if kernel.failed is not None or kernel.store.closed:
            kernel.check_usable()
        try:
            return method(self, *args, **kwargs)
        except BEFORE_CHANGE:
            raise
        except BaseException as exc:
            if _not_called(exc):
                raise  # arguments that do not fit the method: nothing ran
            kernel.fail(name, exc)  # the outermost call names it (add_message: add_batch)
            raise

    functools.update_wrapper(call, method)
    return call


def _not_called(exc: BaseException) -> bool:
    """Whether ``exc`` is the ``TypeError`` of a call whose arguments do not bind (an
    unknown keyword, say): raised in the caller's frame, before the method ran."""
    tb = exc.__traceback__
    return isinstance(exc, TypeError) and tb is not None and tb.tb_next is None


def timer(method: Callable[[S, int], None]) -> Callable[[S, int], None]:
    """An operator's ``timeout(now_ms)``: :func:`changes`, with ``now_ms`` checked first
    (``"soon"`` is an :class:`InvalidArgumentError`, not a failed operator)."""
    changed = changes(method)

    def call(self: S, now_ms: int) -> None:
        changed(self, check_time(now_ms))

    functools.update_wrapper(call, method)
    return call


def queries(method: Callable[Concatenate[S, P], RT]) -> Callable[Concatenate[S, P], RT]:
    """A query of the operator's state: refused on a closed or failed operator."""

    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> RT:
        self.kernel.check_usable()
        return method(self, *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


#: What an infinite query bound stands for: beyond every event time and offset.
_UNBOUNDED = 2**63 - 1


def query_bounds(**bounds: object) -> tuple[int, ...]:
    """A query's time or offset bounds, in the order given, as ints: integers (NumPy's
    too), floats of whole numbers, and an infinity as unbounded; anything else is
    :class:`InvalidArgumentError` named by its argument. Before, a float bound failed
    inside the store's key encoding (``KeyEncodingError``) in one operator and was
    taken in another, and ``None`` or a string raised a bare ``TypeError``."""
    out = []
    for name, value in bounds.items():
        if isinstance(value, int | np.integer) and not isinstance(value, bool):
            out.append(int(value))
            continue
        if isinstance(value, float | np.floating):
            x = float(value)
            if x.is_integer():
                out.append(int(x))
                continue
            if math.isinf(x):
                out.append(_UNBOUNDED if x > 0 else -_UNBOUNDED)
                continue
        raise InvalidArgumentError(
            f"{name} = {show(value)}: query bounds are whole numbers (ms, or offsets)"
        )
    return tuple(out)


class ResultColumns(Protocol[T]):
    """A batch of results in columnar form."""

    def to_results(self) -> list[T]:
        """The batch as one result object per row."""
        ...


B = TypeVar("B", bound=ResultColumns[Any])


class KernelForwarding(Generic[B, T]):
    """The operator API that is the kernel's: a subclass sets :attr:`kernel`.

    ``B`` is the operator's result batch, ``T`` one result.
    """

    kernel: OperatorKernel[B]

    @property
    def late_pending(self) -> bool:
        """Whether LATE updates wait for the end of a running ``emit.late`` period."""
        return self.kernel.timers.late_since is not None

    @changes
    def end_late_period(self) -> None:
        """End the running LATE period at the next :meth:`timeout`: the run stops, and
        the LATE updates it batched go out now rather than at its next start."""
        self.kernel.timers.late_now = True

    @property
    def store(self) -> TaskStore:
        """The task's RocksDB store."""
        return self.kernel.store

    @property
    def state_shape(self) -> Mapping[str, JsonValue]:
        """The layout of the state it keeps (window, aggregations): a store written with
        another cannot be continued."""
        return self.kernel.shape

    @property
    def watermark(self) -> int:
        """The operator's watermark (never decreasing; see the operator for its axis)."""
        return self.kernel.watermark

    @property
    def offsets(self) -> dict[InputPosition, int]:
        """Last applied offset per ``(source index, partition)``."""
        return self.kernel.offsets

    @property
    def batches(self) -> int:
        """How many flushes the store has seen (the changelog batch number)."""
        return self.kernel.batches

    @property
    def now(self) -> int:
        """The latest wall clock seen (messages and ``timeout``)."""
        return self.kernel.clock.now

    def clock_state(self) -> ClockState:
        """The event-time clock as it stands (restored: as the last flush left it)."""
        return self.kernel.clock.state()

    @changes
    def adopt_clock(self, state: ClockState) -> None:
        """Take the clock of the whole job (Spark driver) and fire what it passed."""
        self._advance_watermark(self.kernel.clock.adopt(state))

    @changes
    def begin_batch(self) -> None:
        """Start one micro-batch of several ``add_batch`` calls (a join's two inputs):
        until :meth:`end_batch` each call decides lateness and retention with the
        watermark as it stands now, whatever the calls before it in the batch brought
        (as a task does under the job's clock, which moves only between batches)."""
        self.kernel.holding = True

    @changes
    def end_batch(self) -> None:
        """End the batch :meth:`begin_batch` started: the watermark moves with its rows."""
        self.kernel.holding = False
        self._advance_watermark(self.kernel.clock.coalesced())

    def _advance_watermark(self, candidate: int) -> None:
        """Move the watermark to ``candidate`` if that is further; fire what it passed."""
        raise NotImplementedError

    def _restore(self) -> None:
        """Restore the kernel from the store's checkpoint; the operator's own fields
        go to :meth:`_restore_fields` (nothing to restore: a fresh operator)."""
        fields = self.kernel.restore()
        if fields is not None:
            self._restore_fields(fields)

    def _restore_fields(self, fields: dict[str, JsonValue]) -> None:
        """Take the operator's own checkpoint fields (see :meth:`_restore`)."""
        raise NotImplementedError

    def take_result_batches(self) -> list[B]:
        """Hand over the pending results in columnar form, in emission order."""
        return self.kernel.outputs.take_results()

    def get_result(self) -> list[T]:
        """Hand over (and forget) every result produced so far."""
        return [r for b in self.take_result_batches() for r in b.to_results()]

    def get_errors(self) -> list[ErrorRecord]:
        """Hand over (and forget) the rejected input records."""
        return self.kernel.outputs.take_errors()


class EventOperator(KernelForwarding[ResultBatch, WindowResult]):
    """An operator of one input of keyed events: its single-record path.

    A subclass sets :attr:`decoder` (``None``: columns only) and gives
    :meth:`_add_decoded`; :meth:`_claim_partition` and :meth:`_counted_without_key`
    are its hooks.
    """

    decoder: RecordDecoder | None

    def _records_decoder(self, records: Sized) -> RecordDecoder:
        """The decoder of ``add_batch``'s ``records``, which carry no Kafka timestamp or
        key: refused (before any change) for a job that reads one of those, unless there
        are none."""
        decoder = self.decoder
        if decoder is None:
            raise InvalidArgumentError("add_batch of records needs a RecordDecoder")
        if (decoder.timestamp_field is None or decoder.kafka_key) and len(records):
            raise InvalidArgumentError(
                "add_batch of records: the job reads the Kafka record timestamp or key "
                "(timestamp_from / key_from: kafka), which records alone do not carry; add "
                "them one by one with add_message(..., wall_ms=, kafka_key=), or as an "
                "EventBatch"
            )
        return decoder

    def add_message(
        self,
        message: Mapping[str, Any],
        *,
        partition: int = 0,
        offset: int | None = None,
        wall_ms: int | None = None,
        kafka_key: bytes | str | int | None = None,
    ) -> StepStats:
        """Add one decoded input record (a dict in the job's input schema).

        ``wall_ms`` is its arrival time, which stands for its Kafka record timestamp (the
        event time of a job with ``timestamp_from: kafka``, as in ``simulate``);
        ``kafka_key`` is its Kafka record key (the key of a job with ``key_from: kafka``):
        its bytes, or the value they stand for, as in ``simulate`` (a string; an integer
        for ``key_format`` ``long`` or ``int``; hexadecimal text for ``bytes``).

        A replay is skipped; a record that does not decode is queued as an error record
        with its offset; any other goes to :meth:`_add_decoded`. What :func:`changes`
        does, written out: it runs for every record, and the wrapper cost a tenth of
        the path.
        """
        kernel = self.kernel
        if kernel.failed is not None or kernel.store.closed:
            kernel.check_usable()
        if self.decoder is None:
            raise InvalidArgumentError(
                "add_message needs a RecordDecoder (build the operator from a job)"
            )
        partition, offset, wall_ms = check_record_position(partition, offset, wall_ms)
        self._claim_partition(partition)  # BEFORE_CHANGE errors: raised before any change
        try:
            got = kernel.decode_one(
                self.decoder,
                message,
                source=0,
                partition=partition,
                offset=offset,
                record_time=wall_ms,
                record_key=kafka_key,
            )
            if isinstance(got, StepStats):
                if got.rejected:
                    self._counted_without_key()
                return got
            return self._add_decoded(got, wall_ms)
        except BaseException as exc:
            kernel.fail("add_message", exc)
            raise

    @changes
    def mark_consumed(self, partition: int, offset: int, *, source: int = 0) -> None:
        """Record that ``offset`` of ``partition`` was handled outside (e.g. sent to errors)."""
        partition, _, _ = check_record_position(partition, offset, next_offset=False)
        source, offset = check_source(source, 1), int(offset)  # an integer: checked
        self._claim_partition(partition)
        if self.kernel.positions.mark(source, partition, offset):
            self._counted_without_key()

    @staticmethod
    def _check_key(key: object) -> None:
        """A query's key is a key as the results name it: text (before, ``1`` raised a
        bare ``IndexError`` from the key table)."""
        if not isinstance(key, str):
            raise InvalidArgumentError(
                f"key must be text, as results name it (str({key!r}) for a number), got "
                f"{type(key).__name__}"
            )

    def _add_decoded(self, got: Decoded[DecodedEvent], wall_ms: int | None) -> StepStats:
        """Add one fresh record that decoded (the same as a batch of one)."""
        raise NotImplementedError

    def _claim_partition(self, partition: int) -> None:
        """Raise before any change if the operator cannot take records of ``partition``."""

    def _counted_without_key(self) -> None:
        """A record was handled without reaching a key (rejected, or marked consumed)."""
