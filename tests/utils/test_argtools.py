"""dataflow.utils.argtools: shape2d and the memoizing decorators."""

from __future__ import annotations

import pytest

from dataflow.utils import argtools, shape2d


def test_shape2d():
    assert argtools.shape2d(3) == [3, 3]
    assert argtools.shape2d((2, 5)) == [2, 5]
    assert argtools.shape2d([4, 1]) == [4, 1]
    assert shape2d is argtools.shape2d
    for bad in ("ab", (1, 2, 3), 2.5, True):
        with pytest.raises(ValueError, match="Expected an int or a pair of ints") as e:
            argtools.shape2d(bad)
        assert isinstance(e.value, RuntimeError)  # what tensorpack raised


def test_memoized_caches_per_arguments():
    calls = []

    @argtools.memoized
    def f(x, y=1):
        calls.append((x, y))
        return x + y

    assert [f(1), f(1), f(2, y=3), f(2, y=3)] == [2, 2, 5, 5]
    assert calls == [(1, 1), (2, 3)]


def test_memoized_ignoreargs_keeps_the_first_result():
    calls = []

    @argtools.memoized_ignoreargs
    def f(x):
        calls.append(x)
        return x * 10

    assert [f(1), f(2), f(3)] == [10, 10, 10]
    assert calls == [1]


def test_call_only_once_per_instance():
    class A:
        @argtools.call_only_once
        def setup(self, v):
            return v + 1

    a, b = A(), A()
    assert (a.setup(1), b.setup(2)) == (2, 3)
    with pytest.raises(AssertionError, match=r"A\.setup\(\) was already called on this instance"):
        a.setup(1)
