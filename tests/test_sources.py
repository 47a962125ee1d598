from __future__ import annotations

import queue

import numpy as np
import pytest

import dataflow as df
from dataflow.errors import DataFlowError
from tests.helpers import check_dataflow


def test_data_from_list_in_order_and_reiterable():
    lst = [[i, str(i)] for i in range(5)]
    got = check_dataflow(df.DataFromList(lst, shuffle=False), expected=lst, epochs=3)
    assert got == [[0, "0"], [1, "1"], [2, "2"], [3, "3"], [4, "4"]]


def test_data_from_list_shuffle_is_a_permutation_and_leaves_list():
    lst = [[i] for i in range(100)]
    flow = df.DataFromList(lst, seed=0)
    flow.reset_state()
    e1 = [dp[0] for dp in flow]
    e2 = [dp[0] for dp in flow]
    assert sorted(e1) == list(range(100)) == sorted(e2)
    assert e1 != list(range(100))
    assert e1 != e2
    assert lst == [[i] for i in range(100)]


def test_data_from_list_dict_points():
    lst = [{"a": i, "b": -i} for i in range(3)]
    assert check_dataflow(df.DataFromList(lst, shuffle=False)) == lst


def test_data_from_list_rejects_iterator():
    with pytest.raises(TypeError, match="`lst` must be a list"):
        df.DataFromList(iter([1, 2]))


def test_data_from_generator_callable_every_epoch():
    flow = df.DataFromGenerator(lambda: ([i] for i in range(3)))
    flow.reset_state()
    assert list(flow) == [[0], [1], [2]]
    assert list(flow) == [[0], [1], [2]]
    with pytest.raises(NotImplementedError, match="no length"):
        len(flow)


def test_data_from_generator_object_only_once():
    flow = df.DataFromGenerator([i] for i in range(2))
    assert list(flow) == [[0], [1]]
    with pytest.raises(DataFlowError, match="can be iterated only once"):
        list(flow)


def test_data_from_generator_works_under_batch():
    # tensorpack raised TypeError here at construction
    flow = df.BatchData(df.DataFromGenerator(lambda: ([i] for i in range(5))), 2)
    assert [b[0].tolist() for b in flow] == [[0, 1], [2, 3]]


def test_data_from_iterable_length():
    assert len(df.DataFromIterable(range(4))) == 4
    flow = df.DataFromIterable([[1], [2]])
    assert check_dataflow(flow) == [[1], [2]]
    with pytest.raises(NotImplementedError):
        len(df.DataFromIterable(iter([1])))


def test_data_from_queue_infinite():
    q = queue.Queue()
    for i in range(3):
        q.put([i])
    it = iter(df.DataFromQueue(q))
    assert [next(it) for _ in range(3)] == [[0], [1], [2]]
    with pytest.raises(NotImplementedError):
        len(df.DataFromQueue(q))


def test_fake_data_shapes_dtypes_domain_and_seed():
    flow = df.FakeData([[2, 3], [4]], size=5, dtype=["float32", "uint8"],
                       domain=[(0, 1), (10, 20)], seed=1)
    flow.reset_state()
    dps = list(flow)
    assert len(dps) == 5 == len(flow)
    for a, b in dps:
        assert a.shape == (2, 3) and a.dtype == np.float32
        assert ((a >= 0) & (a < 1)).all()
        assert b.shape == (4,) and b.dtype == np.uint8
        assert ((b >= 10) & (b < 20)).all()
    again = df.FakeData([[2, 3], [4]], size=5, dtype=["float32", "uint8"],
                        domain=[(0, 1), (10, 20)], seed=1)
    again.reset_state()
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(dps, again))


def test_fake_data_not_random_repeats_same_arrays():
    flow = df.FakeData([[3]], size=4, random=False, seed=0)
    flow.reset_state()
    dps = list(flow)
    assert all(dp[0] is dps[0][0] for dp in dps)
    assert dps[0] is not dps[1]


def test_fake_data_validates():
    with pytest.raises(TypeError, match="`shapes` must be a list of shapes"):
        df.FakeData([3, 4])
    with pytest.raises(ValueError, match="`dtype` has 1 entries for 2 shapes"):
        df.FakeData([[1], [2]], dtype=["uint8"])


@pytest.mark.parametrize("make", [
    lambda: df.DataFromList(list(range(5)), shuffle=True),
    lambda: df.FakeData([[2]], 3),
    lambda: df.LocallyShuffleData(df.DataFromList(list(range(5)), shuffle=False), 2),
    lambda: df.RandomChooseData([df.DataFromList([[1]], shuffle=False)]),
], ids=["DataFromList", "FakeData", "LocallyShuffleData", "RandomChooseData"])
def test_a_random_stage_iterated_before_reset_state_says_so(make):
    flow = make()
    with pytest.raises(df.DataFlowError, match=rf"{type(flow).__name__} was iterated before "
                                               r"reset_state\(\): call reset_state\(\) once"):
        next(iter(flow))
    assert list(df.DataFromList([3, 4], shuffle=False)) == [3, 4]  # no reset needed without


@pytest.mark.parametrize("make", [
    lambda: df.DataFromList(list(range(20)), shuffle=True),
    lambda: df.LocallyShuffleData(df.DataFromList(list(range(20)), shuffle=False), 8,
                                  finite=True),
    lambda: df.RandomChooseData([df.DataFromList([[i] for i in range(20)], shuffle=False),
                                 df.DataFromList([[-i] for i in range(20)], shuffle=False)]),
    lambda: df.RandomMixData([df.DataFromList([[i] for i in range(10)], shuffle=False),
                              df.DataFromList([[-i] for i in range(10)], shuffle=False)]),
], ids=["DataFromList", "LocallyShuffleData", "RandomChooseData", "RandomMixData"])
def test_assigning_rng_after_reset_state_pins_the_stage(make):
    def run(rng_seed):
        flow = make()
        flow.reset_state()
        if rng_seed is not None:
            flow.rng = np.random.RandomState(rng_seed)  # tensorpack users pin one stage so
        return [list(flow) for _ in range(2)]

    assert run(42) == run(42)  # the stage draws from the generator it was given
    assert run(42) != run(43)
    df.set_seed(0)
    derived = run(None)
    df.set_seed(0)
    assert run(None) == derived and run(42) != derived
