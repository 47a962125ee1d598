"""RayMapData and RayRunner on a three-node Ray cluster on 127.0.0.1: placement over the nodes,
a worker node killed mid-epoch (its raylet and workers SIGKILLed), a node that joins later, the
object store over many epochs."""

from __future__ import annotations

import contextlib
import gc
import time
from collections import Counter

import psutil
import pytest

from dataflow.ray import RayMapData, RayRunner
from tests.helpers import wait_until
from tests.parallel import flows
from tests.ray import flows as rflows
from tests.ray.conftest import LOOPBACK, listening
from tests.ray_cluster.conftest import NODES, full, living_nodes

pytestmark = [pytest.mark.slow, pytest.mark.allow_children,
              pytest.mark.usefixtures("loopback_cluster")]


def test_every_service_listens_on_loopback_only(loopback_cluster):
    procs = []
    for pid in loopback_cluster.processes():
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    sockets = listening(procs)
    assert len({p.name() for p in procs}) >= 3  # (raylets, GCS, workers: something to check)
    assert "127.0.0.1" in {ip for _, ip, _ in sockets}
    assert [s for s in sockets if s[1] not in LOOPBACK] == []
    assert living_nodes() == set(loopback_cluster.node_ids)
    assert len(loopback_cluster.node_ids) == NODES


def test_actors_spread_over_the_nodes(loopback_cluster):
    full(loopback_cluster)
    nodes = set(loopback_cluster.node_ids)
    with RayMapData(flows.Range(30), NODES, flows.double, strict=True) as m:
        assert sorted(dp[0] for dp in m) == list(range(0, 60, 2))
        assert set(m.worker_nodes()) == nodes
    full(loopback_cluster)
    # half a CPU each: three fit on one node, and SPREAD still puts one on each
    with RayRunner(rflows.WorkerRange(6), NODES, actor_options={"num_cpus": 0.5}) as r:
        got = [tuple(dp) for dp in r]
        assert len(got) == 6
        for w in range(NODES):  # (which copies fill the epoch depends on their speed)
            seq = [i for wid, i in got if wid == w]
            assert seq == list(range(len(seq)))
        assert set(r.worker_nodes()) == nodes


def _recovery(events, outputs: list[float]) -> float:
    """Seconds from the first loss noticed to the next output."""
    noticed = next(e.time for e in events if e.kind == "lost")
    return min(t for t in outputs if t >= noticed) - noticed


#: the most seconds from a loss noticed to the next output (measured: 0.01-0.3 s, also with
#: the machine's load average at 10; most of a loss's cost is Ray noticing it, 1-2 s)
RECOVERY_S = 3.0


def test_strict_map_survives_a_node_loss_and_uses_a_node_that_joins_later(
        loopback_cluster, record_property):
    full(loopback_cluster)
    head = loopback_cluster.head_id
    with RayMapData(flows.Range(300), NODES, flows.sleepy, strict=True, chunk_size=4) as m:
        got, times = [], []
        for dp in m:
            got.append(dp[0])
            times.append(time.monotonic())
            if len(got) == 100:
                nodes = m.worker_nodes()
                victim = next(n for n in nodes if n != head)
                lost_worker = nodes.index(victim)
                loopback_cluster.kill_node(victim)
        assert Counter(got) == Counter(range(300))  # every input exactly once
        events = m.actor_events()
        assert [(e.kind, e.worker) for e in events if e.kind != "started"] == [
            ("lost", lost_worker), ("replaced", lost_worker)]
        assert next(e.node for e in events if e.kind == "lost") == victim
        recovery = _recovery(events, times)
        record_property("recovery_s", round(recovery, 3))
        assert recovery <= RECOVERY_S  # (the lost chunks went to the running actors)
        # the replacement waits for free CPUs (the survivors hold theirs): a new node joins
        new = loopback_cluster.add_node()
        assert sorted(dp[0] for dp in m) == list(range(300))
        while lost_worker not in [e.worker for e in m.actor_events() if e.kind == "ready"]:
            assert sorted(dp[0] for dp in m) == list(range(300))
        assert m.worker_nodes()[lost_worker] == new
        assert set(m.worker_nodes()) == set(loopback_cluster.node_ids)
    print(f"map node loss: loss noticed -> next output {recovery:.3f} s")


