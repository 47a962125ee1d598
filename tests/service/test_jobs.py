"""Many jobs on one pool (their own pipelines and seeds, fair shares, names used again), a
pool that sizes itself, and the shared ring of consumers on the workers' machine. Real
processes and sockets on 127.0.0.1 only."""

from __future__ import annotations

import glob
import os
import threading
import time

import numpy as np
import pytest

import dataflow as df
from dataflow.parallel.autotuning.budget import cpu_budget
from dataflow.service import DataService, ServiceData, ServiceError
from tests.helpers import read_at_once, wait_until
from tests.service import pipelines


def _consumer(address, rank=0, world=1, **kw):
    c = ServiceData(address, rank=rank, world_size=world, timeout=kw.pop("timeout", 20), **kw)
    c.reset_state()
    return c


def _epoch(address, **kw):
    c = _consumer(address, **kw)
    out = [list(dp) for dp in c]
    c.close()
    return out


def _double(dp):
    return [dp[0] * 2]


def _seeded_reference(n, seed):
    m = df.MultiProcessMapDataZMQ(pipelines.source(n), 2, pipelines.tag, strict=True,
                                  ordered=True, seed=seed)
    m.reset_state()
    out = [list(dp) for dp in m]
    m.close()
    return out


def test_jobs_read_their_own_pipelines_and_seeds():
    jobs = {"eval": {"ds": pipelines.source(12), "seed": 9, "shuffle": False},
            "double": {"map_func": _double}}
    with DataService(pipelines.source(40), pipelines.tag, num_workers=2, seed=5,
                     jobs=jobs) as svc:
        evaluation = _epoch(svc.address, job="eval")
        doubled = _epoch(svc.address, job="double")
        default = _epoch(svc.address, job="default")
        # a job name that is none of them (a typo) is an error listing the jobs
        with pytest.raises(ServiceError, match=r"`job` 'evl' is not a job of the DataService "
                           rf"at {svc.address}; its jobs are \['double', 'eval'\] \(and "
                           r"'default', the service's own pipeline\)"):
            _consumer(svc.address, job="evl")
        assert svc.stats()["jobs"] == {"eval": {"n": 12, "seed": 9, "shuffle": False},
                                       "double": {"n": 40, "seed": 5, "shuffle": True}}
    with DataService(pipelines.source(40), pipelines.tag, num_workers=1, seed=5) as alone:
        want_default = _epoch(alone.address)
    # the eval job is exactly a seeded, ordered mapper with its own seed
    assert evaluation == _seeded_reference(12, 9)
    assert default == want_default
    # the doubling job walks the service's shuffled order with its own map
    assert doubled == [[dp[0] * 2] for dp in want_default]
    assert sorted(dp[0] for dp in doubled) == list(range(0, 80, 2))


def test_a_finished_jobs_name_is_used_again():
    with DataService(pipelines.source(30), pipelines.tag, num_workers=2, seed=3) as svc:
        first = _consumer(svc.address, job="run")
        one = [list(dp) for dp in first]
        two = [list(dp) for dp in first]
        first.close()
        again = _consumer(svc.address, job="run")  # a new run under the same name
        assert [list(dp) for dp in again] == one
        assert [list(dp) for dp in again] == two
        again.close()
    assert one != two and sorted(dp[0] for dp in two) == list(range(30))


def test_jobs_that_want_more_than_the_pool_get_equal_shares(monkeypatch):
    monkeypatch.setenv("SVC_SLEEP", "0.004")  # (read by the workers: they start after this)
    with DataService(pipelines.source(5000), pipelines.tag, num_workers=2, seed=1,
                     jobs={"a": {}, "b": {"seed": 2}}) as svc:
        counts: dict[str, int] = {}
        # (equal demand: each keeps many inputs asked for, so that a reader thread that the
        # OS or the GIL holds back for a moment still has work queued at the workers)
        readers = {job: _consumer(svc.address, job=job, prefetch=256) for job in ("a", "b")}
        go = threading.Barrier(2)

        def read(job: str) -> None:
            it = iter(readers[job])
            go.wait()
            end, n = time.monotonic() + 2.0, 0
            while time.monotonic() < end:
                next(it)
                n += 1
            counts[job] = n

        read_at_once(readers, read, 60)
    a, b = counts["a"], counts["b"]
    assert min(a, b) > 100  # (both read all along)
    assert abs(a - b) <= 0.2 * max(a, b), counts


