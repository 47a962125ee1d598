"""Resumable iteration of the parallel mappers: exact for ordered ones (strict or not),
no loss and no repetition for unordered ones; counters only for ``RemoteDataZMQ``. The runners'
resume is tested in ``test_runner.py``."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.base import DataFlow
from dataflow.parallel import (
    MultiProcessMapAndBatchDataZMQ,
    MultiProcessMapDataZMQ,
    MultiThreadMapData,
    RemoteDataZMQ,
)
from dataflow.sources import DataFromList
from dataflow.state import StateMismatchError
from dataflow.wrappers import (
    BatchData,
    FixedSizeData,
    LocallyShuffleData,
    MapData,
    RepeatedData,
)
from tests.helpers import check_resume, to_plain


def times10(dp):
    return [dp[0] * 10, dp[1]]


def times10_drop_thirds(dp):
    """times10, dropping every third input (so that workers hold incomplete batches)."""
    return None if dp[0] % 3 == 0 else [dp[0] * 10, dp[1]]


def jittery(dp):
    """times10 after a short random sleep, so that results finish out of order."""
    time.sleep(random.random() * 0.002)
    return times10(dp)


def drop_odd(dp):
    return None if dp[0] % 2 else times10(dp)


def _src(n=7, shuffle=True, seed=5):
    return DataFromList([[i, float(i)] for i in range(n)], shuffle=shuffle, seed=seed)


def _thread(ds, func=times10, ordered=True, buffer_size=3, strict=True, **kw):
    return MultiThreadMapData(ds, 2, func, buffer_size=buffer_size, strict=strict,
                              ordered=ordered, **kw)


def _proc(ds, func=times10, ordered=True, buffer_size=3, strict=True, **kw):
    return MultiProcessMapDataZMQ(ds, 2, func, buffer_size=buffer_size, strict=strict,
                                  ordered=ordered, **kw)


def _json(state):
    return json.loads(json.dumps(state))


# ---- exact: strict and ordered ----------------------------------------------------------------


@pytest.mark.parametrize("buffer_size", [1, 3, 50])
def test_thread_ordered_strict_resumes_exactly_after_every_datapoint(buffer_size):
    seq = check_resume(lambda: _thread(_src(), jittery, buffer_size=buffer_size), epochs=2)
    assert len(seq) == 14
    assert sorted(dp[0] for dp in seq[:7]) == [0, 10, 20, 30, 40, 50, 60]
    assert seq[:7] != seq[7:]  # the source reshuffles each epoch; resume follows it


def test_process_ordered_strict_resumes_exactly_after_every_datapoint():
    seq = check_resume(lambda: _proc(_src(6), jittery), epochs=2)
    assert sorted(dp[0] for dp in seq[6:]) == [0, 10, 20, 30, 40, 50]


def raise_on_odd(dp):
    if dp[0] % 2:
        raise ValueError(f"odd input {dp[0]}")
    return times10(dp)


@pytest.mark.parametrize("make", [_thread, _proc])
def test_ordered_strict_with_skipped_inputs(make):
    def build():
        return make(_src(8), raise_on_odd, on_error="skip")

    seq = check_resume(build, epochs=2)
    assert sorted(dp[0] for dp in seq[:4]) == [0, 20, 40, 60]
    assert len(seq) == 8
    flow = build()
    flow.reset_state()
    list(flow)
    assert flow.state_dict()["errors"] == {"seen": 8, "skipped": 4, "total": 4}
    flow.close()


def test_a_restored_epoch_goes_on_counting_its_skipped_inputs():
    def build():
        return _thread(_src(40, shuffle=False), raise_on_odd, on_error="skip", max_errors=20,
                       buffer_size=4)

    flow = build()
    flow.reset_state()
    it = iter(flow)
    got = [next(it)[0] for _ in range(5)]  # 0, 20, ..., 80: inputs 0 to 8 (4 skipped)
    state = _json(flow.state_dict())
    it.close()
    flow.close()
    assert got == [0, 20, 40, 60, 80]
    assert state["errors"]["skipped"] >= 4
    fresh = build()
    fresh.reset_state()
    fresh.load_state_dict(state)
    rest = [dp[0] for dp in fresh]
    assert rest == [10 * i for i in range(10, 40, 2)]
    assert fresh.error_policy.skipped == 20  # exactly the odd inputs of the epoch, once each
    fresh.close()


def test_composed_pipeline_resumes_exactly():
    def make():
        mapped = _thread(_src(10, seed=11), jittery, buffer_size=4)
        return MapData(BatchData(mapped, 3, remainder=True), lambda b: [b[0].sum(), len(b[0])])

    seq = check_resume(make, epochs=3)
    assert [dp[1] for dp in seq] == [3, 3, 3, 1] * 3
    assert sum(dp[0] for dp in seq[:4]) == 450


def test_mapper_over_mapper_resumes_exactly():
    check_resume(lambda: _thread(_thread(_src(6), jittery, buffer_size=2), buffer_size=2),
                 epochs=2)


def test_resume_does_not_map_delivered_inputs_again():
    lock = threading.Lock()
    calls: list[int] = []

    def counting(dp):
        with lock:
            calls.append(dp[0])
        return times10(dp)

    ref = _thread(_src(12), counting, buffer_size=4)
    ref.reset_state()
    it = iter(ref)
    first = [next(it)[0] for _ in range(5)]
    state = _json(ref.state_dict())
    it.close()
    ref.close()
    assert state["read"] == 5 and state["pending"] == [] and state["pos"] == 5
    calls.clear()
    fresh = _thread(_src(12), counting, buffer_size=4)
    fresh.reset_state()
    fresh.load_state_dict(state)
    rest = [dp[0] for dp in fresh]
    fresh.close()
    assert len(calls) == 7
    assert sorted(first + rest) == [10 * i for i in range(12)]


# ---- strict and unordered: no loss, no duplicates ---------------------------------------------


def _states_of_a_run(make, epochs=1):
    """(results, states) of an uninterrupted run: states[k] was taken after result k."""
    ref = make()
    ref.reset_state()
    results, states = [], [_json(ref.state_dict())]
    for _ in range(epochs):
        for dp in ref:
            results.append(to_plain(dp))
            states.append(_json(ref.state_dict()))
    ref.close()
    return results, states


@pytest.mark.parametrize("make", [
    lambda: _thread(_src(9), jittery, ordered=False, buffer_size=4),
    lambda: _proc(_src(6), jittery, ordered=False, buffer_size=3),
], ids=["thread", "process"])
def test_unordered_strict_rest_of_epoch_is_every_undelivered_result_once(make):
    results, states = _states_of_a_run(make)
    n = len(results)
    full = sorted(map(repr, results))
    for k, state in enumerate(states):
        assert len(state["pending"]) <= state["read"] and len(state["pending"]) <= 4
        fresh = make()
        fresh.reset_state()
        fresh.load_state_dict(state)
        rest = [to_plain(dp) for dp in fresh]
        later = [to_plain(dp) for dp in fresh]
        fresh.close()
        want = Counter(map(repr, results)) - Counter(map(repr, results[:k]))
        assert Counter(map(repr, rest)) == want, f"after {k} of {n}"
        assert sorted(map(repr, later)) == full


def test_unordered_state_lists_the_inputs_in_flight():
    release = threading.Event()

    def slow_on_zero(dp):
        if dp[0] == 0:
            release.wait(5)
        return times10(dp)

    m = _thread(_src(10, shuffle=False), slow_on_zero, ordered=False, buffer_size=4)
    m.reset_state()
    it = iter(m)
    got = [next(it)[0] for _ in range(6)]
    state = _json(m.state_dict())
    release.set()
    it.close()
    m.close()
    assert sorted(got) == [10, 20, 30, 40, 50, 60]
    # input 0 is still in flight; everything read after it, except what was delivered, too
    assert state["pending"][0] == 0 and state["pos"] == 6
    assert state["read"] - len(state["pending"]) == 6
    fresh = _thread(_src(10, shuffle=False), times10, ordered=False, buffer_size=4)
    fresh.reset_state()
    fresh.load_state_dict(state)
    assert sorted(dp[0] for dp in fresh) == [0, 70, 80, 90]
    fresh.close()


# ---- states ------------------------------------------------------------------------------------


def test_strict_state_layout():
    m = _thread(_src(5, shuffle=False), buffer_size=2)
    m.reset_state()
    state = m.state_dict()
    # the inputs' seed: fresh entropy (no seed anywhere), kept so that a restore maps alike
    assert state.pop("seed")["spawn_key"] == [3, 1, 0]
    assert state == {
        "type": "MultiThreadMapData", "strict": True, "ordered": True, "epoch": -1, "pos": 0,
        "done": True, "size": 5, "child_pos": 0, "read": 0, "pending": [],
        "child": {"type": "DataFromList", "size": 5, "epoch": -1, "pos": 0, "done": True},
    }
    it = iter(m)
    next(it)
    next(it)
    state = m.state_dict()
    assert (state["epoch"], state["pos"], state["done"], state["read"], state["pending"]) == (
        0, 2, False, 2, [])
    # the child's state saved before reading position child_pos (<= 2)
    assert state["child_pos"] in (0, 1, 2)
    assert state["child"] == {"type": "DataFromList", "size": 5, "epoch": 0,
                              "pos": state["child_pos"], "done": False}
    it.close()  # a closed iterator leaves its epoch unfinished: the state does not move
    after = m.state_dict()
    assert (after["epoch"], after["pos"], after["done"], after["read"], after["pending"]) == (
        0, 2, False, 2, [])
    m.close()


def test_resume_reads_the_pass_again_only_from_a_recent_checkpoint():
    lock = threading.Lock()
    reads: list[int] = []

    def count_read(dp):
        with lock:
            reads.append(dp[0])
        return dp

    def make():
        return _thread(MapData(_src(400, shuffle=False), count_read), jittery, buffer_size=8)

    ref = make()
    ref.reset_state()
    it = iter(ref)
    first = [next(it)[0] for _ in range(300)]
    state = _json(ref.state_dict())
    it.close()
    ref.close()
    assert first == [10 * i for i in range(300)]
    assert 100 <= state["child_pos"] <= 300 == state["read"]
    reads.clear()
    fresh = make()
    fresh.reset_state()
    fresh.load_state_dict(state)
    assert [dp[0] for dp in fresh] == [10 * i for i in range(300, 400)]
    fresh.close()
    assert reads == list(range(state["child_pos"], 400))


def test_mismatch_errors_name_stage_expected_and_found():
    m = _thread(_src(7))
    m.reset_state()
    state = _json(m.state_dict())
    m.close()
    cases = [
        (_thread(_src(9)), r"stage MultiThreadMapData: expected size=9, found size=7"),
        (_thread(_src(7), ordered=False), r"stage MultiThreadMapData: expected ordered=False, "
                                          r"found ordered=True"),
        (_thread(_src(7), strict=False), r"expected strict=False, found strict=True"),
        (_proc(_src(7)), r"expected type 'MultiProcessMapDataZMQ', found 'MultiThreadMapData'"),
        (BatchData(_thread(_src(7)), 2), r"stage BatchData: expected type 'BatchData', found "
                                         r"'MultiThreadMapData'"),
    ]
    for flow, match in cases:
        with pytest.raises(StateMismatchError, match=match):
            flow.load_state_dict(state)
        flow.close()
    bad = dict(state, read=2, pending=[3])
    with pytest.raises(StateMismatchError, match=r"expected child_pos <= read .* found "
                                                 r"child_pos=0, read=2, pending=\[3\]"):
        _thread(_src(7)).load_state_dict(bad)


class Numbers(DataFlow):
    """A user-defined flow without a length (it gets the replaying state)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield [i, float(i)]


