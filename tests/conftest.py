"""Shared fixtures: aggregators on temp dirs, one Kafka broker and one Spark session."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from window_operator.job import JobRuntime
from window_operator.timewindows import WindowedAggregator


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--dist loadgroup`` (``bash .ci/run``) the tests marked ``xdist_group`` (jobs
    that each start a Spark of their own) must run one after another on one worker.
    pytest 9.2 silently defeats that grouping (pytest-xdist issue 1386): they then run
    two at a time on two cores and the suite slows by minutes. Refuse it, naming why."""
    if config.getoption("dist", "no") != "loadgroup" or pytest.version_tuple[:2] < (9, 2):
        return
    xdist = version("pytest-xdist")
    if tuple(int(n) for n in xdist.split(".")[:2] if n.isdigit()) <= (3, 8):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {xdist} does not group the tests "
            "marked xdist_group under --dist loadgroup (pytest-xdist issue 1386): install the "
            "pytest pyproject.toml names (pip install -e '.[test]')"
        )


@pytest.fixture
def open_agg(tmp_path: Path) -> Iterator[Callable[..., WindowedAggregator]]:
    """Open aggregators under tmp_path (closed at teardown); same name = same state dir."""
    opened: list[WindowedAggregator] = []

    def _open(
        runtime: JobRuntime, name: str = "a", use_deduct: bool | None = None
    ) -> WindowedAggregator:
        agg = runtime.open_task(tmp_path / name, use_deduct=use_deduct)
        opened.append(agg)
        return agg

    yield _open
    for agg in opened:
        agg.close()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """One broker for the whole session.

    ``KAFKA_BOOTSTRAP_SERVERS`` if set (any Kafka); else, with
    ``WINDOW_OPERATOR_TEST_BROKER=testcontainers`` and a Docker engine, an Apache Kafka
    container; else the local noida-db broker. Tests use unique topic and group names
    (see ``unique_name``).
    """
    existing = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not existing and os.environ.get("WINDOW_OPERATOR_TEST_BROKER") == "testcontainers":
        from testcontainers.community.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            bootstrap = container.get_bootstrap_server()
            os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
            try:
                yield bootstrap
            finally:
                os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)
        return
    if existing:
        from window_operator.kafka_admin import wait_for_broker

        wait_for_broker(existing)
        yield existing
        return
    from window_operator.broker import LocalBroker
    from window_operator.runtime.producers import close_producers

    with LocalBroker() as broker:
        _LOCAL_BROKER["local"] = True
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = broker.bootstrap_servers
        try:
            yield broker.bootstrap_servers
        finally:
            close_producers()  # their threads would log failed reconnects after the broker
            import gc

            gc.collect()  # and the tests' own clients, before the broker stops
            os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)


@pytest.fixture(scope="session")
def local_broker(kafka_bootstrap: str) -> bool:
    """Whether the tests run against the local noida-db broker (not a real Kafka)."""
    return _LOCAL_BROKER.get("local", False)


_LOCAL_BROKER: dict[str, bool] = {}


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Topic/group names unique to this test."""
    import uuid

    base = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")[:60]

    def make(suffix: str) -> str:
        return f"{base}-{suffix}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] Spark session shared by every test that needs Spark."""
    from window_operator.spark.session import build_session

    session = build_session(app_name="window-operator-tests", master="local[2]")
    try:
        yield session
    finally:
        session.stop()
