"""``LoopbackCluster``: a Ray cluster of several nodes on this machine, on 127.0.0.1 only.

For trying (and testing) what a cluster does to a pipeline without a second machine: nodes
that join later, a node that dies with its actors and its share of the object store, the head
node's loss. Each node is a raylet (with its object store) and its worker processes, as on a
real cluster; they share this machine's cores.

Built on ``ray.cluster_utils.Cluster`` (Ray's own multi-node test helper). Its services listen
on the loopback interface only: on Linux Ray would replace 127.0.0.1 by the machine's network
address and listen on every interface, unless its single-machine mode is on for the processes
that start nodes, as for the local Ray that dataflow starts (see
:func:`dataflow.ray._session.acquire_ray`). Connect a driver with ``RayMapData(...,
address=cluster.address)`` (or :meth:`LoopbackCluster.connect`), which keeps that mode.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

from dataflow.ray import _session as session
from dataflow.validation import check_positive_int

__all__ = ["LoopbackCluster"]

#: object store of each node: small, several nodes share this machine's memory
OBJECT_STORE_BYTES = 128 * 1024 * 1024

#: the cluster's settings: the head checks the nodes every second, and a node that missed 5
#: checks in a row is dead (Ray's defaults, every 3 s and 5 misses, take ~15 s; a busy machine
#: still answers within 5); the workers run at the driver's priority, as in a local Ray of
#: dataflow's
SYSTEM_CONFIG = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5,
                 **session.LOCAL_SYSTEM_CONFIG}

#: seconds ``shutdown()`` waits for the killed processes to end
SHUTDOWN_WAIT = 10.0


class LoopbackCluster:
    """A head node and ``num_nodes - 1`` worker nodes, each with ``cpus_per_node`` CPUs and an
    object store of ``object_store_bytes``; every service on 127.0.0.1, no dashboard.

    A context manager: ``shutdown()`` (idempotent) stops every node, killed ones included.
    Ray's session directories go where Ray puts them (under ``$TMPDIR/ray``).
    """

    def __init__(self, num_nodes: int = 3, cpus_per_node: int = 1,
                 object_store_bytes: int = OBJECT_STORE_BYTES) -> None:
        self.num_nodes = check_positive_int(num_nodes, "num_nodes", 3)
        self.cpus_per_node = check_positive_int(cpus_per_node, "cpus_per_node", 1)
        self.object_store_bytes = check_positive_int(object_store_bytes, "object_store_bytes",
                                                     OBJECT_STORE_BYTES)
        self._ray = session.import_ray()
        from ray.cluster_utils import Cluster

        self._cluster: Any = None
        self._nodes: list[Any] = []  # Ray's Node objects, the head first
        with session.loopback_node(self._ray):
            self._cluster = Cluster(initialize_head=True, head_node_args=self._node_args(
                include_dashboard=False, _system_config=SYSTEM_CONFIG))
            self._nodes.append(self._cluster.head_node)
        try:
            for _ in range(self.num_nodes - 1):
                self.add_node()
        except BaseException:
            self.shutdown()
            raise

    def _node_args(self, **extra: Any) -> dict[str, Any]:
        return {"num_cpus": self.cpus_per_node, "object_store_memory": self.object_store_bytes,
                "node_ip_address": session.LOOPBACK, **extra}

    @property
    def address(self) -> str:
        """The head node's address (``127.0.0.1:port``), for ``address=`` or ``ray.init``."""
        return str(self._cluster.address)

    @property
    def node_ids(self) -> list[str]:
        """The Ray node ids of the nodes that were not killed, the head first."""
        return [n.node_id for n in self._nodes]

    @property
    def head_id(self) -> str:
        return str(self._nodes[0].node_id)

    def add_node(self, cpus: int | None = None) -> str:
        """Start one more worker node (``cpus``: default ``cpus_per_node``) and wait until the
        cluster knows it; its node id."""
        args = self._node_args() if cpus is None else {**self._node_args(), "num_cpus": cpus}
        with session.loopback_node(self._ray):
            node = self._cluster.add_node(**args)
        self._nodes.append(node)
        return str(node.node_id)

    def processes(self, node_id: str | None = None) -> list[int]:
        """The process ids of a node (every node if ``None``): its raylet and other services
        and every process they started (its workers and actors)."""
        import psutil

        pids: list[int] = []
        for node in self._nodes:
            if node_id is not None and node.node_id != node_id:
                continue
            for infos in node.all_processes.values():
                for info in infos:
                    with contextlib.suppress(psutil.Error):
                        proc = psutil.Process(info.process.pid)
                        pids.append(proc.pid)
                        pids.extend(c.pid for c in proc.children(recursive=True))
        return pids

    def kill_node(self, node_id: str) -> list[int]:
        """SIGKILL a node's raylet, services and workers at once (a machine that dies); the
        process ids killed. The head node too (then the cluster is gone: shut it down)."""
        import psutil

        node = next((n for n in self._nodes if n.node_id == node_id), None)
        if node is None:
            raise ValueError(f"`node_id` {node_id!r} is not a living node of this cluster; "
                             f"its nodes are {self.node_ids}.")
        pids = self.processes(node_id)
        for pid in pids:
            with contextlib.suppress(psutil.Error, OSError):
                psutil.Process(pid).send_signal(signal.SIGKILL)
        self._nodes.remove(node)
        self._reap(node)
        return pids

    def _reap(self, node: Any) -> None:
        """Collect a node's processes after a kill (no zombies) and forget the node."""
        with contextlib.suppress(Exception):
            node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
        if node is self._cluster.head_node:
            self._cluster.head_node = None
        else:
            self._cluster.worker_nodes.discard(node)

    def connect(self) -> None:
        """``ray.init()`` this process as a driver of the cluster (shut it down with
        ``ray.shutdown()`` before :meth:`shutdown`)."""
        with session.loopback_node(self._ray):
            self._ray.init(address=self.address, log_to_driver=False)

    def shutdown(self) -> None:
        """Stop every node (idempotent)."""
        if self._cluster is None:
            return
        import psutil

        left = []
        for pid in self.processes():
            with contextlib.suppress(psutil.Error):
                left.append(psutil.Process(pid))
        for node in list(self._nodes)[::-1]:
            self._reap(node)
        self._nodes.clear()
        with contextlib.suppress(Exception):
            self._cluster.shutdown()
        for proc in left:  # (workers whose raylet died before them)
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(left, timeout=SHUTDOWN_WAIT)
        self._cluster = None

    def __enter__(self) -> LoopbackCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
