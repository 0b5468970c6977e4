"""``simulate`` of an Avro job: a line gets the verdict the job gives the record
``produce`` writes for it (before, lines were read as JSON whatever the format, so a
field the schema types otherwise was applied, and a missing field with a default was
rejected, where the job on Kafka did the opposite)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson

from window_operator.codecs.result_schema import unwritten_values
from window_operator.config import parse_any_config
from window_operator.job import build_runtime
from window_operator.join import build_join_runtime
from window_operator.simulate import SimulationSummary, simulate

BASE = 1_700_000_000_000
SCHEMA = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "v", "type": ["null", "double"], "default": None},
    ],
}


def _simulate(
    runtime: Any, tmp_path: Path, lines: list[dict[str, Any]] | bytes, batch_size: int = 10
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], SimulationSummary]:
    """``simulate`` of ``lines`` (dicts, one JSON line each, or the file's bytes)."""
    source = tmp_path / "in.jsonl"
    text = lines if isinstance(lines, bytes) else b"".join(orjson.dumps(x) + b"\n" for x in lines)
    source.write_bytes(text)
    out, errors = io.BytesIO(), io.BytesIO()
    summary = simulate(runtime, source, out, errors_out=errors, batch_size=batch_size)
    results = [orjson.loads(x) for x in out.getvalue().splitlines()]
    return results, [orjson.loads(x) for x in errors.getvalue().splitlines()], summary


def _avro_job(
    tmp_path: Path, schema: dict[str, Any], key: str, aggregations: list[dict[str, Any]]
) -> Any:
    """The runtime of a tumbling 10 s job over an Avro input of ``schema``."""
    (tmp_path / "input.avsc").write_bytes(orjson.dumps(schema))
    inp = {"format": "avro", "avro_schema": "input.avsc", "key": key, "timestamp": "ts"}
    window = {"type": "tumbling", "size": "10s"}
    job = {"job": "avro", "input": inp, "window": window, "aggregations": aggregations}
    return build_runtime(parse_any_config(job, base_dir=tmp_path))


def _join_job(tmp_path: Path) -> Any:
    """The runtime of a join whose left input (orders) is Avro, its right one JSON."""
    order = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "long"}, {"name": "ts", "type": "long"}],
    }
    (tmp_path / "order.avsc").write_bytes(orjson.dumps(order))
    left = {"name": "orders", "timestamp": "ts", "format": "avro", "avro_schema": "order.avsc"}
    right = {"name": "shipments", "timestamp": "ts"}
    join = {"left": left, "right": right, "on": ["id"], "range": "1h"}
    job = {"job": "os", "join": join, "retention": {"time": "1h"}}
    return build_join_runtime(parse_any_config(job, base_dir=tmp_path))


def test_an_avro_job_reads_each_line_as_its_topic_would_hold_it(tmp_path: Path) -> None:
    aggs = [{"name": "n", "op": "count"}, {"name": "s", "op": "sum", "field": "v"}]
    runtime = _avro_job(tmp_path, SCHEMA, "page", aggs)
    lines = [
        {"page": "/a", "ts": BASE, "v": 1.5},
        {"page": "/a", "ts": BASE + 1, "v": 2},  # an integer for a double fits
        {"page": "/a", "ts": BASE + 2},  # v takes its default (null)
        {"page": 42, "ts": BASE + 3, "v": 1.0},  # a number where the schema has a string
        {"page": "/a", "ts": True, "v": 1.0},  # not a long (fastavro alone wrote 1)
        {"page": "/a", "ts": BASE + 4, "v": 4.0, "extra": "x"},  # not in the schema
    ]
    results, errors, summary = _simulate(runtime, tmp_path, lines)
    assert [(e["code"], e["offset"]) for e in errors] == [("BAD_AVRO", 3), ("BAD_AVRO", 4)]
    assert "Click.page is int 42, the schema has string" in errors[0]["reason"]
    assert "timestamp-millis" in errors[1]["reason"]
    assert errors[0]["raw"] == orjson.dumps(lines[3]).decode()
    assert summary.applied == 4
    assert [(r["key"], r["values"]) for r in results] == [("/a", {"n": 4, "s": 7.5})]


def test_a_join_reads_its_avro_input_as_its_topic_would_hold_it(tmp_path: Path) -> None:
    lines = [
        {"source": "orders", "id": 1, "ts": BASE},
        {"source": "orders", "id": "2", "ts": BASE},  # a string where the schema has a long
        {"source": "shipments", "id": 1, "ts": BASE + 60_000},
        {"source": "shipments", "id": "2", "ts": BASE + 60_000},  # a JSON input: any type
        {"source": "orders", "id": 1, "ts": BASE, "offset": 0},  # a replay, not an error
    ]
    results, errors, summary = _simulate(_join_job(tmp_path), tmp_path, lines)
    assert [(e["code"], e["offset"], e["topic"]) for e in errors] == [("BAD_AVRO", 1, "orders")]
    assert errors[0]["raw"] == orjson.dumps(lines[1]).decode()
    assert sorted(m["key"]["id"] for m in results if m["kind"] == "MATCH") == [1]
    assert summary.applied == 3 and summary.replayed == 1


