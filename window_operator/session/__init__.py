"""Session windows for one task: time sessions (Jet) and tuple sessions (Samza).

**Time sessions** (``window.gap``). An event's interval is ``[ts, ts + gap]``; an event
joins every session its interval overlaps, inclusively, and extends it; an event whose
interval bridges two sessions merges them. Two events share a session iff their
timestamps chain with differences ``<= gap``, so out-of-order input ends in exactly the
sessions of sorted input. A session is reported as ``window_start`` = its first event
time and ``window_end`` = its last event time + ``gap``; it closes (ON_TIME) once the
watermark reaches that end (``window_end <= watermark``). A late event that changes a
closed session makes it LATE (per ``emit.late``); one that extends it past the
watermark reopens it, and it fires ON_TIME again at its new end.

**Tuple sessions** (``window.max_idle_messages`` = N). Per partition, a key's session
ends once N offsets of that partition have passed without the key (records handled
outside the operator, :meth:`SessionAggregator.mark_consumed`, count too): arrival
order defines sessions, event time does not. ``window_start`` / ``window_end`` are
*offsets* (the first offset of the session, the last offset + 1). A session is emitted
ON_TIME when it ends and then deleted (nothing can change it any more); every open one
is emitted at :data:`END_OF_TIME`. A key seen in several partitions has separate
sessions per partition (keys normally live in one partition).

Per call (a batch; a single message takes a scalar path with the same semantics):

1. replays (offset <= last applied offset of the partition) are no-ops;
2. with the watermark as it stood *before* the call, events past retention go to the
   error output (time sessions only): kept are events whose own interval ends within
   retention, and events inside the span of a retained session (see ``_retained``);
3. accepted events are sorted per (key, time) and cut into the batch's own sessions,
   pre-aggregated with NumPy, then swept together with the retained sessions of the
   touched keys: every group of touching intervals becomes one session, whose
   accumulators are *combined* (never recomputed from messages);
4. sessions that changed after they closed are marked late; the watermark (or, for
   tuple sessions, the partition offset) advances and every session it passed fires.

Retractions: a result is identified by ``(key, window_start, window_end)``. Whenever a
session is emitted under bounds that differ from what was emitted for it (or for the
sessions merged into it) before, a ``RETRACT`` result with empty ``values`` is emitted
for each superseded identity first, in the same step, carrying the ``update_seq`` of
the result that replaces it. A consumer that keeps the latest record per identity and
deletes on RETRACT therefore only ever holds current sessions. With ``emit.late: off``
closed sessions are never re-emitted, so their superseded identities are not retracted
either. Within a step, results are ordered by ``(window_end, window_start, key hash)``,
which does not depend on memory layout, so a restored operator emits the same output.

Retention: a session whose end + ``retention.time`` <= watermark is forgotten (as
Flink cleans a session up): it takes part in no merge, and an event just after it
starts a new session (which may then overlap it in reported bounds).

State (Window Meta Store, key-first as the seed's session window metadata)::

    b"S" + str(key) + i64(start)                         -> session record
    b"X" + i64(bucket of end) + str(key) + i64(start)    -> b""  (time sessions)
    b"P" + str(key) + i64(start)                         -> b""  (LATE pending)

For tuple sessions ``str(key)`` is followed by ``i64(partition)``. A session record
holds: version, flags (closed, late pending, early pending, emitted, extra), the
reported end, the next ``update_seq``, the last emitted bounds, the accumulator row
(:class:`AggregationSet` layout), then further emitted bounds (after merges) and the
payloads of non-full-state object operations. Full-state operations keep their values
in the Message Store ``str(key) + i64(ts) + i64(partition) + i64(offset)`` (tuple
sessions: ``str(key) + i64(partition) + i64(offset)``), which is keyed by key and time,
not by session, so a merge or extension never moves it. An ON_TIME firing does not
rewrite the record: a record still marked open whose end the watermark has passed is
known to have fired with its current bounds (open sessions are always cached).

The ``X`` records are an expiry and restore index in buckets of event time: a session
record is always indexed under a bucket at or after the bucket of its end (written one
bucket ahead, so a growing session is re-indexed rarely; older entries may be stale and
are checked against the record). Restore loads the sessions of buckets at or after the
watermark's (the open ones) plus the pending ones; expiry range-deletes whole buckets
past retention and only reads the index entries being deleted, never live keys.

Open sessions live in an in-memory write-back cache (one float64 row per session so
batches merge with NumPy) written once per :meth:`SessionAggregator.flush`; closed,
clean sessions are evicted then and read back only when a late event may touch them
(one short range scan of the key's records). Merges happen in memory, in the slot of
the earliest session (whose record key usually stays valid), so the store sees one
put per changed session per flush.
"""

from window_operator.session.operator import SessionAggregator

__all__ = ["SessionAggregator"]
