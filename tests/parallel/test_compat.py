"""tensorpack-era code runs unchanged: old keyword names, the order of positional arguments, and
tensorpack's own rules (reset_state() once for the ZeroMQ runner, a None result in strict mode)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dataflow import DataFromList
from dataflow.errors import DataFlowError, WorkerError
from dataflow.parallel import (
    MultiProcessMapAndBatchDataZMQ,
    MultiProcessMapDataComponentSharedArray,
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
    (lambda: MultiProcessMapDataComponentSharedArray(_src(), nr_proc=2, map_func=flows.double,
                                                     output_shape=(), output_dtype="int64"),
     ["nr_proc"], {"num_proc": 2}),
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


def _brighten(img):
    """A fixed-shape result (None for the image filled with 3: that datapoint is dropped)."""
    return None if img[0, 0, 0] == 3 else (img + 1).astype(np.uint8)


def _wrong_shape(img):
    return img[:2]


def _images(n, side):
    return [[f"img{i}", np.full((side, side, 3), i, np.uint8)] for i in range(n)]


@pytest.mark.parametrize("side", [4, 1024])  # 1024x1024x3 results travel through shared memory
def test_component_shared_array_maps_one_component_in_order_every_epoch(side):
    dps = _images(8, side)
    flow = MultiProcessMapDataComponentSharedArray(
        DataFromList(dps, shuffle=False), 2, _brighten, (side, side, 3), np.uint8, index=1)
    with flow:
        flow.reset_state()
        assert len(flow) == 8
        for _ in range(2):
            got = list(flow)
            assert [dp[0] for dp in got] == ["img0", "img1", "img2", "img4", "img5", "img6",
                                             "img7"]
            for name, img in got:
                i = int(name[3:])
                assert img.dtype == np.uint8
                np.testing.assert_array_equal(img, np.full((side, side, 3), i + 1, np.uint8))


def test_component_shared_array_names_a_result_of_the_wrong_shape():
    flow = MultiProcessMapDataComponentSharedArray(
        DataFromList(_images(4, 4), shuffle=False), 1, _wrong_shape, (4, 4, 3), "uint8",
        index=1)
    with flow:
        flow.reset_state()
        with pytest.raises(WorkerError, match=r"map_func returned an array of shape "
                                              r"\(2, 4, 3\) and dtype uint8, but "
                                              r"output_shape=\(4, 4, 3\) and "
                                              r"output_dtype=uint8 were given"):
            list(flow)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"output_shape": "big", "output_dtype": "uint8"}, ValueError,
     r"`output_shape` must be a tuple of non-negative ints, got 'big'; e.g. "
     r"output_shape=\(224, 224, 3\)\."),
    ({"output_shape": (2, -1), "output_dtype": "uint8"}, ValueError,
     r"`output_shape` must be a tuple of non-negative ints, got \(2, -1\)"),
    ({"output_shape": (2,), "output_dtype": "pixels"}, TypeError,
     r"`output_dtype` must be a NumPy dtype, got 'pixels'; e.g. output_dtype='uint8'\."),
])
def test_component_shared_array_checks_its_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        MultiProcessMapDataComponentSharedArray(_src(), 1, flows.double, **kwargs)
