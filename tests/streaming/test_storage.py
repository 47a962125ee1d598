"""The storage clients against real servers: sizes and ranges over local files, HTTP, moto's
S3 (credentials from the standard AWS chain, endpoint from AWS_ENDPOINT_URL or
storage_options) and fsspec; secrets never reach logs or reprs; missing extras are named."""

from __future__ import annotations

import logging
import sys

import pytest

from dataflow.streaming.fetch import ShardFetcher, ShardReadError
from dataflow.streaming.storage import client_for
from tests.streaming.conftest import BUCKET, SECRET_KEY

RANGES = [(0, None), (0, 10), (5, 100_000), (99_990, None), (99_999, 100_000), (100_000, None)]


def _check_client(client, url, expected):
    assert client.size(url) == len(expected)
    for start, end in RANGES:
        body = client.open_range(url, start, end)
        got = b""
        while True:
            piece = body.read(7000)
            if not piece:
                break
            got += piece
        body.close()
        assert got == expected[start:end], (start, end)


def test_local_http_and_file_urls(data_dir, http_server):
    expected = (data_dir / "b.bin").read_bytes()
    for url in [str(data_dir / "b.bin"), f"file://{data_dir / 'b.bin'}",
                f"{http_server.url}/b.bin"]:
        client = client_for(url)
        _check_client(client, url, expected)
        client.close()


def test_http_keeps_the_connection_alive(data_dir, http_server):
    client = client_for(f"{http_server.url}/b.bin")
    for _ in range(3):
        body = client.open_range(f"{http_server.url}/b.bin", 0, 1000)
        assert body.read(2000) == (data_dir / "b.bin").read_bytes()[:1000]
        assert body.read(10) == b""
    assert len(client._all) == 1  # one connection served the three requests
    client.close()


def test_s3_with_endpoint_from_options_and_from_env(data_dir, s3_server, aws_env,
                                                    monkeypatch):
    expected = (data_dir / "b.bin").read_bytes()
    url = f"s3://{BUCKET}/b.bin"
    client = client_for(url, {"endpoint_url": s3_server.url})
    _check_client(client, url, expected)
    client.close()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.url)
    client = client_for(url)
    _check_client(client, url, expected)
    with pytest.raises(FileNotFoundError):
        client.size(f"s3://{BUCKET}/missing.bin")
    client.close()


def test_fsspec_scheme(data_dir):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    expected = (data_dir / "b.bin").read_bytes()
    fs.pipe_file("/dataflow-test/b.bin", expected)
    try:
        client = client_for("memory://dataflow-test/b.bin")
        _check_client(client, "memory://dataflow-test/b.bin", expected)
    finally:
        fs.rm("/dataflow-test", recursive=True)


def test_secrets_never_reach_logs_or_reprs(s3_server, aws_env, caplog, data_dir):
    caplog.set_level(logging.DEBUG)
    url = f"s3://{BUCKET}/b.bin"
    opts = {"endpoint_url": s3_server.url, "aws_secret_access_key": SECRET_KEY,
            "aws_access_key_id": "AKIAOTHER"}
    with ShardFetcher(storage_options=opts, retries=0) as f:
        with f.open(url) as s:
            assert s.read() == (data_dir / "b.bin").read_bytes()
        with pytest.raises(ShardReadError) as info, f.open(f"s3://{BUCKET}/nope") as s:
            s.read()
        texts = [repr(f), str(info.value), repr(info.value), repr(f._state.clients),
                 repr(f.stats())]
    assert caplog.records  # botocore logged at DEBUG
    for text in [caplog.text, *texts]:
        assert SECRET_KEY not in text


def test_missing_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ImportError, match=r"dataflow-reloaded\[s3\]"):
        client_for("s3://b/k")