def test_auto_grows_the_pool_while_consumers_wait_and_gives_workers_back():
    cores = min(cpu_budget().cores, 4)
    with DataService(pipelines.source(4000), pipelines.slow, num_workers="auto",
                     shuffle=False) as svc:
        assert svc.stats()["num_workers"] == 1
        c = _consumer(svc.address)
        it = iter(c)
        got = [next(it)[0] for _ in range(20)]
        # a consumer that waits for the pool: it grows, up to the CPU budget
        deadline = time.monotonic() + 30
        while svc.stats()["num_workers"] < cores and time.monotonic() < deadline:
            got.append(next(it)[0])
        assert svc.stats()["num_workers"] == cores
        decisions = svc.stats()["autotune"]["decisions"]
        if cores > 1:
            assert decisions[0]["old"] == 1 and "worker-bound" in decisions[0]["reason"]

        # a consumer that takes its time: workers go back
        def slow_read() -> int:
            got.append(next(it)[0])
            time.sleep(0.05)
            return svc.stats()["num_workers"]

        # (a climb that paid is held for a while before a give-back may undo it)
        assert wait_until(lambda: slow_read() < cores, 45) or cores == 1
        last = svc.stats()["autotune"]["decisions"][-1]
        c.close()
    # resizing lost and repeated nothing (up to where the reader stopped)
    assert got == list(range(len(got)))
    if cores > 1:
        assert last["new"] < last["old"], last


def _image(dp):
    return [dp[0], np.full((64, 64, 3), dp[0] % 251, np.uint8), np.random.rand(2)]


def test_consumers_on_the_workers_machine_get_arrays_through_the_shared_ring():
    with DataService(pipelines.source(100), _image, num_workers=2, shuffle=False,
                     seed=4) as svc:
        c = _consumer(svc.address)
        out = list(c)
        through_rings = sum(ring.tail[0] for _name, ring in c._link.rings.values())
        sent = svc.stats()["bytes_out"]
        c.close()
        # (the workers unlinked the names of the rings this consumer made)
        assert glob.glob(f"/dev/shm/dataflow-{os.getpid()}-*-ring") == []
    assert [dp[0] for dp in out] == list(range(100))
    assert all(dp[1].shape == (64, 64, 3) and int(dp[1][7, 9, 2]) == dp[0] % 251
               and dp[1].flags.writeable for dp in out)
    # the images went through the rings (bytes moved count them), not through the sockets
    images = 100 * 64 * 64 * 3
    assert len(c._link.rings) == 0 and images <= through_rings < images * 1.1
    assert through_rings < sent < through_rings + images // 10
    ref = df.MultiProcessMapDataZMQ(pipelines.source(100), 2, _image, strict=True,
                                    ordered=True, seed=4)
    ref.reset_state()
    want = list(ref)
    ref.close()
    assert all(np.array_equal(a[2], b[2]) and np.array_equal(a[1], b[1])
               for a, b in zip(out, want))


def test_stats_show_queues_bytes_and_the_pool():
    with DataService(pipelines.source(50), _image, num_workers=2, shuffle=False) as svc:
        c = _consumer(svc.address, prefetch=8)
        assert len(list(c)) == 50
        # (a consumer reports at its heartbeats and at the end of an epoch)
        assert wait_until(lambda: [x["received"] for x in svc.stats()["consumers"]] == [50], 10)
        stats = svc.stats()
        (consumer,) = stats["consumers"]
        assert set(stats) == {"address", "instance", "backend", "datapoints", "seed",
                              "shuffle", "uptime", "jobs", "num_workers", "workers",
                              "consumers", "restarts", "autotune", "dropped", "bytes_out",
                              "bottleneck", "dispatcher_cpu_seconds", "identity",
                              "dropped_by_cause"}
        assert (stats["backend"], stats["num_workers"], stats["autotune"]) == ("process", 2, None)
        assert {w["worker"] for w in stats["workers"]} == {0, 1}
        assert set(stats["workers"][0]) == {"worker", "generation", "address", "busy", "items",
                                            "items_per_second", "rate", "rate_10s",
                                            "bytes_out", "dropped", "queued"}
        assert set(consumer) == {"job", "rank", "world_size", "received", "wait",
                                 "items_per_second", "rate", "rate_10s", "skipped",
                                 "bytes_in", "in_flight", "ready"}
        # at the end of the epoch nothing is asked for or waits to be yielded
        assert (consumer["in_flight"], consumer["ready"]) == (0, 0)
        assert 50 * 64 * 64 * 3 <= consumer["bytes_in"] <= stats["bytes_out"]
        assert sum(w["items"] for w in stats["workers"]) == 50
        assert sum(w["queued"] for w in stats["workers"]) == 0
        c.close()
