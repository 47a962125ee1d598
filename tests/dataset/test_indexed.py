"""The shared iteration of the loaders: order, seeds, epochs, counters, reentrancy."""

from __future__ import annotations

import pickle

import pytest

from dataflow.dataset._base import IndexedDataset, check_choice
from dataflow.errors import DataFlowReentrantError


class Tiny(IndexedDataset):
    def __init__(self, n=6, shuffle=True, seed=None):
        self.n = n
        self._init_iteration(shuffle, seed)

    def __len__(self):
        return self.n

    def _datapoint(self, index):
        return [index]


def _epoch(df):
    return [dp[0] for dp in df]


def test_unshuffled_order_is_file_order():
    df = Tiny(shuffle=False)
    df.reset_state()
    assert _epoch(df) == [0, 1, 2, 3, 4, 5]
    assert _epoch(df) == [0, 1, 2, 3, 4, 5]
    assert len(df) == 6


def test_seed_reproduces_every_epoch_and_epochs_differ():
    a, b = Tiny(n=20, seed=3), Tiny(n=20, seed=3)
    a.reset_state()
    b.reset_state()
    ea = [_epoch(a) for _ in range(3)]
    eb = [_epoch(b) for _ in range(3)]
    assert ea == eb
    assert all(sorted(e) == list(range(20)) for e in ea)
    assert ea[0] != ea[1]
    c = Tiny(n=20, seed=4)
    c.reset_state()
    assert _epoch(c) != ea[0]


def test_counters_and_resume_from_position():
    df = Tiny(n=5, seed=0)
    df.reset_state()
    ref = Tiny(n=5, seed=0)
    ref.reset_state()
    full = _epoch(ref)
    it = iter(df)
    assert [next(it)[0], next(it)[0]] == full[:2]
    state = df.state_dict()
    assert {k: state[k] for k in ("epoch", "pos", "done")} == {"epoch": 0, "pos": 2,
                                                              "done": False}
    it.close()  # an iteration closed early leaves its epoch unfinished where it stood
    assert df.state_dict() == state

    resumed = Tiny(n=5, seed=0)
    resumed.reset_state()
    resumed.load_state_dict(state)
    assert _epoch(resumed) == full[2:]
    assert {k: resumed.state_dict()[k] for k in ("epoch", "pos", "done")} == {
        "epoch": 0, "pos": 5, "done": True}


def test_not_reentrant():
    df = Tiny()
    df.reset_state()
    it = iter(df)
    next(it)
    with pytest.raises(DataFlowReentrantError):
        next(iter(df))
    it.close()
    assert len(_epoch(df)) == 6


def test_picklable_before_reset():
    df = pickle.loads(pickle.dumps(Tiny(n=4, shuffle=False)))
    df.reset_state()
    assert _epoch(df) == [0, 1, 2, 3]


def test_check_choice_message():
    assert check_choice("name", "val", ("train", "val")) == "val"
    with pytest.raises(ValueError, match=r"`name` must be one of 'train', 'val'; got 'tset'"):
        check_choice("name", "tset", ("train", "val"))
