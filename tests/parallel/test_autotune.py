"""Autotuned mappers end to end: ``"auto"`` worker counts and buffers, the live tuner (its
windows shortened so that it decides during a short test), one budget for a pipeline
(``autotune``), the back-end choice of ``ParallelMapData``, and the decisions in
``state_dict()`` and the profiler. Contracts only; speed is the benchmark's."""

from __future__ import annotations

import logging

import pytest

import dataflow
from dataflow.parallel import (
    AUTOTUNE,
    MultiProcessMapAndBatchDataZMQ,
    MultiProcessMapDataZMQ,
    MultiProcessRunnerZMQ,
    MultiThreadMapData,
    MultiThreadRunner,
    ParallelMapData,
    autotune,
)
from dataflow.parallel.autotuning import stage as _autotune
from dataflow.parallel.autotuning.backend import BackendProbe, choose_backend, thread_start
from dataflow.parallel.autotuning.stage import CpuShare, default_share
from dataflow.sources import DataFromList
from tests.parallel import flows

N = 80


@pytest.fixture
def short_windows(monkeypatch):
    """Windows of 5 ms: the tuner decides many times within a test."""
    monkeypatch.setattr(_autotune, "WINDOW", 0.005)


def _reference(cls, **kw):
    with cls(flows.Range(N), 2, flows.random_draws, strict=True, ordered=True, seed=4,
             **kw) as ref:
        return [[tuple(dp) for dp in ref] for _ in range(2)]


@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapDataZMQ])
def test_auto_mapper_keeps_the_outputs_and_resumes(cls, short_windows) -> None:
    want = _reference(cls)
    m = cls(flows.Range(N), AUTOTUNE, flows.random_draws, buffer_size="auto", strict=True,
            ordered=True, seed=4)
    share = default_share()
    per = m._core_per_worker
    maximum = share.maximum(m, per)
    assert m.autotuned and m.buffer_size == max(200, min(16 * maximum, 512))
    with m:
        got = [tuple(dp) for dp in m]
        itr = iter(m)
        head = [tuple(next(itr)) for _ in range(30)]
        state = m.state_dict()
        itr.close()
    assert got == want[0]
    tuned = state["autotune"]
    assert 1 <= tuned["workers"] <= maximum and tuned["maximum"] <= maximum
    assert all(set(d) == {"window", "old", "new", "reason", "rate"}
               for d in tuned["decisions"])
    m2 = cls(flows.Range(N), AUTOTUNE, flows.random_draws, strict=True, ordered=True, seed=4)
    m2.load_state_dict(state)
    assert m2.num_workers == tuned["workers"]  # a restore starts from the tuned count
    with m2:
        assert head + [tuple(dp) for dp in m2] == want[1]


def test_explicit_counts_mean_what_they_did() -> None:
    m = MultiThreadMapData(flows.Range(5), 3, flows.waits, buffer_size=7)
    assert (m.num_thread, m.buffer_size, m.autotuned, m.autotune_state()) == (3, 7, False, None)
    with m:
        assert "autotune" not in m.state_dict()


def test_bad_settings_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="`num_thread` must be a positive int or \"auto\", got "
                       "'Auto'"):
        MultiThreadMapData(flows.Range(5), "Auto", flows.waits)
    with pytest.raises(ValueError, match="`buffer_size` must be a positive int or \"auto\", got "
                       "'max'"):
        MultiProcessMapDataZMQ(flows.Range(5), 2, flows.waits, buffer_size="max")
    with pytest.raises(ValueError, match="`backend` must be one of 'auto', 'thread', "
                       "'process'; got 'gpu'"):
        ParallelMapData(flows.Range(5), 2, flows.waits, backend="gpu")


