"""send_dataflow_zmq / RemoteDataZMQ over tcp loopback, and the safe default wire format."""

from __future__ import annotations

import itertools
import logging
import pickle
import threading
import time

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.parallel import RemoteDataZMQ, send_dataflow_zmq
from dataflow.parallel._bootstrap import get_context
from dataflow.parallel._wire import import_zmq
from dataflow.parallel.remote import _DropLog, dumps_msgpack, loads_msgpack
from tests.helpers import free_port
from tests.parallel import flows


def _sender(df, addr, fmt, epochs):
    send_dataflow_zmq(df, addr, format=fmt, num_epochs=epochs)


@pytest.mark.parametrize("fmt", [None, "pickle"])
def test_sender_process_to_receiver(fmt):
    addr = f"tcp://127.0.0.1:{free_port()}"
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
    a1, a2 = (f"tcp://127.0.0.1:{free_port()}" for _ in range(2))
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


def _send_raw(frames_list, n, caplog):
    """Send ``frames_list`` from a raw PUSH socket to a fresh ``RemoteDataZMQ``; the first
    ``n`` datapoints it yields, the receiver, and the log lines about dropped messages."""
    zmq = import_zmq()
    addr = f"tcp://127.0.0.1:{free_port()}"
    recv = RemoteDataZMQ(addr)
    it = iter(recv)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    try:
        s.connect(addr)
        for frames in frames_list:
            s.send_multipart(frames)
        with caplog.at_level(logging.WARNING, logger="dataflow.parallel"):
            got = list(itertools.islice(it, n))
            it.close()  # (logs what was dropped since the last line)
        return got, recv, [r.getMessage() for r in caplog.records]
    finally:
        it.close()
        s.close(linger=0)
        ctx.term()


def _ok(i):
    return [b"M", dumps_msgpack(["ok", i])]


EVIL = {b"nd": True, b"kind": b"O", b"type": "|O", b"shape": [1], b"data": pickle.dumps(print)}
OVERSIZE = msgpack.packb({b"nd": True, b"kind": b"", b"type": "<f4", b"shape": [10**6, 10**6],
                          b"data": b"\0" * 8}, use_bin_type=True)
MISSING = msgpack.packb({b"nd": True, b"type": "<f4"}, use_bin_type=True)
WHY_FRAMES = ("that is not from send_dataflow_zmq (its messages are 2 frames: a format tag b'M' "
              "or b'P', and the body)")


@pytest.mark.parametrize(
    ("frames", "why"),
    [
        ([pickle.dumps([1])], f"a message of 1 frame(s) {WHY_FRAMES}"),
        ([b"M", dumps_msgpack([1]), b"x"], f"a message of 3 frame(s) {WHY_FRAMES}"),
        ([b"X", dumps_msgpack([1])], f"a message of 2 frame(s) {WHY_FRAMES}"),
        ([b"MM", dumps_msgpack([1])], f"a message of 2 frame(s) {WHY_FRAMES}"),
        ([b"P", pickle.dumps([1])], "the sender uses format='pickle'; receiving it runs code "
         "chosen by the sender. If you trust the sender, pass format='pickle' to RemoteDataZMQ."),
        ([b"M", dumps_msgpack([1]) + b"\x01"], "a msgpack body of 3 bytes that does not decode "
         "(ExtraData: unpack(b) received extra data.)"),
        ([b"M", dumps_msgpack([1, "abc"])[:-1]], "a msgpack body of 5 bytes that does not decode "
         "(ValueError: Unpack failed: incomplete input)"),
        ([b"M", msgpack.packb(EVIL, use_bin_type=True)], "a msgpack body of "
         f"{len(msgpack.packb(EVIL, use_bin_type=True))} bytes that does not decode (ValueError: "
         "refusing to decode an array of object dtype (it would unpickle))"),
        ([b"M", OVERSIZE], f"a msgpack body of {len(OVERSIZE)} bytes that does not decode "
         "(ValueError: cannot reshape array of size 2 into shape (1000000,1000000))"),
        ([b"M", MISSING], f"a msgpack body of {len(MISSING)} bytes that does not decode "
         "(KeyError: b'data')"),
    ],
    ids=["one-frame", "three-frames", "wrong-tag", "long-tag", "pickle", "extra-data",
         "truncated", "object-dtype", "oversize-shape", "missing-key"],
)
def test_a_bad_message_is_dropped_counted_and_logged(frames, why, caplog):
    got, recv, log = _send_raw([_ok(0), frames, _ok(1)], 2, caplog)
    assert got == [["ok", 0], ["ok", 1]]  # the stream goes on after it
    assert (recv.cnt1, recv.dropped) == (2, 1)
    assert recv.state_dict()["dropped"] == 1
    assert log == [f"RemoteDataZMQ dropped 1 message(s) (1 in all); the last: from 127.0.0.1: "
                   f"{why}"]


