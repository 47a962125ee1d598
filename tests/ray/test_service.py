"""``DataService(backend="ray")``: the dispatcher and the workers as Ray actors.

On the local Ray of this package (2 CPUs): the outputs are exactly the process back end's, the
figures, a worker's process killed, and nothing left after ``close()``. On a three-node
``LoopbackCluster`` (in a process of its own, ``tests/ray/service_cluster.py``: this process is
already the local Ray's driver), what ``tests/service`` asks of the process back end: two ranks
sharing an epoch; a consumer process killed mid-epoch and restarted from its saved state while
another rank reads on; all ranks restarted with another world size; two jobs on one pool, each
exact, with equal shares; another pipeline (another seed) started at a consumer's address,
refused live and at ``load_state_dict``; the dispatcher actor killed mid-epoch and a new
service started at its address; a worker's node killed mid-epoch. Each fault counts what its
consumers missed and received twice (both 0) and bounds their longest stall. Every service
listens on 127.0.0.1 only and is closed by its test. (A consumer at an address where nothing
serves is the process back end's test: the consumer is the same whatever the back end.)"""

from __future__ import annotations

import contextlib
import functools
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
from tests.helpers import timed, wait_until
from tests.ray import service_cluster
from tests.ray.conftest import pid_gone
from tests.service import pipelines

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.allow_children]

ROOT = Path(__file__).resolve().parents[2]
#: the longest a consumer may wait for an output across a lost worker or node (seconds)
STALL_S = 5.0


def _service(n, backend="ray", workers=2, seed=5, shuffle=True, func=pipelines.tag):
    return DataService(pipelines.source(n), func, backend=backend,
                       num_workers=workers, seed=seed, shuffle=shuffle)


def _read(address, rank=0, world=1, epochs=1, on_item=None):
    """``epochs`` epochs of one rank (lists of outputs), and the longest gap between two
    outputs (the first measured from the start of its epoch)."""
    c = ServiceData(address, rank=rank, world_size=world, timeout=60)
    c.reset_state()
    out, gap = [], 0.0
    for _ in range(epochs):
        epoch, stall = timed((list(dp) for dp in c), on_item)
        gap = max(gap, stall)
        out.append(epoch)
    c.close()
    return out, gap


@functools.cache
def _process_backend(n, ranks=1, epochs=1, seed=5):
    """What each of ``ranks`` ranks receives from the process back end (a list of epochs per
    rank; the outputs are a function of the seed, so they are computed once per test run)."""
    with _service(n, backend="process", seed=seed) as svc:
        return [_read(svc.address, r, ranks, epochs)[0] for r in range(ranks)]


def _missing_and_repeated(got, ids):
    """How many of ``ids`` the outputs ``got`` lack, and how many outputs repeat another's
    datapoint (or are not one of ``ids``)."""
    seen = Counter(dp[0] for dp in got)
    return len(set(ids) - set(seen)), sum(seen.values()) - len(set(seen) & set(ids))


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
        c = ServiceData(svc.address, rank=0, world_size=1, timeout=60)
        c.reset_state()
        assert len(list(c)) == 40
        # (the dispatcher reads the workers' figures in the background, every 0.25 s)
        assert wait_until(lambda: sum(w["items"] for w in svc.stats()["workers"]) == 40, 10)
        stats = svc.stats()
        c.close()  # (it says goodbye: no longer listed)
        assert wait_until(lambda: svc.stats()["consumers"] == [], 10)
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
def test_a_killed_worker_process_is_replaced_and_nothing_is_lost():
    (want,) = _process_backend(300)  # (the outputs do not depend on the sleep)
    # 5 ms a datapoint, so that the kill lands mid-epoch (the sleep travels with the function:
    # the actors do not see environment variables set after the local Ray started)
    with _service(300, func=functools.partial(pipelines.tag, sleep=0.005)) as svc:
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


