"""The multi-node half of ``test_service.py``, run as a process of its own
(``python -m tests.ray.service_cluster [scenario ...]``): a three-node :class:`LoopbackCluster`
(one CPU each, everything on 127.0.0.1) whose driver is this process, services with
``backend="ray"`` on it and their consumers here. It prints one JSON line of what it saw; the
test asserts on it. With scenario names, only those run (for trying one alone).

A process of its own because a process is the driver of one Ray at a time, and the test
process is already the driver of the local Ray of ``tests/ray/conftest.py``. It is also how a
service is deployed: the cluster's driver serves, trainers elsewhere consume. One process for
every scenario, so that the cluster's start is paid once.

The scenarios, in order (the last one kills a node, so it runs last):

* ``share``: 3 workers, two ranks of 2 read one epoch each (their outputs, and the nodes the
  workers ran on);
* ``restore``: two ranks of 2 read their whole epoch once (the reference); then rank 0 is a
  process of its own that saves its ``state_dict()`` (as JSON) after each output and is
  SIGKILLed after :data:`RESTORE_AT` outputs, and a new rank 0 here continues from the saved
  state, while rank 1 reads its own share meanwhile (it reads half of it, waits until rank 0 is
  killed, then reads the rest);
* ``resize``: two ranks of 2 read :data:`RESIZE_AT` outputs each and save their states; three
  ranks of 3 load them (new rank ``r`` the state of old rank ``r % 2``) and read the rest of
  the epoch, then a whole epoch; the reference is two epochs of one rank of 1;
* ``jobs``: one pool of 2 workers, job ``"a"`` reading the service's pipeline and job ``"b"``
  its own seed (``jobs=``): both read as fast as they can for :data:`SHARE_WINDOW` seconds
  (what each received then), then on to the end of their epochs;
* ``policy``: 3 workers map :func:`tests.service.pipelines.poison` (inputs that end their
  actor's process, exit, raise, or give outputs that cannot travel); two ranks of 2 read their
  epoch with ``on_error="skip"`` and ``prefetch=2`` (their outputs, what rank 1 skipped, the
  restarts, the items of each worker, the notes left in ``/dev/shm`` after ``close()``);
* ``policy_nodes``: the same, each worker's note of the input it maps kept on its own node and
  read there by a task pinned to it once the worker is lost, as for workers on other machines;
* ``resources``: 3 workers, one consumer with ``prefetch=1`` (the items each worker mapped);
  then 2 workers mapping outputs of one MB for a slow consumer with ``prefetch=64`` and
  ``prefetch_bytes=4 MB`` (how far the workers were ahead of it, every 8 outputs);
* ``identity``: a consumer reads 20 outputs of a service at a fixed address (its state saved
  after 10), then the service is closed as a redeploy (``tell_consumers=False``, what ``serve``
  does on SIGTERM) and one with another seed started at the address: what
  the consumer raises as it reads on, and what a new consumer raises loading the saved state;
* ``dispatcher_loss``: a service at a fixed address (a free port of 127.0.0.1); a reference
  epoch; then after :data:`KILL_AT` outputs of a consumer's epoch the dispatcher actor's
  process is SIGKILLed (the consumer reads on meanwhile, in vain), and, once it is gone, a new
  service is started at the same address: the consumer's outputs, its longest gap, and the
  time from the new service's start to its next output; whether the old workers ended with
  their dispatcher (any left is killed by this scenario, and reported);
* ``node_loss``: 2 workers; after :data:`KILL_AT` outputs of a 300-output epoch, the node of a
  worker (not the head, where the dispatcher actor runs) is killed as ``kill_node`` does (its
  raylet, services and workers SIGKILLed): the outputs, the longest gap between two of them,
  the service's figures after it, and the same epoch read again by a new consumer (served with
  the replacement); then what is left of the service after ``close()`` (actors alive,
  listening sockets of its addresses).

Every gap is measured between two outputs of one consumer, the first from the start of its
epoch.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from tests.helpers import read_at_once, timed

#: per-input sleep of the map (tests.service.pipelines.tag), set for the cluster's processes
SLEEP = "0.005"
#: outputs received before the node or the dispatcher is killed
KILL_AT = 60
#: outputs rank 0 receives before its process is killed (``restore``)
RESTORE_AT = 20
#: outputs each old rank receives before all are restarted with another world size
RESIZE_AT = 10
#: seconds both jobs read as fast as they can (``jobs``)
SHARE_WINDOW = 2.0
#: datapoints of each scenario's service
SIZES = {"share": 60, "restore": 120, "resize": 90, "jobs": 1000, "policy": 60,
         "resources": 60, "identity": 200, "dispatcher_loss": 200, "node_loss": 300}
#: the seed of job "b" of ``jobs`` (the service's own is 5, as everywhere here)
JOB_B_SEED = 2
#: the environment variable that marks the processes of a run (the test looks for them after)
MARKER_ENV = "DATAFLOW_RAY_TEST"

ROOT = Path(__file__).resolve().parents[2]

#: a consumer process (rank 0 of 2) that saves its state and its outputs after each output, says
#: "ready" after ``RESTORE_AT`` of them and waits to be killed
_CONSUMER = """
import json, os, sys, time
from dataflow.service import ServiceData
address, path, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = ServiceData(address, rank=0, world_size=2, timeout=60)
c.reset_state()
out = []
for dp in c:
    out.append(list(dp))
    with open(path + ".tmp", "w") as f:
        json.dump({"state": c.state_dict(), "outputs": out}, f)
    os.replace(path + ".tmp", path)
    if len(out) == at:
        print("ready", flush=True)
        time.sleep(120)