def test_a_sender_of_a_too_large_message_is_disconnected_before_it_is_read():
    from zmq.utils.monitor import recv_monitor_message

    zmq = import_zmq()
    addr = f"tcp://127.0.0.1:{free_port()}"
    recv = RemoteDataZMQ(addr, max_message_size=10_000)
    it = iter(recv)
    ctx = zmq.Context()
    big, good = ctx.socket(zmq.PUSH), ctx.socket(zmq.PUSH)
    events = big.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    got: list = []
    first = threading.Thread(target=lambda: got.append(next(it)))  # binds, then waits
    try:
        first.start()
        big.connect(addr)
        big.send_multipart([b"M", dumps_msgpack(["big", b"\0" * 100_000])])
        # the receiver drops the connection at the frame's header, without reading the frame
        assert events.poll(10_000), "the large message's sender was not disconnected"
        assert recv_monitor_message(events)["event"] == zmq.EVENT_DISCONNECTED
        good.connect(addr)
        for i in range(3):
            good.send_multipart(_ok(i))
        first.join(10)
        got.extend(itertools.islice(it, 2))
    finally:
        it.close()
        big.disable_monitor()
        for sock in (events, big, good):
            sock.close(linger=0)
        ctx.term()
    assert got == [["ok", 0], ["ok", 1], ["ok", 2]]
    assert (recv.cnt1, recv.dropped) == (3, 0)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_bad_max_message_size(bad):
    with pytest.raises(ValueError, match=rf"`max_message_size` must be a positive int, got "
                                         rf"{bad!r} .*pass e.g. max_message_size=1073741824"):
        RemoteDataZMQ("tcp://127.0.0.1:1", max_message_size=bad)


def test_the_other_format_is_dropped_with_the_fix(caplog):
    zmq = import_zmq()
    addr = f"tcp://127.0.0.1:{free_port()}"
    recv = RemoteDataZMQ(addr, format="pickle")
    it = iter(recv)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    try:
        s.connect(addr)
        s.send_multipart(_ok(0))
        s.send_multipart([b"P", pickle.dumps(("fine", 1))])
        with caplog.at_level(logging.WARNING, logger="dataflow.parallel"):
            assert next(it) == ("fine", 1)
    finally:
        it.close()
        s.close(linger=0)
        ctx.term()
    assert recv.dropped == 1
    assert [r.getMessage() for r in caplog.records] == [
        "RemoteDataZMQ dropped 1 message(s) (1 in all); the last: from 127.0.0.1: the sender "
        "uses the msgpack format; pass format=None to RemoteDataZMQ"
    ]


def test_drops_are_logged_at_most_once_per_interval(caplog):
    now = [100.0]
    log = _DropLog("RemoteDataZMQ", interval=1.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="dataflow.parallel"):
        for total in range(1, 6):  # five drops within 0.4 s: the first is logged at once
            log.drop(f"reason {total}", total)
            now[0] += 0.1
        now[0] += 0.6  # 1.1 s after the first line
        log.drop("reason 6", 6)
        log.drop("reason 7", 7)
        log.flush(7)  # the iteration ends
        log.flush(7)
    assert [r.getMessage() for r in caplog.records] == [
        "RemoteDataZMQ dropped 1 message(s) (1 in all); the last: reason 1",
        "RemoteDataZMQ dropped 5 message(s) (6 in all); the last: reason 6",
        "RemoteDataZMQ dropped 1 message(s) (7 in all); the last: reason 7",
    ]


# ---- a fuzzed sender next to a real one ------------------------------------------------------

#: the integers msgpack can encode (an int64 or a uint64)
_MSGPACK_INTS = st.integers(-(2**63), 2**64 - 1)

_values = st.recursive(
    st.none() | st.booleans() | _MSGPACK_INTS | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3), max_leaves=6,
)


def _does_not_decode(body: bytes) -> bool:
    try:
        loads_msgpack(body)
    except Exception:
        return True
    return False


_array_fields = st.fixed_dictionaries(
    {b"nd": st.just(True)},
    optional={
        b"kind": st.sampled_from([b"", b"O", b"V", b"x"]),
        b"type": st.sampled_from(["<f4", "|O", "|u1", "not-a-dtype", "V99999999999", "<M8[D]",
                                  ""]) | st.text(max_size=6),
        b"shape": st.lists(st.integers(-3, 2**40), max_size=4) | _MSGPACK_INTS | st.none(),
        b"data": st.binary(max_size=64) | st.text(max_size=4) | _MSGPACK_INTS,
    },
)

