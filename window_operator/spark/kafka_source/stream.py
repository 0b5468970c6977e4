"""Entry points: a streaming DataFrame over Kafka, and the end offsets of topics.

:func:`read_kafka_stream` prefers Spark's built-in ``kafka`` format when its jar is on
the classpath and falls back to this package's ``wo_kafka`` Python data source.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from window_operator.spark.kafka_source.offsets import offsets_to_json
from window_operator.spark.kafka_source.options import parse_options
from window_operator.spark.kafka_source.queries import BrokerQueries
from window_operator.spark.kafka_source.reader import KafkaDataSource
from window_operator.spark.kafka_source.schema import KAFKA_COLUMNS, SOURCE_NAME

__all__ = ["builtin_kafka_available", "kafka_end_offsets", "read_kafka_stream"]

_registered: weakref.WeakSet[Any] = weakref.WeakSet()
_BUILTIN_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
# Options only this package's source understands (not passed to Spark's built-in source).
_OWN_OPTIONS = {"isolation.level", "arrowbatchsize"}


def _register(spark: Any) -> None:
    try:
        if spark in _registered:
            return
    except TypeError:
        pass
    spark.dataSource.register(KafkaDataSource)
    try:
        _registered.add(spark)
    except TypeError:
        pass


def builtin_kafka_available(spark: Any) -> bool:
    """Whether Spark's own ``kafka`` format (spark-sql-kafka jar) is on the classpath."""
    try:
        jvm = spark._jvm
        if jvm is None:
            return False
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(_BUILTIN_PROVIDER, False, loader)
        return True
    except Exception:  # noqa: BLE001 - py4j errors, Spark Connect sessions without _jvm
        return False


def read_kafka_stream(
    spark: Any,
    *,
    bootstrap_servers: str,
    topics: Sequence[str] | str,
    starting_offsets: str | Mapping[str, Mapping[str, int]] = "earliest",
    max_offsets_per_trigger: int | None = None,
    extra: Mapping[str, str] | None = None,
    use_builtin: bool | None = None,
    ranges: bool = False,
) -> Any:
    """A streaming DataFrame over ``topics`` with the columns of :data:`KAFKA_SCHEMA`.

    Uses Spark's built-in ``kafka`` format when its jar is on the classpath (with
    ``includeHeaders=true`` and ``kafka.isolation.level=read_committed``), otherwise this
    package's ``wo_kafka`` Python data source, registered once per session. ``extra``
    holds further source options (``kafka.*`` client settings, ``minPartitions``,
    ``failOnDataLoss``, ...). ``use_builtin`` forces the choice (``None``: automatic).
    With ``ranges=True`` the frame has :data:`RANGES_SCHEMA` instead: one offset range per
    topic partition and batch, for consumers that read the records on the executors
    (with :func:`read_range`).
    """
    topic_list = [topics] if isinstance(topics, str) else list(topics)
    if not topic_list:
        raise ValueError("read_kafka_stream needs at least one topic")
    options: dict[str, str] = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": ",".join(topic_list),
        "startingOffsets": (
            starting_offsets
            if isinstance(starting_offsets, str)
            else json.dumps(
                {t: {str(p): int(o) for p, o in ps.items()} for t, ps in starting_offsets.items()}
            )
        ),
    }
    if max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(int(max_offsets_per_trigger))
    for k, v in (extra or {}).items():
        options[k] = str(v)
    if ranges:
        # the caller reads the records itself (RANGES_SCHEMA): only this source does that
        options["emitRanges"] = "true"
        _register(spark)
        return spark.readStream.format(SOURCE_NAME).options(**options).load()
    builtin = builtin_kafka_available(spark) if use_builtin is None else use_builtin
    if builtin:
        df = spark.readStream.format("kafka").options(**_builtin_options(options)).load()
        return df.select(*KAFKA_COLUMNS)
    _register(spark)
    return spark.readStream.format(SOURCE_NAME).options(**options).load()


def _builtin_options(options: Mapping[str, str]) -> dict[str, str]:
    """This source's options as Spark's built-in ``kafka`` source takes them."""
    own = dict(options)
    isolation = own.pop("isolation.level", None)
    lowered = {k.lower() for k in own}
    builtin = {k: v for k, v in own.items() if k.lower() not in _OWN_OPTIONS}
    if "kafka.isolation.level" not in lowered:
        builtin["kafka.isolation.level"] = isolation or "read_committed"
    builtin["includeHeaders"] = "true"
    return builtin


def kafka_end_offsets(
    bootstrap: str,
    topics: Sequence[str] | str,
    *,
    isolation_level: str = "read_committed",
    extra: Mapping[str, str] | None = None,
) -> dict[str, dict[str, int]]:
    """Current end offsets ``{topic: {"partition": offset}}`` of existing ``topics``.

    Same shape as this source's offsets (so it compares directly with a query's
    ``lastProgress["sources"][0]["endOffset"]``). Under ``read_committed`` the end of a
    partition is its last stable offset. ``extra`` holds ``kafka.*`` client settings.
    """
    topic_list = [topics] if isinstance(topics, str) else list(topics)
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": ",".join(topic_list),
        "isolation.level": isolation_level,
        **(extra or {}),
    }
    queries = BrokerQueries(parse_options(opts))
    try:
        return offsets_to_json(queries.latest())
    finally:
        queries.close()
