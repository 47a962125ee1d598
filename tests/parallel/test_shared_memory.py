"""Shared-memory segments: round trip, clean-up whoever dies, bounded use of /dev/shm, fallback
when it is small or full (never a bus error)."""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from dataflow.parallel.shared_memory import (
    SHM_DIR,
    Ring,
    SegmentSpace,
    SharedMemoryWriter,
    _segments,
    cleanup_segments,
    cleanup_stale_segments,
    new_prefix,
    open_segment,
    shm_available,
)
from tests.helpers import wait_until

pytestmark = pytest.mark.skipif(not shm_available(), reason="needs Linux /dev/shm")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def space():
    sp = SegmentSpace.open()
    assert sp is not None
    yield sp
    sp.close()


def _ours(prefix: str) -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(SHM_DIR, prefix + "-*")))


def test_round_trip_unlinks_and_is_writable(space):
    data = np.arange(100_000, dtype=np.float64)
    name = SharedMemoryWriter(space.prefix, 3).write(memoryview(data).cast("B"))
    assert name == f"{space.prefix}-3-0"
    assert os.path.exists(os.path.join(SHM_DIR, name))
    view = open_segment(name)
    assert not os.path.exists(os.path.join(SHM_DIR, name))  # unlinked once mapped
    arr = np.frombuffer(view, dtype=np.float64)
    assert np.array_equal(arr, data)
    arr[0] = -1.0
    assert arr[0] == -1.0


def test_cleanup_removes_unreceived_segments(space):
    w = SharedMemoryWriter(space.prefix, 0)
    names = [w.write(memoryview(b"x" * 10)) for _ in range(3)]
    assert names == [f"{space.prefix}-0-{i}" for i in range(3)]
    assert cleanup_segments(space.prefix) == 3
    assert cleanup_segments(space.prefix) == 0


def test_close_removes_unreceived_segments_and_ends_the_reaper():
    sp = SegmentSpace.open()
    w = SharedMemoryWriter(sp.prefix, 0)
    assert w.write(memoryview(b"x" * 10)) == f"{sp.prefix}-0-0"
    sp.close()
    sp.close()  # idempotent
    assert sp.wait(10) == 0
    assert _ours(sp.prefix) == []
    assert w.write(memoryview(b"x" * 10)) is None  # no segment without a clean-up process


def test_invalid_names_are_refused():
    with pytest.raises(ValueError, match="invalid shared-memory segment name"):
        open_segment("../etc/passwd")


def test_writer_without_a_space_writes_no_segment(caplog):
    prefix = new_prefix()  # nobody cleans up after this prefix: no segment may be written
    w = SharedMemoryWriter(prefix, 0)
    with caplog.at_level(logging.WARNING, logger="dataflow.parallel"):
        assert w.write(memoryview(b"abc")) is None
        assert w.write(memoryview(b"abc")) is None
    assert caplog.records == []  # inline until a clean-up process accepts: not a fallback
    assert _ours(prefix) == []


def _reapers() -> list[psutil.Process]:
    return [c for c in psutil.Process().children(recursive=True)
            if c.status() != psutil.STATUS_ZOMBIE
            and "shared_memory/_reaper.py" in " ".join(c.cmdline())]


