"""Exact resume of every stage that draws randomness, with and without a seed, on every back
end, from a state saved at any position or right after a ``break``.

Without a seed (no ``seed=``, no ``set_seed``), a stage draws fresh OS entropy when it is reset:
a restored pipeline was reset in another process and drew other entropy, so the state must
carry what the saved run drew. The reference is the saved pipeline's own uninterrupted run.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dataflow as df
from dataflow import imgaug
from tests.helpers import to_plain

N = 12


def _images(seed=None):
    """Small images with their index, in a random order (``seed`` None: fresh entropy)."""
    items = [[np.full((4, 6, 3), i * 10, np.uint8), i] for i in range(N)]
    return df.DataFromList(items, shuffle=True, seed=seed)


def _augs():
    return [imgaug.Flip(horiz=True), imgaug.Brightness(40)]


_AUGS = _augs()


def augment(dp):
    """A random map as a user writes one: augmentors and the global generators."""
    img, label = dp
    img = imgaug.AugmentorList(_AUGS).augment(img)
    noise = np.random.randint(0, 3, size=img.shape[:2]).astype(np.uint8)
    return [img + noise[..., None], label + random.random()]


def _mapper(kind, seed):
    def make():
        src = _images(seed)
        if kind == "thread":
            return df.MultiThreadMapData(src, 2, augment, buffer_size=4, strict=True, ordered=True,
                                         seed=seed)
        if kind == "process":
            return df.MultiProcessMapDataZMQ(src, 2, augment, buffer_size=4, strict=True,
                                             ordered=True, seed=seed)
        if kind == "auto":
            return df.ParallelMapData(src, "auto", augment, buffer_size=4, strict=True,
                                      ordered=True, seed=seed)
        raise AssertionError(kind)

    return make


def _stage(name, seed):
    """A pipeline whose random draws come from stage ``name``."""
    return {
        "list": lambda: _images(seed),
        "fake": lambda: df.FakeData([[2, 3], [1]], size=N, seed=seed),
        "local_shuffle": lambda: df.LocallyShuffleData(_images(seed), 5, seed=seed,
                                                       finite=True),
        "local_shuffle_endless": lambda: df.LocallyShuffleData(_images(seed), 5, seed=seed),
        "random_choose": lambda: df.RandomChooseData([_images(seed), _images(seed)],
                                                     seed=seed),
        "random_mix": lambda: df.RandomMixData([_images(seed), _images(seed)], seed=seed),
        "cache": lambda: df.CacheData(_images(seed), shuffle=True, seed=seed),
        "augment": lambda: df.AugmentImageComponent(_images(seed), _augs(), index=0),
        "map_thread": _mapper("thread", seed),
        "map_process": _mapper("process", seed),
        "map_auto": _mapper("auto", seed),
        "batch_over_map": lambda: df.BatchData(_mapper("thread", seed)(), 3),
    }[name]


#: stages whose iteration does not end (the test takes ``N`` datapoints per loop)
ENDLESS = {"local_shuffle_endless"}


def _take(ds, k, limit):
    """The first ``k`` datapoints of ``ds`` over ``for`` loops of at most ``limit`` each; the
    last loop ``break``s right after the ``k``-th."""
    got = []
    for _ in range(4):
        for n, dp in enumerate(ds, 1):
            got.append(to_plain(dp))
            if len(got) == k or (limit is not None and n >= limit):
                break
        if len(got) >= k:
            break
    return got


def _restore(make, state):
    ds = make()
    ds.reset_state()
    ds.load_state_dict(json.loads(json.dumps(state)))
    return ds


def _check(make, total, at, limit, breaks):
    """Save a state after datapoint ``1 + at % (n - 1)`` of a run of ``n = total`` datapoints
    (``total`` None: one run of a stage that stops by itself), with or without a ``break``, and
    check that it resumes exactly."""
    saved = make()
    saved.reset_state()
    start = saved.state_dict()
    ref = _restore(make, start)  # the saved pipeline's own uninterrupted run
    whole = _take(ref, total or 10 * N, limit)
    ref.close()
    if total is not None:
        assert len(whole) == total
    k = 1 + at % (len(whole) - 1)
    if breaks:
        head = _take(saved, k, limit)
    else:  # a state taken between two datapoints of a loop that goes on
        head, it = [], None
        while len(head) < k:
            it = iter(saved)
            for n, dp in enumerate(it, 1):
                head.append(to_plain(dp))
                if len(head) == k or (limit is not None and n >= limit):
                    break
            # (a loop cut by `limit` stands for a loop of an endless stage that goes on)
    state = saved.state_dict()
    it = None  # (the open loop of a state taken mid-loop ends here)
    saved.close()
    assert head == whole[:k]
    rest_flow = _restore(make, state)
    rest = _take(rest_flow, len(whole) - k, limit)
    rest_flow.close()
    assert rest == whole[k:], f"resume at datapoint {k} differs"


FAST = ["list", "fake", "local_shuffle", "local_shuffle_endless", "random_choose",
        "random_mix", "cache", "augment", "map_thread", "batch_over_map"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(FAST), seeded=st.booleans(), breaks=st.booleans(),
       data=st.data())
def test_random_stages_resume_exactly(name, seeded, breaks, data):
    make = _stage(name, 7 if seeded else None)
    limit = N if name in ENDLESS else None
    total = {"batch_over_map": 2 * (N // 3), "random_choose": None}.get(name, 2 * N)
    _check(make, total, data.draw(st.integers(0, 10**6), label="at"), limit, breaks)


@pytest.mark.parametrize("seeded", [False, True])
@pytest.mark.parametrize("breaks", [False, True])
@pytest.mark.parametrize("kind", ["map_process", "map_auto"])
def test_process_mappers_resume_exactly(kind, breaks, seeded):
    for at in (0, 4, N - 1, N + 6):
        _check(_stage(kind, 7 if seeded else None), 2 * N, at, None, breaks)


def test_an_unseeded_mapper_saves_the_entropy_it_drew():
    a, b = _mapper("thread", None)(), _mapper("thread", None)()
    a.reset_state()
    b.reset_state()
    sa, sb = a.state_dict()["seed"], b.state_dict()["seed"]
    assert sa != sb  # fresh entropy each time
    b.load_state_dict(a.state_dict())
    assert b.state_dict()["seed"] == sa
    assert [to_plain(dp) for dp in a] == [to_plain(dp) for dp in b]
    a.close()
    b.close()
