"""Reading sessions back: what a restore loads, what stays on disk, corrupt records."""

from __future__ import annotations

from pathlib import Path

import pytest
from sessionkit import S, ev, session_runtime

from stores.errors import StateCorruptError
from stores.rocks import StoreBatch
from window_operator.session.state import SESSIONS


# gap 10 s, allowed lateness 0, late updates batched per 10 s:
#
#   a@0 -> [0, 10]   b@5 -> [5, 15]   c@50 -> [50, 60]     x@40: watermark 40
#   a and b fire; b@6 (late) extends b: a LATE update pends
#   ---- snapshot, restore
#   loaded: c (open) and b (pending); a stays on disk until a late event touches it
def test_a_restore_loads_the_open_and_the_pending_sessions(tmp_path: Path) -> None:
    runtime = session_runtime(watermark={"allowed_lateness": 0}, emit={"late": "10s"})
    agg = runtime.open_task(tmp_path)
    agg.add_batch([ev("a", 0), ev("b", 5), ev("c", 50), ev("x", 40)])
    agg.add_message(ev("b", 6))
    agg.close()
    agg = runtime.open_task(tmp_path)
    cache = agg.cache
    assert sorted(cache.keys.name[int(cache.slots.kid[s])] for s in cache.live()) == ["b", "c"]
    agg.add_message(ev("a", 1))  # late: a is read back and updated
    assert "a" in {cache.keys.name[int(cache.slots.kid[s])] for s in cache.live()}
    (w,) = agg.get_windows("a", 0, 100 * S)
    assert (w.window_start, w.window_end, w.values["n"], w.fired) == (0, 11 * S, 2, True)
    agg.close()


def test_a_corrupt_session_record_is_reported_as_such(tmp_path: Path) -> None:
    runtime = session_runtime()
    agg = runtime.open_task(tmp_path)
    agg.add_message(ev("a", 0))
    agg.flush()
    ((key, _),) = agg.store.scan_range(SESSIONS.all())
    batch = StoreBatch()
    batch.put(SESSIONS.cf, key, b"\x09garbage")
    agg.store.commit(batch)
    agg.store.close()
    with pytest.raises(StateCorruptError):
        runtime.open_task(tmp_path)
