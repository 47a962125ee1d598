"""Exact resume of every dataset loader: ``check_resume`` at every step over two
epochs, shuffled and not, the counters in the state, and mismatch errors."""

from __future__ import annotations

import json

import pytest

from dataflow.dataset import (
    BSDS500,
    ILSVRC12,
    Caltech101Silhouettes,
    Cifar10,
    Cifar100,
    FashionMnist,
    ILSVRC12Files,
    Mnist,
    Places365Standard,
    SVHNDigit,
    TinyImageNet,
)
from dataflow.dataset._base import IndexedDataset
from dataflow.state import StateMismatchError
from tests.dataset.test_bsds500 import write_bsds
from tests.dataset.test_caltech101 import caltech_dir  # noqa: F401 (fixture)
from tests.dataset.test_cifar import write_cifar10, write_cifar100
from tests.dataset.test_ilsvrc import image_dir, meta_dir, tiny_dir  # noqa: F401 (fixtures)
from tests.dataset.test_mnist import _write_split
from tests.dataset.test_places import places_dir  # noqa: F401 (fixture)
from tests.dataset.test_svhn import write_svhn
from tests.helpers import check_resume


def _mnist(request, cls):
    folder = request.getfixturevalue("tmp_path") / "mnist"
    _write_split(folder, "train", 4, 0)
    return lambda shuffle: cls("train", dir=folder, shuffle=shuffle, seed=1)


def _cifar(request, cls):
    tmp = request.getfixturevalue("tmp_path")
    if cls is Cifar10:
        write_cifar10(tmp, per_batch=1)
    else:
        write_cifar100(tmp, n_train=4)
    return lambda shuffle: cls("train", shuffle=shuffle, dir=tmp, seed=2)


def _svhn(request):
    tmp = request.getfixturevalue("tmp_path")
    write_svhn(tmp, "test", 4, 0)
    return lambda shuffle: SVHNDigit("test", data_dir=tmp, shuffle=shuffle, seed=3)


def _ilsvrc(request, cls):
    d, _ = request.getfixturevalue("image_dir")
    meta = request.getfixturevalue("meta_dir")
    return lambda shuffle: cls(d, "train", meta_dir=meta, shuffle=shuffle, seed=4)


def _tiny(request):
    d, _, _ = request.getfixturevalue("tiny_dir")
    return lambda shuffle: TinyImageNet(d, "train", shuffle=shuffle, seed=5)


def _bsds(request):
    tmp = request.getfixturevalue("tmp_path")
    write_bsds(tmp)
    return lambda shuffle: BSDS500("train", data_dir=tmp, shuffle=shuffle, seed=6)


def _caltech(request):
    folder, _ = request.getfixturevalue("caltech_dir")
    return lambda shuffle: Caltech101Silhouettes("train", shuffle=shuffle, dir=folder, seed=7)


def _places(request):
    d, _ = request.getfixturevalue("places_dir")
    return lambda shuffle: Places365Standard(d, "train", shuffle=shuffle, seed=8)


LOADERS = {
    "mnist": lambda r: _mnist(r, Mnist),
    "fashion_mnist": lambda r: _mnist(r, FashionMnist),
    "cifar10": lambda r: _cifar(r, Cifar10),
    "cifar100": lambda r: _cifar(r, Cifar100),
    "svhn": _svhn,
    "ilsvrc12_files": lambda r: _ilsvrc(r, ILSVRC12Files),
    "ilsvrc12": lambda r: _ilsvrc(r, ILSVRC12),
    "tiny_imagenet": _tiny,
    "bsds500": _bsds,
    "caltech101": _caltech,
    "places365": _places,
}


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_loader_resumes_exactly(request, name):
    make = LOADERS[name](request)
    n = len(make(False))
    plain = check_resume(lambda: make(False), epochs=2)
    assert len(plain) == 2 * n and plain[:n] == plain[n:]
    shuffled = check_resume(lambda: make(True), epochs=2)
    key = [json.dumps(dp, sort_keys=True) for dp in plain[:n]]
    assert sorted(json.dumps(dp, sort_keys=True) for dp in shuffled[:n]) == sorted(key)
    assert sorted(json.dumps(dp, sort_keys=True) for dp in shuffled[n:]) == sorted(key)