def test_the_clean_up_process_starts_with_the_first_large_inline_buffer(space):
    from dataflow.parallel._wire import SHM_MIN_BYTES, FrameDecoder

    assert not space.started and _reapers() == []
    decoder = FrameDecoder(None, space.prefix)
    small = np.arange(SHM_MIN_BYTES // 2, dtype=np.uint8)  # out of band, but no segment
    assert np.array_equal(decoder.decode(_inline(small)), small)
    assert not space.started  # a buffer that would not go to a segment starts nothing
    large = np.arange(SHM_MIN_BYTES, dtype=np.uint8)
    assert np.array_equal(decoder.decode(_inline(large)), large)
    assert space.started
    assert [p.pid for p in _reapers()] == [space._proc.pid]
    space.close()
    assert space.wait(10) == 0


def _inline(arr: np.ndarray) -> list:
    """The frames of ``arr`` as a worker sends them when it writes no segment."""
    from dataflow.parallel._wire import FrameCodec

    frames = FrameCodec(None).encode(arr)
    assert len(frames) == 3  # head, meta, the buffer inline
    return frames


@pytest.mark.parametrize("size", [100, 4 << 20])
def test_a_pipeline_starts_its_clean_up_process_only_for_segments(size):
    from dataflow import DataFromList, MultiProcessRunnerZMQ

    df = MultiProcessRunnerZMQ(
        DataFromList([[np.full(size, k, np.uint8)] for k in range(4)], shuffle=False), 1)
    # (4 MiB is more than a worker's ring takes in one piece: it needs a segment)
    df.reset_state()
    try:
        got = [dp[0] for _ in range(3) for dp in df]  # three epochs of len(ds)
        seen = [p.pid for p in _reapers()]
    finally:
        df.close()
    assert [int(a[0]) for a in got] == [0, 1, 2, 3] * 3  # one worker: in order
    assert all(a.shape == (size,) and (a == a[0]).all() for a in got)
    assert len(seen) == (0 if size == 100 else 1)


def test_falls_back_and_logs_once_when_space_is_short(space, monkeypatch, caplog):
    monkeypatch.setattr(_segments, "MIN_FREE_BYTES", 1 << 62)
    w = SharedMemoryWriter(space.prefix, 0)
    with caplog.at_level(logging.WARNING, logger="dataflow.parallel"):
        assert w.write(memoryview(b"abc")) is None
        assert w.write(memoryview(b"abc")) is None  # logged once
    assert len(caplog.records) == 1
    msg = caplog.records[0].getMessage()
    assert msg.startswith("dataflow: shared memory unavailable (only ")
    assert msg.endswith(" free in /dev/shm); sending large arrays through ZeroMQ instead. "
                        "Enlarge /dev/shm (docker run --shm-size=2g) to use it.")
    assert _ours(space.prefix) == []


def test_a_pipeline_warns_once_when_dev_shm_is_short(monkeypatch):
    monkeypatch.setattr(_segments, "MIN_FREE_BYTES", 1 << 62)
    with pytest.warns(RuntimeWarning) as record:
        assert SegmentSpace.open() is None
    assert len(record) == 1
    msg = str(record[0].message)
    assert msg.startswith("dataflow: not using shared memory: /dev/shm has only ")
    assert msg.endswith(
        " that shared memory leaves free; large arrays go through ZeroMQ instead (one more copy "
        "each). Enlarge /dev/shm (docker run --shm-size=2g; Kubernetes: an emptyDir volume with "
        "medium: Memory mounted at /dev/shm), or pass use_shm=False to choose this without the "
        "warning."
    )


def test_bytes_in_flight_are_bounded(space):
    w = SharedMemoryWriter(space.prefix, 0, max_in_flight=3000)
    names = [w.write(memoryview(b"x" * 1000)) for _ in range(4)]
    assert names == [f"{space.prefix}-0-{i}" for i in range(3)] + [None]  # 4th: inline
    open_segment(names[0])  # the consumer received the first one
    assert w.write(memoryview(b"y" * 1000)) == f"{space.prefix}-0-3"
    assert w.write(memoryview(b"y" * 1000)) is None
    assert _ours(space.prefix) == [f"{space.prefix}-0-{i}" for i in (1, 2, 3)]




WRITER = """
import sys
from dataflow.parallel.shared_memory import SharedMemoryWriter
w = SharedMemoryWriter(sys.argv[1], "c")
print(w.write(memoryview(b"a" * 100)), flush=True)
sys.stdin.readline()
print(w.write(memoryview(b"b" * 100)), flush=True)
sys.stdin.readline()
"""


def test_reaper_sweeps_when_the_owner_leaves_and_when_the_last_writer_leaves(space):
    prefix = space.prefix
    assert space.start()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with subprocess.Popen([sys.executable, "-c", WRITER, prefix], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, env=env) as child:
        try:
            assert child.stdout.readline().strip() == f"{prefix}-c-0"
            mine = SharedMemoryWriter(prefix, "p")
            assert mine.write(memoryview(b"p" * 100)) == f"{prefix}-p-0"
            assert _ours(prefix) == [f"{prefix}-c-0", f"{prefix}-p-0"]
            space._link.close()  # the owner leaves (as if killed): what it was sent is removed
            assert wait_until(lambda: _ours(prefix) == [], 5)
            assert space._proc.poll() is None  # a writer is still there
            late = subprocess.run([sys.executable, "-c", WRITER, prefix], input="\n\n",
                                  capture_output=True, text=True, env=env, timeout=60)
            assert late.stdout.split() == ["None", "None"]  # no new writer once the owner left
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == f"{prefix}-c-1"  # still connected
            assert _ours(prefix) == [f"{prefix}-c-1"]
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.wait(30) == 0
            assert space._proc.wait(10) == 0  # the last writer left: swept, and the reaper ended
            assert _ours(prefix) == []
        finally:
            if child.poll() is None:
                child.kill()


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
    old = time.time() - _segments.STALE_SECONDS - 60
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


# ---- real pipelines in a subprocess ----------------------------------------------------------

PIPELINE = """
import json, os, sys, time, warnings
import numpy as np
from dataflow.base import DataFlow
from dataflow.parallel import MultiProcessMapDataZMQ, MultiProcessRunnerZMQ
from dataflow.parallel.shared_memory import _segments
from dataflow.sources import DataFromList

kind, mib, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = mib << 20

class Big(DataFlow):
    def __iter__(self):
        i = 0
        while True:
            yield [i, np.full(size, i % 251, np.uint8)]
            i += 1

GO = sys.argv[0] + ".go"  # created once the consumer has stopped iterating

def big(dp):
    # n == 1: inputs well past the 61 the consumer takes wait until it has stopped, so that
    # their results are still in flight then, whatever the scheduling (a consumer that fell
    # behind would otherwise have received every result of its window before it stopped). A
    # worker returns the results of a chunk (at most 16 inputs) together, so the chunk of input
    # 60 must not wait: the gate starts 16 inputs later.
    while n == 1 and dp[0] > 76 and not os.path.exists(GO):
        time.sleep(0.005)
    return [dp[0], np.full(size, dp[0] % 251, np.uint8)]

if len(sys.argv) > 4:  # no free-space check: only posix_fallocate stands before a SIGBUS
    _segments.MIN_FREE_BYTES = -(1 << 40)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if kind == "runner":
        df = MultiProcessRunnerZMQ(Big(), 2, hwm=50)
    else:
        df = MultiProcessMapDataZMQ(DataFromList([[i] for i in range(10**6)], shuffle=False), 2,
                                    big, buffer_size=50, ordered=True)
    df.reset_state()
    it = iter(df)
    print(json.dumps([str(w.message) for w in caught]), flush=True)
first = next(it)
if n == 1:  # the first results came inline (no clean-up process yet): later ones use segments
    for _ in range(60):
        next(it)
got = [first] + [next(it) for _ in range(n - 1)]
ok = all(dp[1].shape == (size,) and int(dp[1][0]) == int(dp[1][-1]) == dp[0] % 251 for dp in got)
print(json.dumps({"ok": ok, "ids": [int(dp[0]) for dp in got]}), flush=True)
if n == 1:  # the workers run ahead (the mapper's on the inputs it has sent them) until killed
    open(GO, "x").close()
    time.sleep(600)
df.close()
"""


def _pipeline(tmp_path: Path, *args: object, prefix: list[str] | None = None) -> list[str]:
    script = tmp_path / "pipeline.py"
    script.write_text(PIPELINE)
    return [*(prefix or []), sys.executable, str(script), *map(str, args)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


@pytest.mark.parametrize("kind", ["runner", "map"])
def test_no_segment_outlives_a_consumer_killed_with_arrays_in_flight(kind, tmp_path):
    proc = subprocess.Popen(_pipeline(tmp_path, kind, 4, 1), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert json.loads(proc.stdout.readline()) == []  # no warning
        assert json.loads(proc.stdout.readline()) == {"ok": True, "ids": [0]}
        pattern = os.path.join(SHM_DIR, f"dataflow-{proc.pid}-*")
        # 4 MiB arrays wait in /dev/shm for the consumer, at most 256 MiB per worker
        assert wait_until(lambda: len(glob.glob(pattern)) >= 8, 20)
        assert len(glob.glob(pattern)) <= 2 * 64
        family = psutil.Process(proc.pid).children(recursive=True)
        assert len(family) == 3  # two workers and the clean-up process
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert wait_until(lambda: glob.glob(pattern) == [], 5)
    assert wait_until(lambda: not any(_running(p) for p in family), 5)


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _small_shm_prefix() -> list[str]:
    """A command prefix that runs its command with a 64 MB tmpfs over /dev/shm (a private mount
    namespace: nothing outside sees it, and it goes with the command), or a skip."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a small /dev/shm in a private namespace")
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
              'mount -t tmpfs -o size=64m dataflow-test /dev/shm && exec "$@"', "sh"]
    probe = subprocess.run([*prefix, "df", "-B1", "--output=size", SHM_DIR],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace: {probe.stderr.strip()}")
    assert probe.stdout.split()[-1] == str(64 << 20)
    return prefix


@pytest.mark.parametrize("kind", ["runner", "map"])
def test_a_64mb_dev_shm_falls_back_to_zeromq_with_one_warning(kind, tmp_path):
    res = subprocess.run(_pipeline(tmp_path, kind, 16, 12, prefix=_small_shm_prefix()),
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert res.returncode == 0, res.stderr
    warned, result = map(json.loads, res.stdout.splitlines())
    assert len(warned) == 1
    assert warned[0].startswith("dataflow: not using shared memory: /dev/shm has only 64 MiB "
                                "free, less than the 256 MiB that shared memory leaves free;")
    assert result["ok"] is True
    assert len(result["ids"]) == 12
    if kind == "map":  # (a runner's two workers each count from 0)
        assert result["ids"] == list(range(12))
    assert "shared memory unavailable" not in res.stderr  # the workers did not even try


@pytest.mark.parametrize("kind", ["runner", "map"])
def test_a_full_dev_shm_never_raises_a_bus_error(kind, tmp_path):
    # Shared memory is on and may fill /dev/shm to the last byte: 2 workers run ahead with
    # 16 MiB arrays (hwm 50) into 64 MiB. Each segment's pages are reserved first, so the
    # segment that does not fit is sent through ZeroMQ instead of faulting (SIGBUS) later.
    res = subprocess.run(_pipeline(tmp_path, kind, 16, 40, "fill", prefix=_small_shm_prefix()),
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert res.returncode == 0, res.stderr
    warned, result = map(json.loads, res.stdout.splitlines())
    assert warned == []
    assert result["ok"] is True
    assert len(result["ids"]) == 40
    if kind == "map":
        assert result["ids"] == list(range(40))
    full = [line for line in res.stderr.splitlines() if "shared memory unavailable" in line]
    assert 1 <= len(full) <= 2  # once per worker that met a full /dev/shm
    assert all(line == "dataflow: shared memory unavailable (/dev/shm is full (No space left on "
               "device)); sending large arrays through ZeroMQ instead. Enlarge /dev/shm (docker "
               "run --shm-size=2g) to use it." for line in full)
