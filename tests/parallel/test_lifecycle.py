"""Lifecycle: no child is left behind, nothing hangs, descriptors do not leak."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from dataflow.errors import DataFlowTerminated, WorkerError
from dataflow.parallel import (
    MultiProcessMapDataZMQ,
    MultiProcessRunner,
    MultiProcessRunnerZMQ,
    MultiThreadMapData,
    MultiThreadRunner,
)
from dataflow.parallel._bootstrap import check_picklable, get_context
from tests.parallel import flows

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL_ENV = dict(os.environ)

PRELUDE = """
import os, sys, time, itertools
from dataflow.parallel import *
from tests.parallel import flows
"""


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "script.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return [sys.executable, str(path)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def _wait_dead(pids: list[int], timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = pids
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


def _read_pids(proc: subprocess.Popen) -> list[int]:
    line = proc.stdout.readline()
    assert line.startswith("PIDS"), line + proc.stderr.read()
    return [int(p) for p in line.split()[1:]]


START_ALL = """
r1 = MultiProcessRunnerZMQ(flows.Range(10**6), 2)
r2 = MultiProcessRunner(flows.Range(10**6), 4, 1)
m = MultiProcessMapDataZMQ(flows.Range(100), 2, flows.double)
for df in (r1, r2, m):
    df.reset_state()
    it = iter(df)
    next(it)
