"""Records over ``output.max_record_bytes``: results become RESULT_ERROR records, and
rejected input records lose their copy (the runner test sends them through a broker)."""

from __future__ import annotations

from window_operator.results import ErrorCode, ErrorRecord
from window_operator.runtime.record_limit import MAX_REASON_BYTES, fit_errors, fit_results


def test_results_up_to_the_bound_are_sent_and_larger_ones_are_result_errors() -> None:
    records = [(b"k1", b"v" * 8), (b"k2", b"v" * 9), (None, b"v" * 10), (b"k" * 11, None)]
    fitted = fit_results(records, 10)
    assert fitted.records == [(b"k1", b"v" * 8), (None, b"v" * 10)]
    assert [(e.code, e.key) for e in fitted.errors] == [
        (ErrorCode.RESULT_ERROR, b"k2"),  # keyed by the window's output key
        (ErrorCode.RESULT_ERROR, None),  # a key over the bound alone is left out too
    ]
    assert "the result keyed k2 is 11 bytes, more than output.max_record_bytes (10)" in (
        fitted.errors[0].reason
    )
    assert fit_results(records[:1], 10).errors == []


def test_a_rejected_record_over_the_bound_keeps_its_position_not_its_copy() -> None:
    # the bound counts the headers too (the reason, and room for the others)
    small = ErrorRecord(ErrorCode.BAD_JSON, "bad", 1, 5, b"{", "t", key=b"k")
    big = ErrorRecord(ErrorCode.BAD_KEY, "too long", 2, 7, b"x" * 200, "t", key=b"k")
    fitted = fit_errors([small, big], 600)
    assert fitted[0] == small
    assert (fitted[1].key, fitted[1].raw, fitted[1].partition, fitted[1].offset) == (
        None,
        None,
        2,
        7,
    )
    assert fitted[1].reason.startswith("too long (the record is not copied here: its key and ")


def test_a_reason_that_quotes_a_large_value_is_cut() -> None:
    """A user operation's exception may quote the whole value: the reason header alone
    would then pass the bound the copy was checked against (a review found a 600 KB
    record whose reason made its error record 1.2 MB)."""
    value = "é" * 300_000
    err = ErrorRecord(ErrorCode.INTERNAL_ERROR, f"it raised {value}", 0, 7, value.encode(), "t")
    (fitted,) = fit_errors([err], 990_000)
    assert fitted.raw == err.raw  # the copy fits once the reason is cut
    head, cut = fitted.reason.split("... (")
    assert len(head.encode()) <= MAX_REASON_BYTES and head.startswith("it raised éé")
    assert cut == f"{len(err.reason.encode()) - len(head.encode())} bytes cut)"
