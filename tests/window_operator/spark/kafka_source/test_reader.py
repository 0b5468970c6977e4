"""The driver-side reader: read limits, AvailableNow, partition planning."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402
from sourcekit import produce, simple_items  # noqa: E402

from window_operator.spark.kafka_source import KafkaStreamReader, kafka_end_offsets  # noqa: E402
from window_operator.spark.kafka_source.options import parse_options  # noqa: E402
from window_operator.spark.kafka_source.schema import KafkaSourceError  # noqa: E402


def test_reader_respects_read_limits_and_available_now_target(
    kafka_bootstrap: str, topic: str
) -> None:
    produce(kafka_bootstrap, topic, simple_items(400))
    reader = KafkaStreamReader(
        parse_options(
            {
                "kafka.bootstrap.servers": kafka_bootstrap,
                "subscribe": topic,
                "maxOffsetsPerTrigger": "40",
            }
        )
    )
    start = reader.initialOffset()
    assert start == {topic: {str(p): 0 for p in range(4)}}
    assert reader.getDefaultReadLimit() == ReadMaxRows(40)
    everything = {topic: {str(p): 100 for p in range(4)}}
    # ReadAllAvailable ignores maxOffsetsPerTrigger.
    assert reader.latestOffset(start, ReadAllAvailable()) == everything
    limited = reader.latestOffset(start, ReadMaxRows(40))
    assert limited == {topic: {str(p): 10 for p in range(4)}}
    parts = reader.partitions(start, limited)
    assert [(p.partition, p.start, p.until) for p in parts] == [(p, 0, 10) for p in range(4)]
    assert reader.partitions(limited, limited) == []

    reader.prepareForTriggerAvailableNow()
    produce(kafka_bootstrap, topic, simple_items(40, tag="late"))
    assert reader.latestOffset(start, ReadAllAvailable()) == everything
    assert reader.latestOffset(everything, ReadMaxRows(40)) == everything
    assert kafka_end_offsets(kafka_bootstrap, [topic]) == {topic: {str(p): 110 for p in range(4)}}


def test_a_partition_that_ends_before_the_query_s_position_stops_the_query(
    kafka_bootstrap: str, topic: str
) -> None:
    """(It waited, then read on from its position once records came past it: the ones
    written below it, where the broker lost records, were never read nor told.)"""
    produce(kafka_bootstrap, topic, simple_items(400))
    options = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic}
    reader = KafkaStreamReader(parse_options(options))
    ahead = {topic: {"0": 100, "1": 100, "2": 150, "3": 100}}
    with pytest.raises(
        KafkaSourceError,
        match=rf"{topic}\[2\] ends at offset 100, before offset 150 the query continues from: "
        "the broker lost records the query had read",
    ):
        reader.latestOffset(ahead, ReadAllAvailable())
    lenient = KafkaStreamReader(parse_options({**options, "failOnDataLoss": "false"}))
    assert lenient.latestOffset(ahead, ReadAllAvailable()) == ahead
    # a start there is refused at once (Spark takes startingOffsets only for a new query)
    starting = json.dumps({topic: {"2": 150}})
    with pytest.raises(KafkaSourceError, match=rf"gives {topic}\[2\] offset 150, past the "):
        KafkaStreamReader(parse_options({**options, "startingOffsets": starting})).initialOffset()
    at_end = json.dumps({topic: {"2": 100, "3": -1}})
    reader = KafkaStreamReader(parse_options({**options, "startingOffsets": at_end}))
    assert reader.initialOffset() == {topic: {"0": 0, "1": 0, "2": 100, "3": 100}}


def test_min_partitions_splits_ranges() -> None:
    reader = KafkaStreamReader(
        parse_options({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "minPartitions": "8"})
    )
    start = {"t": {"0": 0, "1": 10, "2": 7}}
    end = {"t": {"0": 300, "1": 110, "2": 7}}
    parts = reader.partitions(start, end)
    assert len(parts) >= 8
    for p in (0, 1):
        ranges = sorted((x.start, x.until) for x in parts if x.partition == p)
        assert ranges[0][0] == int(start["t"][str(p)]) and ranges[-1][1] == end["t"][str(p)]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    # Off by default: one input partition per Kafka partition with data.
    reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": "x:1", "subscribe": "t"}))
    assert [(x.partition, x.start, x.until) for x in reader.partitions(start, end)] == [
        (0, 0, 300),
        (1, 10, 110),
    ]


_RUNNER_EXIT = """
import sys
sys.modules["__main__"].__file__ = "/x/pyspark/sql/streaming/python_streaming_source_runner.py"
from window_operator.spark.kafka_source import KafkaStreamReader
from window_operator.spark.kafka_source.options import parse_options
reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": "x:1", "subscribe": "t"}))
try:
    raise ERROR("the runner's socket")
finally:
    reader.stop()
"""


@pytest.mark.parametrize("error", ["EOFError", "ValueError"])
def test_the_source_runner_ends_quietly_once_spark_closed_its_socket(error: str) -> None:
    """A query stopped under load: Spark closed the runner's socket before killing it,
    and the runner printed its EOFError and BrokenPipeError tracebacks into the job's
    stderr after Ctrl-C (a CI run of the demo's Ctrl-C test). Other errors still show."""
    import subprocess
    import sys

    script = _RUNNER_EXIT.replace("ERROR", error)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if error == "EOFError":
        assert (proc.returncode, proc.stderr) == (0, "")
    else:
        assert proc.returncode == 1 and "ValueError: the runner's socket" in proc.stderr
