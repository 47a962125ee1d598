"""The epoch plan: a pure function of (seed, epoch, shard sizes), elastic, equal steps, exact
once per epoch, resumable onto another world size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dataflow.streaming.plan import (
    EpochPlan,
    adjacent_distances,
    global_order,
    per_rank,
    rank_positions,
    worker_positions,
)

sizes_st = st.lists(st.integers(0, 40), min_size=1, max_size=12)
RANKS = (1, 2, 4, 8)
WORKERS = (1, 2, 4)  # a rank without workers reads as one worker


def _rank_stream(plan: EpochPlan, workers: int) -> list[int]:
    """The rank's sequence as its workers deliver it round-robin (as a DataLoader does)."""
    parts = [plan.samples(w, workers).tolist() for w in range(workers)]
    out = []
    for i in range(max(map(len, parts))):
        out.extend(p[i] for p in parts if i < len(p))
    return out


def _global_stream(sizes, seed, epoch, window, ranks, workers, partial="drop", start=0):
    """Interleave the ranks step by step: position start + step * R + r."""
    plans = [EpochPlan(tuple(sizes), seed, epoch, window, True, r, ranks, start, partial)
             for r in range(ranks)]
    streams = [_rank_stream(p, workers) for p in plans]
    assert len({len(s) for s in streams}) == 1  # equal steps
    return [s[i] for i in range(len(streams[0])) for s in streams]


@settings(max_examples=60, deadline=None)
@given(sizes_st, st.integers(0, 2**32), st.integers(0, 5), st.integers(1, 50))
def test_global_order_is_a_pure_permutation(sizes, seed, epoch, window):
    a = global_order(sizes, seed, epoch, window)
    b = global_order(list(sizes), seed, epoch, window)
    assert a.tolist() == b.tolist()
    assert sorted(a.tolist()) == list(range(sum(sizes)))


@settings(max_examples=40, deadline=None)
@given(sizes_st, st.integers(0, 1000), st.integers(1, 30),
       st.sampled_from(RANKS), st.sampled_from(WORKERS))
def test_elastic_determinism_and_exactly_once(sizes, seed, window, ranks, workers):
    n = sum(sizes)
    order = global_order(sizes, seed, 0, window).tolist()
    got = _global_stream(sizes, seed, 0, window, ranks, workers)
    keep = n - n % ranks
    assert got == order[:keep]  # the same order for any world size; the remainder is the tail
    assert len(set(got)) == len(got)


@settings(max_examples=40, deadline=None)
@given(sizes_st, st.integers(0, 1000), st.sampled_from(RANKS), st.sampled_from(WORKERS))
@example(sizes=[1], seed=0, ranks=4, workers=1)  # fewer samples than ranks: padded 3 times
def test_pad_policy_equal_steps_covers_everything(sizes, seed, ranks, workers):
    n = sum(sizes)
    got = _global_stream(sizes, seed, 1, 7, ranks, workers, "pad")
    order = global_order(sizes, seed, 1, 7).tolist()
    assert len(got) == -(-n // ranks) * ranks
    assert set(got) == set(range(n))
    # padding repeats the order from its start (more than once when there are fewer samples
    # than ranks)
    assert got == [order[i % n] for i in range(len(got))]


@settings(max_examples=40, deadline=None)
@given(sizes_st, st.integers(0, 1000), st.sampled_from(RANKS), st.sampled_from(RANKS),
       st.data())
def test_resume_onto_another_world_size(sizes, seed, before, after, data):
    n = sum(sizes)
    steps = per_rank(n, 0, before, "drop")
    k = data.draw(st.integers(0, steps))
    first = _global_stream(sizes, seed, 2, 5, before, 1)[:k * before]
    rest = _global_stream(sizes, seed, 2, 5, after, 2, start=k * before)
    whole = first + rest
    assert len(set(whole)) == len(whole)  # nothing repeated
    order = global_order(sizes, seed, 2, 5).tolist()
    assert whole == order[:len(whole)]  # nothing lost: a prefix of the global order
    assert n - len(whole) == (n - k * before) % after  # only the documented remainder


def test_golden_order_and_epochs_differ():
    assert global_order([3, 2, 4], 7, 0, 4).tolist() == global_order([3, 2, 4], 7, 0, 4).tolist()
    e0, e1 = global_order([50] * 4, 0, 0, 16), global_order([50] * 4, 0, 1, 16)
    assert e0.tolist() != e1.tolist()
    assert global_order([3, 2], 0, 0, shuffle=False).tolist() == [0, 1, 2, 3, 4]


def test_rank_and_worker_positions_exact():
    assert rank_positions(10, 1, 4).tolist() == [1, 5]
    assert rank_positions(10, 3, 4, partial="pad").tolist() == [3, 7, 1]
    assert rank_positions(10, 0, 4, start=8).tolist() == []
    assert rank_positions(10, 0, 2, start=8).tolist() == [8]
    assert worker_positions(np.arange(7), 1, 3).tolist() == [1, 4]


def test_window_keeps_shards_together_and_measures_quality():
    sizes = [100] * 20
    order = global_order(sizes, 3, 0, 200)
    shard = order // 100
    # a window of 200 samples spans at most 3 shards
    for lo in range(0, 2000, 200):
        assert len(set(shard[lo:lo + 200].tolist())) <= 3
    d = adjacent_distances(order)
    assert d.shape == (1999,)
    assert float(np.median(d)) > 10  # neighbours come from far apart
    assert adjacent_distances(np.arange(5)).tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"rank": 4, "world_size": 4}, "`rank` must be < world_size"),
    ({"partial": "wrap"}, "`partial` must be one of"),
    ({"world_size": 0}, "`world_size` must be an int >= 1"),
])
def test_bad_arguments_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EpochPlan((3,), 0, 0, **kwargs)


def test_bad_seed_and_window():
    with pytest.raises(ValueError, match="`window` must be an int >= 1"):
        global_order([3], 0, 0, window=0)
    with pytest.raises(ValueError, match="`seed`"):
        global_order([3], -1, 0)
