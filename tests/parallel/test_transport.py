"""Wire format: pickle protocol 5 with out-of-band frames, shared memory, endpoints."""

from __future__ import annotations

import os
import pickle
import struct
import sys

import numpy as np
import psutil
import pytest

from dataflow.parallel._wire import (
    OOB_MIN_BYTES,
    PLAIN_DECODER,
    Endpoint,
    FrameCodec,
    FrameDecoder,
    import_zmq,
)
from dataflow.parallel.shared_memory import (
    Ring,
    SegmentSpace,
    SharedMemoryWriter,
    cleanup_segments,
    shm_available,
)


def _through_zmq(frames):
    zmq = import_zmq()
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        a.bind("inproc://codec-test")
        b.connect("inproc://codec-test")
        a.send_multipart(frames, copy=False)
        return b.recv_multipart(copy=False)
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


def _packed_meta(frame: bytes) -> list:
    assert frame[0] == 1
    (n,) = struct.unpack_from("<I", frame, 1)
    return pickle.loads(frame[5 + n :])


def test_small_objects_are_one_pickle():
    frames = FrameCodec().encode([1, "a", np.arange(3)])
    assert len(frames) == 1
    out = PLAIN_DECODER.decode(frames)
    assert out[:2] == [1, "a"]
    assert np.array_equal(out[2], np.arange(3))


def test_large_arrays_go_out_of_band_without_copies():
    big = np.arange(OOB_MIN_BYTES, dtype=np.int32).reshape(-1, 64)
    fortran = np.asfortranarray(np.ones((200, 300)))
    strided = np.ones((400, 400))[::2]  # not contiguous: stays in band
    frames = FrameCodec().encode({"big": big, "f": fortran, "s": strided})
    assert len(frames) == 4  # head, meta, two buffers
    assert pickle.loads(frames[1]) == [None, None]
    assert np.shares_memory(np.frombuffer(frames[2], np.int32), big)
    out = PLAIN_DECODER.decode(_through_zmq(frames))
    assert np.array_equal(out["big"], big)
    assert np.array_equal(out["f"], fortran)
    assert out["f"].flags.f_contiguous
    assert np.array_equal(out["s"], strided)
    assert out["big"].flags.writeable


@pytest.mark.skipif(not shm_available(), reason="needs Linux /dev/shm")
def test_shared_memory_frames():
    space = SegmentSpace.open()
    codec = FrameCodec(SharedMemoryWriter(space.prefix, 0), shm_min_bytes=1 << 20)
    try:
        arr = np.random.default_rng(0).integers(0, 255, (1024, 1024, 2), dtype=np.uint8)
        frames = codec.encode([arr])
        assert len(frames) == 1
        assert _packed_meta(frames[0]) == [f"{space.prefix}-0-0"]
        out = PLAIN_DECODER.decode(_through_zmq(frames))
        assert np.array_equal(out[0], arr)
        assert out[0].flags.writeable
    finally:
        assert cleanup_segments(space.prefix) == 0
        space.close()


def test_endpoint_is_private():
    e = Endpoint("x")
    if sys.platform.startswith("linux"):
        assert e.address.startswith("ipc://@dataflow-x-")
        assert len(e.address) == len("ipc://@dataflow-x-") + 32
        assert not e.needs_early_bind
    else:  # pragma: no cover
        assert "ipc://" in e.address or e.address.startswith("tcp://127.0.0.1")
    assert Endpoint("x").address != e.address
    e.cleanup()


def test_ring_frames_are_copied_out_and_released():
    ring = Ring(1 << 20)
    decoder = FrameDecoder([Ring(1 << 16), ring])  # worker 1 uses the second ring
    try:
        codec = FrameCodec(ring=ring, worker_id=1)
        for i in range(20):  # several times around the ring
            arr = np.full((200, 300), i, np.float32)  # 240 KB
            frames = codec.encode({"a": arr, "small": np.arange(3)})
            assert len(frames) == 1
            ((wid, _off, n, head),) = _packed_meta(frames[0])
            assert (wid, n) == (1, arr.nbytes)
            out = decoder.decode(_through_zmq(frames))
            assert np.array_equal(out["a"], arr)
            assert out["a"].flags.writeable
            assert not np.shares_memory(out["a"], np.frombuffer(ring.mm, np.uint8))
            assert ring.tail[0] == head
    finally:
        decoder.close()


def test_ring_slot_without_rings_is_refused():
    ring = Ring(1 << 20)
    try:
        frames = FrameCodec(ring=ring).encode([np.zeros(100_000, np.uint8)])
        with pytest.raises(ValueError, match="no rings"):
            PLAIN_DECODER.decode(frames)
    finally:
        ring.close()


def _listening_ports() -> set[tuple[int, str, int]]:
    """(pid, address, port) of the listening inet sockets of this process and its children."""
    out = set()
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            out |= {(proc.pid, c.laddr.ip, c.laddr.port)
                    for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            pass
    return out


def test_endpoint_falls_back_to_tcp_on_loopback(monkeypatch):
    with monkeypatch.context() as m:  # a system without unix sockets
        m.setattr(sys, "platform", "win32")
        m.setattr(os, "name", "nt")
        e = Endpoint("x")
    assert e.address == "tcp://127.0.0.1"
    assert e.needs_early_bind
    zmq = import_zmq()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        e.bind(sock)
        host, port = e.address.removeprefix("tcp://").rsplit(":", 1)
        assert host == "127.0.0.1"
        assert [(ip, p) for _, ip, p in _listening_ports() if p == int(port)] == [
            ("127.0.0.1", int(port))]
    finally:
        sock.close(linger=0)
        ctx.term()


def test_endpoint_without_abstract_sockets_is_in_a_private_directory(monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(sys, "platform", "darwin")
        e = Endpoint("x")
    path = e.address.removeprefix("ipc://")
    folder = os.path.dirname(path)
    assert os.path.basename(path) == "s"
    assert os.stat(folder).st_mode & 0o777 == 0o700
    e.cleanup()
    assert not os.path.exists(folder)


@pytest.mark.parametrize("kind", ["runner", "map"])
def test_pipelines_listen_on_no_network_address(kind):
    from dataflow.parallel import MultiProcessMapDataZMQ, MultiProcessRunnerZMQ
    from tests.parallel import flows

    before = _listening_ports()
    if kind == "runner":
        df, expected = MultiProcessRunnerZMQ(flows.Range(10), 1), list(range(10))
    else:
        df = MultiProcessMapDataZMQ(flows.Range(10), 2, flows.double, strict=True, ordered=True)
        expected = list(range(0, 20, 2))
    with df:
        df.reset_state()
        it = iter(df)
        got = [next(it)[0]]
        assert _listening_ports() - before == set()  # (private unix sockets only)
        got += [dp[0] for dp in it]
    assert got == expected
