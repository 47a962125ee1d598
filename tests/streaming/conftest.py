"""Fixtures of the streaming tests: data files, and real servers on 127.0.0.1 (an HTTP file
server with Range support, moto's S3 server, and fault-injecting proxies in front of them),
each stopped by the fixture."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.streaming.servers import FaultProxy, MotoS3, RangeHTTPServer

BUCKET = "shards"
#: fake credentials of the moto server; the secret is looked for in logs and reprs
ACCESS_KEY = "AKIATESTINGDATAFLOW"
SECRET_KEY = "dataflow-test-secret-9f1c2e7a"


def make_bytes(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Three files: ``a.bin`` (3 MB + 17 bytes), ``b.bin`` (100 KB), ``empty.bin``."""
    d = tmp_path_factory.mktemp("shards")
    (d / "a.bin").write_bytes(make_bytes(3 * (1 << 20) + 17, 1))
    (d / "b.bin").write_bytes(make_bytes(100_000, 2))
    (d / "empty.bin").write_bytes(b"")
    return d


@pytest.fixture(scope="module")
def http_server(data_dir):
    with RangeHTTPServer(str(data_dir)) as server:
        yield server


@pytest.fixture
def http_proxy(http_server):
    with FaultProxy(http_server.port) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def s3_server(data_dir):
    """moto's S3 server holding ``data_dir``'s files in bucket ``shards``."""
    with MotoS3() as server:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        for name in sorted(os.listdir(data_dir)):
            client.put_object(Bucket=BUCKET, Key=name, Body=(data_dir / name).read_bytes())
        client.close()
        yield server


@pytest.fixture
def s3_proxy(s3_server):
    with FaultProxy(s3_server.port) as proxy:
        yield proxy


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """The standard AWS chain pointed at fake credentials (no real config files read)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