def test_a_replay_of_a_rejected_join_line_is_a_replay_whatever_the_batch(tmp_path: Path) -> None:
    """Before, a replay in the same batch as the line it repeats, rejected as BAD_AVRO,
    reached the operator as the line's JSON and joined (with ``--batch-size 10``; not
    with 1): on Kafka that record never joins."""
    lines = [
        {"source": "orders", "id": "2", "ts": BASE},  # BAD_AVRO: a string for a long
        {"source": "orders", "id": "2", "ts": BASE, "offset": 0},  # its replay
        {"source": "shipments", "id": "2", "ts": BASE + 1},
    ]
    for batch in (1, 10):
        results, errors, summary = _simulate(_join_job(tmp_path), tmp_path, lines, batch)
        kinds = [r["kind"] for r in results]
        codes = [e["code"] for e in errors]
        assert (kinds, codes) == ([], ["BAD_AVRO"]), batch
        assert (summary.applied, summary.replayed) == (1, 1), batch


def test_a_schema_with_bytes_reads_its_lines_as_json(tmp_path: Path) -> None:
    """JSON has no bytes: such a schema's lines cannot be written with it, so they are
    read as JSON (before, every line was BAD_AVRO)."""
    schema = {
        "type": "record",
        "name": "Blob",
        "fields": [
            {"name": "k", "type": "string"},
            {"name": "ts", "type": "long"},
            {"name": "data", "type": "bytes"},
        ],
    }
    runtime = _avro_job(tmp_path, schema, "k", [{"name": "n", "op": "count"}])
    lines = [{"k": "a", "ts": BASE, "data": "\u00ff\u0000"}, {"k": "a", "ts": BASE + 1, "data": ""}]
    results, errors, summary = _simulate(runtime, tmp_path, lines)
    assert errors == [] and summary.applied == 2
    assert [r["values"] for r in results] == [{"n": 2}]


def test_errors_of_an_avro_job_come_in_input_order(tmp_path: Path) -> None:
    runtime = _avro_job(tmp_path, SCHEMA, "page", [{"name": "s", "op": "sum", "field": "v"}])
    lines = (
        b'{"page": "/a", "ts": %d, "v": NaN}\n'  # NON_FINITE_VALUE, from the decoder
        b'{"page": 1, "ts": %d}\n'  # BAD_AVRO, from the read-back
        b"not json\n" % (BASE, BASE)  # BAD_AVRO: produce writes it as it is
    )
    _, errors, _ = _simulate(runtime, tmp_path, lines)
    got = [(e["code"], e["offset"]) for e in errors]
    assert got == [("NON_FINITE_VALUE", 0), ("BAD_AVRO", 1), ("BAD_AVRO", 2)]


def test_an_avro_output_is_written_with_its_schema_as_read_prints_it(tmp_path: Path) -> None:
    """``simulate`` wrote every result as JSON whatever ``output.avro_schema`` said: a
    default the schema adds was missing, an aggregation it leaves out was there, a
    ``float`` showed the double, and a value the schema cannot hold was a result, where
    on Kafka it is a RESULT_ERROR."""
    out_schema = {
        "type": "record",
        "name": "Out",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "window_start", "type": "long"},
            {"name": "window_end", "type": "long"},
            {"name": "kind", "type": "string"},
            {"name": "update_seq", "type": "long"},
            {
                "name": "values",
                "type": {
                    "type": "record",
                    "name": "V",
                    "fields": [
                        {"name": "n", "type": "long"},
                        {"name": "m", "type": ["null", "float"]},
                        {"name": "f", "type": ["null", "double"], "default": None},
                    ],
                },
            },
            {"name": "source", "type": "string", "default": "wo"},
        ],
    }
    (tmp_path / "out.avsc").write_bytes(orjson.dumps(out_schema))
    (tmp_path / "input.avsc").write_bytes(orjson.dumps(SCHEMA))
    inp = {"format": "avro", "avro_schema": "input.avsc", "key": "page", "timestamp": "ts"}
    aggs = [
        {"name": "n", "op": "count"},
        {"name": "m", "op": "mean", "field": "v"},
        {"name": "s", "op": "sum", "field": "v"},  # not in the output schema
    ]
    job = {
        "job": "avro",
        "input": inp,
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": aggs,
        "output": {"format": "avro", "avro_schema": "out.avsc"},
    }
    config = parse_any_config(job, base_dir=tmp_path)
    # run and simulate warn of what the schema leaves unwritten (a misspelt name)
    assert unwritten_values(config) == [
        "output.avro_schema has no values field for aggregation(s) s: computed but never written",
        "output.avro_schema values field(s) f name no aggregation: always written as their default",
    ]
    runtime = build_runtime(config)
    lines = [{"page": "/a", "ts": BASE, "v": 0.1}, {"page": "/a", "ts": BASE + 1, "v": 0.2}]
    results, errors, _ = _simulate(runtime, tmp_path, lines)
    assert errors == []
    (result,) = results
    assert result["source"] == "wo"
    assert result["values"] == {"n": 2, "m": 0.15000000596046448, "f": None}
    # a value the schema cannot hold: a RESULT_ERROR, as the job on Kafka sends it
    out_schema["fields"][5]["type"]["fields"][2] = {"name": "f", "type": ["null", "double"]}
    (tmp_path / "out.avsc").write_bytes(orjson.dumps(out_schema))
    job["aggregations"] = [*aggs, {"name": "f", "op": "first", "field": "page"}]
    runtime = build_runtime(parse_any_config(job, base_dir=tmp_path))
    results, errors, summary = _simulate(runtime, tmp_path, lines)
    assert results == []
    assert [e["code"] for e in errors] == ["RESULT_ERROR"]