def test_a_pass_shorter_than_the_state_is_a_mismatch():
    ref = _thread(Numbers(8), buffer_size=2)
    ref.reset_state()
    it = iter(ref)
    [next(it) for _ in range(6)]
    state = _json(ref.state_dict())
    it.close()
    ref.close()
    assert (state["size"], state["read"]) == (None, 6)
    short = _thread(Numbers(4), buffer_size=2)
    short.reset_state()
    short.load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"expected a pass of at least 6 inputs .* "
                                                 r"found 4"):
        list(short)
    short.close()


# ---- weaker contracts: non-strict mappers, runners, receivers ---------------------------------


@pytest.mark.parametrize("backend", [_thread, _proc])
def test_non_strict_ordered_stream_resumes_exactly(backend):
    """The endless stream continues exactly, across passes and __iter__ calls."""
    seq = check_resume(lambda: backend(_src(5), jittery, strict=False, buffer_size=3),
                       epochs=3, limit=4)
    assert len(seq) == 12
    assert sorted(dp[0] for dp in seq[:5]) == [0, 10, 20, 30, 40]


def test_non_strict_unordered_stream_delivers_every_input_exactly_once():
    def make():
        return _thread(_src(1000, shuffle=False), jittery, ordered=False, strict=False,
                       buffer_size=4)

    ref = make()
    ref.reset_state()
    it = iter(ref)
    first = [next(it)[0] // 10 for _ in range(30)]
    state = _json(ref.state_dict())
    it.close()
    ref.close()
    assert len(state["pending"]) <= 4 and state["read"] <= 34
    fresh = make()
    fresh.reset_state()
    fresh.load_state_dict(state)
    it = iter(fresh)
    rest = [next(it)[0] // 10 for _ in range(70)]
    it.close()
    fresh.close()
    got = first + rest
    # no duplicates; at most buffer_size inputs in flight, so all but 4 of the first 104
    assert len(set(got)) == 100 and max(got) < 104
    assert set(range(60)) <= set(got)


def test_map_and_batch_state_keeps_the_batches_not_yet_yielded():
    def make():
        return MultiProcessMapAndBatchDataZMQ(_src(200, shuffle=False), 2, times10, 4)

    ref = make()
    ref.reset_state()
    it = iter(ref)
    first = [next(it) for _ in range(3)]
    state = _json(ref.state_dict())
    it.close()
    ref.close()
    assert state["batch_size"] == 4 and state["pos"] == 3
    fresh = make()
    fresh.reset_state()
    fresh.load_state_dict(state)
    it = iter(fresh)
    rest = [next(it) for _ in range(3)]
    it.close()
    fresh.close()
    seen = [int(x) for b in first + rest for x in b[0]]
    assert len(seen) == 24 and len(set(seen)) == 24  # nothing repeated
    assert all(b[0].shape == (4,) for b in rest)
    with pytest.raises(StateMismatchError, match=r"expected batch_size=8, found batch_size=4"):
        MultiProcessMapAndBatchDataZMQ(_src(40), 2, times10, 8).load_state_dict(state)


def test_remote_receiver_saves_its_counters_only():
    r = RemoteDataZMQ("ipc:///nonexistent-a", "ipc:///nonexistent-b")
    r.cnt1, r.cnt2, r.dropped = 3, 4, 5
    state = _json(r.state_dict())
    assert state == {"type": "RemoteDataZMQ", "num_addrs": 2, "cnt1": 3, "cnt2": 4, "dropped": 5}
    other = RemoteDataZMQ("ipc:///nonexistent-a", "ipc:///nonexistent-b")
    other.load_state_dict(state)
    assert (other.cnt1, other.cnt2, other.dropped) == (3, 4, 5)
    with pytest.raises(StateMismatchError, match=r"expected num_addrs=1, found num_addrs=2"):
        RemoteDataZMQ("ipc:///nonexistent-a").load_state_dict(state)


# ---- properties and edge cases ----------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 14), buffer_size=st.integers(1, 5), ordered=st.booleans(),
       drop=st.booleans(), data=st.data())
def test_strict_resume_property(n, buffer_size, ordered, drop, data):
    func = raise_on_odd if drop else jittery

    def make():
        return _thread(_src(n, seed=n), func, ordered=ordered, buffer_size=buffer_size,
                       on_error="skip" if drop else "raise")

    results, states = _states_of_a_run(make, epochs=2)
    k = data.draw(st.integers(0, len(results)))
    per_epoch = len(results) // 2
    fresh = make()
    fresh.reset_state()
    fresh.load_state_dict(states[k])
    rest: list = []
    calls = 0
    while len(rest) < len(results) - k and calls < 3:  # the rest of the epoch, then the next
        calls += 1
        rest += [to_plain(dp) for dp in fresh]
    fresh.close()
    assert states[k]["pos"] == (k if k <= per_epoch else k - per_epoch)
    if ordered:
        assert rest == results[k:]
    else:
        assert sorted(map(repr, rest)) == sorted(map(repr, results[k:]))


def test_non_strict_state_loaded_before_reset_state():
    def make():
        return _thread(_src(9), strict=False, buffer_size=2)

    ref = make()
    ref.reset_state()
    it = iter(ref)
    first = [next(it) for _ in range(4)]
    state = _json(ref.state_dict())
    rest_ref = [next(it) for _ in range(10)]
    it.close()
    ref.close()
    fresh = make()
    fresh.load_state_dict(state)  # no reset_state() yet: iterating starts the workers
    it = iter(fresh)
    rest = [next(it) for _ in range(10)]
    it.close()
    fresh.close()
    assert len(first) == 4 and to_plain(rest) == to_plain(rest_ref)


class NoState(DataFlow):
    """A flow that says it cannot save its state."""

    def __iter__(self):
        yield from ([i, 0.0] for i in range(5))

    def state_dict(self):
        raise NotImplementedError("NoState has no state")

    def load_state_dict(self, state):
        raise NotImplementedError("NoState has no state")


@pytest.mark.parametrize("strict", [True, False])
def test_child_without_state_iterates_but_cannot_save(strict):
    m = _thread(NoState(), strict=strict, buffer_size=2)
    m.reset_state()
    it = iter(m)
    got = [next(it)[0] for _ in range(5)]
    with pytest.raises(NotImplementedError, match=r"MultiThreadMapData cannot save its "
                                                  r"iteration state: its child NoState"):
        m.state_dict()
    it.close()
    m.close()
    assert got == [0, 10, 20, 30, 40]


@pytest.mark.parametrize("make", [
    lambda: RepeatedData(_thread(_src(5), jittery, buffer_size=2), 2),
    lambda: _thread(LocallyShuffleData(_src(6), 3, seed=1, finite=True), jittery, buffer_size=2),
    lambda: _thread(BatchData(_src(9), 2, remainder=True), lambda b: [b[0].sum(), len(b[0])],
                    buffer_size=3),
], ids=["repeated", "local-shuffle-child", "over-batches"])
def test_more_compositions_resume_exactly(make):
    check_resume(make, epochs=2)


def test_non_strict_over_a_buffering_child_resumes_exactly():
    check_resume(lambda: _thread(LocallyShuffleData(_src(5), 4, seed=2, finite=True), jittery,
                                 strict=False, buffer_size=2), epochs=3, limit=4)


def test_child_that_continues_its_own_child_across_epochs():
    # FixedSizeData(keep_state=True) continues the list's epoch in the mapper's next epoch: the
    # state saved at the end of an epoch must not end the list's epoch too
    check_resume(lambda: _thread(FixedSizeData(_src(5), 3), jittery, buffer_size=2), epochs=4)


def test_state_saved_between_epochs():
    def make():
        return _thread(FixedSizeData(_src(5), 3), jittery, buffer_size=2)

    ref = make()
    ref.reset_state()
    states, epochs = [], []
    for _ in range(4):
        epochs.append([to_plain(dp) for dp in ref])
        states.append(_json(ref.state_dict()))
    ref.close()
    assert states[0]["done"] is True and all(len(e) == 3 for e in epochs)
    for i in range(3):
        fresh = make()
        fresh.reset_state()
        fresh.load_state_dict(states[i])
        got = [[to_plain(dp) for dp in fresh] for _ in range(3 - i)]
        fresh.close()
        assert got == epochs[i + 1:], f"after epoch {i}"


def test_map_and_batch_restore_loses_nothing_held_in_incomplete_batches():
    # one worker: inputs are answered in dispatch order, so what is still in flight is always
    # among the last buffer_size inputs (with several workers an incomplete batch may lag)
    def make():
        return MultiProcessMapAndBatchDataZMQ(_src(300, shuffle=False), 1, times10_drop_thirds,
                                              4)

    ref = make()
    ref.reset_state()
    it = iter(ref)
    first = [next(it) for _ in range(3)]
    state = _json(ref.state_dict())
    it.close()
    ref.close()
    fresh = make()
    fresh.reset_state()
    fresh.load_state_dict(state)
    it = iter(fresh)
    rest = [next(it) for _ in range(40)]
    it.close()
    fresh.close()
    seen = [int(x) // 10 for b in first + rest for x in b[0]]
    assert len(seen) == 172 and len(set(seen)) == 172  # nothing repeated
    assert all(v % 3 for v in seen)
    # at most buffer_size (40) inputs are in flight: every kept input before them was delivered
    top = max(seen) - 40
    assert {v for v in range(top) if v % 3} <= set(seen)


def test_map_and_batch_buffer_must_cover_the_incomplete_batches():
    with pytest.raises(ValueError, match=r"at least \(num_proc \+ 1\) \* batch_size = 12"):
        MultiProcessMapAndBatchDataZMQ(_src(40), 2, times10, 4, buffer_size=8)
    assert MultiProcessMapAndBatchDataZMQ(_src(40), 12, times10, 4).buffer_size == 52
