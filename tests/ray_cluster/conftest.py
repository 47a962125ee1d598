"""A Ray cluster of three nodes on 127.0.0.1 (one CPU and a 128 MiB object store each) per test
module, this process its driver; after it, none of its processes is left.

In a package of its own: the Ray tests of ``tests/ray`` share one local Ray for their package,
and a process is the driver of one Ray at a time."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psutil
import pytest

from dataflow.ray._session import RayHooks
from tests.ray.conftest import wait_no_children

NODES = 3


@pytest.fixture(scope="module")
def loopback_cluster() -> Iterator:
    ray = pytest.importorskip("ray")
    from dataflow.ray.local_cluster import LoopbackCluster

    assert not ray.is_initialized()
    hooks = RayHooks()
    cluster = LoopbackCluster(NODES)
    try:
        cluster.connect()
        hooks.after_init()
        yield cluster
    finally:
        pids = cluster.processes()
        ray.shutdown()
        cluster.shutdown()
        hooks.restore()
    assert wait_no_children() == []
    assert [p for p in pids if alive(p)] == []


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def full(cluster, nodes: int = NODES) -> None:
    """Add worker nodes until the cluster has ``nodes`` again (a test killed some), and wait
    until it is :func:`idle` (a killed node is declared dead after a few seconds)."""
    while len(cluster.node_ids) < nodes:
        cluster.add_node()
    deadline = time.monotonic() + 60
    while not idle(cluster, nodes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert living_nodes() == set(cluster.node_ids)
    assert idle(cluster, nodes)


def idle(cluster, nodes: int) -> bool:
    """Whether Ray knows exactly the cluster's nodes alive, and all their CPUs free (the
    actors of the flows closed before released theirs)."""
    import ray

    return (living_nodes() == set(cluster.node_ids)
            and ray.available_resources().get("CPU", 0) == nodes)


def living_nodes() -> set[str]:
    import ray

    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}