def test_runners_and_the_batching_mapper_take_the_budget() -> None:
    cores = default_share().cores
    r = MultiThreadRunner(lambda: DataFromList([[1]]), AUTOTUNE, AUTOTUNE)
    assert (r.num_thread, r.num_prefetch) == (cores, 16)
    z = MultiProcessRunnerZMQ(flows.Range(3), AUTOTUNE, AUTOTUNE)
    assert (z.num_proc, z.hwm) == (cores, 50)
    b = MultiProcessMapAndBatchDataZMQ(flows.Range(3), AUTOTUNE, flows.waits, 4, AUTOTUNE)
    assert (b.num_proc, b.buffer_size, b.autotuned) == (cores, max(40, (cores + 1) * 4), False)
    for flow in (r, z, b):
        flow.close()


def test_one_budget_for_the_pipeline() -> None:
    a = MultiThreadMapData(flows.Range(N), AUTOTUNE, flows.waits, strict=True)
    b = MultiThreadMapData(a, 2, flows.waits, strict=True)  # not autotuned: keeps its count
    c = MultiThreadMapData(b, AUTOTUNE, flows.waits, strict=True)
    assert autotune(c, cores=3) is c
    assert a.cpu_share is c.cpu_share and a.cpu_share.cores == 3 and b.cpu_share is None
    share = a.cpu_share
    share.claim(a, 8, 0.25)  # a claims two cores' worth: c may use the one left
    assert share.maximum(c, 0.25) == 4 and share.maximum(c, 1.0) == 1
    share.release(a)
    assert share.maximum(c, 1.0) == 3
    with c:
        assert sorted(dp[0] for dp in c) == list(range(N))


def test_cpu_share_minimum_is_one_worker() -> None:
    share = CpuShare(1)
    share.claim("x", 4, 1.0)
    assert share.maximum("y", 1.0) == 1


@pytest.mark.parametrize(("overlap", "cores_used", "budget", "backend", "computes"), [
    (4.0, 0.1, 8, "thread", False),  # it waits
    (2.0, 1.8, 8, "thread", True),  # it releases the GIL
    (3.0, 1.0, 8, "process", True),  # it holds the GIL: one core however many map
    (3.0, 1.0, 1, "thread", True),  # ... but the budget has one core
    (1.0, 0.9, 8, "thread", True),  # the threads never overlapped: unknown, threads
])
def test_choose_backend(overlap, cores_used, budget, backend, computes) -> None:
    choice = choose_backend(overlap, cores_used, budget)
    assert (choice.backend, choice.computes) == (backend, computes)


@pytest.mark.parametrize(("idle", "backend"), [
    (None, "process"),  # not known: one core's worth among 3 threads holds the GIL
    (1.0, "process"),  # a core stood idle: the threads could not use it (the GIL)
    (0.49, "thread"),  # the cores were busy: one core's worth tells nothing
])
def test_one_core_used_says_gil_only_if_cores_stood_idle(idle, backend) -> None:
    choice = choose_backend(3.0, 1.1, 2, idle)
    assert (choice.backend, choice.computes) == (backend, True)
    if backend == "thread":
        assert choice.reason == ("it computes (3.0 threads mapping at once used 1.10 cores), "
                                 "but the cores were busy (0.49 idle), so whether it holds the "
                                 "GIL is unknown: threads")


def test_idle_seconds_are_read_for_this_process_cores() -> None:
    import os
    import sys
    import time

    from dataflow.parallel.autotuning.backend import idle_seconds

    first = idle_seconds()
    if not sys.platform.startswith("linux"):
        assert first is None
        return
    assert first is not None
    time.sleep(0.05)
    second = idle_seconds()
    assert second is not None and second[1] > first[1]
    # never more idle time than the cores of the process's affinity had (the kernel counts
    # in ticks of 1/100 s: one more tick per core at most)
    cores, elapsed = len(os.sched_getaffinity(0)), second[1] - first[1]
    assert 0 <= second[0] - first[0] <= cores * (elapsed + 0.011)


