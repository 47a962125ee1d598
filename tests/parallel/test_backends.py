"""The contract every back end shares, parametrized over thread, process and ZeroMQ."""

from __future__ import annotations

import itertools
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.errors import (
    DataFlowError,
    DataFlowReentrantError,
    DataFlowTerminated,
    NoneResultError,
    WorkerError,
)
from dataflow.parallel import (
    MultiProcessMapDataZMQ,
    MultiProcessRunner,
    MultiProcessRunnerZMQ,
    MultiThreadMapData,
    MultiThreadRunner,
)
from tests.parallel import flows

RUNNERS = {
    "thread": lambda make, n: MultiThreadRunner(make, 4, n),
    "process": lambda make, n: MultiProcessRunner(make(), 4, n),
    "zmq": lambda make, n: MultiProcessRunnerZMQ(make(), n),
}
MAPPERS = {
    "thread": lambda ds, n, f, **kw: MultiThreadMapData(ds, n, f, **kw),
    "zmq": lambda ds, n, f, **kw: MultiProcessMapDataZMQ(ds, n, f, **kw),
}
runner_kinds = pytest.mark.parametrize("kind", sorted(RUNNERS))
mapper_kinds = pytest.mark.parametrize("kind", sorted(MAPPERS))


# ---- runners ----------------------------------------------------------------------------------


@runner_kinds
def test_one_worker_keeps_data_and_order(kind):
    with RUNNERS[kind](lambda: flows.Range(7), 1) as r:
        assert len(r) == 7
        r.reset_state()
        for _ in range(3):
            assert [dp[0] for dp in r] == list(range(7))


@runner_kinds
def test_workers_run_independent_copies(kind):
    with RUNNERS[kind](lambda: flows.Tagged(5), 2) as r:
        r.reset_state()
        got = [dp for _ in range(4) for dp in r]
    assert len(got) == 20
    per_worker: dict[int, list[int]] = {}
    for wid, _pid, i in got:
        per_worker.setdefault(wid, []).append(i)
    assert set(per_worker) <= {0, 1}
    for seq in per_worker.values():  # every copy walks its own epochs, in order
        assert seq == [i % 5 for i in range(len(seq))]


@runner_kinds
def test_unknown_length_runs_until_stopped(kind):
    with RUNNERS[kind](lambda: flows.NoLen(3), 2) as r:
        r.reset_state()
        got = [dp[0] for dp in itertools.islice(r, 25)]
    assert len(got) == 25
    assert set(got) == {0, 1, 2}


@runner_kinds
@pytest.mark.parametrize("make", [lambda: flows.Range(0), lambda: flows.NoLen(0)])
def test_empty_flow_ends_instead_of_hanging(kind, make):
    with RUNNERS[kind](make, 2) as r:
        r.reset_state()
        assert list(r) == []
        assert list(r) == []


@runner_kinds
def test_worker_exception_surfaces(kind):
    with RUNNERS[kind](lambda: flows.Range(10, fail_at=4), 2) as r:
        r.reset_state()
        start = time.monotonic()
        with pytest.raises(WorkerError) as ei:
            list(itertools.chain(r, r, r))
        assert time.monotonic() - start < 5
    err = ei.value
    assert type(err.__cause__) is KeyError
    assert err.exc_type == "KeyError"
    assert "bad datapoint 4" in str(err)
    assert err.worker_id in (0, 1)
    assert "in __iter__" in err.remote_traceback


@runner_kinds
def test_lifecycle_is_idempotent_and_lazy(kind):
    r = RUNNERS[kind](lambda: flows.Range(4), 1)
    if kind == "zmq":  # as in tensorpack: reset_state() once, before iterating
        with pytest.raises(DataFlowError, match=r"iterated before reset_state\(\)"):
            iter(r)
        r.reset_state()
        assert [dp[0] for dp in r] == [0, 1, 2, 3]
        with pytest.raises(DataFlowError, match=r"reset_state\(\) was called twice"):
            r.reset_state()
    else:
        assert [dp[0] for dp in r] == [0, 1, 2, 3]  # starts lazily
        r.reset_state()  # a second reset is harmless
    assert [dp[0] for dp in r] == [0, 1, 2, 3]
    r.close()
    r.close()
    r.reset_state()  # closed runners can start again
    assert [dp[0] for dp in r] == [0, 1, 2, 3]
    r.close()


@runner_kinds
def test_runner_is_not_reentrant(kind):
    with RUNNERS[kind](lambda: flows.Range(4), 1) as r:
        r.reset_state()
        it = iter(r)
        next(it)
        with pytest.raises(DataFlowReentrantError):
            next(iter(r))
        it.close()
        assert len(list(r)) == 4


# ---- mappers ----------------------------------------------------------------------------------


