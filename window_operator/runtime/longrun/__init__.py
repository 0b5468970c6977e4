"""The long-running shape of a job: workers that stay up, exchange rows between them and
keep their state tasks open, instead of two Spark stages per micro-batch.

See :mod:`~window_operator.runtime.longrun.worker` for what a worker does,
:mod:`~window_operator.runtime.longrun.assignment` for where input starts, and
:mod:`~window_operator.spark.longrun` for how Spark runs the workers.
"""
