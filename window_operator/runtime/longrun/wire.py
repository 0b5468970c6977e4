"""What the workers of a long-running job send each other and their driver, and how.

Every message is one frame on a TCP connection: a 4-byte big-endian payload length, a
1-byte kind, then the payload, a pickle of one of the message dataclasses below. The
peers are processes of the same job running the same code (Spark's own closures are
pickles too). Nothing is unpickled before a connection's first frame, a :class:`Hello`
in plain bytes (the sender's index and the job's secret token), has proved that the
other end is a worker of the job.
"""

from __future__ import annotations

import hmac
import pickle
import socket
import struct
import threading
from dataclasses import dataclass, field
from enum import IntEnum

from window_operator.errors import WindowOperatorError
from window_operator.kernel import ClockState, InputPosition
from window_operator.results import ErrorRecord
from window_operator.runtime.exchange import MapReport, Rows
from window_operator.runtime.report import TaskReport

__all__ = [
    "Ack",
    "Chunk",
    "Connection",
    "End",
    "EpochReport",
    "Gather",
    "Held",
    "Hello",
    "Kind",
    "PeerLostError",
    "Stop",
    "WorkerSummary",
    "connect",
    "handshake",
    "introduce",
]

_HEADER = struct.Struct(">IB")
#: The largest frame accepted (a chunk of a few ten thousand rows is a few MB).
MAX_FRAME = 1 << 30


class PeerLostError(WindowOperatorError):
    """A connection to another worker or to the driver broke, or carried garbage."""


class Kind(IntEnum):
    """What a frame carries."""

    HELLO = 1
    CHUNK = 2
    END = 3
    ACK = 4
    REPORT = 5
    STOP = 6
    GATHER = 7
    HELD = 8


_KINDS = frozenset(int(k) for k in Kind)


@dataclass(frozen=True, slots=True)
class Hello:
    """The first frame of every connection: who connects, and the job's token."""

    worker: int
    token: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one chunk of an input partition brings the state tasks of one worker.

    Every task folds ``report`` into its clock and marks its range handled; ``rows``
    holds the rows of the receiving worker's tasks that have any; ``errors`` the chunk's
    rejected records when its error lane is one of them. ``at_end``: the reader reached
    the partition's end with this chunk (nothing waited behind it).
    """

    report: MapReport
    rows: dict[int, Rows] = field(default_factory=dict)
    errors: dict[int, tuple[ErrorRecord, ...]] = field(default_factory=dict)
    at_end: bool = False


@dataclass(frozen=True, slots=True)
class End:
    """The sender reads no more input: every chunk it will send was sent before this."""

    worker: int


@dataclass(frozen=True, slots=True)
class Held:
    """The sender's reader is held back (by slower receivers, or waiting for its epoch
    to commit): records may wait in ``positions`` that it cannot read now, so they are
    not idle (see :class:`~window_operator.runtime.longrun.inbox.TaskClock`)."""

    positions: tuple[InputPosition, ...]


@dataclass(frozen=True, slots=True)
class Ack:
    """The receiver took ``nbytes`` more of the sender's chunk frames (flow control)."""

    nbytes: int


@dataclass(frozen=True, slots=True)
class EpochReport:
    """Worker -> driver: what one epoch of a worker did.

    ``ranges`` sums the chunks the worker read in the epoch, one per input partition.
    """

    worker: int
    epoch: int
    tasks: list[TaskReport]
    ranges: list[MapReport]
    clock: ClockState
    seconds: float


@dataclass(frozen=True, slots=True)
class Gather:
    """Workers meeting through the driver: to the driver one worker's ``payload`` of
    round ``round``, from the driver every worker's, in worker order."""

    round: str
    payload: list[str]


@dataclass(frozen=True, slots=True)
class Stop:
    """Driver -> worker: read no more input, commit what was read, end."""


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    """What a worker did from its start to its end (its Spark task's result)."""

    worker: int
    epochs: int
    records: int
    tasks: tuple[int, ...]
    #: it ended because an input got partitions it did not read (see ``.growth``)
    inputs_grew: bool = False


class Connection:
    """A framed, thread-safe-to-send TCP connection."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self._send_lock = threading.Lock()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, kind: Kind, message: object) -> int:
        """Send one message; the bytes it took on the wire."""
        return self.send_raw(kind, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def send_raw(self, kind: Kind, payload: bytes) -> int:
        """Send one frame of ``payload``; the bytes it took on the wire."""
        header = _HEADER.pack(len(payload), int(kind))
        try:
            with self._send_lock:
                self.sock.sendall(header)
                self.sock.sendall(payload)
        except OSError as exc:
            raise PeerLostError(f"sending to {self.peer} failed: {exc}") from exc
        return len(header) + len(payload)

    def receive(self) -> tuple[Kind, object, int] | None:
        """The next message (kind, message, bytes on the wire); None at a clean end."""
        frame = self.receive_raw()
        if frame is None:
            return None
        kind, payload = frame
        try:
            return kind, pickle.loads(payload), _HEADER.size + len(payload)
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            raise PeerLostError(f"{self.peer} sent an unreadable frame: {exc}") from exc

    def receive_raw(self) -> tuple[Kind, bytes] | None:
        """The next frame's kind and payload; None at a clean end."""
        header = self._exactly(_HEADER.size, allow_end=True)
        if header is None:
            return None
        size, kind = _HEADER.unpack(header)
        if size > MAX_FRAME or kind not in _KINDS:
            raise PeerLostError(f"{self.peer} sent a frame of kind {kind}, {size} bytes")
        payload = self._exactly(size, allow_end=False)
        assert payload is not None
        return Kind(kind), payload

    def _exactly(self, n: int, *, allow_end: bool) -> bytes | None:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:], n - got)
            except OSError as exc:
                raise PeerLostError(f"receiving from {self.peer} failed: {exc}") from exc
            if k == 0:
                if got == 0 and allow_end:
                    return None
                raise PeerLostError(f"{self.peer} closed the connection mid-frame")
            got += k
        return bytes(buf)

    def close(self) -> None:
        """Close the socket (a receiver blocked on it returns)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def connect(address: str, timeout_s: float) -> Connection:
    """A connection to ``host:port``."""
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    except OSError as exc:
        raise PeerLostError(f"cannot connect to {address}: {exc}") from exc
    sock.settimeout(None)
    return Connection(sock, address)


_HELLO = struct.Struct(">I")


def introduce(conn: Connection, hello: Hello) -> None:
    """Send the first frame of a connection (plain bytes, see module doc)."""
    conn.send_raw(Kind.HELLO, _HELLO.pack(hello.worker) + hello.token.encode())


def handshake(conn: Connection, token: str, timeout_s: float) -> Hello:
    """Read the first frame of an accepted connection; it must be a :class:`Hello` with
    ``token`` (anything else closes the connection)."""
    conn.sock.settimeout(timeout_s)
    try:
        frame = conn.receive_raw()
    except PeerLostError:
        conn.close()
        raise
    finally:
        conn.sock.settimeout(None)
    if frame is None or frame[0] is not Kind.HELLO or len(frame[1]) < _HELLO.size:
        conn.close()
        raise PeerLostError(f"{conn.peer} did not introduce itself")
    (worker,) = _HELLO.unpack_from(frame[1])
    if not hmac.compare_digest(frame[1][_HELLO.size :], token.encode()):
        conn.close()
        raise PeerLostError(f"{conn.peer} is not a worker of this job (wrong token)")
    return Hello(worker, token)
