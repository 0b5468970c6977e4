"""Observability of the streaming job: metrics, the per-batch log line, status, progress.

* :mod:`~window_operator.observe.metrics`: :class:`JobMetrics`, the Prometheus metrics
  of a job, aggregated from its batch reports and served by the driver;
* :mod:`~window_operator.observe.logs`: logging set-up of the command line and the one
  INFO line per micro-batch;
* :mod:`~window_operator.observe.status`: ``window-operator status`` (checkpoint,
  changelog and input topics, read without the job running);
* :mod:`~window_operator.observe.progress`: progress bars and the executors' restore
  progress log;
* :mod:`~window_operator.observe.redact`: secrets of ``kafka.*`` settings kept out of
  logs, metrics and reports.

The modules import their libraries (prometheus_client, tqdm, matplotlib) themselves, so
importing this package costs nothing.
"""

from __future__ import annotations

__all__: list[str] = []