def test_the_probe_measures_the_union_of_the_spans() -> None:
    probe = BackendProbe(4)
    # two threads each mapping 20 ms chunks side by side with 20 ms of CPU each: 2 cores
    got = [probe.add(0.02 * k, 0.02 * k + 0.02, 0.02) for k in range(4) for _ in range(2)]
    assert got[:-1] == [None] * 7
    last = got[-1]
    assert last is not None and last.backend == "thread" and last.computes
    assert (round(last.overlap, 6), round(last.cores, 6)) == (2.0, 2.0)
    gil = BackendProbe(4)  # the same spans with one core's CPU in all: it holds the GIL
    last = [gil.add(0.02 * k, 0.02 * k + 0.02, 0.01) for k in range(4) for _ in range(2)][-1]
    assert last is not None and last.backend == "process"
    assert (round(last.overlap, 6), round(last.cores, 6)) == (2.0, 1.0)


def test_computing_threads_start_at_one_per_core() -> None:
    # waiting work starts at the stage's start (4 threads per core of the budget: it may
    # climb to many); work that computes in threads starts at one per core
    assert [thread_start(False, 8, 2), thread_start(True, 8, 2), thread_start(True, 4, 1),
            thread_start(True, 1, 4)] == [8, 2, 1, 1]


class _Counting:
    """A map function that counts its calls (a side effect the probe must not add to)."""

    def __init__(self, func) -> None:
        self.func, self.calls = func, 0
        self.__name__ = func.__name__

    def __call__(self, dp):
        self.calls += 1
        return self.func(dp)


def _measured(func, caplog, n=4 * N):
    counting = _Counting(func)
    with caplog.at_level(logging.INFO, logger="dataflow.parallel"):
        m = ParallelMapData(flows.Range(n), 4, counting, strict=True, ordered=True)
        assert counting.calls == 0 and isinstance(m, MultiThreadMapData)
        assert dataflow.autotune_report(m) == [{"stage": "MultiThreadMapData", "depth": 0}]
        with m:
            assert [dp[0] for dp in m] == list(range(n))
    name = func.__name__
    lines = [r.getMessage() for r in caplog.records if f"ParallelMapData({name})" in
             r.getMessage()]
    choice = m.backend_choice
    assert choice is not None and lines == [f"ParallelMapData({name}): {choice.reason}"]
    assert dataflow.autotune_report(m) == [
        {"stage": "MultiThreadMapData", "depth": 0, "backend_choice": choice.to_dict()}]
    # each input mapped once, nothing extra for the probe: all on threads, or after a move
    # the rest in the worker processes (whose calls this counter does not see)
    assert m.backend == choice.backend
    assert counting.calls == n if choice.backend == "thread" else 0 < counting.calls < n
    return choice


@pytest.mark.parametrize("func", [flows.waits, flows.spin])
def test_parallel_map_data_measures_its_stream_and_logs_one_line(caplog, func) -> None:
    choice = _measured(func, caplog)
    # the verdict is the one its own figures give (what they are depends on the machine's load)
    again = choose_backend(choice.overlap, choice.cores, default_share().cores)
    if "but the cores were busy" in choice.reason:  # (the cores' idle time it read then is
        # not in the choice: without it, the same figures say "holds the GIL")
        assert (choice.backend, choice.computes, again.backend) == ("thread", True, "process")
    else:
        assert (choice.backend, choice.computes) == (again.backend, again.computes)
    if func is flows.waits:  # sleeping threads use next to no CPU, loaded machine or not
        assert (choice.backend, choice.computes) == ("thread", False)


def test_work_found_to_hold_the_gil_moves_to_processes(caplog, monkeypatch) -> None:
    """The probe's verdict "process" moves the stage's work, live, with nothing lost."""
    from dataflow.parallel.autotuning import backend as _backend

    verdict = _backend.BackendChoice("process", "it holds the GIL (test)", True, 3.0, 1.0)
    monkeypatch.setattr(_backend.BackendProbe, "add", lambda self, *span: verdict)
    choice = _measured(flows.spin, caplog)
    assert choice == verdict


