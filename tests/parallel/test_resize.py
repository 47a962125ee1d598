"""Live resizing of the thread and ZMQ mappers: whatever the resize schedule, a strict mapper
yields every input exactly once, an ordered one in order, the outputs are those of a run with a
fixed worker count (random draws are keyed by each input's epoch and position), and a state
saved between resizes resumes exactly."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataflow.parallel import MultiProcessMapDataZMQ, MultiThreadMapData
from tests.parallel import flows

N = 60
BACKENDS = {"thread": MultiThreadMapData, "zmq": MultiProcessMapDataZMQ}
EXAMPLES = {"thread": 25, "zmq": 10}

schedules = st.lists(st.tuples(st.integers(0, N - 1), st.integers(1, 4)), max_size=4).map(
    sorted)


def _mapper(backend: str, workers: int, ordered: bool = True):
    m = BACKENDS[backend](flows.Range(N), workers, flows.random_draws, buffer_size=12,
                          strict=True, ordered=ordered, seed=11)
    m.reset_state()
    return m


@contextlib.contextmanager
def _pair(backend: str, ordered: bool = True) -> Iterator[tuple[object, object]]:
    """(mapper to resize, ordered reference with 2 workers), iterated in lockstep: one epoch
    of each per example (the processes are started once per test)."""
    ref, m = _mapper(backend, 2), _mapper(backend, 3, ordered)
    try:
        yield m, ref
    finally:
        m.close()
        ref.close()


def _take(m, schedule: list[tuple[int, int]], stop: int | None = None,
          itr: Iterator | None = None) -> list:
    """Results of one pass of ``m`` (or of ``itr``, a live iteration of it), or its first
    ``stop`` ones, resizing at the scheduled positions."""
    out, todo = [], list(schedule)
    itr = iter(m) if itr is None else itr
    while stop is None or len(out) < stop:
        while todo and todo[0][0] <= len(out):
            m.resize(todo.pop(0)[1])
        try:
            out.append(tuple(next(itr)))
        except StopIteration:
            break
    return out


def _check_examples(backend: str):
    return settings(max_examples=EXAMPLES[backend], deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("ordered", [True, False])
def test_resizes_keep_exactly_once_order_and_outputs(backend: str, ordered: bool) -> None:
    with _pair(backend, ordered) as (m, ref):

        @_check_examples(backend)
        @given(schedule=schedules)
        def check(schedule):
            want = [tuple(dp) for dp in ref]
            got = _take(m, schedule)
            if ordered:
                assert got == want
            else:
                assert Counter(got) == Counter(want)
                assert len(got) == N
            if schedule:
                assert m.num_workers == schedule[-1][1]

        check()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_resume_between_resizes_is_exact(backend: str) -> None:
    with _pair(backend) as (m, ref):

        @_check_examples(backend)
        @given(before=schedules, after=schedules, stop=st.integers(1, N - 1))
        def check(before, after, stop):
            want = [tuple(dp) for dp in ref]
            itr = iter(m)
            head = _take(m, before, stop, itr)
            state = m.state_dict()  # (while the pass is live)
            itr.close()
            m.load_state_dict(state)
            tail = _take(m, after)
            assert head + tail == want

        check()


def test_resize_outside_iteration_and_bad_counts() -> None:
    m = MultiThreadMapData(flows.Range(10), 2, flows.random_draws, strict=True, ordered=True,
                           seed=1)
    m.resize(3)  # before the workers start: the count they start with
    assert (m.num_workers, m.num_thread) == (3, 3)
    with m:
        assert [dp[0] for dp in m] == list(range(10))
        m.resize(1)
        assert [dp[0] for dp in m] == list(range(10))
        with pytest.raises(ValueError, match="`num_workers` must be a positive int, got 0"):
            m.resize(0)


def test_chunks_are_sized_for_the_workers_running_now() -> None:
    # a chunk is at most a quarter of a worker's share of the buffer and 16 inputs: sized for
    # the count it runs, so that a few workers get big chunks and many still all get work
    with MultiThreadMapData(flows.Range(1000), 2, flows.random_draws, buffer_size=512) as m:
        itr = iter(m)
        sizes = []
        for n in (2, 8, 64, 128, 3):
            m.resize(n)
            next(itr)
            sizes.append(m._sched.chunk_size)
        assert sizes == [16, 16, 2, 1, 16]


def test_a_non_strict_stream_goes_on_across_resizes() -> None:
    with MultiProcessMapDataZMQ(flows.Range(25), 1, flows.random_draws, buffer_size=8,
                                ordered=True, seed=5) as ref:
        want = [tuple(dp) for _, dp in zip(range(70), ref, strict=False)]
    with MultiProcessMapDataZMQ(flows.Range(25), 2, flows.random_draws, buffer_size=8,
                                ordered=True, seed=5) as m:
        got = []
        for n in (3, 1, 2):
            got += [tuple(dp) for _, dp in zip(range(23), m, strict=False)]
            m.resize(n)
        got += [tuple(dp) for _, dp in zip(range(1), m, strict=False)]
        assert got == want
