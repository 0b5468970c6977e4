"""Windowed stream-stream joins over RocksDB: the seed's Join Window Operator, for one task.

A join task reads two inputs, ``left`` and ``right`` (named ``join.left.name`` and
``join.right.name``; source indexes :data:`LEFT` ``0`` and :data:`RIGHT` ``1``, which key
its offsets and watermark inputs), and pairs their messages with equal join fields (``join.on``)
under one condition on ``d = right.ts - left.ts``:

* ``range: D`` -- ``0 <= d <= D`` (``RANGE D PRECEDING`` over the left stream);
* ``between: [lo, hi]`` -- ``lo <= d <= hi``;
* ``rows: n`` -- ``ROWS n PRECEDING``: a right message joins the ``n`` most recent left
  messages with its join key, in arrival order (the left window), while a left message
  joins every retained right message with its key (the right stream's default
  ``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`` window). Inner joins only.

**Pairing rule.** A message is joined once, when it arrives, against the *other*
input's stored messages that satisfy the condition, and is then stored itself (the
seed's "first occurrence": a message belongs to exactly one window, so sliding windows
never pair it twice). Every pair is therefore produced exactly once, by whichever of
its two messages arrives second. A late message (behind the watermark) still joins
everything stored within retention, so late arrivals produce additional results.

**Watermark.** Per input partition: the largest event time seen minus
``watermark.allowed_lateness``; per input: the minimum over its partitions; the join's
watermark is the minimum over both inputs and never decreases. A partition idle for
longer than ``watermark.idle_timeout`` (wall clock) stops holding it back, and so does
an input that has sent nothing for that long since the task started.

**Retention.** A message whose event time is more than ``retention.time`` behind the
watermark is rejected (error ``OUT_OF_RETENTION``). A stored message expires once no
accepted message can match it any more: a left message when ``ts + hi + retention <
watermark``, a right message when ``ts - lo + retention < watermark`` (rows joins:
``ts + retention < watermark``, and a left message also once ``n`` newer left messages
of its key arrived). Expired messages are removed by range deletes: one per input for
time-first layouts, lazily per join-key prefix (through a per-prefix expiry index) for
key-first layouts; rows joins delete the few expired keys one by one.

**Operator.** :class:`JoinOperator` satisfies the typed operator protocol
(:class:`~window_operator.kernel.WindowOperator` of :class:`JoinRows`,
:class:`JoinResultBatch` and :class:`JoinWindow`): ``add_batch(rows)`` takes decoded
rows that name their source; ``add_records`` / ``add_message`` take records of an input
by name. Results are emitted as soon as they are known (the seed's join defaults: per
incoming message, and per late arrival); the ``emit`` section of a job does not apply
to joins (and ``retention.size`` is refused).

**Outer joins** (``kind: left`` / ``full``). A left row that has not matched is emitted
once as ``LEFT_UNMATCHED`` when the watermark proves no on-time right row can match it
(``ts + hi < watermark``); for full joins a right row likewise as ``RIGHT_UNMATCHED``
(``ts - lo < watermark``). If a late message later matches a row already emitted as
unmatched, the ``MATCH`` is emitted together with a ``RETRACT`` record that repeats the
unmatched record exactly (only ``kind`` differs); a consumer drops one equal unmatched
record per ``RETRACT``. A row is never emitted unmatched after it has matched.

**Output record** (one JSON object per result, see :meth:`JoinResultBatch.to_json_lines`)::

    {"kind": "MATCH" | "LEFT_UNMATCHED" | "RIGHT_UNMATCHED" | "RETRACT",
     "key": {<on field>: <value>, ...},       # {} when there are no equal fields
     "left": {...} | null, "right": {...} | null,
     "left_ts": <ms> | null, "right_ts": <ms> | null}

``left`` / ``right`` carry the input record (all its fields, or ``join.<side>.fields``).

**Message Store** (column family ``messages``), one side tag byte (``L``/``R``) and then
the seed's key matrix, chosen by ``join.store`` (``auto``: :func:`choose_layout`):

* ``ts_offset``         ``<timestamp><offset>``              (no equal fields)
* ``ts_fields_offset``  ``<timestamp><equal_flds><offset>``  (small windows)
* ``fields_ts_offset``  ``<equal_flds><timestamp><offset>``  (large windows)
* ``fields_offset``     ``<equal_flds><offset>``             (rows joins; offset = arrival seq)

The "offset" of a time layout is the message *position* ``partition * 2**48 + offset``
(:func:`message_position`), unique per input across its partitions. The value is the
record's JSON, preceded by what the key does not hold (see
:mod:`~window_operator.join.state`, which declares every keyspace and value codec): the
length-prefixed equal fields for ``ts_offset``, event time and position for
``fields_offset``.

**Window Meta Store** (column family ``window_meta``):

* ``W <side> i64(frame)``: per input and event-time frame (tumbling, ``frame_ms``): the
  count, min/max event time and min/max position of the messages in it -- the seed's
  time-window metadata; a message belongs to the first (only) frame that includes it;
* ``U <side> i64(ts) i64(position)``: the outer-join state of a row that has not
  matched yet (a flag says whether it was emitted unmatched) and its message;
* ``X <side> i64(bucket) <equal_flds>``: the per-prefix expiry index of key-first
  layouts (which join keys have messages in which ``sweep_ms`` bucket).

**Hot path.** Time joins keep a write-through cache of the recent messages of each
input in memory, sorted by ``(join key, ts)``: a batch is probed against the other
input's cache with vectorized range searches, and only probes that reach below the
cache's horizon (late messages, or right after a restore) read RocksDB, with one range
scan per join key (key-first layouts) or per merged time range (time-first layouts).
New messages are written with one bulk put per input and flush; state and input
offsets are committed in the same WriteBatch, and reopening the store restores both.
"""

from window_operator.join.common import (
    LEFT,
    POSITION_BITS,
    RIGHT,
    JoinKey,
    UnknownSourceError,
    message_position,
)
from window_operator.join.decoding import JoinDecoder, JoinDecodeResult, JoinRecord, JoinRows
from window_operator.join.layouts import LARGE_WINDOW_MS, StoreLayout, choose_layout
from window_operator.join.operator import JoinOperator
from window_operator.join.results import (
    JoinKind,
    JoinMessage,
    JoinResult,
    JoinResultBatch,
    JoinWindow,
)
from window_operator.join.runtime import JoinRuntime, build_join_runtime
from window_operator.join.spec import JoinSpec

__all__ = [
    "LARGE_WINDOW_MS",
    "LEFT",
    "POSITION_BITS",
    "RIGHT",
    "JoinDecodeResult",
    "JoinDecoder",
    "JoinKey",
    "JoinKind",
    "JoinMessage",
    "JoinOperator",
    "JoinRecord",
    "JoinResult",
    "JoinResultBatch",
    "JoinRows",
    "JoinRuntime",
    "JoinSpec",
    "JoinWindow",
    "StoreLayout",
    "UnknownSourceError",
    "build_join_runtime",
    "choose_layout",
    "message_position",
]