GARBAGE = st.one_of(
    # a message of other than 2 frames
    st.lists(st.binary(max_size=32), min_size=1, max_size=4).filter(lambda f: len(f) != 2),
    # a wrong format tag
    st.tuples(st.binary(max_size=3).filter(lambda t: t not in (b"M", b"P")),
              st.binary(max_size=32)).map(list),
    # a pickle (or anything tagged so) where msgpack is expected
    st.one_of(_values.map(pickle.dumps), st.binary(max_size=32)).map(lambda b: [b"P", b]),
    # truncated msgpack (a strict prefix of one object never decodes)
    _values.map(dumps_msgpack).flatmap(
        lambda b: st.integers(0, len(b) - 1).map(lambda k: [b"M", b[:k]])),
    # msgpack with trailing bytes
    st.tuples(_values.map(dumps_msgpack), st.binary(min_size=1, max_size=8))
    .map(lambda t: [b"M", t[0] + t[1]]),
    # arrays with object dtypes, oversize or negative shapes, bad dtypes, missing fields
    _array_fields.map(lambda d: [b"M", msgpack.packb([d], use_bin_type=True)])
    .filter(lambda f: _does_not_decode(f[1])),
    # random bytes that are not msgpack
    st.binary(max_size=48).filter(_does_not_decode).map(lambda b: [b"M", b]),
)


def _receive(it, n, out):
    out.extend(itertools.islice(it, n))


@settings(max_examples=25, deadline=None)
@given(plan=st.lists(st.one_of(GARBAGE, st.none()), max_size=30), n_real=st.integers(0, 20))
def test_a_fuzzed_sender_cannot_stop_the_receiver(plan, n_real):
    zmq = import_zmq()
    addr = f"tcp://127.0.0.1:{free_port()}"
    recv = RemoteDataZMQ(addr)
    it = iter(recv)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("dataflow.parallel")
    logger.addHandler(handler)
    ctx = zmq.Context()
    fuzz = ctx.socket(zmq.PUSH)
    got: list = []
    n_fuzz = sum(frames is None for frames in plan)
    start = time.monotonic()
    try:
        # the real sender, in a thread, and a raw one that mixes garbage with valid datapoints
        # (None in the plan) and ends with a valid marker; its messages arrive in the order sent
        real = threading.Thread(
            target=send_dataflow_zmq, args=(flows.Range(n_real), addr),
            kwargs={"num_epochs": 1, "drain_timeout": 30},
        )
        reader = threading.Thread(target=_receive, args=(it, n_real + n_fuzz + 1, got))
        reader.start()
        real.start()
        fuzz.connect(addr)
        k = 0
        for frames in plan:
            if frames is None:
                fuzz.send_multipart(_ok(k))
                k += 1
            else:
                fuzz.send_multipart(frames)
        fuzz.send_multipart([b"M", dumps_msgpack(["end"])])
        real.join(60)
        reader.join(60)
        assert not reader.is_alive()
        it.close()  # (logs what was dropped since the last line)
    finally:
        it.close()
        fuzz.close(linger=0)
        ctx.term()
        logger.removeHandler(handler)
    elapsed = time.monotonic() - start
    n_bad = len(plan) - n_fuzz
    assert sorted(map(repr, got)) == sorted(
        [repr([i]) for i in range(n_real)] + [repr(["ok", i]) for i in range(n_fuzz)]
        + [repr(["end"])]
    )
    assert recv.cnt1 == n_real + n_fuzz + 1
    assert recv.dropped == n_bad
    assert recv.state_dict()["dropped"] == n_bad
    assert sum(r.args[1] for r in records) == n_bad  # every drop is in a log line
    assert len(records) <= 2 + elapsed  # at most one a second, and one at the end
    assert (len(records) >= 1) == (n_bad >= 1)


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
    recv = RemoteDataZMQ(addr, hwm=2)
    it = iter(recv)
    try:
        for dp in itertools.islice(it, n):
            time.sleep(delay)
            out.append(int(dp[0]))
    finally:
        it.close()


def test_sender_waits_for_a_slow_receiver_to_take_the_tail():
    addr = f"tcp://127.0.0.1:{free_port()}"
    got: list[int] = []
    reader = threading.Thread(target=_slow_read, args=(addr, 40, 0.03, got))
    reader.start()
    # the receiver takes ~1.2 s to read 40 datapoints; the sender finishes sending long before
    # and then waits (up to drain_timeout) until its queue reached the receiver: nothing lost
    send_dataflow_zmq(flows.Arrays(40, (4,)), addr, hwm=2, num_epochs=1, drain_timeout=30)
    reader.join(30)
    assert got == list(range(40))


def test_sender_warns_when_the_receiver_never_reads():
    addr = f"tcp://127.0.0.1:{free_port()}"  # nobody listens: the datapoint stays queued
    with pytest.warns(RuntimeWarning, match=r"drain_timeout=0.3 s; what was still queued"):
        send_dataflow_zmq(flows.Arrays(1, (4,)), addr, hwm=2, num_epochs=1, drain_timeout=0.3)


@pytest.mark.parametrize("bad", [-1, "10", None])
def test_bad_drain_timeout(bad):
    with pytest.raises(ValueError, match=r"`drain_timeout` must be a number of seconds >= 0, "):
        send_dataflow_zmq(flows.Arrays(1, (4,)), "tcp://127.0.0.1:1", drain_timeout=bad)
