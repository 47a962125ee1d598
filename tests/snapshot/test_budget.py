"""The budget's choice: what fits is stored; when full, the outputs most expensive per byte
replace the cheapest ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.snapshot.budget import admit, parse_budget


def test_parse_budget():
    assert parse_budget(None) is None
    assert parse_budget(1000) == 1000
    assert parse_budget("20GB") == 20 * 10**9
    assert parse_budget("512MiB") == 512 * 2**20
    assert parse_budget("1.5 kb") == 1500
    for bad in ("twenty", "-1GB", "5XB"):
        with pytest.raises(ValueError, match="`budget`"):
            parse_budget(bad)
    with pytest.raises(TypeError, match="`budget`"):
        parse_budget([1])


def test_admit_replaces_the_cheapest_per_byte_only():
    stored = {0: (1.0, 100), 1: (5.0, 100), 2: (0.5, 100)}  # densities .01 .05 .005
    assert admit(50, 0.1, 60, stored) == (True, [])
    assert admit(150, 3.0, 0, stored) == (True, [2, 0])  # .02 per byte beats .005 and .01
    assert admit(150, 0.1, 0, stored) == (False, [])
    assert admit(400, 100.0, 0, stored) == (False, [])  # does not fit even alone


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.001, 10), st.integers(1, 50)), min_size=1, max_size=40),
       st.integers(0, 300))
def test_a_budget_converges_to_the_most_expensive_per_byte(items, limit):
    stored: dict[int, tuple[float, int]] = {}
    for _ in range(len(items) + 2):  # epochs, until one changes nothing
        before = dict(stored)
        for i, (s, b) in enumerate(items):
            if i in stored:
                continue
            ok, victims = admit(b, s, limit - sum(v[1] for v in stored.values()), stored)
            for v in victims:
                del stored[v]
            if ok:
                stored[i] = (s, b)
            assert sum(v[1] for v in stored.values()) <= limit
        if stored == before:
            break
    assert stored == before  # it settles
    # no item left out is more expensive per byte than a stored one while fitting in its place
    for i, (s, b) in enumerate(items):
        if i not in stored and stored:
            cheaper = [v for v in stored.values() if v[0] / v[1] < s / b]
            free = limit - sum(v[1] for v in stored.values())
            assert b > free + sum(v[1] for v in cheaper)
