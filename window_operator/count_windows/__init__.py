"""Tuple windows: per-key count windows and per-partition offset windows.

Two window shapes share one operator, :class:`CountWindowAggregator` (``window.type``):

``count`` (the Flink ``countWindow``, :mod:`.per_key`)
    A key's messages are numbered ``0, 1, 2, ...`` in arrival order (per key, across
    the operator's partitions, in the order the operator receives them). The window
    starting at ``s`` (a multiple of ``step``) holds the key's messages ``[s, s +
    size)``; ``window_start`` / ``window_end`` of a result are these message indices,
    not times. Each key's messages are accumulated into frames of ``step`` messages
    (Jet frames; no event is kept except for full-state operations, whose values go
    to the Message Store) and a window is the combine of its ``size // step`` frames,
    or, with deduct, the previous window minus its trailing frame plus the leading one.

    * Full-size policy: a window is emitted ``ON_TIME`` the moment it holds ``size``
      messages.
    * End of input (``timeout(END_OF_TIME)``): every window that still holds messages
      but is not full is emitted ``ON_TIME`` as it stands, so every message appears in
      the output. Should input continue afterwards, those windows are emitted again
      (``update_seq`` + 1) when they change.
    * Early policy: every ``emit.early`` of wall clock, the open windows that changed
      since the last EARLY emission are emitted ``EARLY``.
    * Arrival order defines the windows, so there are no late arrivals; replays
      (offset <= last applied offset of the partition) are no-ops.
    * Retention: only the frames of open windows are kept, in a ring of ``size //
      step`` slots per key (:mod:`.ring`, :mod:`.state`), so a key's state stays bounded
      without deletes. Past windows are not kept (``get_windows`` shows the open ones).
      Keys are never released: a key's count numbers its future windows and its partial
      window can still produce a result (when it fills, or at the end of input), and
      there is no event-time retention to expire either, so the state of every key ever
      seen stays, in memory and in the store. Bounding it would change results.
    * Order-sensitive operations (``first``, ``last``, ``collect``) follow the
      message index, i.e. arrival order; two-input operations (``linreg``) still get
      the event time as ``x``.

``offsets`` (the seed's tuple-based window, :mod:`.offsets`)
    The window key is the start offset (a multiple of ``step``) and a window covers
    offsets ``[start, start + size)`` of one input partition; results are per
    ``(grouping key, window)`` as for time windows. Offsets act as event time with zero
    lateness: a window is emitted ``ON_TIME`` once the partition has delivered an
    offset ``>= start + size`` (offsets may have gaps, so messages are not counted), or
    at the end of input; EARLY results as for time windows. This is the time-window
    aggregator on the offset axis. One operator covers **one** partition; a record of a
    second partition raises :class:`OffsetsPartitionError`.

Neither shape fires on event time: adopting the job's clock (``adopt_clock``) only
takes its wall clock. The parts: the operator kernel (positions, outputs, checkpoint,
timers), :mod:`.numbering` (message indices per key), :mod:`.firing` (which windows
fire, which frames stay), :mod:`.evaluator` (window values) and :mod:`.ring` (the state).
"""

from window_operator.count_windows.offsets import OffsetsPartitionError
from window_operator.count_windows.operator import CountWindowAggregator
from window_operator.errors import IncompatibleStateError

__all__ = [
    "CountWindowAggregator",
    "IncompatibleStateError",
    "OffsetsPartitionError",
]
