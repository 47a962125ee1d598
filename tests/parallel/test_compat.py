"""tensorpack-era code runs unchanged: old keyword names, the order of positional arguments, and
tensorpack's own rules (reset_state() once for the ZeroMQ runner, a None result in strict mode)."""

from __future__ import annotations

import warnings

import pytest

from dataflow.errors import DataFlowError
from dataflow.parallel import (
    MultiProcessMapAndBatchDataZMQ,
    MultiProcessMapDataZMQ,
    MultiProcessRunner,
    MultiProcessRunnerZMQ,
    MultiThreadMapData,
    MultiThreadRunner,
    PrefetchData,
    PrefetchDataZMQ,
)
from tests.parallel import flows


def _src():
    return flows.Range(6)


# (factory with the old keywords, the old names, the attributes they must set)
OLD_KEYWORDS = [
    (lambda: MultiProcessRunner(_src(), nr_prefetch=3, nr_proc=2), ["nr_prefetch", "nr_proc"],
     {"num_prefetch": 3, "num_proc": 2}),
    (lambda: PrefetchData(_src(), nr_prefetch=3, nr_proc=2), ["nr_prefetch", "nr_proc"],
     {"num_prefetch": 3, "num_proc": 2}),
    (lambda: MultiProcessRunnerZMQ(_src(), nr_proc=2), ["nr_proc"], {"num_proc": 2}),
    (lambda: PrefetchDataZMQ(_src(), nr_proc=2), ["nr_proc"], {"num_proc": 2}),
    (lambda: MultiThreadRunner(_src, nr_prefetch=3, nr_thread=2), ["nr_prefetch", "nr_thread"],
     {"num_prefetch": 3, "num_thread": 2}),
    (lambda: MultiThreadMapData(_src(), nr_thread=2, map_func=flows.double), ["nr_thread"],
     {"num_thread": 2}),
    (lambda: MultiProcessMapDataZMQ(_src(), nr_proc=2, map_func=flows.double), ["nr_proc"],
     {"num_proc": 2}),
    (lambda: MultiProcessMapAndBatchDataZMQ(_src(), nr_proc=2, map_func=flows.double,
                                            batch_size=2), ["nr_proc"], {"num_proc": 2}),
]


@pytest.mark.parametrize(("make", "old", "attrs"), OLD_KEYWORDS)
def test_old_keyword_names_work_with_a_warning_naming_the_new_one(make, old, attrs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flow = make()
    try:
        messages = sorted(str(w.message) for w in caught if w.category is DeprecationWarning)
        new = {"nr_prefetch": "num_prefetch", "nr_proc": "num_proc", "nr_thread": "num_thread"}
        assert messages == sorted(
            f"{type(flow).__name__}: `{o}` is deprecated, use `{new[o]}`." for o in old)
        assert {k: getattr(flow, k) for k in attrs} == attrs
    finally:
        flow.close()


def test_old_and_new_name_together_is_an_error():
    with pytest.raises(TypeError, match=r"got both `nr_proc` and `num_proc`; pass only "
                                        r"`num_proc`"):
        MultiProcessRunnerZMQ(_src(), num_proc=2, nr_proc=2)


@pytest.mark.parametrize("cls", [MultiProcessMapDataZMQ, MultiThreadMapData,
                                 MultiProcessMapAndBatchDataZMQ])
def test_swapped_positional_arguments_are_named_as_such(cls):
    args = (_src(), flows.double, 2) + ((4,) if cls is MultiProcessMapAndBatchDataZMQ else ())
    worker = "num_thread" if cls is MultiThreadMapData else "num_proc"
    with pytest.raises(TypeError, match=rf"{cls.__name__} takes \(ds, {worker}, map_func\), but "
                                        rf"got a callable for `{worker}` .*the arguments look "
                                        rf"swapped; write {cls.__name__}\(ds, 2, double\)"):
        cls(*args)


def test_the_zmq_runner_wants_one_reset_state_as_in_tensorpack():
    r = MultiProcessRunnerZMQ(_src(), 1)
    with pytest.raises(DataFlowError, match=r"iterated before reset_state\(\): call "
                                            r"reset_state\(\) once"):
        list(r)
    r.reset_state()
    try:
        assert [dp[0] for dp in r] == list(range(6))
        with pytest.raises(DataFlowError, match=r"reset_state\(\) was called twice"):
            r.reset_state()
    finally:
        r.close()
    r.reset_state()  # after close() it may start again
    assert [dp[0] for dp in r] == list(range(6))
    r.close()
