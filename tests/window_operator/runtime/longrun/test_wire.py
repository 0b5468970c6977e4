"""Frames between workers: round trips, and what a stranger's connection gets."""

from __future__ import annotations

import pickle
import socket
import struct

import pytest

from window_operator.runtime.exchange import InputRange, MapReport, Rows
from window_operator.runtime.longrun.wire import (
    Chunk,
    Connection,
    End,
    Hello,
    Kind,
    PeerLostError,
    handshake,
    introduce,
)


def pair() -> tuple[Connection, Connection]:
    """Two ends of a TCP connection on the loopback."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    return Connection(a, "a"), Connection(b, "b")


def test_messages_round_trip_in_order() -> None:
    a, b = pair()
    report = MapReport(InputRange(0, "t", 3, 10, 20), 10, 1234, {"BAD_JSON": 1})
    chunk = Chunk(report, {2: Rows(0, b"arrow-bytes")}, {})
    sent = a.send(Kind.CHUNK, chunk) + a.send(Kind.END, End(1))
    first, second = b.receive(), b.receive()
    assert first is not None and second is not None
    assert (first[0], first[1]) == (Kind.CHUNK, chunk)
    assert (second[0], second[1]) == (Kind.END, End(1))
    assert first[2] + second[2] == sent
    a.close()
    assert b.receive() is None  # a clean end between frames
    b.close()


def test_the_handshake_checks_the_token_before_anything_is_unpickled() -> None:
    a, b = pair()
    introduce(a, Hello(4, "secret"))
    assert handshake(b, "secret", 5.0) == Hello(4, "secret")

    a, b = pair()
    introduce(a, Hello(4, "guess"))
    with pytest.raises(PeerLostError, match="wrong token"):
        handshake(b, "secret", 5.0)

    a, b = pair()  # a frame of another kind first: closed, its payload never read
    a.sock.sendall(struct.pack(">IB", 5, int(Kind.CHUNK)) + pickle.dumps(1)[:5])
    with pytest.raises(PeerLostError, match="did not introduce itself"):
        handshake(b, "secret", 5.0)


def test_a_frame_cut_short_or_of_an_unknown_kind_is_refused() -> None:
    a, b = pair()
    a.sock.sendall(struct.pack(">IB", 100, int(Kind.CHUNK)) + b"short")
    a.close()
    with pytest.raises(PeerLostError, match="mid-frame"):
        b.receive()
    a, b = pair()
    a.sock.sendall(struct.pack(">IB", 1, 99) + b"x")
    with pytest.raises(PeerLostError, match="kind 99"):
        b.receive()
