"""ShardFetcher: exact bytes for any read pattern, progressive reads, the byte budget, and
threads that end with close() or garbage collection."""

from __future__ import annotations

import gc
import itertools
import pickle
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.streaming._download import CHUNK, OPEN_WINDOW
from dataflow.streaming.fetch import ShardFetcher, ShardReadError


def _fetch_threads(besides: frozenset = frozenset()) -> list[threading.Thread]:
    """The fetchers' download threads running, but those in ``besides`` (the module's
    ``fetcher``, open across tests, may still run a download hinted by one of them)."""
    return [t for t in threading.enumerate() if t.name == "dataflow-fetch" and t not in besides]


@pytest.fixture(scope="module")
def fetcher():
    f = ShardFetcher(prefetch_bytes=1 << 20)
    yield f
    f.close()


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_ranges_and_reads_give_the_files_bytes(fetcher, data_dir, data):
    name = data.draw(st.sampled_from(["a.bin", "b.bin", "empty.bin"]))
    expected = (data_dir / name).read_bytes()
    n = len(expected)
    start = data.draw(st.integers(0, n))
    end = data.draw(st.one_of(st.none(), st.integers(start, n + 10)))
    hint = data.draw(st.booleans())
    url = str(data_dir / name) if data.draw(st.booleans()) else f"file://{data_dir / name}"
    if hint:
        fetcher.prefetch([(url, start, end)])
    reads = data.draw(st.lists(
        st.tuples(st.sampled_from(["read", "read1", "readinto"]),
                  st.one_of(st.integers(1, 5000), st.integers(1, 2 * CHUNK))),
        min_size=1, max_size=4))
    got = []
    with fetcher.open(url, start, end) as s:
        for step in itertools.count():
            how, size = reads[step % len(reads)]
            size = max(size, n // 64)  # at most ~64 steps per range
            if how == "readinto":
                buf = bytearray(size)
                k = s.readinto(buf)
                piece = bytes(buf[:k])
            else:
                piece = getattr(s, how)(size)
            if not piece:
                break
            got.append(piece)
            assert s.tell() == start + sum(map(len, got))
    assert b"".join(got) == expected[start:end]


def test_first_bytes_arrive_before_the_rest(http_proxy, data_dir):
    # the proxy sends 200 KB and then nothing: the first read returns all the same
    http_proxy.faults.append(("stall", 200_000))
    expected = (data_dir / "a.bin").read_bytes()
    others = frozenset(_fetch_threads())
    f = ShardFetcher(timeout=60.0)
    s = f.open(f"{http_proxy.url}/a.bin")
    assert s.read(150_000) == expected[:150_000]
    f.close()  # aborts the stalled download
    with pytest.raises(ValueError, match="closed"):
        s.read(200_000)
    assert _fetch_threads(others) == []


def test_budget_bounds_the_bytes_held(data_dir):
    files = [str(data_dir / "a.bin")] * 4 + [str(data_dir / "b.bin")]
    budget = 2 << 20
    with ShardFetcher(prefetch_bytes=budget, concurrency=2) as f:
        f.prefetch([(u, i, None) for i, u in enumerate(files)])
        for i, u in enumerate(files):
            with f.open(u, i) as s:
                assert s.read() == (data_dir / u.rsplit("/", 1)[1]).read_bytes()[i:]
        stats = f.stats()
    # one chunk of overshoot per running download, and the window of the open stream
    assert stats["peak_bytes_in_flight"] <= budget + 2 * CHUNK + OPEN_WINDOW
    assert stats["bytes_in_flight"] == 0
    assert stats["bytes_read"] == sum(len((data_dir / u.rsplit("/", 1)[1]).read_bytes()) - i
                                      for i, u in enumerate(files))


def test_close_and_garbage_collection_end_the_threads(data_dir):
    others = frozenset(_fetch_threads())
    f = ShardFetcher(prefetch_bytes=64 << 10)
    f.prefetch([(str(data_dir / "a.bin"), 0, None), (str(data_dir / "b.bin"), 0, None)])
    f.close()
    f.close()  # idempotent
    assert _fetch_threads(others) == []
    with pytest.raises(ValueError, match="closed"):
        f.open(str(data_dir / "a.bin"))
    g = ShardFetcher(prefetch_bytes=64 << 10)
    g.prefetch([(str(data_dir / "a.bin"), 0, None)])
    del g
    gc.collect()
    assert _fetch_threads(others) == []


def test_size_and_missing_files(data_dir):
    with ShardFetcher() as f:
        assert f.size(str(data_dir / "b.bin")) == 100_000
        with pytest.raises(ShardReadError) as info:
            f.size(str(data_dir / "nope.bin"))
        assert info.value.offset == 0 and isinstance(info.value.cause, FileNotFoundError)
        assert f.stats()["errors"] == 1


def test_shard_read_error_pickles():
    e = ShardReadError("s3://b/k", 42, TimeoutError("slow"))
    back = pickle.loads(pickle.dumps(e))
    assert (back.url, back.offset, str(back)) == ("s3://b/k", 42, str(e))
    assert str(e) == "reading s3://b/k failed at byte 42: TimeoutError: slow"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"prefetch_bytes": -1}, "`prefetch_bytes`"), ({"retries": 1.5}, "`retries`"),
    ({"timeout": 0}, "`timeout`"), ({"cache_limit": 10}, "needs `cache_dir`"),
    ({"storage_options": [1]}, "`storage_options`"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ShardFetcher(**kwargs)


def test_bad_ranges(data_dir):
    with ShardFetcher() as f:
        with pytest.raises(ValueError, match="`start`"):
            f.open(str(data_dir / "a.bin"), -1)
        with pytest.raises(ValueError, match="`end`"):
            f.open(str(data_dir / "a.bin"), 10, 5)
