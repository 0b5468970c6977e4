"""The keyed exchange of a long-running job: a TCP connection from every worker to every
other, carrying map-side chunks to the workers that own their state tasks.

Each worker listens on one port. Once every worker knows every address, worker ``i``
connects to every other worker ``j`` and sends its chunks for ``j`` on that connection;
``j`` reads them on a thread of its own and hands them to its worker (``deliver``), and
writes :class:`~window_operator.runtime.longrun.wire.Ack` frames back on the same
connection as its state tasks take them. A sender with more than ``max_unacked`` bytes
not yet taken by some worker reads no more input (:attr:`Mesh.throttled`) until that
worker catches up, so a slow worker bounds the memory its peers fill. Receiving never
waits on anything, so two workers sending to each other cannot block each other.

Chunks to the worker's own tasks never touch a socket: :meth:`Mesh.send` hands them over
directly, in order with everything else the worker sends.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from window_operator.runtime.longrun.wire import (
    Ack,
    Connection,
    Hello,
    Kind,
    PeerLostError,
    connect,
    handshake,
    introduce,
)

__all__ = ["DEFAULT_MAX_UNACKED", "Deliver", "Mesh"]

log = logging.getLogger(__name__)

#: Bytes a worker may have sent another worker before that worker took them.
DEFAULT_MAX_UNACKED = 64 << 20

Deliver = Callable[[int, Kind, object, int], None]
"""``deliver(sender, kind, message, nbytes)``: a message for this worker."""


@dataclass
class _Outgoing:
    """This worker's connection to one peer: what was sent and what the peer took."""

    conn: Connection
    sent: int = 0
    acked: int = 0
    #: this worker sent its END: nothing more goes out on the connection
    ended: bool = False


@dataclass
class Mesh:
    """One worker's end of the exchange (see module doc)."""

    index: int
    workers: int
    token: str
    deliver: Deliver
    host: str = "127.0.0.1"
    max_unacked: int = DEFAULT_MAX_UNACKED
    timeout_s: float = 60.0
    _listener: socket.socket | None = field(default=None, init=False)
    _out: dict[int, _Outgoing] = field(default_factory=dict, init=False)
    _in: dict[int, Connection] = field(default_factory=dict, init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False)
    _failure: BaseException | None = field(default=None, init=False)
    _ended_in: set[int] = field(default_factory=set, init=False)
    _closing: bool = field(default=False, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    # -- setting up ---------------------------------------------------------------------

    def listen(self) -> str:
        """Open the listening socket; the address the other workers connect to."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0" if self.host not in ("127.0.0.1", "localhost") else self.host, 0))
        sock.listen(max(self.workers, 1))
        self._listener = sock
        return f"{self.host}:{sock.getsockname()[1]}"

    def join(self, addresses: Sequence[str]) -> None:
        """Connect to every other worker and accept their connections (see module doc)."""
        if len(addresses) != self.workers:
            raise ValueError(f"{len(addresses)} addresses for {self.workers} workers")
        accepting = threading.Thread(target=self._accept_all, name="mesh-accept", daemon=True)
        accepting.start()
        for j, address in enumerate(addresses):
            if j != self.index:
                conn = connect(address, self.timeout_s)
                introduce(conn, Hello(self.index, self.token))
                self._out[j] = _Outgoing(conn)
                self._start(self._read_acks, j, conn, f"mesh-acks-{j}")
        accepting.join(self.timeout_s)
        self.check()
        if len(self._in) != self.workers - 1:
            raise PeerLostError(
                f"worker {self.index}: {len(self._in)} of {self.workers - 1} other workers "
                f"connected within {self.timeout_s:.0f}s"
            )

    def _accept_all(self) -> None:
        assert self._listener is not None
        self._listener.settimeout(self.timeout_s)
        try:
            while len(self._in) < self.workers - 1:
                sock, peer = self._listener.accept()
                conn = Connection(sock, f"{peer[0]}:{peer[1]}")
                hello = handshake(conn, self.token, self.timeout_s)
                self._in[hello.worker] = conn
                self._start(self._read_chunks, hello.worker, conn, f"mesh-in-{hello.worker}")
        except (OSError, PeerLostError) as exc:
            self._fail(exc)

    def _start(self, target: Callable[[int, Connection], None], j: int, conn: Connection,
               name: str) -> None:  # fmt: skip
        t = threading.Thread(target=target, args=(j, conn), name=name, daemon=True)
        self._threads.append(t)
        t.start()

    # -- receiving ----------------------------------------------------------------------

    def _read_chunks(self, sender: int, conn: Connection) -> None:
        ended = False
        try:
            while (frame := conn.receive()) is not None:
                kind, message, nbytes = frame
                if kind is Kind.END:
                    ended = True
                    self._ended_in.add(sender)
                self.deliver(sender, kind, message, nbytes)
            if not ended:
                self._fail(PeerLostError(f"worker {sender} closed its connection"))
        except BaseException as exc:  # noqa: BLE001 - handed to the worker's loop
            if not ended:  # after its END a finished worker may go at any time
                self._fail(exc)

    def _read_acks(self, peer: int, conn: Connection) -> None:
        out = self._out[peer]
        try:
            while (frame := conn.receive()) is not None:
                kind, message, _ = frame
                if kind is Kind.ACK and isinstance(message, Ack):
                    with self._lock:
                        out.acked += message.nbytes
        except BaseException as exc:  # noqa: BLE001 - handed to the worker's loop
            if not out.ended:  # after our END, nothing more goes to that worker
                self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._closing:
            return
        with self._lock:
            if self._failure is None:
                self._failure = exc

    def check(self) -> None:
        """Raise what broke a connection (a worker that died), if anything did."""
        if self._failure is not None:
            if isinstance(self._failure, PeerLostError):
                raise self._failure
            raise PeerLostError(f"worker {self.index}: exchange failed: {self._failure}")

    # -- sending ------------------------------------------------------------------------

    def send(self, worker: int, kind: Kind, message: object) -> None:
        """Send ``message`` to ``worker`` (this worker: handed over directly)."""
        if worker == self.index:
            self.deliver(self.index, kind, message, 0)
            return
        out = self._out[worker]
        n = out.conn.send(kind, message)
        if kind is Kind.CHUNK:
            with self._lock:
                out.sent += n
        out.ended = out.ended or kind is Kind.END

    def acknowledge(self, sender: int, nbytes: int) -> None:
        """Tell ``sender`` that this worker's tasks took ``nbytes`` more of its chunks."""
        if sender == self.index or nbytes <= 0 or sender in self._ended_in:
            return  # a worker that sent its END reads no more input: it needs no credit
        self._in[sender].send(Kind.ACK, Ack(nbytes))

    @property
    def throttled(self) -> bool:
        """Whether some worker has more than ``max_unacked`` bytes of ours not taken."""
        with self._lock:
            return any(o.sent - o.acked > self.max_unacked for o in self._out.values())

    def close(self, wait_s: float = 1.0) -> None:
        """Close every connection and the listener."""
        self._closing = True
        for out in self._out.values():
            out.conn.close()
        for conn in self._in.values():
            conn.close()
        if self._listener is not None:
            self._listener.close()
        deadline = time.monotonic() + wait_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