@pytest.mark.usefixtures("local_ray")
def test_a_frozen_worker_actor_is_replaced_and_nothing_is_lost():
    # SIGSTOP the actor's process: Ray sees nothing wrong (its connections stay open, as for a
    # machine cut off from the network); the pool's calls go unanswered, and after
    # worker_timeout it kills and replaces the actor
    (want,) = _process_backend(300)
    svc = DataService(pipelines.source(300), functools.partial(pipelines.tag, sleep=0.005),
                      backend="ray", num_workers=2, seed=5, worker_timeout=1.5)
    with svc:
        victim = svc.worker_pids()[0]

        def freeze(k):
            if k == 60:
                os.kill(victim, signal.SIGSTOP)

        try:
            got, stall = _read(svc.address, on_item=freeze)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
        stats = svc.stats()
    assert got == want  # 0 missing, 0 repeated, the same order
    assert stats["restarts"] == 1
    assert 1.5 <= stall < STALL_S, stall
    assert pid_gone(victim)
    print(f"worker actor frozen: longest stall {stall:.3f} s")


@pytest.mark.usefixtures("local_ray")
def test_a_map_call_that_holds_the_gil_is_not_taken_for_a_frozen_actor():
    # the actor cannot answer while the call computes with the GIL held; on this machine the
    # CPU time its process uses is a sign of life
    svc = DataService(pipelines.source(8), pipelines.gil_hog_at_3, backend="ray",
                      num_workers=1, shuffle=False, worker_timeout=1.0)
    with svc:
        (epoch,), stall = _read(svc.address)
        assert svc.stats()["restarts"] == 0
    assert [dp[0] for dp in epoch] == list(range(8))
    assert stall > 1.0, stall  # (the call did outlast worker_timeout)


@pytest.mark.usefixtures("local_ray")
def test_auto_grows_to_the_clusters_cpus_and_gives_workers_back():
    # the local Ray has 2 CPUs: the pool starts at one worker actor, grows to two while the
    # consumer waits for it, and gives one back when the consumer takes its time
    with DataService(pipelines.source(4000), pipelines.slow, backend="ray", num_workers="auto",
                     shuffle=False) as svc:
        assert svc.stats()["num_workers"] == 1
        c = ServiceData(svc.address, timeout=60)
        c.reset_state()
        it = iter(c)
        got = [next(it)[0] for _ in range(20)]
        deadline = time.monotonic() + 30  # (reading as fast as the pool serves)
        while svc.stats()["num_workers"] < 2 and time.monotonic() < deadline:
            got.append(next(it)[0])
        assert svc.stats()["num_workers"] == 2
        first = svc.stats()["autotune"]["decisions"][0]
        assert first["old"] == 1 and first["new"] == 2 and "worker-bound" in first["reason"]

        def slow_read() -> int:
            got.append(next(it)[0])
            time.sleep(0.05)
            return svc.stats()["num_workers"]

        assert wait_until(lambda: slow_read() == 1, 45)
        last = svc.stats()["autotune"]["decisions"][-1]
        assert (last["old"], last["new"]) == (2, 1), last
        assert [w["worker"] for w in svc.stats()["workers"]] == [0]
        c.close()
    assert got == list(range(len(got)))  # resizing lost and repeated nothing
    assert service_cluster.ours_alive(ray) == []


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


@pytest.mark.slow
def test_a_consumer_killed_mid_epoch_resumes_from_its_state_on_three_nodes(
        cluster_report, record_property):
    report = cluster_report["restore"]
    want = [epochs[0] for epochs in _process_backend(120, ranks=2)]
    assert report["want"] == want  # (the reference: both ranks' whole epoch, undisturbed)
    assert report["ready"] == "ready\n"
    before, rest = report["before"], report["rest"]
    assert len(before) == service_cluster.RESTORE_AT  # (what the killed process had saved)
    # the restored rank 0 goes on exactly after its last saved output
    assert _missing_and_repeated(before + rest, [dp[0] for dp in want[0]]) == (0, 0)
    assert before + rest == want[0]
    # rank 1 read its own share, half of it after rank 0 was killed, unaffected
    assert report["other_overlapped"]
    assert _missing_and_repeated(report["other"], [dp[0] for dp in want[1]]) == (0, 0)
    assert report["other"] == want[1]
    stall, other = report["stall"], report["other_stall"]
    record_property("stall_s", round(stall, 3))
    record_property("other_rank_stall_s", round(other, 3))
    assert max(stall, other) < STALL_S, (stall, other)
    print(f"consumer killed and restored: longest stall {stall:.3f} s (restored rank), "
          f"{other:.3f} s (the other rank)")


