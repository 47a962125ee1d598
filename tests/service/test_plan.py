"""The service's epoch plan: elastic, exact, equal counts (pure functions)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.service import plan


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 60), world=st.integers(1, 7), seed=st.integers(0, 50),
       epoch=st.integers(0, 3), shuffle=st.booleans(), partial=st.sampled_from(["drop", "pad"]))
def test_ranks_share_the_epoch_exactly(n, world, seed, epoch, shuffle, partial):
    per_rank = [plan.rank_steps(n, seed, epoch, shuffle, r, world, 0, partial)
                for r in range(world)]
    counts = {len(p) for p, _ in per_rank}
    assert counts == {plan.steps_per_rank(n, world, 0, partial)}  # the same on every rank
    indices = Counter(int(i) for _, idx in per_rank for i in idx)
    if partial == "drop":
        assert sum(indices.values()) == n - n % world and max(indices.values(), default=1) == 1
    else:
        assert set(indices) == set(range(n))  # every index; the first ones repeated to pad
        assert sum(indices.values()) == -(-n // world) * world if n else True
    # the global order does not depend on the world size (elastic determinism)
    _, order = plan.rank_steps(n, seed, epoch, shuffle, 0, 1)
    assert sorted(order.tolist()) == list(range(n))
    if not shuffle:
        assert order.tolist() == list(range(n))
    for r, (pos, idx) in enumerate(per_rank):
        assert [int(order[p % n]) for p in pos] == idx.tolist() if n else True
        assert pos.tolist()[: n // world] == list(range(r, n - n % world, world))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 80), old=st.integers(1, 5), new=st.integers(1, 5),
       steps=st.integers(0, 20), seed=st.integers(0, 9))
def test_a_new_world_size_continues_the_epoch(n, old, new, steps, seed):
    done = min(steps, plan.steps_per_rank(n, old))
    before = [int(i) for r in range(old)
              for i in plan.rank_steps(n, seed, 0, True, r, old)[1][:done]]
    start = plan.consumed(0, done, old)
    after = [int(i) for r in range(new)
             for i in plan.rank_steps(n, seed, 0, True, r, new, start)[1]]
    got = Counter(before + after)
    assert max(got.values(), default=1) == 1  # nothing repeated
    assert len(got) == n - (n - start) % new  # nothing lost but the documented remainder