"""


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
    return sorted(a["ActorClassName"] for a in _actors(ray))


def _actors(ray: Any, name: str | None = None) -> list[dict[str, Any]]:
    """Ray's records of the service's actors (of class ``name``, else of both) not seen end."""
    from ray._private import state

    mine = (name,) if name else ("_ServiceHost", "_WorkerActor")
    return [a for a in state.actors().values()
            if a.get("ActorClassName") in mine and a.get("State") != "DEAD"]


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


def _living(pids: list[int]) -> list[int]:
    """Those of ``pids`` whose process runs (a zombie has ended)."""
    alive = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive


def _node_of(cluster: Any, pid: int) -> str | None:
    return next((n for n in cluster.node_ids if pid in cluster.processes(n)), None)


def _service(cluster: Any, scenario: str, workers: int = 2, seed: int = 5, **kw: Any) -> Any:
    """A service of ``SIZES[scenario]`` datapoints (seed 5) on the cluster, not started."""
    from dataflow.service import DataService
    from tests.service import pipelines

    return DataService(pipelines.source(SIZES[scenario]), pipelines.tag, backend="ray",
                       num_workers=workers, seed=seed, ray_address=cluster.address, **kw)


def _consumer(address: str, rank: int = 0, world: int = 1, **kw: Any) -> Any:
    from dataflow.service import ServiceData

    c = ServiceData(address, rank=rank, world_size=world, timeout=60, **kw)
    c.reset_state()
    return c


def _epoch(c: Any, on_item: Any = None) -> tuple[list[list], float]:
    """One epoch of consumer ``c``: its outputs and the longest gap between two (the first
    measured from the start of the epoch)."""
    return timed((list(dp) for dp in c), on_item)


def _read(address: str, rank: int = 0, world: int = 1, on_item: Any = None,
          epochs: int = 1) -> tuple[list[list], float]:
    """``epochs`` epochs of a new rank ``rank`` of ``world`` (their outputs, one list) and the
    longest gap."""
    c = _consumer(address, rank, world)
    out, gap = [], 0.0
    for _ in range(epochs):
        got, g = _epoch(c, on_item)
        out, gap = out + got, max(gap, g)
    c.close()
    return out, gap


def share(cluster: Any) -> dict[str, Any]:
    with _service(cluster, "share", workers=3) as svc:
        ranks = [_read(svc.address, r, 2)[0] for r in range(2)]
        nodes = [_node_of(cluster, pid) for pid in svc.worker_pids()]
    return {"ranks": ranks, "worker_nodes": nodes, "nodes": cluster.node_ids}


def restore(cluster: Any) -> dict[str, Any]:
    with _service(cluster, "restore") as svc, \
            tempfile.TemporaryDirectory(prefix="service-cluster-") as tmp:
        want = [_read(svc.address, r, 2)[0] for r in range(2)]
        killed = threading.Event()
        other: dict[str, Any] = {}

        def read_other() -> None:  # rank 1: half its share, then the rest once 0 is killed
            c = _consumer(svc.address, 1, 2)
            out, gap, last = [], 0.0, time.monotonic()
            for dp in c:
                now = time.monotonic()
                gap, last = max(gap, now - last), now
                out.append(list(dp))
                if len(out) == len(want[1]) // 2:
                    killed.wait(60)
                    other["after_kill"] = time.monotonic()
                    last = time.monotonic()  # (its own wait is no stall)
            other.update(outputs=out, stall=gap, done=time.monotonic())
            c.close()

        reader = threading.Thread(target=read_other)
        reader.start()
        path = os.path.join(tmp, "state.json")
        proc = subprocess.Popen([sys.executable, "-c", _CONSUMER, svc.address, path,
                                 str(RESTORE_AT)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()
            killed.set()
        saved = json.loads(Path(path).read_text())
        state = json.loads(json.dumps(saved["state"]))
        again = _consumer(svc.address, 0, 2)
        again.load_state_dict(state)
        rest, stall = _epoch(again)
        restored_done = time.monotonic()
        again.close()
        reader.join(timeout=120)
    return {"want": want, "ready": ready, "before": saved["outputs"], "rest": rest,
            "stall": stall, "other": other["outputs"], "other_stall": other["stall"],
            # (rank 1 read on after the kill, while rank 0 was restored and read)
            "other_overlapped": other["after_kill"] < restored_done}


def resize(cluster: Any) -> dict[str, Any]:
    with _service(cluster, "resize") as svc:
        reference, _ = _read(svc.address, epochs=2)
        old = [_consumer(svc.address, r, 2) for r in range(2)]
        before = []
        for c in old:
            for k, dp in enumerate(c, 1):
                before.append(list(dp))
                if k == RESIZE_AT:
                    break
        states = [json.loads(json.dumps(c.state_dict())) for c in old]
        for c in old:
            c.close()
        new = [_consumer(svc.address, r, 3) for r in range(3)]
        for r, c in enumerate(new):
            c.load_state_dict(states[r % 2])
        rest = [_epoch(c) for c in new]
        following = [_epoch(c) for c in new]  # then whole epochs of the new world size
        for c in new:
            c.close()
    return {"reference": reference, "before": before, "rest": [r[0] for r in rest],
            "next": [f[0] for f in following], "stall": max(g for _, g in rest + following)}


def jobs(cluster: Any) -> dict[str, Any]:
    with _service(cluster, "jobs", jobs={"a": {}, "b": {"seed": JOB_B_SEED}}) as svc:
        # (equal demand: each keeps many inputs asked for, so that a reader thread that the
        # OS or the GIL holds back for a moment still has work queued at the workers)
        readers = {job: _consumer(svc.address, job=job, prefetch=256)
                   for job in ("a", "b")}
        go = threading.Barrier(2)
        got: dict[str, dict[str, Any]] = {}

        def read(job: str) -> None:
            it = iter(readers[job])
            out, gap = [], 0.0
            go.wait()
            last = start = time.monotonic()
            window = None
            for dp in it:
                now = time.monotonic()
                gap, last = max(gap, now - last), now
                out.append(list(dp))
                if window is None and now - start >= SHARE_WINDOW:
                    window = len(out)  # (what it received in the window)
            got[job] = {"outputs": out, "window": window, "stall": gap}

        read_at_once(readers, read, 120)
        stats = svc.stats()
    return {**got, "jobs": stats["jobs"], "workers": stats["num_workers"]}


def _host_pid(ray: Any) -> int:
    """The process id of the one living dispatcher actor."""
    (host,) = _actors(ray, "_ServiceHost")
    return int(host["Pid"])


def policy(cluster: Any) -> dict[str, Any]:
    from dataflow.service import DataService
    from tests.service import pipelines

    svc = DataService(pipelines.source(SIZES["policy"]), pipelines.poison, backend="ray",
                      num_workers=3, seed=5, shuffle=False, ray_address=cluster.address)
    with svc:
        import ray

        # the pool, in the dispatcher actor, names every note after that actor's pid (the
        # notes of another test session on the machine have their own)
        notes = f"dataflow-{_host_pid(ray)}-"
        outs, items = [], []
        for rank in range(2):
            c = _consumer(svc.address, rank, 2, on_error="skip", max_errors=6, prefetch=2)
            outs.append([list(dp) for dp in c])
            state = c.state_dict()
            c.close()
            if not items:  # (rank 0 meets no poison: what each worker mapped for it; the
                # figures of the workers are read every 0.25 s)
                time.sleep(1.0)
                items = [w["items"] for w in svc.stats()["workers"]]
        stats = svc.stats()
    return {"outputs": outs, "skipped": state["errors"]["skipped"],
            "restarts": stats["restarts"], "worker_items": items,
            "notes_left": sorted(f for f in os.listdir("/dev/shm")
                                 if f.startswith(notes) and f.endswith("-note"))}


def policy_nodes(cluster: Any) -> dict[str, Any]:
    """``policy`` with each worker's note on its own node, read there by a pinned task once
    the worker is lost: the path of workers on other machines."""
    from dataflow.service.ray_pool import NODE_NOTES_ENV

    os.environ[NODE_NOTES_ENV] = "1"
    try:
        return policy(cluster)
    finally:
        del os.environ[NODE_NOTES_ENV]


def resources(cluster: Any) -> dict[str, Any]:
    from dataflow.service import DataService
    from tests.service import pipelines

    report: dict[str, Any] = {}
    with DataService(pipelines.source(SIZES["resources"]), pipelines.tag, backend="ray",
                     num_workers=3, seed=5, shuffle=False,
                     ray_address=cluster.address) as svc:
        c = _consumer(svc.address, prefetch=1)
        report["spread_outputs"] = [dp[0] for dp in c]
        c.close()
        time.sleep(1.0)  # (the figures of the workers are read every 0.25 s)
        report["spread_items"] = [w["items"] for w in svc.stats()["workers"]]
    with DataService(pipelines.source(40), pipelines.megabyte, backend="ray", num_workers=2,
                     seed=5, shuffle=False, ray_address=cluster.address) as svc:
        c = _consumer(svc.address, prefetch=64, prefetch_bytes=4 << 20)
        ahead, sizes = [], set()
        for k, dp in enumerate(c, 1):
            sizes.add(int(dp[1].nbytes))
            if k % 8 == 0:
                time.sleep(0.3)  # (a slow reader: the workers could run far ahead)
                ahead.append(sum(w["items"] for w in svc.stats()["workers"]) - k)
        c.close()
    report["ahead"], report["sizes"] = ahead, sorted(sizes)
    return report


def identity(cluster: Any) -> dict[str, Any]:
    from dataflow.errors import StateMismatchError
    from dataflow.service import ServiceError
    from tests.helpers import free_port

    address = f"tcp://127.0.0.1:{free_port()}"
    services = [_service(cluster, "identity", address=address).start()]
    report: dict[str, Any] = {"address": address, "got": 0}
    try:
        c = _consumer(address)
        state = None
        try:
            for k, _dp in enumerate(c):
                report["got"] = k + 1
                if k == 9:
                    state = json.loads(json.dumps(c.state_dict()))
                if k == 19:  # a redeploy with another seed, while this consumer reads
                    services[0].close(tell_consumers=False)
                    services.append(_service(cluster, "identity", address=address,
                                             seed=6).start())
        except ServiceError as e:
            report["live_error"] = str(e)
        c.close()
        fresh = _consumer(address)
        try:
            fresh.load_state_dict(state)
        except StateMismatchError as e:
            report["state_error"] = str(e)
        fresh.close()
    finally:
        for svc in services:
            svc.close()
    return report


def dispatcher_loss(cluster: Any) -> dict[str, Any]:
    import ray
    from tests.helpers import free_port

    address = f"tcp://127.0.0.1:{free_port()}"
    first = _service(cluster, "dispatcher_loss", address=address).start()
    services = [first]
    report: dict[str, Any] = {"address": address}
    try:
        report["want"], _ = _read(address)
        host, workers = _host_pid(ray), first.worker_pids()
        report["first_instance"] = first.stats()["instance"]

        def lose_and_restart() -> None:
            os.kill(host, signal.SIGKILL)
            report["killed_at"] = time.monotonic()
            # (its socket at `address` is free once its process has ended)
            report["host_left"] = gone(lambda: _living([host]), 30)
            # the worker actors are the dispatcher actor's (it made them): Ray ends them
            # with it; any that outlives it would hold its CPU on the cluster, so it is killed
            left = gone(lambda: _living(workers), 15)
            report["old_workers_left"] = left
            for pid in left:
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
            report["gone_after"] = time.monotonic() - report["killed_at"]
            second = _service(cluster, "dispatcher_loss", address=address)
            services.append(second)
            second.start()
            report["up_at"] = time.monotonic()
            report["second_instance"] = second.stats()["instance"]

        restarter = threading.Thread(target=lose_and_restart)
        times: list[float] = []

        def on_item(k: int) -> None:
            times.append(time.monotonic())
            if k == KILL_AT:  # (in a thread: the consumer reads on meanwhile, as it would)
                restarter.start()

        report["outputs"], report["stall"] = _read(address, on_item=on_item)
        restarter.join(timeout=120)
        up = report["up_at"]
        report["restart_s"] = up - report["killed_at"]
        report["after_up"] = min((t for t in times if t >= up), default=float("inf")) - up
        report["outputs_before_up"] = sum(t < up for t in times)
    finally:
        for svc in services:
            svc.close()
    report["alive_after_close"] = gone(lambda: ours_alive(ray))
    return report


def node_loss(cluster: Any) -> dict[str, Any]:
    import ray

    head = cluster.head_id
    svc = _service(cluster, "node_loss").start()
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


#: the scenarios, in the order they run (``node_loss`` leaves the cluster a node short)
SCENARIOS = {"share": share, "restore": restore, "resize": resize, "jobs": jobs,
             "policy": policy, "policy_nodes": policy_nodes, "resources": resources,
             "identity": identity,
             "dispatcher_loss": dispatcher_loss, "node_loss": node_loss}


def main(names: list[str]) -> None:
    import ray
    from dataflow.ray.local_cluster import LoopbackCluster

    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; they are {list(SCENARIOS)}")
    report: dict[str, Any] = {}
    with LoopbackCluster(3) as cluster:
        cluster.connect()
        try:
            for name, scenario in SCENARIOS.items():
                if not names or name in names:
                    t0 = time.monotonic()
                    report[name] = scenario(cluster)
                    report[name]["seconds"] = round(time.monotonic() - t0, 3)
        finally:
            ray.shutdown()
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
