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

Retractions: a result is identified by ``(key, window_start, window_end)``. Whenever a
session is emitted under bounds that differ from what was emitted for it (or for the
sessions merged into it) before, a ``RETRACT`` result with empty ``values`` is emitted
for each superseded identity first, in the same step, carrying the ``update_seq`` of
the result that replaces it. A consumer that keeps the latest record per identity and
deletes on RETRACT therefore only ever holds current sessions. With ``emit.late: off``
closed sessions are never re-emitted, so their superseded identities are not retracted
either.

Retention: a session whose end + ``retention.time`` <= watermark is forgotten (as
Flink cleans a session up): it takes part in no merge, and an event just after it
starts a new session (which may then overlap it in reported bounds).

The parts (composed by :class:`SessionAggregator` over the operator kernel):
:mod:`.merge` (pure: cut a batch into sessions, merge them with existing ones),
:mod:`.trigger` (pure: fire, late, retract, retention, expiry decisions),
:mod:`.cache` (the sessions in memory), :mod:`.store` and :mod:`.loader` (RocksDB,
through the keyspaces and codecs of :mod:`.state`) and :mod:`.emitter` (results).
"""

from window_operator.session.operator import SessionAggregator

__all__ = ["SessionAggregator"]