@mapper_kinds
@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize(("n", "buffer_size"), [(0, 5), (1, 1), (1, 200), (5, 2), (60, 7)])
def test_strict_epoch_is_exactly_the_serial_map(kind, ordered, n, buffer_size):
    expected = [2 * i for i in range(n)]
    with MAPPERS[kind](
        flows.Range(n), 2, flows.double, buffer_size=buffer_size, strict=True, ordered=ordered
    ) as m:
        assert len(m) == n
        for _ in range(3):
            got = [dp[0] for dp in m]
            if ordered:
                assert got == expected
            else:
                assert Counter(got) == Counter(expected)


@mapper_kinds
def test_strict_large_epochs_with_uneven_work(kind):
    with MAPPERS[kind](
        flows.Range(400), 3, flows.slow_identity, buffer_size=50, strict=True
    ) as m:
        for _ in range(2):
            assert sorted(dp[0] for dp in m) == list(range(400))


@mapper_kinds
def test_none_results_are_dropped_when_not_strict(kind):
    with MAPPERS[kind](flows.Range(10), 2, flows.drop_odd, ordered=True) as m:
        assert [dp[0] for dp in itertools.islice(m, 5)] == [0, 2, 4, 6, 8]


@mapper_kinds
@pytest.mark.parametrize("ordered", [False, True])
def test_a_none_result_in_strict_mode_raises_naming_the_input(kind, ordered):
    # as in tensorpack (whose strict mode asserted): a strict epoch has a result per input
    with MAPPERS[kind](flows.Range(10), 2, flows.drop_odd, strict=True, ordered=ordered) as m:
        with pytest.raises(NoneResultError, match=r"returned None for input index (\d)") as ei:
            list(m)
        assert int(ei.value.args[0].split("input index ")[1].split()[0]) % 2 == 1


@mapper_kinds
def test_non_strict_is_endless_and_continues_across_iterations(kind):
    with MAPPERS[kind](flows.Range(4), 2, flows.double, buffer_size=3, ordered=True) as m:
        got = []
        for _ in range(3):
            got += [dp[0] for dp in itertools.islice(m, 6)]
    assert got == [2 * (i % 4) for i in range(18)]


@mapper_kinds
def test_abandoned_strict_epoch_then_full_epoch(kind):
    with MAPPERS[kind](flows.Range(30), 2, flows.double, buffer_size=8, strict=True) as m:
        it = iter(m)
        for _ in range(5):
            next(it)
        it.close()
        assert sorted(dp[0] for dp in m) == [2 * i for i in range(30)]


@mapper_kinds
def test_map_exception_surfaces_with_index(kind):
    with MAPPERS[kind](flows.Range(20), 2, flows.fail_at_7, strict=True) as m:
        start = time.monotonic()
        with pytest.raises(WorkerError) as ei:
            list(m)
        assert time.monotonic() - start < 5
    err = ei.value
    assert err.index == 7
    assert err.worker_id in (0, 1)
    assert type(err.__cause__) is ValueError
    assert str(err.__cause__) == "cannot map 7"
    assert "ValueError: cannot map 7" in str(err)
    assert "fail_at_7" in err.remote_traceback


@mapper_kinds
def test_unpicklable_exception_is_reconstructed(kind):
    m = MAPPERS[kind](flows.Range(3), 1, flows.raise_unpicklable, strict=True)
    with m, pytest.raises(WorkerError) as ei:
        list(m)
    assert ei.value.exc_type == "tests.parallel.flows._UnpicklableError"
    assert "1/2" in str(ei.value.__cause__)


@mapper_kinds
def test_mapper_lifecycle(kind):
    m = MAPPERS[kind](flows.Range(5), 2, flows.double, strict=True)
    assert sorted(dp[0] for dp in m) == [0, 2, 4, 6, 8]  # lazy start
    m.reset_state()
    m.close()
    m.close()
    with m:
        assert sorted(dp[0] for dp in m) == [0, 2, 4, 6, 8]


@mapper_kinds
def test_error_then_restart(kind):
    with MAPPERS[kind](flows.Range(10), 2, flows.fail_at_7, strict=True) as m:
        with pytest.raises(WorkerError):
            list(m)
        m.map_func = flows.double
        m.close()
        assert sorted(dp[0] for dp in m) == [2 * i for i in range(10)]


@pytest.mark.parametrize(
    ("factory", "arg"),
    [
        (lambda v: MultiThreadMapData(flows.Range(1), v, flows.double), "num_thread"),
        (lambda v: MultiProcessMapDataZMQ(flows.Range(1), v, flows.double), "num_proc"),
        (lambda v: MultiProcessRunnerZMQ(flows.Range(1), v), "num_proc"),
        (lambda v: MultiProcessRunner(flows.Range(1), 2, v), "num_proc"),
        (lambda v: MultiThreadRunner(lambda: flows.Range(1), 2, v), "num_thread"),
    ],
)
@pytest.mark.parametrize("value", [None, 0, -1, 1.5])
def test_bad_worker_count_names_the_parameter(factory, arg, value):
    # (the counts that may be "auto" say so)
    with pytest.raises(ValueError, match=f'`{arg}` must be a positive int( or "auto")?, got '
                       f"{value!r}"):
        factory(value)


