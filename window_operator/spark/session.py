"""Build a SparkSession configured for the window operator."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TASK_ATTEMPTS", "build_session", "prepare_environment", "with_task_retries"]


def prepare_environment() -> None:
    """Environment PySpark needs on these machines (set only where the user has not)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


#: Attempts of a Spark task before its micro-batch fails (Spark's default on clusters).
TASK_ATTEMPTS = 4


def with_task_retries(master: str) -> str:
    """``master``, with task retries in local mode (``local[N]`` allows no retry at all).

    A task that fails (an executor lost, a store still locked by a killed worker) runs
    again; its state task recognises what the failed attempt committed.
    """
    found = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master.strip())
    if found is None:
        return master
    return f"local[{found.group(1) or 1},{TASK_ATTEMPTS}]"


def build_session(
    *,
    app_name: str = "window-operator",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession (``local[*]`` unless ``master`` or spark-submit says otherwise)."""
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(with_task_retries(master))
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:
        # not under spark-submit (which launches this driver and sets the master itself)
        builder = builder.master(with_task_retries(os.environ.get("SPARK_MASTER", "local[*]")))
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.speculation": "false",
        "spark.driver.host": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
    }
    for k, v in {**defaults, **(conf or {})}.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
