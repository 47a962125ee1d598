"""send_dataflow_zmq / RemoteDataZMQ over tcp loopback, and the safe default wire format."""

from __future__ import annotations

import itertools
import pickle
import socket

import msgpack
import numpy as np
import pytest

from dataflow.parallel import RemoteDataZMQ, send_dataflow_zmq
from dataflow.parallel._processes import get_context
from dataflow.parallel._zmq import import_zmq
from dataflow.parallel.remote import dumps_msgpack, loads_msgpack
from tests.parallel import flows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sender(df, addr, fmt, epochs):
    send_dataflow_zmq(df, addr, format=fmt, num_epochs=epochs)


@pytest.mark.parametrize("fmt", [None, "pickle"])
def test_sender_process_to_receiver(fmt):
    addr = f"tcp://127.0.0.1:{_free_port()}"
    recv = RemoteDataZMQ(addr, format=fmt)
    recv.reset_state()
    it = iter(recv)
    proc = get_context("fork").Process(
        target=_sender, args=(flows.Arrays(5, (8, 8, 3)), addr, fmt, 2)
    )
    proc.start()
    try:
        got = list(itertools.islice(it, 10))
    finally:
        proc.join(20)
        it.close()
    assert proc.exitcode == 0
    assert [int(dp[0]) for dp in got] == [0, 1, 2, 3, 4] * 2
    for i, arr in got:
        assert np.array_equal(arr, np.full((8, 8, 3), i % 251, np.uint8))
        assert arr.flags.writeable
    assert recv.cnt1 == 10
    assert recv.cnt2 == 0


def test_two_addresses_and_counters():
    zmq = import_zmq()
    a1, a2 = (f"tcp://127.0.0.1:{_free_port()}" for _ in range(2))
    recv = RemoteDataZMQ(a1, a2)  # works without reset_state, unlike tensorpack
    it = iter(recv)
    ctx = zmq.Context()
    try:
        for addr, n in ((a1, 2), (a2, 3)):
            s = ctx.socket(zmq.PUSH)
            s.connect(addr)
            for i in range(n):
                s.send_multipart([b"M", dumps_msgpack([addr[-5:], i])])
            s.close(linger=1000)
        got = sorted(tuple(dp) for dp in itertools.islice(it, 5))
    finally:
        it.close()
        ctx.term()
    assert got == sorted([(a1[-5:], 0), (a1[-5:], 1), (a2[-5:], 0), (a2[-5:], 1), (a2[-5:], 2)])
    assert (recv.cnt1, recv.cnt2) == (2, 3)


def _send_raw(frames_list):
    zmq = import_zmq()
    addr = f"tcp://127.0.0.1:{_free_port()}"
    recv = RemoteDataZMQ(addr)
    it = iter(recv)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    try:
        s.connect(addr)
        for frames in frames_list:
            s.send_multipart(frames)
        return next(it)
    finally:
        it.close()
        s.close(linger=0)
        ctx.term()


def test_default_format_never_unpickles():
    evil = {b"nd": True, b"kind": b"O", b"type": "|O", b"shape": [1],
            b"data": pickle.dumps(print)}
    with pytest.raises(ValueError, match="refusing to decode an array of object dtype"):
        _send_raw([[b"M", msgpack.packb(evil, use_bin_type=True)]])


def test_pickle_needs_opt_in():
    with pytest.raises(ValueError, match="pass format='pickle' to RemoteDataZMQ"):
        _send_raw([[b"P", pickle.dumps([1])]])


def test_foreign_messages_are_refused():
    with pytest.raises(ValueError, match="not from send_dataflow_zmq"):
        _send_raw([[pickle.dumps([1])]])


@pytest.mark.parametrize(
    "value",
    [
        [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(True), np.float32(2.5),
         np.int64(-3)],
        {"a": [1, "x", b"y"], "b": np.zeros((0, 3), np.int64)},
        [np.array([(1, 2.0)], dtype=[("i", "<i4"), ("f", "<f8")]), 3 + 4j],
    ],
)
def test_msgpack_round_trip(value):
    out = loads_msgpack(dumps_msgpack(value))
    flat_in = value if isinstance(value, list) else list(value.values())
    flat_out = out if isinstance(out, list) else list(out.values())
    for a, b in zip(flat_in, flat_out, strict=True):
        if isinstance(a, np.ndarray | np.generic):
            assert type(a) is type(b)
            assert a.dtype == b.dtype
            assert np.array_equal(a, b)
        else:
            assert a == b


def test_object_arrays_are_refused_by_the_sender():
    with pytest.raises(TypeError, match="object dtype cannot be sent"):
        dumps_msgpack([np.array([None])])


def test_bad_format():
    with pytest.raises(ValueError, match="`format` must be None"):
        RemoteDataZMQ("tcp://127.0.0.1:1", format="zmq_op")


def _slow_read(addr: str, n: int, delay: float, out: list) -> None:
    import time

    recv = RemoteDataZMQ(addr, hwm=2)
    it = iter(recv)
    try:
        for dp in itertools.islice(it, n):
            time.sleep(delay)
            out.append(int(dp[0]))
    finally:
        it.close()


def test_sender_waits_for_a_slow_receiver_to_take_the_tail():
    import threading

    addr = f"tcp://127.0.0.1:{_free_port()}"
    got: list[int] = []
    reader = threading.Thread(target=_slow_read, args=(addr, 40, 0.03, got))
    reader.start()
    # the receiver takes ~1.2 s to read 40 datapoints; the sender finishes sending long before
    # and then waits (up to drain_timeout) until its queue reached the receiver: nothing lost
    send_dataflow_zmq(flows.Arrays(40, (4,)), addr, hwm=2, num_epochs=1, drain_timeout=30)
    reader.join(30)
    assert got == list(range(40))


def test_sender_warns_when_the_receiver_never_reads():
    addr = f"tcp://127.0.0.1:{_free_port()}"  # nobody listens: the datapoint stays queued
    with pytest.warns(RuntimeWarning, match=r"drain_timeout=0.3 s; what was still queued"):
        send_dataflow_zmq(flows.Arrays(1, (4,)), addr, hwm=2, num_epochs=1, drain_timeout=0.3)


@pytest.mark.parametrize("bad", [-1, "10", None])
def test_bad_drain_timeout(bad):
    with pytest.raises(ValueError, match=r"`drain_timeout` must be a number of seconds >= 0, "):
        send_dataflow_zmq(flows.Arrays(1, (4,)), "tcp://127.0.0.1:1", drain_timeout=bad)