class Tiny(IndexedDataset):
    def __init__(self, n=5, shuffle=True, seed=None):
        self.n = n
        self.loaded: list[int] = []
        self._init_iteration(shuffle, seed)

    def __len__(self):
        return self.n

    def _datapoint(self, index):
        self.loaded.append(index)
        return [index]


def test_counters_in_the_state():
    df = Tiny(n=3, shuffle=False)
    assert df.state_dict() == {"type": "Tiny", "size": 3, "shuffle": False, "epoch": -1,
                               "pos": 0, "done": True}
    df.reset_state()
    it = iter(df)
    next(it)
    assert df.state_dict() == {"type": "Tiny", "size": 3, "shuffle": False, "epoch": 0,
                               "pos": 1, "done": False}
    rest = list(it)
    assert rest == [[1], [2]]
    assert df.state_dict() == {"type": "Tiny", "size": 3, "shuffle": False, "epoch": 0,
                               "pos": 3, "done": True}
    it = iter(df)
    next(it)
    it.close()  # an iteration closed early leaves its epoch unfinished where it stood
    assert df.state_dict() == {"type": "Tiny", "size": 3, "shuffle": False, "epoch": 1,
                               "pos": 1, "done": False}
    fresh = Tiny(n=3, shuffle=False)
    fresh.reset_state()
    fresh.load_state_dict(df.state_dict())
    assert [dp[0] for dp in fresh] == [1, 2]  # the rest of that epoch
    assert [dp[0] for dp in fresh] == [0, 1, 2]  # then the next one, from its start
    assert fresh.state_dict()["epoch"] == 2


def test_resume_loads_only_the_rest():
    df = Tiny(n=6, seed=9)
    df.reset_state()
    it = iter(df)
    delivered = [next(it)[0] for _ in range(4)]
    state = json.loads(json.dumps(df.state_dict()))
    rest = [dp[0] for dp in it]
    fresh = Tiny(n=6, seed=9)
    fresh.reset_state()
    fresh.load_state_dict(state)
    assert [dp[0] for dp in fresh] == rest
    assert fresh.loaded == rest and sorted(delivered + rest) == list(range(6))
    # a state saved without a global or explicit seed carries its entropy
    free = Tiny(n=6)
    free.reset_state()
    it = iter(free)
    next(it)
    state = json.loads(json.dumps(free.state_dict()))
    other = Tiny(n=6)
    other.reset_state()
    other.load_state_dict(state)
    assert [dp[0] for dp in other] == [dp[0] for dp in it]


def test_loaders_inside_wrappers():
    """Parents that create a child's iterator before (or without) reading it."""
    from dataflow.wrappers import FixedSizeData, RandomMixData

    check_resume(lambda: RandomMixData([Tiny(n=4, seed=1), Tiny(n=3, shuffle=False)], seed=2),
                 epochs=3)
    check_resume(lambda: FixedSizeData(Tiny(n=5, seed=3), 3, keep_state=False), epochs=3)
    check_resume(lambda: FixedSizeData(Tiny(n=5, seed=3), 3), epochs=3)


def test_a_failed_second_iteration_leaves_the_first_intact():
    df = Tiny(n=4, shuffle=False)
    df.reset_state()
    it = iter(df)
    assert next(it) == [0]
    with pytest.raises(RuntimeError, match="not reentrant"):
        next(iter(df))
    assert [dp[0] for dp in it] == [1, 2, 3]
    assert df.state_dict()["epoch"] == 0 and [dp[0] for dp in df] == [0, 1, 2, 3]


def test_mismatch_names_stage_expected_and_found(request):
    make = _mnist(request, Mnist)
    df = make(True)
    df.reset_state()
    next(iter(df))
    state = df.state_dict()
    with pytest.raises(StateMismatchError, match=r"stage Tiny: expected type 'Tiny', found "
                                                 r"'Mnist'"):
        Tiny(n=4).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"stage Mnist: expected shuffle=False, found "
                                                 r"shuffle=True"):
        make(False).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"stage Tiny: expected size=5, found size=4"):
        Tiny(n=5).load_state_dict({**state, "type": "Tiny"})
    with pytest.raises(StateMismatchError, match=r"expected a position in \[0, 4\], found -1"):
        make(True).load_state_dict({**state, "pos": -1})
    # (the iterator was dropped before its end: the epoch is left unfinished at 1)
    assert (state["epoch"], state["pos"], state["done"]) == (0, 1, False)
