"""Property tests: random compositions of wrappers against a plain-Python reference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import dataflow as df


def _add(c):
    return lambda x: x + c


def _even(dp):
    return dp[0] % 2 == 0


# each op: (name, parameter strategy)
OPS = st.one_of(
    st.tuples(st.just("map"), st.integers(-5, 5)),
    st.tuples(st.just("filter"), st.just(0)),
    st.tuples(st.just("repeat"), st.integers(0, 3)),
    st.tuples(st.just("repeat_dp"), st.integers(1, 3)),
    st.tuples(st.just("fixed"), st.integers(0, 12)),
    st.tuples(st.just("concat"), st.lists(st.integers(0, 50), max_size=4)),
    st.tuples(st.just("cache"), st.booleans()),
    st.tuples(st.just("local_shuffle"), st.integers(1, 6)),
)


def _apply(flow, ref, op, exact_len, ordered):
    name, p = op
    if name == "map":
        return df.MapDataComponent(flow, _add(p)), [[x[0] + p] for x in ref], exact_len, ordered
    if name == "filter":
        return df.FilterData(flow, _even), [x for x in ref if x[0] % 2 == 0], False, ordered
    if name == "repeat":
        return df.RepeatedData(flow, p), ref * p, exact_len, ordered
    if name == "repeat_dp":
        return df.RepeatedDataPoint(flow, p), [x for x in ref for _ in range(p)], exact_len, ordered
    if name == "fixed":
        if not ref or not ordered:
            return flow, ref, exact_len, ordered
        out = [ref[i % len(ref)] for i in range(p)]
        return df.FixedSizeData(flow, p, keep_state=False), out, True, ordered
    if name == "concat":
        extra = [[v] for v in p]
        return (df.ConcatData([flow, df.DataFromList(extra, shuffle=False)]), ref + extra,
                exact_len, ordered)
    if name == "cache":
        return df.CacheData(flow, shuffle=p, seed=1), ref, exact_len, ordered and not p
    if name == "local_shuffle":
        # epochs mix at the buffer, so only membership (and the length) is kept
        if len(ref) < p or not exact_len:
            return flow, ref, exact_len, ordered
        return df.LocallyShuffleData(flow, p, seed=2, finite=True), ref, exact_len, False
    raise AssertionError(name)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.integers(-100, 100), max_size=15),
    shuffle=st.booleans(),
    ops=st.lists(OPS, max_size=4),
)
def test_random_compositions_match_reference(values, shuffle, ops):
    ref = [[v] for v in values]
    flow = df.DataFromList(ref, shuffle=shuffle, seed=0)
    exact_len, ordered = True, not shuffle
    for op in ops:
        flow, ref, exact_len, ordered = _apply(flow, ref, op, exact_len, ordered)
    flow.reset_state()
    for _ in range(2):  # two epochs: re-iteration gives the same content
        got = list(flow)
        if exact_len:
            assert len(flow) == len(ref)
        if ordered:
            assert got == ref
        elif any(op[0] == "local_shuffle" for op in ops):
            assert {x[0] for x in got} <= {x[0] for x in ref}
            if exact_len:
                assert len(got) == len(ref)
        else:
            assert sorted(got) == sorted(ref)


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(0, 40),
    batch_size=st.integers(1, 8),
    remainder=st.booleans(),
    dict_points=st.booleans(),
)
def test_batch_lengths_and_content(n, batch_size, remainder, dict_points):
    points = [{"x": i, "y": -i} if dict_points else [i, -i] for i in range(n)]
    src = df.DataFromList(points, shuffle=False)
    if not remainder and batch_size > n:
        return
    flow = df.BatchData(src, batch_size, remainder=remainder)
    flow.reset_state()
    batches = list(flow)
    assert len(batches) == len(flow)
    key = "x" if dict_points else 0
    flat = [int(v) for b in batches for v in b[key]]
    expected_n = n if remainder else n - n % batch_size
    assert flat == list(range(expected_n))
    assert all(len(b[key]) == batch_size for b in batches[: n // batch_size])


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 30),
    buffer_size=st.integers(1, 10),
    num_reuse=st.integers(1, 3),
    epochs=st.integers(1, 4),
)
def test_local_shuffle_never_loses_or_duplicates(n, buffer_size, num_reuse, epochs):
    import collections

    flow = df.LocallyShuffleData(df.DataFromList([[i] for i in range(n)], shuffle=False),
                                 buffer_size, num_reuse=num_reuse, seed=0, finite=True)
    flow.reset_state()
    yielded = collections.Counter()
    for _ in range(epochs):
        got = [dp[0] for dp in flow]
        assert len(got) == n * num_reuse
        yielded.update(got)
    buffered = collections.Counter(dp[0] for dp in flow._buffer)
    pending = collections.Counter({flow._current[0]: flow._pending} if flow._pending else {})
    total = epochs * n * num_reuse + sum(buffered.values()) + sum(pending.values())
    pulled = collections.Counter()
    pulled_items = total // num_reuse
    for i in range(pulled_items):
        pulled[i % n] += num_reuse
    assert yielded + buffered + pending == pulled


def _build(values, shuffle, ops):
    ref = [[v] for v in values]
    flow = df.DataFromList(ref, shuffle=shuffle, seed=0)
    exact_len, ordered = True, not shuffle
    for op in ops:
        flow, ref, exact_len, ordered = _apply(flow, ref, op, exact_len, ordered)
    return flow


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(-100, 100), max_size=8),
    shuffle=st.booleans(),
    ops=st.lists(OPS, max_size=3),
)
def test_random_compositions_resume_exactly(values, shuffle, ops):
    from tests.helpers import check_resume

    check_resume(lambda: _build(values, shuffle, ops), epochs=2)
