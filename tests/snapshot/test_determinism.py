"""The randomness test: a function drawing from any generator the library seeds is refused,
naming it; a deterministic one passes; the generators' states are left as they were."""

from __future__ import annotations

import random

import numpy as np
import pytest

import dataflow as df
from dataflow.rng import input_rng
from dataflow.snapshot.determinism import NondeterministicError, check_deterministic, fingerprint

INPUTS = [[np.arange(6, dtype=np.uint8).reshape(2, 3), i] for i in range(3)]


def fixed(dp):
    return [dp[0][:, ::-1].copy(), dp[1] * 2]


def legacy_numpy(dp):
    return [dp[0] + np.random.randint(0, 2), dp[1]]


def bound_numpy(dp, _rand=np.random.random_sample):  # bound before: the global generator
    return [dp[0], dp[1] + _rand()]


def python_random(dp):
    return [dp[0], dp[1] + random.random()]


def engine_stream(dp):
    return [dp[0], dp[1] + input_rng().randint(0, 1000)]


def fresh_entropy(dp):
    return [dp[0], np.random.default_rng().random()]


def augmentor(dp):
    return [df.imgaug.Flip(horiz=True, prob=0.5).augment(dp[0]), dp[1]]


@pytest.mark.parametrize("func", [legacy_numpy, bound_numpy, python_random, engine_stream,
                                  fresh_entropy])
def test_every_seeded_generator_is_caught(func):
    with pytest.raises(NondeterministicError, match=rf"`map_func` .*\.{func.__name__} is random"):
        check_deterministic(func, INPUTS)


def test_an_augmentor_is_caught_and_the_message_says_where_to_cut():
    pytest.importorskip("cv2")
    with pytest.raises(NondeterministicError) as e:
        check_deterministic(augmentor, [[np.arange(600, dtype=np.uint8).reshape(10, 20, 3), 0]
                                        for _ in range(3)])
    assert "output[0]" in str(e.value) and "dataflow.snapshot(ds, path)" in str(e.value)


def test_a_deterministic_function_passes_and_the_generators_are_left_alone():
    np.random.seed(5)
    random.seed(5)
    want_np, want_py = np.random.random(), random.random()
    np.random.seed(5)
    random.seed(5)
    outs = check_deterministic(fixed, INPUTS)
    assert [fingerprint(o) for o in outs] == [fingerprint(fixed(x)) for x in INPUTS]
    assert (np.random.random(), random.random()) == (want_np, want_py)
    assert np.random.random_sample.__module__ != "dataflow._global_rng"  # dispatch removed


def test_fingerprint_tells_dtypes_shapes_and_values_apart():
    a = np.zeros((2, 2), np.float32)
    assert fingerprint([a, 1]) == fingerprint((a.copy(), 1))
    assert fingerprint([a]) != fingerprint([a.astype(np.float64)])
    assert fingerprint([a]) != fingerprint([a.reshape(4)])
    assert fingerprint([1]) != fingerprint([1.0]) != fingerprint([True])
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
