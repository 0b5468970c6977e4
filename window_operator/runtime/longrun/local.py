"""A long-running job's workers as threads of this process (tests and tools).

The same workers, mesh and coordinator as on Spark; threads stand in for the tasks of
Spark's barrier stage.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from window_operator.runtime.longrun.control import Coordinator
from window_operator.runtime.longrun.wire import EpochReport, WorkerSummary
from window_operator.runtime.longrun.worker import Worker, WorkerSpec

__all__ = ["LocalLongRunningJob"]


@dataclass
class LocalLongRunningJob:
    """Runs the workers of ``spec`` in threads, with a coordinator (see module doc)."""

    spec: WorkerSpec
    on_report: Callable[[EpochReport], None] | None = None
    reports: list[EpochReport] = field(default_factory=list)
    summaries: list[WorkerSummary] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _coordinator: Coordinator | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Start the coordinator and every worker."""
        workers = self.spec.assignment.workers
        self._coordinator = Coordinator(self.spec.token, workers, self._report)
        spec = replace(self.spec, control=self._coordinator.start(), attempt="local")
        for w in range(workers):
            t = threading.Thread(target=self._run, args=(spec, w), name=f"worker-{w}", daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, spec: WorkerSpec, index: int) -> None:
        try:
            summary = Worker(spec, index).run()
            with self._lock:
                self.summaries.append(summary)
        except BaseException as exc:  # noqa: BLE001 - handed to wait()
            with self._lock:
                self.errors.append(exc)

    def _report(self, report: EpochReport) -> None:
        with self._lock:
            self.reports.append(report)
        if self.on_report is not None:
            self.on_report(report)

    def stop(self) -> None:
        """Ask every worker to stop (they commit what they read, then end)."""
        if self._coordinator is not None:
            self._coordinator.stop_workers()

    def wait(self, timeout_s: float = 300.0) -> list[WorkerSummary]:
        """Wait for every worker to end; their summaries (the first error is raised)."""
        for t in self._threads:
            t.join(timeout_s)
        if self._coordinator is not None:
            self._coordinator.close()
        if any(t.is_alive() for t in self._threads):
            raise TimeoutError(f"the workers did not end within {timeout_s:.0f}s")
        if self.errors:
            raise self.errors[0]
        return sorted(self.summaries, key=lambda s: s.worker)
