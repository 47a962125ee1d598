"""Brace patterns, lists and schemes of shard URLs."""

from __future__ import annotations

import pathlib
import re

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


# ---- local globs ---------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path):
    for name in ["t-0002.tar", "t-0000.tar", "t-0010.tar", "t-0001.tar", "t-0000.tar.idx.json",
                 "other.txt", "x[1].tar"]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "t-dir.tar").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t-0000.tar").write_bytes(b"")
    return tmp_path


def test_local_globs_expand_sorted_files_only(files):
    d = str(files)
    tars = [f"{d}/t-0000.tar", f"{d}/t-0001.tar", f"{d}/t-0002.tar", f"{d}/t-0010.tar"]
    assert expand_urls(f"{d}/t-*.tar") == tars  # no directory, no index
    assert expand_urls(f"{d}/t-*") == tars
    assert expand_urls(f"file://{d}/t-000?.tar") == ["file://" + t for t in tars[:3]]
    assert expand_urls(f"{d}/t-000[02].tar") == [tars[0], tars[2]]
    assert expand_urls(f"{{{d},{d}/sub}}/t-0000.tar") == [tars[0], f"{d}/sub/t-0000.tar"]
    assert expand_urls([f"{d}/*/t-*.tar", f"{d}/t-001*.tar"]) == [f"{d}/sub/t-0000.tar",
                                                                   tars[3]]
    assert expand_urls(f"{d}/x[1].tar") == [f"{d}/x[1].tar"]  # exists as written: kept


def test_a_glob_that_matches_nothing(files, monkeypatch):
    pattern = f"{files}/t-*.tgz"
    with pytest.raises(FileNotFoundError, match=(
            f"^`urls`: the glob {re.escape(repr(pattern))} matched no file; check the "
            r"directory and the pattern \(`\*`, `\?` and `\[\.\.\.\]` match as in the shell\)$")):
        expand_urls(pattern)
    monkeypatch.chdir(files)
    with pytest.raises(FileNotFoundError, match=(
            r"^`urls`: the glob 'out/\*\.tar' matched no file \(relative to "
            f"{re.escape(repr(str(files)))}\\); check")):
        expand_urls("out/*.tar")
    with pytest.raises(FileNotFoundError, match="the glob 'file://nowhere/a\\?' matched no"):
        expand_urls("file://nowhere/a?")


def test_remote_globs_are_refused_with_the_brace_form():
    with pytest.raises(ValueError, match=re.escape(
            "`urls`: 's3://b/train-*.tar' holds the glob character '*', but globs are "
            "expanded for local paths and file:// URLs only, not for s3:// URLs (they are not "
            "listed); name the shards with a brace range such as 'train-{000..099}.tar', or "
            "give the list of URLs")):
        expand_urls("s3://b/train-*.tar")
    # a query string, an IPv6 host: no glob
    assert expand_urls("https://h/x-{0..1}.tar?sig=a*b") == ["https://h/x-0.tar?sig=a*b",
                                                            "https://h/x-1.tar?sig=a*b"]
    assert expand_urls("http://[::1]:80/a.tar::b") == ["http://[::1]:80/a.tar", "b"]


def test_streaming_shards_reads_a_glob(tmp_path, monkeypatch):
    from dataflow.streaming.source import StreamingShards
    from tests.streaming._shards import write_shards

    (tmp_path / "out").mkdir()
    paths = write_shards(tmp_path / "out", 25, 10)
    monkeypatch.chdir(tmp_path)
    ds = StreamingShards("out/*.tar", shuffle=False)
    try:
        assert ds.urls == ["out/t-0000.tar", "out/t-0001.tar", "out/t-0002.tar"]
        assert [p.endswith(u) for p, u in zip(paths, ds.urls, strict=True)] == [True] * 3
        ds.reset_state()
        assert [int(d["cls"]) for d in ds] == list(range(25))
    finally:
        ds.close()
