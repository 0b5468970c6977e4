"""Build a SparkSession configured for the window operator."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULTS",
    "JVM_DEFAULT_OPTIONS",
    "LOG_CONFIG",
    "TASK_ATTEMPTS",
    "SessionSettings",
    "build_session",
    "is_local",
    "prepare_environment",
    "session_settings",
    "with_task_retries",
]


def prepare_environment(*, local: bool = True) -> None:
    """Environment PySpark needs (set only where the user has not): this Python for the
    driver and, on a ``local`` master, for the workers too and the loopback address (a
    cluster's executors have a Python of their own, and must reach the driver at an
    address of its host, which Spark picks itself)."""
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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


#: Settings of the window operator's sessions where neither spark-submit nor the job set
#: them (the job's own: ``spark.conf`` in the YAML, ``run --conf``, always apply).
DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.speculation": "false",
    # streaming queries turn it off anyway, warning at every micro-batch start
    "spark.sql.adaptive.enabled": "false",
}


@dataclass(frozen=True)
class SessionSettings:
    """What :func:`build_session` sets on the builder."""

    #: the master to set (``None``: spark-submit's stands)
    master: str | None
    #: whether that master runs every executor on this host
    local: bool
    conf: dict[str, str]


def session_settings(
    master: str | None, conf: Mapping[str, str], *, submitted: Mapping[str, str] | None
) -> SessionSettings:
    """The master and settings of a session: ``master`` if given, else spark-submit's
    (``submitted``: the settings it launched this driver with; ``None``: not launched
    by spark-submit), else ``SPARK_MASTER`` or ``local[*]``; :data:`DEFAULTS` where
    spark-submit did not set the key, and on a local master the driver at
    ``SPARK_LOCAL_IP`` (loopback by default); ``conf`` over all of them."""
    given = submitted or {}
    if master:
        chosen: str | None = with_task_retries(master)
    elif submitted is None:
        chosen = with_task_retries(os.environ.get("SPARK_MASTER", "local[*]"))
    else:
        chosen = None
    local = is_local(chosen or given.get("spark.master", ""))
    defaults = dict(DEFAULTS)
    if submitted is None and _spark_log_config() is None:  # this process starts the JVM
        # the options Spark puts before spark.driver.extraJavaOptions: the user's (in the
        # job's conf, or in spark-defaults.conf, which the launcher reads too) stay, and
        # a -Dlog4j.configurationFile of theirs comes after this one and wins
        defaults[JVM_DEFAULT_OPTIONS] = f"-Dlog4j.configurationFile={LOG_CONFIG}"
    if local:
        defaults["spark.driver.host"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {k: v for k, v in defaults.items() if k not in given}
    return SessionSettings(chosen, local, {**settings, **conf})


#: The JVM's log settings where the user has none (see the file).
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

#: Where they go: Spark puts these options before ``spark.driver.extraJavaOptions``.
JVM_DEFAULT_OPTIONS = "spark.driver.defaultJavaOptions"
_SETS_DEFAULT_OPTIONS = re.compile(r"\s*spark\.driver\.defaultJavaOptions\s*[=:\s]")


def _spark_log_config() -> Path | None:
    """The user's ``log4j2.properties``, where Spark finds it, or their
    ``spark-defaults.conf`` where it sets :data:`JVM_DEFAULT_OPTIONS` (``None``: neither)."""
    for env, sub in (("SPARK_CONF_DIR", ""), ("SPARK_HOME", "conf")):
        where = os.environ.get(env)
        if not where:
            continue
        conf = Path(where) / sub
        if (conf / "log4j2.properties").is_file():
            return conf / "log4j2.properties"
        defaults = conf / "spark-defaults.conf"
        try:
            lines = defaults.read_text().splitlines() if defaults.is_file() else []
        except OSError:
            lines = []
        if any(_SETS_DEFAULT_OPTIONS.match(line) for line in lines):
            return defaults
    return None


def is_local(master: str) -> bool:
    """Whether ``master`` runs every executor on this host (``local``, ``local[N]``, ...)."""
    return master.strip().startswith("local")


def _submitted_conf() -> dict[str, str] | None:
    """The settings spark-submit launched this driver with (its ``--conf`` and
    ``spark-defaults.conf``); ``None`` when spark-submit did not launch it."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to the JVM spark-submit started
    return dict(SparkConf().getAll())


def build_session(
    *,
    app_name: str = "window-operator",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    keep_interrupts: bool = False,
) -> SparkSession:
    """A SparkSession (see :func:`session_settings` for its master and settings).

    ``keep_interrupts``: the process's Ctrl-C handler stays (PySpark puts its own in
    place, which cancels every Spark job and raises ``KeyboardInterrupt``)."""
    submitted = _submitted_conf()
    settings = session_settings(master, conf or {}, submitted=submitted)
    prepare_environment(local=settings.local)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if settings.master:
        builder = builder.master(settings.master)
    for k, v in settings.conf.items():
        builder = builder.config(k, v)
    with _jvm_ignores_sigterm(), _interrupts_kept(keep_interrupts):
        session = builder.getOrCreate()
    _end_jvm_at_exit()
    session.sparkContext.setLogLevel("WARN")
    return session


@contextlib.contextmanager
def _jvm_ignores_sigterm() -> Iterator[None]:
    """A JVM started here ignores SIGTERM, as PySpark makes it ignore SIGINT: a stop sent
    to the whole process group (systemd, ``timeout``) reaches the driver, which stops the
    job between batches, instead of killing Spark under it. Only the JVM's process
    ignores it (set between its fork and exec: an ignored signal stays ignored across
    exec); before, the driver ignored it while Spark started, and a SIGTERM then was
    lost for good."""
    from pyspark import java_gateway

    names = vars(java_gateway)  # its Popen, which launch_gateway calls
    launch = names["Popen"]

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        first = kwargs.get("preexec_fn")

        def preexec() -> None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if first is not None:
                first()

        proc: subprocess.Popen[bytes] = launch(*args, **{**kwargs, "preexec_fn": preexec})
        return proc

    names["Popen"] = popen
    try:
        yield
    finally:
        names["Popen"] = launch


class _SignalsButSigint:
    """The ``signal`` module as ``pyspark.core.context`` sees it while a session starts
    under :func:`_interrupts_kept`: a SIGINT handler it sets is not set."""

    def __getattr__(self, name: str) -> Any:
        return getattr(signal, name)

    @staticmethod
    def signal(signum: int, handler: Any) -> Any:
        if signum == signal.SIGINT:
            return signal.getsignal(signum)
        return signal.signal(signum, handler)


@contextlib.contextmanager
def _interrupts_kept(keep: bool) -> Iterator[None]:
    """While a SparkContext starts, keep the process's SIGINT handler (``keep``):
    PySpark sets its own at the end of the start, and one set after the start
    returns would leave it in place for the seconds the session takes to build."""
    if not keep:
        yield
        return
    from pyspark.core import context

    names = vars(context)
    real = names["signal"]
    names["signal"] = _SignalsButSigint()
    try:
        yield
    finally:
        names["signal"] = real


@functools.cache  # once per process
def _end_jvm_at_exit() -> None:
    """At the driver's exit, end the JVM it started if it still runs: it ignores SIGINT
    and SIGTERM, and one left by a driver stopped while Spark started outlived it (a
    user walkthrough found one 27 minutes later). After ``spark.stop()`` there is
    nothing left for it to do."""
    atexit.register(_end_jvm)


def _end_jvm() -> None:
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
