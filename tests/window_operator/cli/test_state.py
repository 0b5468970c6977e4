"""``inspect``: its JSON lines (stored values written as results are, failures shown)
and the key it looks up."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from window_operator.cli.common import parse_time
from window_operator.cli.state import _group_key, _inspect_json
from window_operator.config import parse_any_config, parse_config
from window_operator.results import FailedValue


def test_stored_values_are_written_as_results_are_and_failures_are_shown() -> None:
    line: dict[str, object] = {
        "key": "a",
        "values": {
            "n": np.int64(3),  # what orjson writes with the job's options
            "big": {"x": 2**80, "nan": float("nan")},  # the stdlib fallback: NaN is null
            "failed": FailedValue("aggregation 'failed': finish raised KeyError"),
            "set": {"a"},
        },
    }
    assert orjson.loads(_inspect_json(line)) == {
        "key": "a",
        "values": {
            "n": 3,
            "big": {"x": 2**80, "nan": None},
            "failed": {"error": "aggregation 'failed': finish raised KeyError"},
            "set": {"error": "no JSON form: set"},
        },
    }


def test_inspect_takes_a_several_field_key_as_any_json_array_of_it() -> None:
    doc = {
        "job": "j",
        "input": {"key": ["country", "year"], "timestamp": "ts"},
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": [{"name": "n", "op": "count"}],
    }
    config = parse_config(doc, base_dir=Path("."))
    hint = ' (a key of country, year is a JSON array, such as \'["<country>","<year>"]\')'
    assert _group_key(config, '["US", 2024]') == ('["US","2024"]', hint)
    assert _group_key(config, '["US","2024"]') == ('["US","2024"]', hint)
    assert _group_key(config, "US") == ("US", hint)  # not JSON: as it is, with the hint
    assert _group_key(config, '["US"]') == ('["US"]', hint)  # one field short
    one = parse_config({**doc, "input": {"key": "country", "timestamp": "ts"}}, base_dir=Path("."))
    assert _group_key(one, '["US", 2024]') == ('["US", 2024]', "")
    # a number written otherwise than the job writes its key: looked up as given (a
    # string key "1e3" may exist), and a miss says which key the job made of it
    assert _group_key(one, "1e3") == ("1e3", " (the number 1e3 in the input is the key "
                                      "'1000.0': --key 1000.0)")  # fmt: skip
    assert _group_key(one, "1000") == ("1000", "")
    # one global key, or the Kafka record key: the text as it is, without a field's hint
    for inp in ({"timestamp": "ts"}, {"key_from": "kafka", "timestamp": "ts"}):
        other = parse_config({**doc, "input": inp}, base_dir=Path("."))
        assert _group_key(other, '["US", 2024]') == ('["US", 2024]', "")


@pytest.mark.parametrize(
    ("on", "hint"),
    [
        (["oid"], " (a key of oid is its value as JSON, such as 5 or '\"a\"')"),
        (["oid", "n"], ' (a key of oid, n is a JSON array, such as \'["<oid>","<n>"]\')'),
        ([], " (a join without on fields keeps every message under the key [])"),
    ],
)
def test_a_missed_join_key_says_how_a_key_of_the_on_fields_is_written(
    on: list[str], hint: str
) -> None:
    """``inspect --key '[14, 2]'`` of a join on one field said only that nothing was
    stored (a walkthrough): a miss names the key's form."""
    side = {"timestamp": "ts"}
    doc = {
        "job": "j",
        "join": {
            "left": {"name": "a", **side},
            "right": {"name": "b", **side},
            "on": on,
            "range": "1s",
        },
    }
    config = parse_any_config(doc, base_dir=Path("."))
    assert _group_key(config, "[14, 2]") == ("[14, 2]", hint)


def test_inspect_takes_a_kafka_key_as_its_key_format_writes_its_text() -> None:
    """A ``long`` key is any spelling of its integer, a ``bytes`` key hexadecimal text in
    either case; a key the format cannot have is looked up as given, with the reason."""
    doc = {
        "job": "j",
        "input": {"key_from": "kafka", "key_format": "long", "timestamp": "ts"},
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": [{"name": "n", "op": "count"}],
    }
    longs = parse_config(doc, base_dir=Path("."))
    assert _group_key(longs, "1234") == ("1234", "")
    assert _group_key(longs, "+01234") == ("1234", "")
    assert _group_key(longs, "user") == (
        "user",
        ' (a Kafka record key of key_format long is an integer, got string "user")',
    )
    doc["input"] = {**doc["input"], "key_format": "bytes"}
    hashes = parse_config(doc, base_dir=Path("."))
    assert _group_key(hashes, "F9 7C") == ("f97c", "")
    assert _group_key(hashes, "f9x")[0] == "f9x"


def test_inspect_times_without_a_zone_are_utc_as_the_log_prints_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--from 2023-11-14 22:15:00`` (copied from a log line) is UTC, whatever the
    machine's zone; before, it was the machine's local time."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        want = 1_700_000_100_000
        assert parse_time("2023-11-14 22:15:00", 0) == want
        assert parse_time("2023-11-14T22:15:00Z", 0) == want
        assert parse_time("2023-11-14T17:15:00-05:00", 0) == want
        assert parse_time(str(want), 0) == want and parse_time(None, 7) == 7
    finally:
        monkeypatch.undo()
        time.tzset()


def test_inspect_refuses_a_range_that_ends_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--from 10 --to 5`` printed windows (a review)."""
    from window_operator.cli import main

    job = tmp_path / "job.yaml"
    job.write_text(
        "job: x\ninput: {key: k, timestamp: ts, topic: t}\n"
        "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n"
        f"state: {{dir: {tmp_path / 'state'}}}\n"
    )
    assert main(["inspect", "--config", str(job), "--key", "a", "--from", "10", "--to", "5"]) == 2
    assert "--from (10) must be before --to (5)" in capsys.readouterr().err


@pytest.mark.parametrize(("on", "key", "stored"), [([], "[]", []), (["v", "w"], "[1, 2]", [1, 2])])
def test_inspect_of_a_join_key_with_another_number_of_fields_is_a_miss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on: list[str], key: str, stored: list[int]
) -> None:
    """A key of another number of fields than ``on`` has (``5`` for a cross join, or
    for a join on two fields) raised a ValueError with a traceback, and ``[]``, a cross
    join's one key, an IndexError (a walkthrough): a miss with the hint, and the key."""
    from window_operator.cli import main

    side = "timestamp: ts"
    job = tmp_path / "job.yaml"
    job.write_text(
        f"job: x\njoin:\n  left: {{name: a, topic: ta, {side}}}\n"
        f"  right: {{name: b, topic: tb, {side}}}\n  on: {on}\n  range: 1s\n"
    )
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"source":"a","ts":1000,"v":1,"w":2}\n{"source":"b","ts":1500,"v":1,"w":2}\n')
    state = str(tmp_path / "state")
    simulate = ["simulate", "--config", str(job), "--input", str(lines), "--state-dir", state]
    assert main([*simulate, "--keep-open"]) == 0
    capsys.readouterr()
    inspect = ["inspect", "--config", str(job), "--state-dir", state, "--key"]
    assert main([*inspect, "5"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("no stored state for key '5' in that range (a ")
    assert main([*inspect, key]) == 0
    found = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(m["source"], m["key"]) for m in found] == [("a", stored), ("b", stored)]