@pytest.mark.slow
def test_all_ranks_restarted_with_another_world_size_on_three_nodes(cluster_report,
                                                                     record_property):
    report = cluster_report["resize"]
    n, at = 90, service_cluster.RESIZE_AT
    ((epoch0, epoch1),) = _process_backend(n, epochs=2)
    # one rank of 1 receives the global order (the reference: two epochs)
    assert report["reference"] == epoch0 + epoch1
    # two ranks of 2 read `at` outputs each: global positions 0 .. 2 * at - 1
    assert report["before"] == epoch0[0::2][:at] + epoch0[1::2][:at]
    # three ranks of 3, restored from those states, share the rest of the epoch: rank r
    # the global positions 2 * at + r, 2 * at + r + 3, ... (the last (n - 2 * at) % 3 left out)
    rest = report["rest"]
    each = (n - 2 * at) // 3
    assert [len(r) for r in rest] == [each] * 3
    assert rest == [epoch0[2 * at + r::3][:each] for r in range(3)]
    kept = [dp[0] for dp in epoch0[:2 * at + 3 * each]]  # (what partial="drop" keeps)
    assert _missing_and_repeated(report["before"] + [dp for r in rest for dp in r],
                                 kept) == (0, 0)
    assert len(kept) == n - (n - 2 * at) % 3
    # then whole epochs of the new world size
    assert report["next"] == [epoch1[r::3] for r in range(3)]
    assert _missing_and_repeated([dp for r in report["next"] for dp in r],
                                 range(n)) == (0, 0)
    stall = report["stall"]
    record_property("stall_s", round(stall, 3))
    assert stall < STALL_S, stall
    print(f"2 -> 3 ranks: longest stall {stall:.3f} s")


@pytest.mark.slow
def test_two_jobs_on_one_pool_are_exact_and_get_equal_shares_on_three_nodes(cluster_report):
    report = cluster_report["jobs"]
    # job "a" reads the service's pipeline, job "b" the same one with its own seed (jobs=)
    assert report["jobs"] == {"a": {"n": 1000, "seed": 5, "shuffle": True},
                              "b": {"n": 1000, "seed": service_cluster.JOB_B_SEED,
                                    "shuffle": True}}
    assert report["workers"] == 2
    for job, seed in (("a", 5), ("b", service_cluster.JOB_B_SEED)):
        ((want,),) = _process_backend(1000, seed=seed)
        got = report[job]["outputs"]
        assert _missing_and_repeated(got, range(1000)) == (0, 0), job
        assert got == want, job
    assert report["a"]["outputs"] != report["b"]["outputs"]
    # reading as fast as they can for the same time, both got the same share of the pool
    a, b = report["a"]["window"], report["b"]["window"]
    assert a is not None and b is not None  # (the window ended before either epoch did)
    assert min(a, b) > 100
    assert abs(a - b) <= 0.2 * max(a, b), (a, b)
    print(f"two jobs: {a} and {b} outputs in {service_cluster.SHARE_WINDOW:g} s")