def test_parallel_map_data_with_a_fixed_backend() -> None:
    pinned = ParallelMapData(flows.Range(3), 2, flows.spin, backend="process")
    assert isinstance(pinned, MultiProcessMapDataZMQ) and pinned.num_proc == 2
    pinned.close()
    threads = ParallelMapData(flows.Range(3), 2, flows.spin, backend="thread")
    assert isinstance(threads, MultiThreadMapData) and dataflow.autotune_report(threads) == []
    threads.close()


def test_autotune_report_finds_stages_anywhere_in_the_pipeline(short_windows) -> None:
    inner = MultiThreadMapData(flows.Range(N), AUTOTUNE, flows.waits, strict=True)
    ds = dataflow.BatchData(dataflow.MapData(inner, lambda dp: dp), 4)
    assert [(e["stage"], e["depth"], e["workers"]) for e in dataflow.autotune_report(ds)] == [
        ("MultiThreadMapData", 2, inner.num_workers)]
    with ds:
        ds.reset_state()
        assert sum(len(b[0]) for b in ds) == N
    report = dataflow.autotune_report(ds)
    assert report[0]["workers"] == inner.num_workers
    assert report[0]["decisions"] == inner.state_dict()["autotune"]["decisions"]


@pytest.mark.parametrize("cores", [0, -1, 1.5, "2"])
def test_autotune_refuses_a_bad_core_count(cores) -> None:
    with pytest.raises((ValueError, TypeError), match=r"`cores` must be a positive int, got "
                       + repr(cores).replace(".", r"\.")):
        autotune(flows.Range(3), cores=cores)


def test_profiler_shows_the_decisions(short_windows) -> None:
    m = MultiThreadMapData(flows.Range(400), AUTOTUNE, flows.waits)
    with m:
        report = dataflow.profile(m, num=150, warmup=5)
    stage = report.stages[0]
    assert stage.autotune is not None and stage.autotune["workers"] == m.num_workers
    text = report.format()
    assert f"autotune: stage 0 (MultiThreadMapData): {m.num_workers} workers" in text
    assert report.to_dict()["stages"][0]["autotune"]["workers"] == m.num_workers


def test_the_batching_mapper_is_not_resized_live() -> None:
    b = MultiProcessMapAndBatchDataZMQ(flows.Range(8), 2, flows.waits, 4)
    with b:
        itr = iter(b)
        assert len(next(itr)[0]) == 4
        with pytest.raises(NotImplementedError, match="MultiProcessMapAndBatchDataZMQ cannot "
                           "change its worker count while it runs"):
            b.resize(3)
        itr.close()
    assert b.num_proc == 2


