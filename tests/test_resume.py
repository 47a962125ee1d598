"""Exact resume of sources and wrappers: ``check_resume`` at every step."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dataflow as df
from dataflow.state import StateMismatchError, decode_items, encode_items
from tests.helpers import check_resume, to_plain


def _lst(n=7, shuffle=False, seed=3):
    return df.DataFromList([[i, float(i)] for i in range(n)], shuffle=shuffle, seed=seed)


@pytest.mark.parametrize("shuffle", [False, True])
def test_data_from_list(shuffle):
    seq = check_resume(lambda: _lst(shuffle=shuffle), epochs=3)
    assert len(seq) == 21


def test_data_from_list_without_seed_saves_its_entropy():
    flow = df.DataFromList([[i] for i in range(20)], shuffle=True)
    flow.reset_state()
    it = iter(flow)
    [next(it) for _ in range(5)]
    state = json.loads(json.dumps(flow.state_dict()))
    rest = [dp[0] for dp in it]
    other = df.DataFromList([[i] for i in range(20)], shuffle=True)
    other.reset_state()
    other.load_state_dict(state)
    assert [dp[0] for dp in other] == rest


def test_fake_data():
    check_resume(lambda: df.FakeData([[2], [3]], size=5, seed=1), epochs=2)
    check_resume(lambda: df.FakeData([[2]], size=4, random=False, seed=1), epochs=2)


def test_generator_and_iterable_replay():
    check_resume(lambda: df.DataFromGenerator(lambda: ([i] for i in range(5))), epochs=2)
    check_resume(lambda: df.DataFromIterable([[i] for i in range(4)]), epochs=2)


def test_user_defined_flow_gets_replaying_state():
    class Squares(df.DataFlow):
        def __iter__(self):
            for i in range(5):
                yield [i * i]

    class Plus(df.ProxyDataFlow):
        def __iter__(self):
            for dp in self.ds:
                yield [dp[0] + 1]

    check_resume(Squares, epochs=2)
    check_resume(lambda: Plus(_lst(6, shuffle=True)), epochs=3)
    assert Squares().state_dict() == {"type": "Squares", "mode": "replay", "epoch": -1, "pos": 0,
                                      "done": True, "child_start": None}


def test_mismatch_errors_name_stage_expected_and_found():
    flow = _lst(7)
    flow.reset_state()
    state = flow.state_dict()
    with pytest.raises(StateMismatchError, match=r"stage DataFromList: expected size=5, found "
                                                 r"size=7"):
        _lst(5).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"stage BatchData: expected type 'BatchData', "
                                                 r"found 'DataFromList'"):
        df.BatchData(_lst(7), 2).load_state_dict(state)
    with pytest.raises(ValueError, match="expected a dict"):
        flow.load_state_dict([1, 2])


def test_encode_items_round_trip():
    items = [[np.arange(6, dtype=np.uint8).reshape(2, 3), 1, "a", b"b"], {"k": 2.5}]
    back = decode_items(json.loads(json.dumps(encode_items(items))))
    assert back[0][0].tolist() == [[0, 1, 2], [3, 4, 5]] and back[0][0].dtype == np.uint8
    assert back[0][1:] == [1, "a", b"b"] and back[1] == {"k": 2.5}


def _arr(n=9):
    return df.DataFromList([[np.full(2, i, np.int64), i] for i in range(n)], shuffle=False)


def _times10(x):
    return x * 10


def _odd(dp):
    return dp[1] % 2 == 1


def _even_or_none(dp):
    return None if dp[1] % 3 == 0 else [dp[1], -dp[1]]


PIPELINES = {
    "map": lambda: df.MapData(_arr(), _even_or_none),
    "map_component": lambda: df.MapDataComponent(_arr(), _times10, index=1),
    "filter": lambda: df.FilterData(_arr(), _odd),
    "select": lambda: df.SelectComponent(_arr(), [1]),
    "batch": lambda: df.BatchData(_arr(), 2),
    "batch_remainder": lambda: df.BatchData(_arr(), 4, remainder=True),
    "batch_by_shape": lambda: df.BatchDataByShape(
        df.DataFromList([[np.zeros(i % 3 + 1), i] for i in range(11)], shuffle=False), 2, 0),
    "repeat": lambda: df.RepeatedData(_lst(4, shuffle=True), 3),
    "repeat_dp": lambda: df.RepeatedDataPoint(_lst(4, shuffle=True), 3),
    "fixed_keep": lambda: df.FixedSizeData(_lst(5), 3),
    "fixed_restart": lambda: df.FixedSizeData(_lst(5, shuffle=True), 3, keep_state=False),
    "concat": lambda: df.ConcatData([_lst(3), _lst(0), _lst(4, shuffle=True)]),
    "join": lambda: df.JoinData([_lst(5), df.MapDataComponent(_lst(4, shuffle=True), _times10)]),
    "random_choose": lambda: df.RandomChooseData([_lst(4), (_lst(6, shuffle=True))], seed=5),
    "random_mix": lambda: df.RandomMixData([_lst(3), _lst(5, shuffle=True)], seed=5),
    "local_shuffle": lambda: df.LocallyShuffleData(_lst(6), 3, seed=2, finite=True),
    "local_shuffle_reuse": lambda: df.LocallyShuffleData(_arr(5), 4, num_reuse=2, seed=2,
                                                         finite=True),
    "cache": lambda: df.CacheData(_lst(5, shuffle=True)),
    "cache_shuffle": lambda: df.CacheData(_lst(5), shuffle=True, seed=1),
    "print": lambda: df.PrintData(_lst(4), num=10, file=__import__("io").StringIO()),
    "composed": lambda: df.BatchData(
        df.LocallyShuffleData(
            df.ConcatData([df.MapDataComponent(_lst(5, shuffle=True), _times10), _lst(3)]),
            4, seed=1, finite=True),
        3, remainder=True),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_wrappers_resume_exactly(name):
    seq = check_resume(PIPELINES[name], epochs=3)
    assert len(seq) > 0


def test_repeat_forever_resumes():
    check_resume(lambda: df.RepeatedData(_lst(3, shuffle=True), -1), epochs=1, limit=10)


@pytest.mark.parametrize("num_reuse", [1, 2])
def test_endless_local_shuffle_resumes_anywhere_in_its_stream(num_reuse):
    # the default, as in tensorpack: one iteration runs past len(); iterations of 9 taken by
    # islice and closed continue the same stream
    seq = check_resume(lambda: df.LocallyShuffleData(_lst(6), 3, num_reuse=num_reuse, seed=2),
                       epochs=3, limit=9)
    finite = df.LocallyShuffleData(_lst(6), 3, num_reuse=num_reuse, seed=2, finite=True)
    finite.reset_state()
    assert seq == [to_plain(dp) for _ in range(5) for dp in finite][:27]  # epochs back to back


def test_state_is_small_for_non_buffering_wrappers():
    flow = df.BatchData(df.MapDataComponent(_lst(1000, shuffle=True), _times10), 10)
    flow.reset_state()
    it = iter(flow)
    next(it)
    assert len(json.dumps(flow.state_dict())) < 400


class _Squares(df.DataFlow):
    def __len__(self):
        return 4

    def __iter__(self):
        for i in range(4):
            yield [i * i]


@pytest.mark.parametrize("name", ["mix_user", "fixed_user", "fixed_gen", "mix_iterable",
                                  "concat_user"])
def test_children_begin_their_epoch_when_iterated(name):
    """Parents that create child iterators up front (or never pull from one) resume exactly."""
    make = {
        "mix_user": lambda: df.RandomMixData([_Squares(), _lst(2)], seed=5),
        "fixed_user": lambda: df.FixedSizeData(_Squares(), 3, keep_state=False),
        "fixed_gen": lambda: df.FixedSizeData(
            df.MapDataComponent(df.DataFromGenerator(lambda: ([i] for i in range(4))), _times10),
            3, keep_state=False),
        "mix_iterable": lambda: df.RandomMixData(
            [df.DataFromIterable([[i] for i in range(3)]), _lst(2, shuffle=True)], seed=1),
        "concat_user": lambda: df.JoinData([df.ConcatData([_Squares(), _lst(2)]), _lst(5)]),
    }[name]
    check_resume(make, epochs=3)


def test_a_break_saves_the_position_of_the_loop():
    """A state saved after a ``break`` resumes at the next datapoint; in the same process the
    next ``for`` loop still starts a new epoch (tensorpack's behaviour)."""
    a = df.BatchData(_lst(6), 2)
    a.reset_state()
    for step, _batch in enumerate(a):
        if step == 0:
            break
    state = a.state_dict()
    assert state["child"] == {"type": "DataFromList", "size": 6, "epoch": 0, "pos": 2,
                              "done": False}
    b = df.BatchData(_lst(6), 2)
    b.reset_state()
    b.load_state_dict(state)
    assert [x[0].tolist() for x in b] == [[2, 3], [4, 5]]
    assert [x[0].tolist() for x in a] == [[0, 1], [2, 3], [4, 5]]


def test_restore_between_epochs_keeps_a_nested_keep_state_child_going():
    def make():
        return df.ConcatData([df.FixedSizeData(_lst(5), 3)])

    ref = make()
    ref.reset_state()
    list(ref)
    state = json.loads(json.dumps(ref.state_dict()))
    want = [dp[0] for dp in ref]
    fresh = make()
    fresh.reset_state()
    fresh.load_state_dict(state)
    assert [dp[0] for dp in fresh] == want == [3, 4, 0]
    check_resume(make, epochs=4)


def test_a_batch_state_is_refused_by_another_batch_size_or_remainder():
    saved = df.BatchData(_lst(8), 4)
    saved.reset_state()
    next(iter(saved))
    state = json.loads(json.dumps(saved.state_dict()))
    assert {k: state[k] for k in ("type", "batch_size", "remainder")} == {
        "type": "BatchData", "batch_size": 4, "remainder": False}
    with pytest.raises(StateMismatchError, match=r"^state for stage BatchData: expected "
                       r"batch_size=2, found batch_size=4; the state was saved from another "
                       r"pipeline or dataset\.$"):
        df.BatchData(_lst(8), 2).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"expected remainder=True, found "
                       r"remainder=False"):
        df.BatchData(_lst(8), 4, remainder=True).load_state_dict(state)
    old = {"type": "BatchData", "child": state["child"]}  # saved before settings were kept
    other = df.BatchData(_lst(8), 4)
    other.reset_state()
    other.load_state_dict(old)
    assert [b[0].tolist() for b in other] == [[4, 5, 6, 7]]