@pytest.mark.slow
@pytest.mark.parametrize("notes", ["policy", "policy_nodes"])
def test_poison_inputs_are_skipped_alike_on_three_nodes(cluster_report, notes):
    # (policy_nodes: each worker's note of its input on its own node, read there by a task
    # pinned to it: what workers on other machines do)
    report = cluster_report[notes]
    outs = report["outputs"]
    assert [len(x) for x in outs] == [30, 30]  # (every rank yields len())
    for r, out in enumerate(outs):
        want = []
        for i in range(r, 60, 2):
            want.append([i, "ok"] if i not in pipelines.POISON else want[-1])
        assert out == want, r
    assert report["skipped"] == 6
    assert report["restarts"] == 2  # (11 ended two actors' processes, never asked a third time)
    assert min(report["worker_items"]) > 0  # (prefetch 2: every worker asked)
    assert report["notes_left"] == []


@pytest.mark.slow
def test_work_is_spread_and_bytes_ahead_are_bounded_on_three_nodes(cluster_report):
    report = cluster_report["resources"]
    assert report["spread_outputs"] == list(range(60))
    items = report["spread_items"]
    assert sum(items) == 60 and min(items) >= 10, items  # (prefetch 1: every worker asked)
    # 4 MB of one-MB outputs: about 4 asked for ahead of the reader, never 64
    assert report["sizes"] == [1 << 20]
    assert len(report["ahead"]) == 5 and max(report["ahead"]) <= 6, report["ahead"]


@pytest.mark.slow
def test_another_pipeline_at_the_address_is_an_error_on_three_nodes(cluster_report):
    report = cluster_report["identity"]
    address = report["address"]
    assert address.startswith("tcp://127.0.0.1:")
    # the outputs received before the error are the first pipeline's (those it had sent when it
    # was closed), never the other's
    assert 20 <= report["got"] < 200
    assert report["live_error"].startswith(
        f"ServiceData: the DataService at {address} now serves another pipeline for job "
        "'default' than the one this consumer read (seed: 5 -> 6)")
    assert "serves another pipeline than the saved run's (seed: 5 -> 6)" in report[
        "state_error"]


@pytest.mark.slow
def test_the_dispatcher_lost_and_started_again_on_its_address_on_three_nodes(
        cluster_report, record_property):
    report = cluster_report["dispatcher_loss"]
    ((want,),) = _process_backend(200)
    assert report["address"].startswith("tcp://127.0.0.1:")
    assert report["want"] == want  # (the reference epoch, from the first service)
    got = report["outputs"]
    assert _missing_and_repeated(got, range(200)) == (0, 0)
    assert got == want  # exact: the same outputs, in order, from both services' workers
    # the dispatcher actor's process ended, and its workers with it (Ray ends the actors an
    # actor made when it dies); a new service (another instance) served at the same address
    assert report["host_left"] == [] and report["old_workers_left"] == []
    assert report["first_instance"] != report["second_instance"]
    # the consumer had outputs left for the new service to answer, and got the next one soon
    # after it was up
    assert service_cluster.KILL_AT <= report["outputs_before_up"] < 200
    after_up, stall = report["after_up"], report["stall"]
    record_property("after_up_s", round(after_up, 3))
    record_property("stall_s", round(stall, 3))
    record_property("restart_s", round(report["restart_s"], 3))
    assert after_up < 10.0, after_up
    assert report["alive_after_close"] == []
    print(f"dispatcher lost: the next output {after_up:.3f} s after the new service was up; "
          f"longest stall {stall:.3f} s, of which {report['restart_s']:.3f} s the new "
          "service's start")


def test_a_worker_that_cannot_listen_removes_the_note_it_made_on_its_node():
    # (in this process, not as an actor: its run() as a worker on another machine runs it, with
    # CURVE keys that ZeroMQ refuses, so that it fails after making its note, before it serves)
    from dataflow.parallel.shared_memory import SHM_DIR
    from dataflow.service.ray_actors import _note_name, _WorkerActor

    name = _note_name()
    actor = _WorkerActor(0, {}, "127.0.0.1", "token", None, curve=(b"bad", b"key"),
                         node_note=name)
    with pytest.raises(Exception, match="Invalid argument"):
        actor.run()
    assert actor.error == "ZMQError: Invalid argument"
    # the pool never learnt its node, so only the actor itself could remove it
    assert not os.path.exists(os.path.join(SHM_DIR, name))
