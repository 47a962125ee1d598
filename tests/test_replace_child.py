"""DataFlow.replace_child(old, new): a stage reads another child in the place of one of its
children(), wherever it holds it; refused with a clear error where it cannot."""

from __future__ import annotations

import itertools

import pytest

import dataflow as df
from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.snapshot import SnapshotData
from tests.helpers import epoch


def _plus_100(dp):
    return [dp[0] + 100]


def _list(values):
    return df.DataFromList([[v] for v in values], shuffle=False)


# Each stage kind over one child: (build it over `child`, its epoch over [[10], ..., [15]]).
STAGES = {
    "MapData": (lambda c: df.MapData(c, _plus_100), [[v + 100] for v in range(10, 16)]),
    "MapDataComponent": (lambda c: df.MapDataComponent(c, lambda x: -x, index=0),
                         [[-v] for v in range(10, 16)]),
    "BatchData": (lambda c: df.BatchData(c, 3, use_list=True),
                  [[[10, 11, 12]], [[13, 14, 15]]]),
    "LocallyShuffleData": (lambda c: df.LocallyShuffleData(c, 1, seed=0, finite=True),
                           [[v] for v in range(10, 16)]),
    "CacheData": (lambda c: df.CacheData(c), [[v] for v in range(10, 16)]),
    "FixedSizeData": (lambda c: df.FixedSizeData(c, 4), [[v] for v in range(10, 14)]),
    "MultiThreadMapData": (lambda c: df.MultiThreadMapData(c, 2, _plus_100, strict=True),
                           [[v + 100] for v in range(10, 16)]),
    "MultiProcessMapDataZMQ": (
        lambda c: df.MultiProcessMapDataZMQ(c, 1, _plus_100, strict=True),
        [[v + 100] for v in range(10, 16)]),
}


@pytest.mark.parametrize("kind", sorted(STAGES))
def test_a_stage_reads_the_new_child_in_place_of_the_old(kind):
    build, want = STAGES[kind]
    old, new = _list(range(5)), _list(range(10, 16))
    stage = build(old)
    stage.replace_child(old, new)
    assert stage.children() == [new]
    stage.reset_state()
    try:
        assert epoch(stage) == want
    finally:
        stage.close()


def test_the_process_and_zmq_runners_and_the_mappers_before_a_start_replace_their_child():
    old, new = _list(range(3)), _list(range(10, 13))
    for stage in (df.MultiProcessRunner(old, 4, 2), df.MultiProcessRunnerZMQ(old, 2),
                  df.MultiProcessMapData(old, 2, _plus_100),
                  df.MultiProcessMapAndBatchDataZMQ(old, 2, _plus_100, 2),
                  df.PrefetchData(old, 4, 1)):
        stage.replace_child(old, new)
        assert stage.children() == [new] and stage.ds is new, type(stage).__name__
        stage.close()


def test_a_thread_runner_replaces_the_copy_it_is_given_and_keeps_the_others():
    copies = iter([_list(range(3)), _list(range(3, 6))])
    runner = df.MultiThreadRunner(lambda: next(copies), 4, 2)
    first, second = runner.children()
    new = _list(range(10, 13))
    runner.replace_child(second, new)
    assert runner.children() == [first, new] and runner.ds is first
    runner.replace_child(first, new)
    assert runner.children() == [new, new] and runner.ds is new


def test_several_children_are_replaced_where_they_are():
    a, b, c = _list([1, 2]), _list([3]), _list([7])
    concat = df.ConcatData([a, b, a])
    concat.replace_child(a, c)
    assert concat.children() == [c, b, c]
    concat.reset_state()
    assert epoch(concat) == [[7], [3], [7]]
    join = df.JoinData([a, b])
    join.replace_child(b, c)
    assert join.children() == [a, c]
    mix = df.RandomMixData([a, b])
    mix.replace_child(a, c)
    assert mix.children() == [c, b]


def test_a_mapper_saves_and_resumes_the_state_of_its_new_child():
    """The checkpoints a mapper takes of its child are of the new child: a resume goes on from
    where the new child was, not from the start of the old one."""
    def build():
        return df.MultiThreadMapData(_list(range(10, 20)), 2, _plus_100, strict=True,
                                     buffer_size=2)

    old = _list(range(3))
    stage = df.MultiThreadMapData(old, 2, _plus_100, strict=True, buffer_size=2)
    stage.replace_child(old, _list(range(10, 20)))
    stage.reset_state()
    try:
        first = [dp[0] for dp in itertools.islice(stage, 6)]
        state = stage.state_dict()
    finally:
        stage.close()
    assert first == list(range(110, 116))
    fresh = build()
    fresh.load_state_dict(state)
    fresh.reset_state()
    try:
        assert [dp[0] for dp in fresh] == list(range(116, 120))
    finally:
        fresh.close()


def test_a_flow_keeping_its_child_as_ds_gets_it_by_default():
    class Plain(DataFlow):
        def __init__(self, ds):
            self.ds = ds

        def __iter__(self):
            yield from self.ds

    old, new = _list([1]), _list([2])
    flow = Plain(old)
    flow.replace_child(old, new)
    assert flow.ds is new and flow.children() == [new]


def test_a_flow_that_says_its_children_but_not_how_to_replace_them_is_refused():
    class Pair(DataFlow):
        def __init__(self, a, b):
            self.a, self.b = a, b

        def children(self):
            return [self.a, self.b]

        def __iter__(self):
            yield from itertools.chain(self.a, self.b)

    a, b = _list([1]), _list([2])
    with pytest.raises(NotImplementedError, match=r"Pair cannot replace its child DataFromList: "
                                                  r"it says its children\(\) but not how to "
                                                  r"replace one\. Implement _replace_child"):
        Pair(a, b).replace_child(a, _list([3]))


def test_bad_arguments_name_the_parameter():
    old = _list([1])
    stage = df.MapData(old, _plus_100)
    with pytest.raises(ValueError, match=r"`old` \(DataFromList\) is not a child of MapData, "
                                         r"whose children\(\) are \['DataFromList'\]"):
        stage.replace_child(_list([1]), _list([2]))
    with pytest.raises(TypeError, match=r"`new` must be a DataFlow, got list \[\[2\]\]"):
        stage.replace_child(old, [[2]])
    assert stage.ds is old


def test_a_running_mapper_refuses_and_a_closed_one_accepts():
    old, new = _list(range(4)), _list(range(10, 14))
    stage = df.MultiThreadMapData(old, 2, _plus_100, strict=True)
    stage.reset_state()
    with pytest.raises(RuntimeError, match=r"MultiThreadMapData\.replace_child: its workers "
                                           r"are running"):
        stage.replace_child(old, new)
    assert stage.ds is old
    stage.close()
    stage.replace_child(old, new)
    stage.reset_state()
    try:
        assert epoch(stage) == [[v + 100] for v in range(10, 14)]
    finally:
        stage.close()


def test_a_snapshot_does_not_change_its_keyed_source(tmp_path):
    old = _list(range(3))
    snap = SnapshotData(old, tmp_path)
    with pytest.raises(ValueError, match="SnapshotData cannot replace its source DataFromList: "
                                         "the source is part of the snapshot's key"):
        snap.replace_child(old, _list([5]))
    assert snap.ds is old


def test_a_proxy_subclass_inherits_it():
    class Twice(ProxyDataFlow):
        def __iter__(self):
            for dp in self.ds:
                yield dp
                yield dp

    old, new = _list([1]), _list([2])
    flow = Twice(old)
    flow.replace_child(old, new)
    flow.reset_state()
    assert epoch(flow) == [[2], [2]]