def test_bad_map_func_and_buffer():
    with pytest.raises(TypeError, match="`map_func` must be callable"):
        MultiThreadMapData(flows.Range(1), 2, None)
    with pytest.raises(ValueError, match='`buffer_size` must be a positive int or "auto", got 0'):
        MultiProcessMapDataZMQ(flows.Range(1), 2, flows.double, buffer_size=0)
    with pytest.raises(ValueError, match="`start_method` must be one of"):
        MultiProcessRunnerZMQ(flows.Range(1), 1, start_method="thread")


@mapper_kinds
@pytest.mark.parametrize("strict", [False, True])
def test_source_error_in_the_consumer_leaves_the_mapper_usable(kind, strict):
    src = flows.Range(10, fail_at=5)
    with MAPPERS[kind](src, 2, flows.double, buffer_size=3, strict=strict, ordered=True) as m:
        for _ in range(4):  # failures must not eat the buffer (no phantom inputs in flight)
            with pytest.raises(KeyError, match="bad datapoint 5"):
                list(itertools.islice(m, 30))
        src.fail_at = None
        got = [dp[0] for dp in itertools.islice(m, 10)]
    if strict:
        assert got == [2 * i for i in range(10)]
    else:  # results still in flight from the failed pass come first, then a new pass
        start = got.index(0)
        assert set(got[:start]) <= {2 * i for i in range(5)}
        assert got[start:] == [2 * i for i in range(len(got) - start)]


@pytest.mark.parametrize(
    "make",
    [
        lambda: RUNNERS["zmq"](lambda: flows.Range(50), 2),
        lambda: RUNNERS["process"](lambda: flows.Range(50), 2),
        lambda: RUNNERS["thread"](lambda: flows.Range(50), 2),
        lambda: MAPPERS["zmq"](flows.Range(50), 2, flows.double),
        lambda: MAPPERS["thread"](flows.Range(50), 2, flows.double),
    ],
    ids=["zmq-runner", "process-runner", "thread-runner", "zmq-map", "thread-map"],
)
def test_iterator_resumed_after_close_raises_terminated(make):
    df = make()
    df.reset_state()
    it = iter(df)
    next(it)
    df.close()
    with pytest.raises(DataFlowTerminated):
        list(itertools.islice(it, 200))  # what was already received may come first
    it.close()


@pytest.mark.parametrize(("kind", "examples"), [("thread", 40), ("zmq", 12)])
def test_strict_multiset_property(kind, examples):
    @settings(max_examples=examples, deadline=None)
    @given(
        n=st.integers(0, 80),
        buffer_size=st.integers(1, 100),
        workers=st.integers(1, 3),
        ordered=st.booleans(),
    )
    def check(n, buffer_size, workers, ordered):
        expected = [2 * i for i in range(n)]
        with MAPPERS[kind](
            flows.Range(n), workers, flows.double, buffer_size=buffer_size,
            strict=True, ordered=ordered,
        ) as m:
            for _ in range(2):
                got = [dp[0] for dp in m]
                assert (got if ordered else sorted(got)) == expected

    check()


@mapper_kinds
def test_mapper_queue_stats(kind):
    m = MAPPERS[kind](flows.Range(30), 2, flows.double, buffer_size=10, strict=True)
    assert m.queue_stats() is None
    with m:
        it = iter(m)
        next(it)
        stats = m.queue_stats()
        assert stats["capacity"] == 10
        assert 0 <= stats["size"] <= 10
        it.close()


def test_thread_runner_queue_stats():
    r = MultiThreadRunner(lambda: flows.Range(30), 5, 2)
    assert r.queue_stats() is None
    with r:
        next(iter(r))
        stats = r.queue_stats()
        assert stats["capacity"] == 5
        assert 0 <= stats["size"] <= 5


@mapper_kinds
@pytest.mark.parametrize(
    ("n", "buffer_size", "strict", "expected"),
    [(10**6, 200, True, 16), (40, 200, True, 5), (10, 200, True, 1), (10, 200, False, 16),
     (10**6, 8, True, 1)],
)
def test_chunk_size_keeps_every_worker_busy(kind, n, buffer_size, strict, expected):
    m = MAPPERS[kind](flows.Range(n), 2, flows.double, buffer_size=buffer_size, strict=strict)
    assert m._chunk_size() == expected
    m.close()
