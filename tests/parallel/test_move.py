"""A thread stage that moves its work to processes while it runs (what an autotuned stage of
``ParallelMapData`` does when its consumer is the bottleneck): nothing in flight is lost or
mapped twice, an ordered stage keeps the order, the outputs are those of a thread stage that
never moved (random draws are keyed by each input's epoch and position), a state saved before
or after the move resumes exactly (a restored stage starts on the back end it had moved to),
and a move whose processes cannot start leaves the stage on threads."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataflow.parallel import AUTOTUNE, MultiThreadMapData, _map_processes, autotune
from dataflow.parallel.autotuning import stage as _autotune
from dataflow.parallel.autotuning.backend import may_move
from tests.parallel import flows

N = 60


def _stage(ordered: bool = True, workers=2) -> MultiThreadMapData:
    m = MultiThreadMapData(flows.Range(N), workers, flows.random_draws, buffer_size=12,
                           strict=True, ordered=ordered, seed=11)
    m._may_move = True  # (what ParallelMapData sets for work that computes, on 2+ cores)
    return m


def _reference(epochs: int = 1) -> list[list[tuple]]:
    """The epochs of a stage that never moved (each epoch's draws are keyed by its number)."""
    with MultiThreadMapData(flows.Range(N), 2, flows.random_draws, buffer_size=12,
                            strict=True, ordered=True, seed=11) as ref:
        return [[tuple(dp) for dp in ref] for _ in range(epochs)]


def _check(got: list[tuple], want: list[tuple], ordered: bool) -> None:
    if ordered:
        assert got == want
    else:
        assert Counter(got) == Counter(want) and len(got) == N


def _worker_pids(m: MultiThreadMapData) -> set[int]:
    return {p.pid for p in psutil.Process().children()} if m._pool is not None else set()


@pytest.mark.parametrize("ordered", [True, False])
def test_a_move_keeps_every_input_once_the_order_and_the_outputs(ordered: bool) -> None:
    want = _reference(3)

    @settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(at=st.integers(0, N - 1), second_epoch=st.booleans())
    def check(at: int, second_epoch: bool) -> None:
        with _stage(ordered, workers=1) as m:
            if second_epoch:  # (the move happens in the second epoch of the stage)
                _check([tuple(dp) for dp in m], want[0], ordered)
            got = []
            for dp in m:
                got.append(tuple(dp))
                if len(got) == at + 1:
                    m._request_move()
            assert m.backend == "process" and len(_worker_pids(m)) == 1 and m._retiring is None
            assert (m.profile_hint, m._core_per_worker) == ("process-map", 1.0)
            _check(got, want[second_epoch], ordered)
            # the next epoch runs on the process, and resizes there
            m.resize(2)
            _check([tuple(dp) for dp in m], want[second_epoch + 1], ordered)
            assert len(_worker_pids(m)) == 2
        assert m._pool is None and m._transport is None

    check()


_GATE, _AT_GATE = threading.Event(), threading.Event()


def _gated_pid(dp: list) -> list:
    """``[i, pid of the worker]``; input 0 waits for the gate (in the consumer's process)."""
    if dp[0] == 0:
        _AT_GATE.set()
        _GATE.wait(10)
    return [dp[0], os.getpid()]


def test_the_inputs_the_threads_have_not_started_move_with_the_work() -> None:
    _GATE.clear()
    _AT_GATE.clear()
    m = MultiThreadMapData(flows.Range(64), 1, _gated_pid, buffer_size=64, strict=True,
                           ordered=True)
    m._may_move = True
    with m:
        itr = iter(m)
        m._sched._fill()  # (what the first next() does: 4 chunks of 16 go to the thread)
        assert _AT_GATE.wait(10)
        # the thread holds chunk 0 and maps its input 0 at the gate: chunks 1-3 move, and so
        # do inputs 1-15 of chunk 0, which the thread hands back once input 0 is done
        m._request_move()
        (child,) = _worker_pids(m)
        _GATE.set()
        got = [tuple(dp) for dp in itr]
    me = os.getpid()
    assert got == [(0, me)] + [(i, child) for i in range(1, 64)]


def test_a_state_saved_before_or_after_the_move_resumes_exactly() -> None:
    want = _reference()[0]
    with _stage(workers=AUTOTUNE) as m:
        itr = iter(m)
        head = [tuple(next(itr)) for _ in range(20)]
        before = m.state_dict()  # on threads
        m.resize(1)
        m._request_move()
        head += [tuple(next(itr)) for _ in range(20)]
        after = m.state_dict()  # on the process
        itr.close()
    assert before["autotune"]["backend"] == "thread"
    assert after["autotune"]["backend"] == "process"
    for state, n in ((before, 20), (after, 40)):
        restored = _stage(workers=AUTOTUNE)
        restored.load_state_dict(state)
        assert restored.backend == state["autotune"]["backend"]
        with restored:
            assert head[:n] + [tuple(dp) for dp in restored] == want
            assert bool(_worker_pids(restored)) == (n == 40)  # (the tuner sets the count)


def test_the_tuner_moves_a_consumer_bound_stage(monkeypatch, caplog) -> None:
    # windows of 5 ms; a consumer that takes 2 ms per result while the map takes a fraction
    # of that: the consumer is the bottleneck, the stage gives its threads back to one, then
    # moves its work to a process; the results are those of a stage that never moved
    monkeypatch.setattr(_autotune, "WINDOW", 0.005)
    n = 4000
    with MultiThreadMapData(flows.Range(n), 2, flows.random_draws, strict=True, ordered=True,
                            seed=3) as ref:
        want = [tuple(dp) for dp in ref]
    m = MultiThreadMapData(flows.Range(n), AUTOTUNE, flows.random_draws, strict=True,
                           ordered=True, seed=3)
    m._may_move = True
    autotune(m, cores=2)
    got = []
    with caplog.at_level(logging.INFO, logger="dataflow.parallel"), m:
        for dp in m:
            got.append(tuple(dp))
            if m.backend == "thread":
                time.sleep(0.002)
        tuned = m.autotune_state()
    assert got == want
    assert m.backend == "process" and tuned is not None and tuned["backend"] == "process"
    moves = [d for d in tuned["decisions"] if d["old"] == d["new"]]
    assert len(moves) == 1 and moves[0]["old"] == 1
    assert moves[0]["reason"].startswith("consumer-bound at 1 worker(s) for 4 windows: the "
                                         "work moves to processes")
    logged = [r.getMessage() for r in caplog.records if "work moves" in r.getMessage()]
    assert logged == [f"MultiThreadMapData: {moves[0]['reason']}"]


def test_a_move_whose_processes_cannot_start_stays_on_threads(monkeypatch, caplog) -> None:
    def no_processes(*args, **kwargs):
        raise OSError("fork: Resource temporarily unavailable")

    monkeypatch.setattr(_map_processes, "start_map_processes", no_processes)
    want, again = _reference(2)
    with caplog.at_level(logging.WARNING, logger="dataflow.parallel"), _stage() as m:
        got = []
        for dp in m:
            got.append(tuple(dp))
            if len(got) == 10:
                m._request_move()
        assert got == want and m.backend == "thread" and m._pool is None
        assert [tuple(dp) for dp in m] == again
    assert [r.getMessage() for r in caplog.records] == [
        "MultiThreadMapData: its work could not move to processes (OSError: fork: Resource "
        "temporarily unavailable); it stays on threads"]


def test_which_thread_stages_may_move() -> None:
    # work that computes (rather than waits), with a core to spare
    assert [may_move(True, 2), may_move(True, 4), may_move(False, 2), may_move(True, 1)] == [
        True, True, False, False]


def _slow_pid(dp: list) -> list:
    time.sleep(0.002)
    return [dp[0], os.getpid()]


def test_a_burst_waits_for_the_workers_still_starting(monkeypatch) -> None:
    # all inputs in flight at once (a buffer as large as the pass): without the backlog they
    # all went to the first worker that announced itself, and the other idled
    from dataflow.parallel import MultiProcessMapDataZMQ, _zmq_consumer

    monkeypatch.setattr(_zmq_consumer, "BACKLOG_WAIT", 60.0)  # (however slow a start is)
    n = 256
    with MultiProcessMapDataZMQ(flows.Range(n), 2, _slow_pid, buffer_size=n, strict=True,
                                ordered=True) as m:
        got = [tuple(dp) for dp in m]
    assert [i for i, _ in got] == list(range(n))
    per_worker = Counter(pid for _, pid in got)
    assert len(per_worker) == 2 and min(per_worker.values()) >= n // 4, per_worker


def test_an_automatic_buffer_is_sized_again_for_the_processes() -> None:
    # an autotuned thread stage sizes its buffer for the most threads it may run (hundreds of
    # inputs); once its work moved to 2 processes, at most a process stage's buffer is in flight
    m = MultiThreadMapData(flows.Range(N), AUTOTUNE, flows.random_draws, buffer_size="auto",
                           strict=True, ordered=True, seed=11)
    m._may_move = True
    autotune(m, cores=2)
    want = _reference()[0]
    with m:
        itr = iter(m)
        got = [tuple(next(itr))]
        before = m._sched.buffer_size
        m._request_move()
        got.extend(tuple(dp) for dp in itr)
        after = m._sched.buffer_size
    assert before == m.buffer_size and before > 200
    assert after == 200  # (the auto buffer of up to 12 processes)
    assert got == want
