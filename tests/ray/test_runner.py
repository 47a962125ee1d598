"""RayRunner against a real local Ray (2 CPUs): the runners' contract, errors, lost actors."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time

import pytest

from dataflow.errors import WorkerError
from dataflow.ray import RayRunner
from dataflow.sources import DataFromList
from tests.helpers import check_resume
from tests.parallel import flows
from tests.ray import flows as rflows
from tests.ray.conftest import pid_gone

pytestmark = [pytest.mark.usefixtures("local_ray"), pytest.mark.allow_children]


def test_one_worker_keeps_data_and_order():
    with RayRunner(flows.Range(7), 1) as r:
        assert len(r) == 7
        for _ in range(3):
            assert [dp[0] for dp in r] == list(range(7))


def test_workers_run_independent_copies():
    with RayRunner(flows.Tagged(5), 2, chunk_size=2) as r:
        got = [dp for _ in range(4) for dp in r]
        pids = r.worker_pids()
    assert len(got) == 20
    per_worker: dict[int, list[int]] = {}
    for wid, pid, i in got:
        assert pid == pids[wid]
        per_worker.setdefault(wid, []).append(i)
    assert set(per_worker) <= {0, 1}
    for seq in per_worker.values():
        assert seq == [i % 5 for i in range(len(seq))]


def test_unknown_length_and_empty_flows():
    with RayRunner(flows.NoLen(3), 2) as r:
        assert sorted(dp[0] for dp in itertools.islice(r, 12)) == [0] * 4 + [1] * 4 + [2] * 4
    with RayRunner(flows.Range(0), 2) as r:
        assert list(r) == []


def test_worker_exception_surfaces_with_remote_traceback():
    with RayRunner(flows.Range(10, fail_at=4), 2) as r:
        r.reset_state()  # (the actors' start-up is not part of the delay)
        start = time.monotonic()
        with pytest.raises(WorkerError) as ei:
            list(itertools.chain(r, r, r))
        assert time.monotonic() - start < 5
    err = ei.value
    assert type(err.__cause__) is KeyError
    assert err.exc_type == "KeyError"
    assert err.stage == "RayRunner"
    assert err.worker_id in (0, 1)
    assert "in __iter__" in err.remote_traceback


def test_lost_actor_continues_its_stream(tmp_path):
    with RayRunner(rflows.KillOnceRange(40, 17, tmp_path / "killed"), 2, chunk_size=4) as r:
        got = [dp for _ in range(3) for dp in r]
        assert (tmp_path / "killed").exists()
    assert len(got) == 120
    for w in (0, 1):  # each copy's stream has no gap and no repetition across the loss
        seq = [i for wid, i in got if wid == w]
        assert seq == [i % 40 for i in range(len(seq))]


def test_actor_killed_from_outside_mid_epoch():
    with RayRunner(flows.Range(300, delay=0.001), 1) as r:
        it = iter(r)
        got = [next(it)[0] for _ in range(50)]
        pid = r.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        got += [dp[0] for dp in it]
        assert got == list(range(300))
        assert [dp[0] for dp in r] == list(range(300))
    assert pid_gone(pid)


def test_a_copy_that_always_dies_raises_after_retries():
    r = RayRunner(rflows.AlwaysDie(), 1, max_retries=1)
    with pytest.raises(WorkerError) as ei:
        list(r)
    r.close()
    assert ei.value.exc_type == "WorkerDied"
    assert "lost 2 times in a row" in ei.value.exc_message


def test_close_kills_the_actors(local_ray):
    r = RayRunner(flows.Range(4), 2)
    assert len(list(r)) == 4
    pids = r.worker_pids()
    r.close()
    r.close()
    assert all(pid_gone(p) for p in pids)
    assert local_ray.is_initialized()
    assert [dp[0] for dp in itertools.islice(RayRunner(flows.Range(4), 1), 4)] == [0, 1, 2, 3]


def test_arguments_are_validated():
    with pytest.raises(ValueError, match="`num_workers` must be a positive int, got 0"):
        RayRunner(flows.Range(3), 0)
    with pytest.raises(ValueError, match="`chunk_size` must be a positive int, got -2"):
        RayRunner(flows.Range(3), 1, chunk_size=-2)


def test_resume_with_one_worker_is_exact():
    check_resume(lambda: RayRunner(DataFromList(list(range(8)), shuffle=True, seed=1), 1),
                 epochs=2, every=11)


def test_resume_continues_each_workers_stream():
    def make():
        return RayRunner(flows.Tagged(10), 2, chunk_size=1, num_prefetch=2)

    r = make()
    it = iter(r)
    first = [next(it) for _ in range(7)]
    state = json.loads(json.dumps(r.state_dict()))
    it.close()
    r.close()
    fresh = make()
    fresh.load_state_dict(state)
    rest = list(fresh)
    fresh.close()
    assert len(rest) == 3
    for w in (0, 1):
        seq = [i for wid, _, i in first + rest if wid == w]
        assert seq == list(range(len(seq)))


def test_actors_use_one_thread_per_cpu_for_blas_and_opencv():
    with RayRunner(flows.Cv2Threads(), 1) as r:
        assert list(r) == [[1, "1"]]
