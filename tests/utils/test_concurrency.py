"""dataflow.utils.concurrency: stoppable threads and process helpers."""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest

from dataflow.parallel._bootstrap import get_context
from dataflow.utils.concurrency import (
    LoopThread,
    StoppableThread,
    enable_death_signal,
    ensure_proc_terminate,
    mask_sigint,
    start_proc_mask_signal,
)
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_stoppable_thread_queue_operations():
    t = StoppableThread()
    q: queue.Queue = queue.Queue(maxsize=1)
    t.queue_put_stoppable(q, 1)
    assert t.queue_get_stoppable(q) == 1
    assert not t.stopped()
    t.stop()
    assert t.stopped()
    q.put(2)
    t.queue_put_stoppable(q, 3)  # full and stopped: gives up at once
    assert q.get_nowait() == 2 and q.empty()
    assert t.queue_get_stoppable(q) is None
    evt = threading.Event()
    assert not StoppableThread(evt).stopped()
    evt.set()
    assert StoppableThread(evt).stopped()


def test_loop_thread_loops_pauses_and_stops():
    q: queue.Queue = queue.Queue()
    t = LoopThread(lambda: q.put(1))
    assert t.daemon
    t.start()
    assert [q.get(timeout=30) for _ in range(3)] == [1, 1, 1]
    t.pause()
    t.stop()
    t.resume()
    t.join(30)
    assert not t.is_alive()
    with pytest.raises(RuntimeError, match="pausable=False"):
        LoopThread(lambda: None, pausable=False).pause()
    with pytest.raises(TypeError, match="`func` must be callable"):
        LoopThread(3)


def test_mask_sigint():
    before = signal.getsignal(signal.SIGINT)
    with mask_sigint() as masked:
        assert masked is True
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is before
    out = []

    def in_thread():
        with mask_sigint() as m:
            out.append(m)

    th = threading.Thread(target=in_thread)
    th.start()
    th.join()
    assert out == [False]


def _report_child(q) -> None:
    enable_death_signal()
    value = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
    q.put((signal.getsignal(signal.SIGINT) == signal.SIG_IGN, value.value))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_start_proc_mask_signal_and_enable_death_signal():
    ctx = get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_report_child, args=(q,))
    start_proc_mask_signal([proc])
    try:
        assert q.get(timeout=60) == (True, int(signal.SIGHUP))
    finally:
        proc.join(60)
    assert proc.exitcode == 0


ENSURE = """
import time
from dataflow.parallel._bootstrap import get_context
from dataflow.utils.concurrency import ensure_proc_terminate

def sleep():
    time.sleep(600)

if __name__ == "__main__":
    proc = get_context("fork").Process(target=sleep, daemon=False)
    proc.start()
    ensure_proc_terminate(proc)
    print(proc.pid, flush=True)
"""


def test_ensure_proc_terminate_ends_the_process_at_exit(tmp_path):
    script = tmp_path / "ensure.py"
    script.write_text(textwrap.dedent(ENSURE))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert res.returncode == 0, res.stderr
    pid = int(res.stdout)
    # a non-daemon child that sleeps 600 s: the interpreter's exit terminated and joined it
    assert wait_until(lambda: not psutil.pid_exists(pid) or
                      psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10)


def test_ensure_proc_terminate_accepts_a_list_of_unstarted_processes():
    ctx = get_context("fork")
    ensure_proc_terminate([ctx.Process(target=print), ctx.Process(target=print)])  # no error
