"""Brace patterns, lists and schemes of shard URLs."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataflow.streaming.urls import expand_urls, scheme_of, strip_file_scheme


def test_numeric_range_keeps_the_padding():
    urls = expand_urls("s3://b/train-{000000..000127}.tar")
    assert len(urls) == 128
    assert urls[0] == "s3://b/train-000000.tar"
    assert urls[-1] == "s3://b/train-000127.tar"


def test_several_groups_lists_and_descending_ranges():
    assert expand_urls("{a,b}-{1..3}") == ["a-1", "a-2", "a-3", "b-1", "b-2", "b-3"]
    assert expand_urls("x{3..1}") == ["x3", "x2", "x1"]
    assert expand_urls("x{8..11}") == ["x8", "x9", "x10", "x11"]


def test_lists_paths_and_double_colon():
    assert expand_urls(["a{0..1}", pathlib.Path("/d/c")]) == ["a0", "a1", "/d/c"]
    assert expand_urls("a::b{1,2}") == ["a", "b1", "b2"]


@pytest.mark.parametrize(("bad", "match"), [
    ("a{1..", "unbalanced"), ("a{{1..2}}", "unbalanced"), ("a{xyz}", "numeric range"),
    ([], "names no shard"), ("a::", "empty URL"),
])
def test_bad_patterns_name_the_parameter(bad, match):
    with pytest.raises(ValueError, match=match) as info:
        expand_urls(bad)
    assert "`urls`" in str(info.value)


def test_wrong_types():
    with pytest.raises(TypeError, match="`urls`"):
        expand_urls(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="every entry"):
        expand_urls(["a", 3])  # type: ignore[list-item]


def test_schemes():
    assert [scheme_of(u) for u in ["/a", "rel/a", "file:///a", "HTTP://h/a", "s3://b/k",
                                   "gs://b/k"]] == ["file", "file", "file", "http", "s3", "gs"]
    assert strip_file_scheme("file:///a/b") == "/a/b"
    with pytest.raises(ValueError, match="not a local path"):
        strip_file_scheme("s3://b/k")


@given(st.lists(st.tuples(st.text("ab/-_.", max_size=3),
                          st.one_of(st.tuples(st.integers(0, 30), st.integers(0, 30)),
                                    st.lists(st.text("xyz", min_size=1, max_size=2),
                                             min_size=2, max_size=3))),
                min_size=1, max_size=3),
       st.text("ab.", max_size=3))
def test_expansion_is_the_product_of_the_groups(parts, tail):
    pattern = ""
    choices = []
    for literal, group in parts:
        if isinstance(group, tuple):
            a, b = group
            pattern += f"{literal}{{{a}..{b}}}"
            step = 1 if b >= a else -1
            choices.append([literal + str(i) for i in range(a, b + step, step)])
        else:
            pattern += literal + "{" + ",".join(group) + "}"
            choices.append([literal + g for g in group])
    pattern += tail
    expected = [""]
    for c in choices:
        expected = [e + x for e in expected for x in c]
    assert expand_urls(pattern) == [e + tail for e in expected]