@pytest.mark.parametrize(("per_worker", "settle_closes_at"), [(1 / 16, 1.25), (1.0, 1.5)])
def test_the_window_after_a_change_is_shorter_for_threads(monkeypatch, per_worker,
                                                          settle_closes_at) -> None:
    """A thread stage's unmeasured window after a change lasts half a window (threads start at
    once); a process stage's, and the first window of any stage, a whole one."""
    from types import SimpleNamespace

    from dataflow.parallel.autotuning.controller import Controller

    clock, answered, resized = [0.0], [0], []
    monkeypatch.setattr(_autotune, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    ctl = Controller(1, 16, 8, quick_start=False)
    tuner = _autotune.StageTuner("t", ctl, resized.append, lambda: answered[0], CpuShare(16),
                                 per_worker)

    def at(t: float) -> int:
        clock[0] = t
        answered[0] += 100
        tuner.waited(0.0)
        return ctl.window

    assert at(0.3) == 0 and at(0.5) == 1  # the first window: a whole one
    assert at(1.0) == 2 and resized == [4]  # consumer-bound: half given back
    assert at(settle_closes_at - 0.01) == 2
    assert at(settle_closes_at) == 3 and resized == [4]


def test_a_starting_thread_stage_measures_short_windows_of_enough_answers(monkeypatch) -> None:
    """While its controller is starting, a thread stage's first window ends once an input was
    answered and ``START_WINDOW`` passed; a measured one also needs an answered input per
    worker (at most ``WINDOW``); the one after a change lasts half of ``START_WINDOW``. Once
    the start is over, the windows are the usual ones, and the count is set again (so that
    the stage sizes its chunks for it)."""
    from types import SimpleNamespace

    from dataflow.parallel.autotuning.controller import Controller

    clock, answered, resized = [0.0], [0], []
    monkeypatch.setattr(_autotune, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    ctl = Controller(1, 32, 8)
    tuner = _autotune.StageTuner("t", ctl, resized.append, lambda: answered[0], CpuShare(1),
                                 1 / 32)
    assert tuner.starting

    def at(t: float, more: int, waited: float = 0.0) -> int:
        clock[0] = t
        answered[0] += more
        tuner.waited(waited)
        return ctl.window

    assert at(0.06, 0) == 0  # nothing answered yet: the first window goes on
    assert at(0.07, 5) == 1 and resized == []  # (not measured)
    assert at(0.11, 100, 0.036) == 1  # 40 ms: not yet a short window
    assert at(0.125, 0, 0.014) == 2 and resized == [32]  # waited 91 %: 4x as many
    assert ctl.decisions[-1].reason == "worker-bound (consumer waited 91%): trying more"
    assert at(0.149, 0) == 2 and at(0.151, 0) == 3  # after the change: half a short window
    assert at(0.21, 31, 0.05) == 3  # 31 answered: fewer than the 32 workers
    assert at(0.22, 1) == 4 and ctl.workers == 8 and not tuner.starting  # no gain: back
    assert ctl.decisions[-1].reason == "32 workers gave no more than 8 (463.8 vs 1818.2/s)"
    assert resized == [32, 8]
    assert at(0.469, 100) == 4 and at(0.471, 0) == 5  # the usual settling window, then
    assert at(0.97, 100) == 5 and at(0.972, 0) == 6  # the usual windows
    # a measured window of a starting stage with fewer answers than workers ends at WINDOW
    ctl = Controller(1, 32, 8)
    tuner = _autotune.StageTuner("t", ctl, resized.append, lambda: answered[0], CpuShare(1),
                                 1 / 32)
    assert at(2.1, 1) == 1  # (the first window)
    assert at(2.59, 0, 0.4) == 1 and at(2.601, 0) == 2
    assert ctl.workers == 32  # (waited 80 %: 4x as many)


def test_no_climb_while_the_stage_measures_its_back_end(monkeypatch) -> None:
    """While ``ParallelMapData`` measures whether its work holds the GIL, a worker-bound
    window decides nothing (no climb on work that may move to processes); a consumer-bound
    one gives workers back as usual; once it chose, a climb may follow."""
    from types import SimpleNamespace

    from dataflow.parallel.autotuning.controller import Controller

    clock, answered, probing = [0.0], [0], [True]
    monkeypatch.setattr(_autotune, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    ctl = Controller(1, 32, 8)
    tuner = _autotune.StageTuner("t", ctl, lambda n: None, lambda: answered[0], CpuShare(1),
                                 1 / 32, probing=lambda: probing[0])

    def at(t: float, more: int, waited: float) -> tuple[int, int]:
        clock[0], answered[0] = t, answered[0] + more
        tuner.waited(waited)
        return ctl.window, ctl.workers

    assert at(0.1, 50, 0.1) == (1, 8)  # (the first window: not measured)
    assert at(0.2, 50, 0.1) == (1, 8) and at(0.3, 50, 0.1) == (1, 8)  # waited: nothing
    probing[0] = False
    assert at(0.4, 50, 0.1) == (2, 32)  # a climb, once it chose
    ctl = Controller(1, 32, 8)  # behind a slow consumer (it never waits), still probing
    tuner = _autotune.StageTuner("t", ctl, lambda n: None, lambda: answered[0], CpuShare(1),
                                 1 / 32, probing=lambda: True)
    assert at(0.5, 50, 0.0) == (1, 8) and at(0.6, 50, 0.0) == (2, 4)  # a give-back


def test_a_settle_until_an_answered_count_is_not_measured(monkeypatch) -> None:
    """``settle_until(n)``: the window in progress is not measured and lasts until ``n``
    inputs were answered in all (at most ``WINDOW`` from the call)."""
    from types import SimpleNamespace

    from dataflow.parallel.autotuning.controller import Controller

    clock, answered = [0.0], [0]
    monkeypatch.setattr(_autotune, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    ctl = Controller(1, 32, 8)
    tuner = _autotune.StageTuner("t", ctl, lambda n: None, lambda: answered[0], CpuShare(1),
                                 1 / 32)

    def at(t: float, more: int, waited: float = 0.0) -> int:
        clock[0] = t
        answered[0] += more
        tuner.waited(waited)
        return ctl.window

    assert at(0.1, 10) == 1  # (the first window)
    tuner.settle_until(138)  # 128 more inputs in flight in large chunks
    assert at(0.2, 100, 0.1) == 1 and at(0.3, 27, 0.1) == 1  # 137: not yet
    assert at(0.31, 1) == 2 and ctl.workers == 8  # 138: over, not measured
    tuner.settle_until(10**6)
    assert at(0.8, 1) == 2 and at(0.811, 0) == 3  # at most WINDOW


def test_the_queued_chunks_are_split_once_the_work_is_known_to_wait() -> None:
    """What the threads have not taken yet is split into chunks of the new size, in order,
    each input once; a retire token keeps its place."""
    from dataflow.parallel.thread import _RETIRE, _ThreadMapTransport

    transport = _ThreadMapTransport(flows.waits, 0, "t", (0, ()))  # (no thread takes any)
    try:
        transport.submit([(0, 0, [0]), (1, 1, [1]), (2, 2, [2])])
        transport._in.put(_RETIRE)
        transport.submit([(3, 3, [3]), (4, 4, [4])])
        transport.rechunk(2)
        got = []
        while not transport._in.empty():
            got.append(transport._in.get_nowait())
        assert got == [[(0, 0, [0]), (1, 1, [1])], [(2, 2, [2])], _RETIRE,
                       [(3, 3, [3]), (4, 4, [4])]]
    finally:
        transport.close()


@pytest.mark.parametrize(("cores_used", "starting"), [(0.1, True), (1.8, False)])
def test_the_quick_start_is_for_work_that_waits(cores_used, starting) -> None:
    # ParallelMapData's probe measures chunks sized for the threads running (16 inputs for
    # 8 threads behind 512); once it knows the work waits, the starting tuner's chunks hold
    # one input (sized for the most threads); work that computes gets the usual tuning
    m = autotune(ParallelMapData(flows.Range(4 * N), AUTOTUNE, flows.waits, strict=True,
                                 buffer_size=512), cores=2)

    def usual() -> int:  # (a quarter of a worker's share of the buffer and of the pass)
        return min(16, 512 // (4 * m.num_workers), 4 * N // (4 * m.num_workers))

    with m:
        m.reset_state()
        assert m._tuner is not None and m._tuner.starting and m._probing()
        assert (m.num_workers, m._sched.chunk_size) == (8, usual())
        m._chosen(choose_backend(2.0, cores_used, 2))
        assert m._tuner.starting == starting and not m._probing()
        assert m._sched.chunk_size == (1 if starting else usual())
        assert m.num_workers == (8 if starting else 2)
        assert sorted(dp[0] for dp in m) == list(range(4 * N))


@pytest.mark.parametrize(("build", "name", "value"), [
    (lambda: ParallelMapData(flows.Range(3), num_workers=-3, map_func=flows.waits),
     "num_workers", "-3"),
    (lambda: ParallelMapData(flows.Range(3), -1, flows.waits), "num_workers", "-1"),
    (lambda: MultiProcessMapDataZMQ(flows.Range(3), "Auto", flows.waits), "num_proc", "'Auto'"),
    (lambda: MultiThreadMapData(flows.Range(3), num_thread=0, map_func=flows.waits),
     "num_thread", "0"),
    (lambda: MultiThreadMapData(flows.Range(3), 2, flows.waits, buffer_size="AUTO"),
     "buffer_size", "'AUTO'"),
    (lambda: MultiProcessRunnerZMQ(flows.Range(3), 2.5), "num_proc", "2.5"),
    (lambda: MultiThreadRunner(lambda: flows.Range(3), num_prefetch="x", num_thread=2),
     "num_prefetch", "'x'"),
])
def test_worker_counts_are_named_as_the_user_spelled_them(build, name, value) -> None:
    with pytest.raises(ValueError) as info:
        build()
    msg = str(info.value)
    assert msg.startswith(f'`{name}` must be a positive int or "auto", got {value} (type ')
    example = {"buffer_size": 200, "num_prefetch": 16}.get(name, 4)
    assert msg.endswith(f'pass e.g. {name}={example}, or {name}="auto" to let it tune itself.')
    assert ('did you mean "auto"' in msg) == (value.lower() in ("'auto'",))


def test_a_window_goes_on_over_the_next_epoch_without_the_time_between(monkeypatch) -> None:
    """The tuner's window is suspended when an iteration ends and goes on at the next one:
    epochs of 0.2 s, 1 s apart, make a window of 0.5 s of iteration over three of them (each
    iteration restarted it, and epochs shorter than a window never measured one); the time
    between them and the inputs answered meanwhile (an endless stream's in flight) are not
    counted."""
    from types import SimpleNamespace

    from dataflow.parallel.autotuning.controller import Controller

    clock, answered, resized = [0.0], [0], []
    monkeypatch.setattr(_autotune, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    ctl = Controller(1, 32, 8, quick_start=False)
    tuner = _autotune.StageTuner("t", ctl, resized.append, lambda: answered[0], CpuShare(1),
                                 1 / 32)
    tuner.suspend()  # (as a mapper does: the clock starts with its first iteration)
    windows = []
    for epoch in range(6):
        start = 10.0 * epoch  # (1 s or more between two epochs)
        clock[0] = start
        tuner.resume()
        for k in (1, 2):
            clock[0] = start + 0.1 * k
            answered[0] += 20
            tuner.waited(0.05)
            windows.append(ctl.window)
        tuner.suspend()
        answered[0] += 7  # answered between two iterations: not in the window
    # 0.5 s of iteration per window: the first (not measured) ends 0.1 s into the third
    # epoch, the second 0.2 s into the fifth
    assert windows == [0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2]
    assert resized == [12] and ctl.workers == 12
    d = ctl.decisions[-1]
    # 100 answered in 0.5 s of iteration, 0.25 s of it waiting
    assert (d.window, d.old, d.new, d.rate) == (2, 8, 12, 200.0)
    assert d.reason == "worker-bound (consumer waited 50%): trying more"


def test_many_short_epochs_are_tuned_as_one_long_one(monkeypatch) -> None:
    """An autotuned stage over epochs of 32 inputs that wait 2 ms (each epoch far shorter than
    a window) keeps measuring windows and deciding: its controller's windows add up over the
    epochs (it measured none, and kept its start-up count, when each epoch restarted them)."""
    monkeypatch.setattr(_autotune, "WINDOW", 0.1)
    m = MultiThreadMapData(flows.Range(32), AUTOTUNE, flows.waits, strict=True)
    m.cpu_share = CpuShare(1)
    with m:
        m.reset_state()
        for _ in range(300):  # at least 2 ms each: at least 0.6 s of iteration
            assert sorted(dp[0] for dp in m) == list(range(32))
        state = m.autotune_state()
    assert state["window"] >= 3
    assert state["decisions"] and state["decisions"][0]["reason"].startswith("worker-bound")
