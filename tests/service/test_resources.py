"""What a consumer costs: work spread over every worker, shared rings only for the workers it
asks (none left in /dev/shm after a SIGKILL), and a bound on the bytes it asks for ahead. Real
services, worker processes and consumers on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataflow.parallel.shared_memory import SHM_DIR
from dataflow.service import DataService, ServiceData
from tests.service import pipelines

ROOT = Path(__file__).resolve().parents[2]


def _consumer(address, **kw):
    c = ServiceData(address, rank=0, world_size=1, timeout=20, **kw)
    c.reset_state()
    return c


@pytest.mark.parametrize("prefetch", [1, 4])
def test_work_is_spread_over_every_worker_whatever_the_prefetch(prefetch):
    with DataService(pipelines.source(60), pipelines.tag, num_workers=3, seed=5,
                     shuffle=False) as svc:
        c = _consumer(svc.address, prefetch=prefetch)
        assert [dp[0] for dp in c] == list(range(60))
        items = [w["items"] for w in svc.stats()["workers"]]
        c.close()
    assert sum(items) == 60 and min(items) >= 10, items


def _segments(pid: int) -> list[str]:
    return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(f"dataflow-{pid}-"))


def test_rings_only_for_asked_workers_and_nothing_left_after_a_consumer_sigkill():
    script = (
        "import os, sys, time\n"
        "from dataflow.service import ServiceData\n"
        "c = ServiceData(sys.argv[1], rank=0, world_size=1, timeout=20, prefetch=4)\n"
        "c.reset_state()\n"
        "print('connected', flush=True)\n"
        "sys.stdin.readline()\n"
        "for k, dp in enumerate(c, 1):\n"
        "    if k == 10:\n"
        "        print('read', flush=True)\n"
        "        time.sleep(60)\n"
    )
    with DataService(pipelines.source(100), pipelines.megabyte, num_workers=3, seed=5,
                     shuffle=False) as svc:
        proc = subprocess.Popen([sys.executable, "-c", script, svc.address], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdin is not None
            assert proc.stdout.readline() == "connected\n"
            connected = _segments(proc.pid)  # (connected, nothing asked: no ring yet)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "read\n"
            busy = [w["items"] > 0 for w in svc.stats()["workers"]]
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            proc.stdout.close()
            proc.stdin.close()
        left = _segments(proc.pid)
    assert connected == [] and left == []
    assert busy == [True, True, True]


def test_prefetch_bytes_bounds_the_outputs_asked_for_ahead():
    with DataService(pipelines.source(40), pipelines.megabyte, num_workers=2, seed=5,
                     shuffle=False) as svc:
        c = _consumer(svc.address, prefetch=64, prefetch_bytes=4 << 20)
        ahead = []
        for k, dp in enumerate(c, 1):
            assert dp[1].nbytes == 1 << 20
            if k % 8 == 0:
                time.sleep(0.3)  # (a slow reader: the workers could run far ahead)
                ahead.append(sum(w["items"] for w in svc.stats()["workers"]) - k)
        c.close()
    # (4 MB: about 4 outputs ahead, as estimated from those received; never 64)
    assert len(ahead) == 5 and max(ahead) <= 6, ahead
