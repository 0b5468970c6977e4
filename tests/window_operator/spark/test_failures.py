"""One line for a failed Spark job: the task's own error out of Spark's wrapping."""

from __future__ import annotations

from window_operator.spark.failures import root_cause

#: The shape of a StreamingQueryException's text when a task raised (abridged).
FAILED_QUERY = """[STREAM_FAILED] Query [id = 1] terminated with exception: \
[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function.
  File "/venv/pyspark/sql/utils.py", line 163, in call
    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/tmp/ops.py", line 21, in combine
    sys.exit(3)
SystemExit: 3

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/app/window_operator/runtime/runner.py", line 241, in _run_once
    raise UserCodeExitError.of(exc) from exc
window_operator.errors.UserCodeExitError: a user-defined operation called sys.exit(3) in combine \
(/tmp/ops.py, line 21)

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(x.scala:1)
"""


def test_the_last_python_error_of_the_task_is_the_line() -> None:
    """The package's errors end in ``Error`` so that this line names them (a class named
    ``UserCodeExit`` was passed over for PySpark's wrapper line)."""
    assert root_cause(Exception(FAILED_QUERY)) == (
        "window_operator.errors.UserCodeExitError: a user-defined operation called "
        "sys.exit(3) in combine (/tmp/ops.py, line 21)"
    )


def test_a_failure_without_a_python_error_is_its_first_line() -> None:
    assert root_cause(Exception("Job aborted.\nat x")) == "Job aborted."
    assert root_cause(Exception("")) == "Exception"


def test_the_java_error_py4j_carries_is_the_line() -> None:
    """What the JVM refused, for example a master of 0 threads (abridged)."""
    refused = (
        "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
        ": org.apache.spark.SparkException: Asked to run locally with 0 threads\n"
        "\tat org.apache.spark.SparkContext$.createTaskScheduler(SparkContext.scala:3333)\n"
    )
    assert root_cause(Exception(refused)) == (
        "org.apache.spark.SparkException: Asked to run locally with 0 threads"
    )
