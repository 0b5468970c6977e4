"""What the join hands out: columnar batches (as emitted) and their JSON lines."""

from __future__ import annotations

import numpy as np

from window_operator.join import LEFT, RIGHT, JoinKind, JoinResult, JoinResultBatch
from window_operator.join.emission import JoinEmitter
from window_operator.join.keys import JoinKeyTable
from window_operator.join.outer import OuterRow
from window_operator.join.reads import Partners
from window_operator.kernel import OutputBuffer

INT = np.int64


def test_matches_put_each_record_on_its_own_side() -> None:
    keys = JoinKeyTable(("id",))
    keys.ids_of([1, 2])
    out: OutputBuffer[JoinResultBatch] = OutputBuffer()
    emitter = JoinEmitter(keys, out)
    own = np.array([b'{"o":0}', b'{"o":1}'], dtype=object)
    partners = Partners(
        np.array([1], dtype=INT), np.array([50], dtype=INT), np.array([7], dtype=INT),
        np.array([b'{"p":0}'], dtype=object),
    )  # fmt: skip
    kids, ts, pos = np.array([0, 1], INT), np.array([5, 6], INT), np.array([10, 11], INT)
    emitter.matches(RIGHT, kids, ts, pos, own, partners)
    emitter.rows(JoinKind.LEFT_UNMATCHED, LEFT, [OuterRow(0, 3, b'{"u":1}', True, False)])
    (match, unmatched) = out.take_results()
    assert match.to_results() == [JoinResult(JoinKind.MATCH, {"id": 2}, {"p": 0}, {"o": 1}, 50, 6)]
    # the pair's identity: the partner's position on the left, the new message's on the right
    assert match.left_pos is not None and match.right_pos is not None
    assert (match.left_pos.tolist(), match.right_pos.tolist()) == ([7], [11])
    assert match.to_json_lines() == (
        b'{"kind":"MATCH","key":{"id":2},"left":{"p":0},"right":{"o":1},'
        b'"left_ts":50,"right_ts":6}\n'
    )
    assert unmatched.to_json_lines() == (
        b'{"kind":"LEFT_UNMATCHED","key":{"id":1},"left":{"u":1},"right":null,'
        b'"left_ts":3,"right_ts":null}\n'
    )
