"""The multi-node half of ``test_service.py``, run as a process of its own
(``python -m tests.ray.service_cluster``): a three-node :class:`LoopbackCluster` (one CPU each,
everything on 127.0.0.1) whose driver is this process, a ``DataService(backend="ray")`` on it
and its consumers here. It prints one JSON line of what it saw; the test asserts on it.

A process of its own because a process is the driver of one Ray at a time, and the test
process is already the driver of the local Ray of ``tests/ray/conftest.py``. It is also how a
service is deployed: the cluster's driver serves, trainers elsewhere consume.

Two scenarios, in order:

* ``share``: 3 workers, two ranks of 2 read one epoch each (their outputs, and the nodes the
  workers ran on);
* ``node_loss``: 2 workers; after 60 outputs of a 300-output epoch, the node of a worker (not
  the head, where the dispatcher actor runs) is killed as ``kill_node`` does (its raylet,
  services and workers SIGKILLed): the outputs, the longest gap between two of them, the
  service's figures after it, and the same epoch read again by a new consumer (served with the
  replacement); then what is left of the service after ``close()`` (actors alive, listening
  sockets of its addresses).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from typing import Any

import psutil

#: per-input sleep of the map (tests.service.pipelines.tag), set for the cluster's processes
SLEEP = "0.005"
#: outputs received before the node is killed
KILL_AT = 60
#: the environment variable that marks the processes of a run (the test looks for them after)
MARKER_ENV = "DATAFLOW_RAY_TEST"


def with_marker(marker: str) -> list[int]:
    """Process ids of the living processes whose environment holds ``marker`` (in
    :data:`MARKER_ENV`): this process and its cluster's, when the test gives it."""
    pids = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE \
                    and proc.environ().get(MARKER_ENV) == marker:
                pids.append(proc.pid)
    return pids


def ours_alive(ray: Any) -> list[str]:
    """Class names of the service's actors (dispatcher and workers) that Ray has not seen
    end."""
    from ray._private import state

    mine = ("_ServiceHost", "_WorkerActor")
    return sorted(a.get("ActorClassName", "") for a in state.actors().values()
                  if a.get("ActorClassName") in mine and a.get("State") != "DEAD")


def listening(pids: list[int], ports: set[int]) -> list[tuple[str, int]]:
    """``(address, port)`` of the listening TCP sockets of processes ``pids`` on ``ports``."""
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for c in psutil.Process(pid).net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN and c.laddr.port in ports:
                    out.append((c.laddr.ip, c.laddr.port))
    return sorted(out)


def ports(stats: dict[str, Any]) -> set[int]:
    """The ports of a service's address and of its workers' (from ``stats()``)."""
    addresses = [stats["address"], *(w["address"] for w in stats["workers"])]
    return {int(a.rsplit(":", 1)[1]) for a in addresses if a}


def gone(check: Any, timeout: float = 15.0) -> Any:
    """``check()`` once it is empty, or its last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = check()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = check()
    return left


def _node_of(cluster: Any, pid: int) -> str | None:
    return next((n for n in cluster.node_ids if pid in cluster.processes(n)), None)


def _read(address: str, rank: int = 0, world: int = 1, on_item: Any = None
          ) -> tuple[list[list], float]:
    """One epoch of rank ``rank`` of ``world``: its outputs and the longest gap between two
    (the first measured from the start of the epoch)."""
    from dataflow.service import ServiceData

    c = ServiceData(address, rank=rank, world_size=world, timeout=60)
    c.reset_state()
    out, gap, last = [], 0.0, time.monotonic()
    for dp in c:
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        out.append(list(dp))
        if on_item is not None:
            on_item(len(out))
    c.close()
    return out, gap


def share(cluster: Any) -> dict[str, Any]:
    from dataflow.service import DataService
    from tests.service import pipelines

    with DataService(pipelines.source(60), pipelines.tag, backend="ray", num_workers=3,
                     seed=5, ray_address=cluster.address) as svc:
        ranks = [_read(svc.address, r, 2)[0] for r in range(2)]
        nodes = [_node_of(cluster, pid) for pid in svc.worker_pids()]
    return {"ranks": ranks, "worker_nodes": nodes, "nodes": cluster.node_ids}


def node_loss(cluster: Any) -> dict[str, Any]:
    import ray
    from dataflow.service import DataService
    from tests.service import pipelines

    head = cluster.head_id
    svc = DataService(pipelines.source(300), pipelines.tag, backend="ray", num_workers=2,
                      seed=5, ray_address=cluster.address).start()
    try:
        pids = svc.worker_pids()
        nodes = [_node_of(cluster, pid) for pid in pids]
        victim = next(n for n in nodes if n is not None and n != head)
        killer = threading.Thread(target=cluster.kill_node, args=(victim,))

        def kill(k: int) -> None:
            if k == KILL_AT:  # (in a thread: the consumer reads on meanwhile, as it would)
                killer.start()

        out, stall = _read(svc.address, on_item=kill)
        killer.join()
        after = svc.stats()
        again, _ = _read(svc.address)  # (a new reader: its epoch 0, with the replacement)
        replaced = [_node_of(cluster, pid) for pid in svc.worker_pids()]
        last = svc.stats()
    finally:
        svc.close()
    left = gone(lambda: ours_alive(ray))
    family = cluster.processes()
    return {"outputs": out, "stall": stall, "again": again, "victim": victim, "head": head,
            "nodes_before": nodes, "nodes_after": replaced, "restarts": after["restarts"],
            "workers_after": after["workers"], "workers_last": last["workers"],
            "backend": last["backend"], "alive_after_close": left,
            "listening_after_close": gone(lambda: listening(family, ports(last)))}


def main() -> None:
    import ray
    from dataflow.ray.local_cluster import LoopbackCluster

    report: dict[str, Any] = {}
    with LoopbackCluster(3) as cluster:
        cluster.connect()
        try:
            report["share"] = share(cluster)
            report["node_loss"] = node_loss(cluster)
        finally:
            ray.shutdown()
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
