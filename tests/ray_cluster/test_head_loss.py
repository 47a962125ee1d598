"""The head node's loss mid-epoch: a clear error in the consumer, not a hang.

The driver runs in a subprocess: a Ray driver whose head node stays away for a minute ends its
own process (Ray's choice), which must not be this test session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ray_cluster.conftest import alive

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

DRIVER = r"""
import json, sys, time
from dataflow.errors import HeadNodeLostError
from dataflow.ray import RayMapData
from dataflow.ray.local_cluster import LoopbackCluster
from tests.parallel import flows

out = {}
with LoopbackCluster(2) as cluster:
    out["pids"] = cluster.processes()
    ds = RayMapData(flows.Range(10**6), 2, flows.sleepy, strict=True, address=cluster.address)
    n = 0
    try:
        for dp in ds:
            n += 1
            if n == 50:
                killed = time.monotonic()
                cluster.kill_node(cluster.head_id)
    except HeadNodeLostError as e:
        out["error"] = str(e)
        out["after_s"] = time.monotonic() - killed
    out["outputs"] = n
    ds.close()
    out["pids"] += cluster.processes()
print(json.dumps(out))
"""


def test_the_head_nodes_loss_is_a_clear_error():
    pytest.importorskip("ray")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"].startswith("RayMapData: the head node of the Ray cluster (its GCS at "
                                   "127.0.0.1:")
    assert "no longer answers" in out["error"]
    assert out["outputs"] >= 50
    assert [p for p in out["pids"] if alive(p)] == []
    print(f"head node loss: HeadNodeLostError {out['after_s']:.2f} s after the kill")