pids = r1._pool.pids + r2._pool.pids + m._pool.pids
print("PIDS", *pids, flush=True)
"""


def test_sigkill_of_the_parent_kills_the_workers(tmp_path):
    proc = subprocess.Popen(
        _script(tmp_path, START_ALL + "time.sleep(60)\n"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    try:
        pids = _read_pids(proc)
        assert len(pids) == 5
        assert all(psutil.pid_exists(p) for p in pids)
        proc.kill()
        proc.wait(10)
        assert _wait_dead(pids) == []
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_normal_exit_does_not_hang_and_leaves_nothing(tmp_path):
    res = subprocess.run(
        _script(tmp_path, START_ALL + "print('END', flush=True)\n"),
        capture_output=True, text=True, env=_env(), timeout=30,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[-1] == "END"
    pids = [int(p) for p in lines[0].split()[1:]]
    assert _wait_dead(pids) == []
    assert res.stderr == ""


def test_ctrl_c_stops_everything(tmp_path):
    # a job started in the background (`make test &`) inherits SIGINT ignored, and so would
    # this child: it sets Python's own Ctrl-C handler itself, as a terminal's foreground job has
    body = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
""" + START_ALL + """
while True:
    for dp in r1:
        pass
"""
    proc = subprocess.Popen(
        _script(tmp_path, body), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(), start_new_session=True,
    )
    try:
        pids = _read_pids(proc)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        rc = proc.wait(15)
        err = proc.stderr.read()
        assert rc != 0
        assert err.rstrip().endswith("KeyboardInterrupt"), err
        # a plain KeyboardInterrupt: not raised while handling an exception of ZeroMQ's
        assert "During handling of the above exception" not in err, err
        assert "zmq.error" not in err, err
        assert _wait_dead(pids) == []
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.slow
def test_spawn_and_forkserver_start_methods(tmp_path):
    body = """
def main():
    for method in ("spawn", "forkserver"):
        with MultiProcessRunnerZMQ(flows.Range(5), 2, start_method=method) as r:
            r.reset_state()
            print(method, sorted(dp[0] for dp in r))
        with MultiProcessMapDataZMQ(flows.Range(6), 2, flows.double, strict=True,
                                    start_method=method) as m:
            print(method, sorted(dp[0] for dp in m))
    with MultiProcessRunner(flows.Range(3), 2, 1, start_method="spawn") as r:
        print("queue", [dp[0] for dp in r])

if __name__ == "__main__":  # spawn re-imports the main module
    main()
"""
    res = subprocess.run(
        _script(tmp_path, body), capture_output=True, text=True, env=_env(), timeout=120
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert len(out) == 5
    assert out[1] == "spawn [0, 2, 4, 6, 8, 10]"
    assert out[3] == "forkserver [0, 2, 4, 6, 8, 10]"
    assert out[4] == "queue [0, 1, 2]"
    for i, method in ((0, "spawn"), (2, "forkserver")):
        name, values = out[i].split(" ", 1)
        assert name == method
        values = [int(v) for v in values.strip("[]").split(", ")]
        assert len(values) == 5
        assert set(values) <= set(range(5))


def test_unpicklable_dataflow_names_the_attribute():
    r = MultiProcessRunnerZMQ(flows.Unpicklable(3), 1, start_method="spawn")
    with pytest.raises(TypeError, match=r"`ds.handle` is not"):
        r.reset_state()
    r.close()
    m = MultiProcessMapDataZMQ(flows.Range(3), 1, lambda dp: dp, start_method="spawn")
    with pytest.raises(TypeError, match="`map_func` must be picklable"):
        m.reset_state()
    m.close()


def test_check_picklable_walks_nested_containers():
    class Holder:
        def __init__(self):
            self.ok = [1, 2]
            self.inner = {"fine": 1, "bad": [0, lambda: None]}

    with pytest.raises(TypeError, match=r"`x.inner\['bad'\]\[1\]` is not"):
        check_picklable(Holder(), "x", "spawn")


def test_default_start_method_is_fork_on_linux():
    expected = "fork" if sys.platform.startswith("linux") else "spawn"
    assert get_context(None).get_start_method() == expected


def test_garbage_collection_stops_workers():
    r = MultiProcessRunnerZMQ(flows.Range(100), 2)
    r.reset_state()
    next(iter(r))
    pids = r._pool.pids
    del r
    gc.collect()
    assert _wait_dead(pids) == []


def _fds() -> int:
    return psutil.Process().num_fds()


@pytest.mark.slow
def test_many_cycles_leave_no_children_and_no_descriptors():
    def cycle(i):
        r = MultiProcessRunnerZMQ(flows.Range(3), 1) if i % 2 else MultiProcessRunner(
            flows.Range(3), 2, 1
        )
        with r:
            r.reset_state()
            assert [dp[0] for dp in r] == [0, 1, 2]
        with MultiThreadMapData(flows.Range(3), 2, flows.double, strict=True) as m:
            assert sorted(dp[0] for dp in m) == [0, 2, 4]
        if i % 10 == 0:
            with MultiProcessMapDataZMQ(flows.Range(3), 1, flows.double, strict=True) as m:
                assert sorted(dp[0] for dp in m) == [0, 2, 4]

    for i in range(4):
        cycle(i)
    gc.collect()
    before = _fds()
    for i in range(80):  # (a descriptor or a child leaked per cycle shows after one)
        cycle(i)
    gc.collect()
    assert psutil.Process().children() == []
    assert _fds() <= before


def test_workers_started_from_a_thread_outlive_it_but_not_the_parent(tmp_path):
    body = """
import threading
box = []
def start():
    r = MultiProcessRunnerZMQ(flows.Range(10**6), 2)
    r.reset_state()
    box.append(r)
t = threading.Thread(target=start)
t.start()
t.join()  # the thread that forked is gone: the workers must keep running
r = box[0]
time.sleep(0.5)
assert len(list(itertools.islice(r, 3))) == 3
print("PIDS", *r._pool.pids, flush=True)
time.sleep(60)
"""
    proc = subprocess.Popen(
        _script(tmp_path, body), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(),
    )
    try:
        pids = _read_pids(proc)
        assert all(psutil.pid_exists(p) for p in pids)
        proc.kill()  # no PDEATHSIG here (not the main thread): the watchdog must act
        proc.wait(10)
        assert _wait_dead(pids) == []
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_forked_workers_get_single_threaded_opencv_without_deadlock():
    cv2 = pytest.importorskip("cv2")
    img = np.zeros((1024, 1024, 3), np.uint8)
    for _ in range(3):  # start OpenCV's thread pool in this process
        cv2.GaussianBlur(img, (5, 5), 1)
    before = cv2.getNumThreads()
    for _ in range(3):
        with MultiProcessRunnerZMQ(flows.Cv2Threads(), 2) as r:
            r.reset_state()
            assert list(r) == [[1, "1"]]
        assert cv2.getNumThreads() == before  # restored in the consumer
    assert os.environ.get("OMP_NUM_THREADS") == ORIGINAL_ENV.get("OMP_NUM_THREADS")


@pytest.mark.parametrize(
    "make",
    [
        lambda: MultiProcessRunnerZMQ(flows.Range(10**6, delay=0.001), 2),
        lambda: MultiProcessRunner(flows.Range(10**6, delay=0.001), 4, 2),
        lambda: MultiThreadRunner(lambda: flows.Range(10**6, delay=0.001), 4, 2),
        lambda: MultiProcessMapDataZMQ(flows.Range(100), 2, flows.sleepy),
        lambda: MultiThreadMapData(flows.Range(100), 2, flows.sleepy),
    ],
    ids=["zmq-runner", "process-runner", "thread-runner", "zmq-map", "thread-map"],
)
def test_close_from_another_thread_terminates_the_iteration(make):
    df = make()
    df.reset_state()
    pool = getattr(df, "_pool", None)
    pids = pool.pids if pool is not None else []
    outcome = []

    def consume():
        try:
            for _ in df:
                pass
        except DataFlowTerminated:
            outcome.append("terminated")
        except WorkerError as e:  # the workers may be seen dead first
            outcome.append(f"worker error: {e.exc_type}")

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.3)
    df.close()  # e.g. an atexit hook while a feeding thread iterates
    t.join(10)
    assert not t.is_alive()
    assert outcome == ["terminated"]
    assert _wait_dead(pids) == []
