"""Shared-memory segments: round trip, clean-up, fallback when /dev/shm is full."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from dataflow.parallel import shared_memory
from dataflow.parallel.shared_memory import (
    SHM_DIR,
    Ring,
    SharedMemoryWriter,
    cleanup_segments,
    cleanup_stale_segments,
    new_prefix,
    open_segment,
    shm_available,
)

pytestmark = pytest.mark.skipif(not shm_available(), reason="needs Linux /dev/shm")


def _prefix(tmp_path) -> str:
    return f"dataflow-test{abs(hash(str(tmp_path))) % 10**8}"


def test_round_trip_unlinks_and_is_writable(tmp_path):
    prefix = _prefix(tmp_path)
    data = np.arange(100_000, dtype=np.float64)
    name = SharedMemoryWriter(prefix, 3).write(memoryview(data).cast("B"))
    assert name == f"{prefix}-3-0"
    assert os.path.exists(os.path.join(SHM_DIR, name))
    view = open_segment(name)
    assert not os.path.exists(os.path.join(SHM_DIR, name))  # unlinked once mapped
    arr = np.frombuffer(view, dtype=np.float64)
    assert np.array_equal(arr, data)
    arr[0] = -1.0
    assert arr[0] == -1.0


def test_cleanup_removes_unreceived_segments(tmp_path):
    prefix = _prefix(tmp_path)
    w = SharedMemoryWriter(prefix, 0)
    names = [w.write(memoryview(b"x" * 10)) for _ in range(3)]
    assert names == [f"{prefix}-0-{i}" for i in range(3)]
    assert cleanup_segments(prefix) == 3
    assert cleanup_segments(prefix) == 0


def test_invalid_names_are_refused():
    with pytest.raises(ValueError, match="invalid shared-memory segment name"):
        open_segment("../etc/passwd")


def test_falls_back_with_a_warning_when_space_is_short(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_memory, "MIN_FREE_BYTES", 1 << 62)
    w = SharedMemoryWriter(_prefix(tmp_path), 0)
    with pytest.warns(RuntimeWarning, match="shared memory unavailable"):
        assert w.write(memoryview(b"abc")) is None
    assert w.write(memoryview(b"abc")) is None  # warns once


def test_ring_round_trip_wraps_around_and_releases():
    ring = Ring(1024)
    try:
        assert ring.max_item == 256
        seen = []
        for i in range(40):  # many times around the ring
            data = bytes([i]) * (100 + i)
            slot = ring.write(memoryview(data))
            assert slot is not None
            off, n, head = slot
            assert n == len(data)
            assert off % Ring.ALIGN == 0
            assert off + n <= 1024
            out = ring.read(off, n, head)
            assert isinstance(out, bytearray)
            seen.append(bytes(out) == data)
        assert all(seen)
        assert ring.write(memoryview(b"x" * 257)) is None  # too large: sent another way
    finally:
        ring.close()


def test_ring_writer_waits_for_space():
    ring = Ring(1024)
    try:
        slots = [ring.write(memoryview(bytes([k]) * 200)) for k in range(4)]  # 4 x 256 bytes
        assert [s[0] for s in slots] == [0, 256, 512, 768]
        done = []
        t = threading.Thread(target=lambda: done.append(ring.write(memoryview(b"z" * 200))))
        t.start()
        time.sleep(0.1)
        assert done == []  # full: the writer waits
        assert bytes(ring.read(*slots[0])) == b"\x00" * 200
        t.join(5)
        assert done[0][0] == 0  # it reused the released space
        assert bytes(ring.read(*slots[1])) == b"\x01" * 200  # earlier data untouched
    finally:
        ring.close()


def test_stale_segments_of_dead_consumers_are_removed():
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(proc.stdout)
    old = time.time() - shared_memory.STALE_SECONDS - 60
    paths = {
        "dead-old": os.path.join(SHM_DIR, f"dataflow-{dead}-stale0-0-0"),
        "dead-new": os.path.join(SHM_DIR, f"dataflow-{dead}-stale1-0-0"),
        "alive-old": os.path.join(SHM_DIR, f"dataflow-{os.getpid()}-stale2-0-0"),
    }
    try:
        for key, path in paths.items():
            with open(path, "wb") as f:
                f.write(b"x")
            if key.endswith("old"):
                os.utime(path, (old, old))
        assert cleanup_stale_segments() >= 1
        assert not os.path.exists(paths["dead-old"])
        assert os.path.exists(paths["dead-new"])
        assert os.path.exists(paths["alive-old"])
    finally:
        for path in paths.values():
            if os.path.exists(path):
                os.unlink(path)


def test_new_prefix_names_the_consumer():
    prefix = new_prefix()
    assert prefix.startswith(f"dataflow-{os.getpid()}-")
    assert new_prefix() != prefix