def test_runner_streams_continue_on_the_surviving_nodes(loopback_cluster, record_property):
    full(loopback_cluster)
    head = loopback_cluster.head_id
    n = 60
    got, times = [], []
    with RayRunner(rflows.WorkerRange(n, delay=0.01), NODES, chunk_size=4,
                   actor_options={"num_cpus": 0.5}) as r:

        def epoch() -> None:
            for dp in r:
                got.append(tuple(dp))
                times.append(time.monotonic())
                if len(got) == 40:
                    nodes[:] = r.worker_nodes()
                    victim = next(x for x in nodes if x != head)
                    before.append(sum(dp[0] == nodes.index(victim) for dp in got))
                    loopback_cluster.kill_node(victim)

        nodes: list = []
        before: list[int] = []  # what the lost copy had delivered
        epoch()
        # (the epoch may end before the loss is noticed: the other copies fill it)
        while "ready" not in [e.kind for e in r.actor_events()]:
            epoch()
        epoch()  # with the replacement
        epochs = len(got) // n
        victim = next(x for x in nodes if x != head)
        lost_worker = nodes.index(victim)
        events = r.actor_events()
        survivors = set(loopback_cluster.node_ids)
        assert victim not in survivors
        assert r.worker_nodes()[lost_worker] in survivors
        assert [(e.kind, e.worker) for e in events if e.kind != "started"] == [
            ("lost", lost_worker), ("replaced", lost_worker), ("ready", lost_worker)]
        recovery = _recovery(events, times)
        record_property("recovery_s", round(recovery, 3))
        assert recovery <= RECOVERY_S
    assert len(got) == epochs * n
    for w in range(NODES):  # each copy's stream has no gap and no repetition across the loss
        seq = [i for wid, i in got if wid == w]
        assert seq == [i % n for i in range(len(seq))]
    assert len([i for wid, i in got if wid == lost_worker]) > before[0]  # and went on
    print(f"runner node loss: loss noticed -> next output {recovery:.3f} s")


def _driver_objects() -> int:
    """How many objects this process (the driver) still holds references to."""
    import ray

    return len(ray._private.worker.global_worker.core_worker.get_all_reference_counts())


def _store_bytes(cluster) -> tuple[int, int]:
    """Bytes in use in the object stores of the cluster (primary and cached copies), and their
    capacity."""
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address

    stats = get_memory_info_reply(get_state_from_address(cluster.address)).store_stats
    return stats.object_store_bytes_used, stats.object_store_bytes_avail


def test_arrays_arrive_without_a_copy_and_memory_stays_bounded(loopback_cluster):
    full(loopback_cluster)
    held, used = [], []
    with RayMapData(flows.Range(60), NODES, rflows.big_image, strict=True, ordered=True,
                    chunk_size=2) as m:
        for _ in range(4):
            for i, img in m:
                assert img.shape == (512, 512, 4)
                assert int(img[0, 0, 0]) == i % 251
                # a read-only view of the object store's buffer, not an array of its own
                assert not img.flags.owndata
                assert not img.flags.writeable
            del img
            # Ray drops a reference a moment after the last Python handle to it goes (and a
            # handle in a reference cycle only goes with the collector): wait for that
            gc.collect()
            wait_until(lambda: _driver_objects() == 0, timeout=10)
            held.append(_driver_objects())
            used.append(_store_bytes(loopback_cluster))
    # 60 MiB mapped per epoch: after each, the driver holds no reference (Ray frees them) ...
    assert held == [0] * 4
    # ... and the stores hold at most cached copies, within their capacity
    assert all(u <= cap for u, cap in used), used
    print("object store bytes in use after each epoch:", [u for u, _ in used])
