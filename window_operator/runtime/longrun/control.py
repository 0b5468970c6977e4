"""The driver's line to the workers of a long-running job.

The driver runs a :class:`Coordinator`: a TCP server every worker connects to when it
starts (:class:`ControlClient`). Through it

* the workers meet: each sends a :class:`~window_operator.runtime.longrun.wire.Gather`
  (its address and its tasks' positions) and gets everyone's once all ``workers`` of
  the same round sent theirs (Spark's own ``BarrierTaskContext.allGather`` answers only
  on a one-second tick);
* the workers send an :class:`~window_operator.runtime.longrun.wire.EpochReport` after
  every epoch (what the driver's metrics, log line and ``--report`` file are made of);
* the driver sends :class:`~window_operator.runtime.longrun.wire.Stop` to end the job
  cleanly. A worker that connects after the stop was asked gets it at once. A worker
  that loses the driver stops (a driver that is gone cannot be asked whether to go on).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from window_operator.runtime.longrun.wire import (
    Connection,
    EpochReport,
    Gather,
    Hello,
    Kind,
    PeerLostError,
    Stop,
    connect,
    handshake,
    introduce,
)

__all__ = ["ControlClient", "Coordinator"]

log = logging.getLogger(__name__)

#: How long connecting and introducing may take.
_TIMEOUT_S = 30.0


@dataclass
class _Round:
    """One gathering: what each worker sent, and where to send everyone's."""

    messages: dict[int, str] = field(default_factory=dict)
    conns: dict[int, Connection] = field(default_factory=dict)


@dataclass
class Coordinator:
    """The driver's end (see module doc); ``on_report`` is called on a reader thread."""

    token: str
    workers: int
    on_report: Callable[[EpochReport], None]
    host: str = "127.0.0.1"
    _listener: socket.socket | None = field(default=None, init=False)
    _workers: dict[int, Connection] = field(default_factory=dict, init=False)
    _rounds: dict[str, _Round] = field(default_factory=dict, init=False)
    _stopping: bool = field(default=False, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _closed: threading.Event = field(default_factory=threading.Event, init=False)

    def start(self) -> str:
        """Listen; the address workers connect to."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        loopback = self.host in ("127.0.0.1", "localhost")
        sock.bind((self.host if loopback else "0.0.0.0", 0))
        sock.listen(64)
        self._listener = sock
        threading.Thread(target=self._accept, name="coordinator", daemon=True).start()
        return f"{self.host}:{sock.getsockname()[1]}"

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return  # closed
            conn = Connection(sock, f"{peer[0]}:{peer[1]}")
            threading.Thread(
                target=self._serve, args=(conn,), name="coordinator-worker", daemon=True
            ).start()

    def _serve(self, conn: Connection) -> None:
        try:
            hello = handshake(conn, self.token, _TIMEOUT_S)
        except PeerLostError as exc:
            log.warning("coordinator: refused a connection: %s", exc)
            return
        with self._lock:
            if self._closed.is_set():  # closed while this one introduced itself
                conn.close()
                return
            old = self._workers.get(hello.worker)
            self._workers[hello.worker] = conn
            stopping = self._stopping
        if old is not None:
            old.close()  # the worker's earlier attempt
        try:
            if stopping:
                conn.send(Kind.STOP, Stop())
            while (frame := conn.receive()) is not None:
                kind, message, _ = frame
                if kind is Kind.REPORT and isinstance(message, EpochReport):
                    self.on_report(message)
                elif kind is Kind.GATHER and isinstance(message, Gather):
                    self._gather(hello.worker, message, conn)
        except PeerLostError as exc:
            log.debug("coordinator: worker %d: %s", hello.worker, exc)
        except Exception:  # noqa: BLE001 - an observer failure never stops the job
            log.exception("coordinator: handling a message of worker %d failed", hello.worker)
        finally:
            with self._lock:
                if self._workers.get(hello.worker) is conn:
                    del self._workers[hello.worker]

    def _gather(self, worker: int, message: Gather, conn: Connection) -> None:
        """Keep a worker's part of a round; once every worker's is in, send them all."""
        with self._lock:
            r = self._rounds.setdefault(message.round, _Round())
            r.messages[worker] = message.payload[0]
            r.conns[worker] = conn
            if len(r.messages) < self.workers:
                return
            del self._rounds[message.round]
        everyone = Gather(message.round, [r.messages[w] for w in range(self.workers)])
        for c in r.conns.values():
            try:
                c.send(Kind.GATHER, everyone)
            except PeerLostError:
                pass  # that worker is gone: its attempt fails, and the round with it

    def stop_workers(self) -> None:
        """Ask every worker (and every worker that connects from now on) to stop."""
        with self._lock:
            self._stopping = True
            workers = list(self._workers.values())
        for conn in workers:
            try:
                conn.send(Kind.STOP, Stop())
            except PeerLostError:
                pass  # that worker is gone: nothing to stop

    def resume(self) -> None:
        """Let workers that connect from now on run (a new start after
        :meth:`stop_workers` ended the last ones)."""
        with self._lock:
            self._stopping = False

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closed.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for conn in workers:
            conn.close()


class ControlClient:
    """A worker's end (see module doc)."""

    def __init__(self, address: str, token: str, worker: int) -> None:
        self.stop_requested = threading.Event()
        #: the driver went away (killed, or its host lost): set with ``stop_requested``
        self.driver_lost = threading.Event()
        #: set by :meth:`close`: the reader's end is then this worker's doing
        self._closing = threading.Event()
        self.conn = connect(address, _TIMEOUT_S)
        introduce(self.conn, Hello(worker, token))
        self._gathered: Gather | None = None
        self._gathered_event = threading.Event()
        self._reader = threading.Thread(target=self._read, name="control", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while (frame := self.conn.receive()) is not None:
                kind, message, _ = frame
                if kind is Kind.STOP:
                    self.stop_requested.set()
                elif kind is Kind.GATHER and isinstance(message, Gather):
                    self._gathered = message
                    self._gathered_event.set()
        except PeerLostError as exc:
            if not self._closing.is_set():
                log.warning("lost the driver (%s): stopping", exc)
        if not self._closing.is_set():  # the connection ended on the driver's side
            self.driver_lost.set()
        self.stop_requested.set()
        self._gathered_event.set()  # a gather waiting for the driver waits no more

    def gather(self, round_id: str, payload: str, timeout_s: float) -> list[str]:
        """Every worker's ``payload`` of round ``round_id``, in worker order."""
        self.conn.send(Kind.GATHER, Gather(round_id, [payload]))
        if not self._gathered_event.wait(timeout_s):
            raise PeerLostError(f"the other workers did not start within {timeout_s:.0f}s")
        got = self._gathered
        if got is None or got.round != round_id:
            raise PeerLostError("lost the driver while the workers were meeting")
        return got.payload

    def report(self, report: EpochReport) -> None:
        """Send an epoch's report (a driver that is gone is noticed by the reader)."""
        try:
            self.conn.send(Kind.REPORT, report)
        except PeerLostError as exc:
            log.warning("could not report epoch %d to the driver: %s", report.epoch, exc)

    def close(self) -> None:
        """Close the connection (the reader then ends without a word)."""
        self._closing.set()
        self.conn.close()
