"""The Spark session's master and settings: the job's defaults never override what
spark-submit was given, and only a local master gets the loopback driver address."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from window_operator.spark.session import DEFAULTS, LOG_CONFIG, session_settings

ROOT = Path(__file__).resolve().parents[3]


def test_a_local_master_gets_the_defaults_and_the_loopback_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    s = session_settings(None, {"spark.sql.shuffle.partitions": "3"}, submitted=None)
    assert (s.master, s.local) == ("local[*,4]", True)
    assert s.conf == {**DEFAULTS, **JVM_LOG, "spark.driver.host": "127.0.0.1",
                      "spark.sql.shuffle.partitions": "3"}  # fmt: skip


#: the driver JVM's log settings, where the job starts it and the user gave none
JVM_LOG = {"spark.driver.defaultJavaOptions": f"-Dlog4j.configurationFile={LOG_CONFIG}"}


def test_the_jvm_log_settings_give_way_to_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's banner lines and the native-hadoop warning of every start are gone, unless
    the user configured the JVM's log (a log4j2.properties where Spark finds it, or
    their own java options); spark-submit started the JVM itself."""
    assert LOG_CONFIG.is_file() and "rootLogger.level = warn" in LOG_CONFIG.read_text()
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert session_settings("local[1]", {}, submitted=None).conf.items() >= JVM_LOG.items()
    (tmp_path / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert not session_settings("local[1]", {}, submitted=None).conf.keys() & JVM_KEYS
    monkeypatch.delenv("SPARK_CONF_DIR")
    own = {"spark.driver.extraJavaOptions": "-Xss4m"}
    # the user's options and the log settings both reach the JVM (Spark puts the
    # default options first: a -Dlog4j.configurationFile of the user's wins)
    assert session_settings("local[1]", own, submitted=None).conf.items() >= (own | JVM_LOG).items()
    assert not session_settings(None, {}, submitted={}).conf.keys() & JVM_KEYS


JVM_KEYS = {"spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions"}


def test_the_jvm_log_settings_keep_the_java_options_of_spark_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher PySpark starts reads spark-defaults.conf of the conf dir, where a
    user's java options (a -javaagent, -Duser.timezone) may stand: the session's conf,
    passed as --conf, overrode them with the log settings (the user's options were gone
    from the JVM). Spark puts spark.driver.defaultJavaOptions before them instead; an
    administrator's own of those stands."""
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Dmine=1\n")
    conf = session_settings("local[1]", {}, submitted=None).conf
    assert "spark.driver.extraJavaOptions" not in conf and conf.items() >= JVM_LOG.items()
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.defaultJavaOptions=-Dadmin=1\n")
    assert not session_settings("local[1]", {}, submitted=None).conf.keys() & JVM_KEYS


def test_a_cluster_master_leaves_the_driver_address_to_spark() -> None:
    """Executors on other hosts must reach the driver: no 127.0.0.1 for ``spark://``."""
    s = session_settings("spark://master:7077", {}, submitted=None)
    assert (s.master, s.local) == ("spark://master:7077", False)
    assert "spark.driver.host" not in s.conf and s.conf == DEFAULTS | JVM_LOG


def test_spark_submit_settings_stand_and_the_job_conf_wins_over_both() -> None:
    submitted = {"spark.master": "yarn", "spark.ui.enabled": "true", "spark.speculation": "x"}
    s = session_settings(None, {"spark.speculation": "false"}, submitted=submitted)
    assert (s.master, s.local) == (None, False)  # spark-submit's master stands
    assert "spark.ui.enabled" not in s.conf and "spark.driver.host" not in s.conf
    assert s.conf["spark.speculation"] == "false"
    # a local master given to spark-submit: the loopback driver, unless it was set
    local = session_settings(None, {}, submitted={"spark.master": "local[2]"})
    assert local.local and local.conf["spark.driver.host"] == "127.0.0.1"
    given = {"spark.master": "local[2]", "spark.driver.host": "localhost"}
    assert "spark.driver.host" not in session_settings(None, {}, submitted=given).conf


SHOW_CONF = """
from window_operator.spark.session import build_session
conf = build_session().sparkContext.getConf()
print(conf.get("spark.driver.host"), conf.get("spark.ui.enabled"), conf.get("spark.speculation"))
"""


@pytest.mark.spark
def test_under_spark_submit_its_conf_is_kept(tmp_path: Path) -> None:
    """``spark-submit --conf`` reaches the session. Before, the job's defaults replaced
    it: the driver was always at 127.0.0.1, with the UI off."""
    script = tmp_path / "show_conf.py"
    script.write_text(SHOW_CONF)
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    env.pop("SPARK_LOCAL_IP", None)
    proc = subprocess.run(
        [str(submit), "--master", "local[1]", "--conf", "spark.driver.host=localhost",
         "--conf", "spark.ui.enabled=true", "--conf", "spark.ui.port=0", str(script)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["localhost", "true", "false"]


def test_a_session_started_keeping_interrupts_leaves_the_ctrl_c_handler() -> None:
    """``run`` keeps its Ctrl-C handler while Spark starts: PySpark sets its own at the
    end of the SparkContext's start (it cancels every Spark job and raises
    KeyboardInterrupt), and put back once the session was built it stood for about 2
    s, in which a Ctrl-C crashed the job (a review). PySpark's other signals pass."""
    import signal

    from pyspark.core import context

    from window_operator.spark.session import _interrupts_kept

    def ours(*_: object) -> None: ...

    def pysparks(*_: object) -> None: ...

    before = signal.signal(signal.SIGINT, ours)
    term = signal.getsignal(signal.SIGTERM)
    try:
        with _interrupts_kept(True):
            # what SparkContext._do_init does on the main thread
            context.signal.signal(context.signal.SIGINT, pysparks)
            assert signal.getsignal(signal.SIGINT) is ours
            context.signal.signal(context.signal.SIGTERM, pysparks)
            assert signal.getsignal(signal.SIGTERM) is pysparks
        context.signal.signal(context.signal.SIGINT, pysparks)  # outside: as PySpark does
        assert signal.getsignal(signal.SIGINT) is pysparks
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGTERM, term)
