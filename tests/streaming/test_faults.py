"""Faults injected by a loopback proxy in front of the HTTP and S3 servers: every fault is
retried, resuming at the first missing byte, so the bytes read are exactly the object's; the
retries are counted; exhausted retries raise ShardReadError naming the URL and the offset."""

from __future__ import annotations

import pytest

from dataflow.streaming.fetch import ShardFetcher, ShardReadError
from tests.streaming.conftest import BUCKET

FAULTS = [
    [("reset", 1_500_000)],
    [("truncate", 700_000)],
    [("slowdown", 0)],
    [("stall", 1_000_000)],
    [("reset", 10), ("slowdown", 0), ("truncate", 2_000_000), ("reset", 0)],
]


def _url(kind: str, proxy) -> str:
    if kind == "http":
        return f"{proxy.url}/a.bin"
    return f"s3://{BUCKET}/a.bin"


def _options(kind: str, proxy) -> dict | None:
    return None if kind == "http" else {"endpoint_url": proxy.url}


@pytest.mark.parametrize("kind", ["http", "s3"])
@pytest.mark.parametrize("faults", FAULTS, ids=lambda f: "+".join(k for k, _ in f))
def test_fault_loses_and_repeats_nothing(kind, faults, data_dir, request, aws_env):
    proxy = request.getfixturevalue(f"{kind}_proxy")
    proxy.faults.extend(faults)
    expected = (data_dir / "a.bin").read_bytes()
    timeout = 1.0 if any(k == "stall" for k, _ in faults) else 30.0
    with ShardFetcher(prefetch_bytes=8 << 20, timeout=timeout, retries=5, backoff=0.01,
                      storage_options=_options(kind, proxy)) as f:
        with f.open(_url(kind, proxy)) as s:
            got = s.read()
        stats = f.stats()
    assert got == expected
    assert proxy.injected == len(faults)
    assert stats["retries"] == len(faults)
    assert stats["errors"] == 0
    assert stats["bytes_read"] == len(expected)


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_exhausted_retries_raise_shard_read_error(kind, request, aws_env):
    proxy = request.getfixturevalue(f"{kind}_proxy")
    proxy.faults.append(("truncate", 1_000_000))
    proxy.always = ("slowdown", 0)
    url = _url(kind, proxy)
    with ShardFetcher(retries=3, backoff=0.0, storage_options=_options(kind, proxy)) as f:
        s = f.open(url)
        head = s.read(1_000_000)
        with pytest.raises(ShardReadError) as info:
            s.read(1)
        s.close()
        stats = f.stats()
    err = info.value
    assert isinstance(err, OSError)
    assert (err.url, err.offset) == (url, 1_000_000)
    assert url in str(err) and "1000000" in str(err)
    assert len(head) == 1_000_000
    # the truncation is the first failure in a row, then 3 retries meet SlowDown
    assert proxy.injected == 4
    assert stats["retries"] == 3
    assert stats["errors"] == 1


def test_missing_object_is_not_retried(http_proxy):
    with ShardFetcher(retries=5) as f:
        with pytest.raises(ShardReadError) as info, f.open(f"{http_proxy.url}/nope.bin") as s:
            s.read()
        assert isinstance(info.value.cause, FileNotFoundError)
        assert f.stats()["retries"] == 0
