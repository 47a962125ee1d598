"""``DataService(backend="ray")``: the dispatcher and the workers as Ray actors.

On the local Ray of this package (2 CPUs): the outputs are exactly the process back end's, the
figures, a worker's process killed, and nothing left after ``close()``. On a three-node
``LoopbackCluster`` (in a process of its own, ``tests/ray/service_cluster.py``: this process is
already the local Ray's driver): two ranks sharing an epoch, and a worker's node killed
mid-epoch. Every service listens on 127.0.0.1 only and is closed by its test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import psutil
import pytest

from dataflow.service import DataService, ServiceData
from tests.helpers import wait_until
from tests.ray import service_cluster
from tests.service import pipelines

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.allow_children]

ROOT = Path(__file__).resolve().parents[2]
#: the longest a consumer may wait for an output across a lost worker or node (seconds)
STALL_S = 5.0


def _service(n, backend="ray", workers=2, seed=5, shuffle=True):
    return DataService(pipelines.source(n), pipelines.tag, backend=backend,
                       num_workers=workers, seed=seed, shuffle=shuffle)


def _read(address, rank=0, world=1, epochs=1, on_item=None):
    """``epochs`` epochs of one rank (lists of outputs), and the longest gap between two
    outputs (the first measured from the start of its epoch)."""
    c = ServiceData(address, rank=rank, world_size=world, timeout=60)
    c.reset_state()
    out, gap = [], 0.0
    for _ in range(epochs):
        epoch, last = [], time.monotonic()
        for dp in c:
            now = time.monotonic()
            gap, last = max(gap, now - last), now
            epoch.append(list(dp))
            if on_item is not None:
                on_item(len(epoch))
        out.append(epoch)
    c.close()
    return out, gap


def _process_backend(n, ranks=1, epochs=1):
    """What each of ``ranks`` ranks receives from the process back end (same seed)."""
    with _service(n, backend="process") as svc:
        return [_read(svc.address, r, ranks, epochs)[0] for r in range(ranks)]


# ---- on the local Ray (2 CPUs) ------------------------------------------------------------------


@pytest.mark.usefixtures("local_ray")
def test_one_rank_receives_exactly_what_the_process_backend_gives():
    (want,) = _process_backend(80, epochs=2)
    with _service(80) as svc:
        assert svc.address.startswith("tcp://127.0.0.1:")
        got, _ = _read(svc.address, epochs=2)
    assert got == want  # the same outputs in the same order, both epochs
    assert sorted(dp[0] for dp in got[0]) == list(range(80))
    assert [dp[0] for dp in got[0]] != [dp[0] for dp in got[1]]  # (a new order per epoch)


@pytest.mark.usefixtures("local_ray")
def test_stats_name_the_ray_backend_and_its_workers():
    with _service(40) as svc:
        (epoch,), _ = _read(svc.address)
        assert len(epoch) == 40
        # (the dispatcher reads the workers' figures in the background, every 0.25 s)
        assert wait_until(lambda: sum(w["items"] for w in svc.stats()["workers"]) == 40, 10)
        stats = svc.stats()
    assert stats["backend"] == "ray"
    assert stats["address"] == svc.address and stats["datapoints"] == 40
    assert stats["num_workers"] == 2 and stats["restarts"] == 0
    assert [(w["worker"], w["generation"]) for w in stats["workers"]] == [(0, 0), (1, 0)]
    assert all(w["address"].startswith("tcp://127.0.0.1:") for w in stats["workers"])
    # (its reader, known from its hello; what it received, from its reports: none may have
    # come in so short an epoch)
    assert [(c["job"], c["rank"], c["world_size"]) for c in stats["consumers"]] == [
        ("default", 0, 1)]


@pytest.mark.usefixtures("local_ray")
def test_a_killed_worker_process_is_replaced_and_nothing_is_lost(monkeypatch):
    monkeypatch.setenv("SVC_SLEEP", "0.005")  # (the actors' processes are started after this)
    (want,) = _process_backend(300)
    with _service(300) as svc:
        victim = svc.worker_pids()[0]

        def kill(k):
            if k == 60:
                os.kill(victim, signal.SIGKILL)

        got, stall = _read(svc.address, on_item=kill)
        stats = svc.stats()
    assert got == want  # 0 missing, 0 repeated, the same order
    assert stats["restarts"] == 1
    assert stall < STALL_S, stall
    print(f"worker process killed: longest stall {stall:.3f} s")


def _family() -> list[int]:
    """This process and its descendants (the local Ray's processes: its actors)."""
    me = psutil.Process()
    return [me.pid, *(p.pid for p in me.children(recursive=True))]


@pytest.mark.usefixtures("local_ray")
def test_close_leaves_no_actor_and_no_socket():
    svc = _service(20).start()
    try:
        assert len(_read(svc.address)[0][0]) == 20
        stats = svc.stats()
        ports = service_cluster.ports(stats)
        assert len(ports) == 3  # the dispatcher's and two workers'
        # every socket of the service (in the actors' processes) listens on loopback only
        listening = service_cluster.listening(_family(), ports)
        assert {port for _, port in listening} == ports
        assert {ip for ip, _ in listening} == {"127.0.0.1"}
        assert service_cluster.ours_alive(ray) == ["_ServiceHost", "_WorkerActor",
                                                   "_WorkerActor"]
    finally:
        svc.close()
    assert service_cluster.ours_alive(ray) == []  # (close() waits until they are gone)
    assert service_cluster.gone(lambda: service_cluster.listening(_family(), ports)) == []
    svc.close()  # (idempotent)


# ---- on a three-node cluster (a process of its own) ---------------------------------------------


@pytest.fixture(scope="module")
def cluster_report():
    """What ``python -m tests.ray.service_cluster`` saw (see there); none of its processes
    (its cluster's) outlives it."""
    marker = uuid.uuid4().hex
    env = {**os.environ, "SVC_SLEEP": service_cluster.SLEEP,
           service_cluster.MARKER_ENV: marker}
    out = subprocess.run([sys.executable, "-m", "tests.ray.service_cluster"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-5000:]
    assert service_cluster.gone(lambda: service_cluster.with_marker(marker)) == []
    # (Ray's driver may print notices of its own before: the report is the last line)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_two_ranks_share_an_epoch_exactly_on_three_nodes(cluster_report):
    report = cluster_report["share"]
    ranks = report["ranks"]
    want = [epochs[0] for epochs in _process_backend(60, ranks=2)]
    assert ranks == want  # each rank exactly its share, in order
    assert [len(r) for r in ranks] == [30, 30]
    seen = Counter(dp[0] for r in ranks for dp in r)
    assert sorted(seen) == list(range(60)) and set(seen.values()) == {1}
    # the three workers went one to each node (Ray's SPREAD)
    assert sorted(report["worker_nodes"]) == sorted(report["nodes"])


@pytest.mark.slow
def test_a_node_lost_mid_epoch_loses_and_repeats_nothing(cluster_report, record_property):
    report = cluster_report["node_loss"]
    ((want,),) = _process_backend(300)
    got = report["outputs"]
    ids = Counter(dp[0] for dp in got)
    assert len(ids) == 300 and max(ids.values()) == 1  # 0 missing, 0 repeated
    assert got == want  # and exactly the outputs, in order
    assert report["again"] == want  # (a new reader's epoch 0, with the replacement)
    stall = report["stall"]
    record_property("stall_s", round(stall, 3))
    assert stall < STALL_S, stall
    # the lost worker was replaced once, on a node that lives; the dispatcher (on the head)
    # went on
    assert report["victim"] in report["nodes_before"] and report["victim"] != report["head"]
    assert report["restarts"] == 1
    assert report["victim"] not in report["nodes_after"] and None not in report["nodes_after"]
    assert [(w["worker"], w["generation"]) for w in report["workers_last"]] == sorted(
        (w["worker"], w["generation"]) for w in report["workers_after"])
    assert report["backend"] == "ray"
    # closed: no actor of the service alive, none of its sockets listening
    assert report["alive_after_close"] == [] and report["listening_after_close"] == []
    print(f"node lost mid-epoch: longest stall {stall:.3f} s")

