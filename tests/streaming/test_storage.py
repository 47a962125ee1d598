"""The storage clients against real servers: sizes and ranges over local files, HTTP, moto's
S3 (credentials from the standard AWS chain, endpoint from AWS_ENDPOINT_URL or
storage_options) and fsspec; secrets never reach logs or reprs; missing extras are named."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import warnings

import pytest

from dataflow.streaming.fetch import ShardFetcher, ShardReadError
from dataflow.streaming.storage import client_for
from tests.streaming.conftest import BUCKET, SECRET_KEY
from tests.streaming.servers import PlainHTTPServer

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
    with pytest.raises(ImportError, match=r"pip install 'boto3>=1\.34' \(the extra \[s3\] of "
                                          r"dataflow-reloaded; in a clone: pip install -e "
                                          r"'\.\[s3\]'\)"):
        client_for("s3://b/k")


# ---- URLs whose scheme no client reads ---------------------------------------------------

def _supported(fsspec_part: str) -> str:
    return ("Supported schemes: plain paths and file://, http://, https://, s3://, s3a://; "
            + fsspec_part)


def test_a_scheme_typo_names_the_parameter_the_url_and_the_fix():
    from dataflow.streaming.source import StreamingShards

    fsspec = pytest.importorskip("fsspec")
    others = ", ".join(sorted(p for p in fsspec.available_protocols()
                              if p not in ("file", "http", "https", "s3", "s3a")))
    expected = ("`urls`: 'htp://host/x-000.tar' has the scheme 'htp', which no storage client "
                "reads; did you mean 'http'? " + _supported(f"through fsspec: {others}."))
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        StreamingShards("htp://host/x-{000..003}.tar")
    assert ", gs, " in expected and ", memory, " in expected  # fsspec's schemes are listed
    # the fetcher and the scheme table name their own parameter, `url`
    with ShardFetcher() as f, pytest.raises(ValueError, match=r"^`url`: 'htp://h/a' has the "
                                                              r"scheme 'htp'.*did you mean 'http'"):
        f.open("htp://h/a")
    with pytest.raises(ValueError, match=r"^`url`: 's3x://b/k' has the scheme 's3x'.*did you "
                                         r"mean 's3'\?"):
        client_for("s3x://b/k")
    with pytest.raises(ValueError, match=r"'qqqq'.*no storage client reads; check the scheme "
                                         r"of the URL\. Supported"):
        StreamingShards(["/a/b.tar", "qqqq://h/x.tar"])


def test_a_scheme_typo_without_fsspec(monkeypatch):
    from dataflow.streaming.source import StreamingShards

    monkeypatch.setitem(sys.modules, "fsspec", None)
    expected = ("`urls`: 'htp://host/a.tar' has the scheme 'htp', which no storage client "
                "reads; did you mean 'http'? " + _supported(
                    "other schemes (gs, az, hf, ...) need fsspec, which is not installed: "
                    "pip install 'fsspec>=2024.1' (the extra [streaming] of "
                    "dataflow-reloaded; in a clone: pip install -e '.[streaming]')."))
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        StreamingShards("htp://host/a.tar")
    # a scheme that is no typo of ours may be fsspec's: the missing extra is named, as before
    with pytest.raises(ImportError, match=r"pip install 'fsspec>=2024\.1' \(the extra "
                                          r"\[streaming\] of dataflow-reloaded"):
        client_for("gs://b/k")


# ---- storage_options that the S3 client does not take ------------------------------------

S3_KEYS = ("api_version, aws_access_key_id, aws_secret_access_key, aws_session_token, "
           "client_kwargs, config, endpoint_url, key, max_pool_connections, profile, "
           "profile_name, region_name, secret, token, use_ssl, verify")


def test_an_unknown_s3_option_is_refused_up_front():
    from dataflow.streaming.source import StreamingShards

    expected = ("`storage_options`: s3:// URLs take no option 'endpoint'; did you mean "
                f"'endpoint_url'? The keys accepted for s3:// are: {S3_KEYS} (see "
                "docs/streaming-io.md).")
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        StreamingShards("s3://b/x-{0..3}.tar", storage_options={"endpoint": "http://h:1"})
    with ShardFetcher(storage_options={"endpoint": "http://h:1"}) as f, \
            pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        f.open("s3://b/k")
    with pytest.raises(ValueError, match=re.escape(
            "`storage_options['client_kwargs']`: s3:// URLs take no option 'endpoint'; did "
            "you mean 'endpoint_url'? The keys accepted for s3:// are: api_version, "
            "endpoint_url, region_name, use_ssl, verify, aws_access_key_id, "
            "aws_secret_access_key, aws_session_token (")):
        client_for("s3://b/k", {"client_kwargs": {"endpoint": "http://h:1"}})
    with pytest.raises(ValueError, match=r"^`storage_options`: s3:// URLs take no option "
                                         r"'anonymous'\. The keys"):
        client_for("s3://b/k", {"anonymous": True})
    # an option given twice, under s3fs's name and boto3's: named, its value never shown
    with pytest.raises(ValueError, match=r"^`storage_options`: 'secret' and "
                                         r"'aws_secret_access_key' give the same option "
                                         r"\(aws_secret_access_key\); give it once\.$"):
        StreamingShards("s3://b/x.tar", storage_options={"secret": SECRET_KEY,
                                                         "aws_secret_access_key": SECRET_KEY})
    # options of other schemes are not the S3 client's to judge
    StreamingShards("/d/x.tar", storage_options={"endpoint": "x"})


def test_a_botocore_config_is_merged(data_dir, s3_server, aws_env):
    from botocore.config import Config

    url = f"s3://{BUCKET}/b.bin"
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 9})
    client = client_for(url, {"endpoint_url": s3_server.url, "config": config})
    try:
        _check_client(client, url, (data_dir / "b.bin").read_bytes())
        merged = client._client.meta.config
        assert merged.s3 == {"addressing_style": "path"}
        assert merged.retries == {"total_max_attempts": 1, "mode": "standard"}  # ours win
    finally:
        client.close()
    with pytest.raises(TypeError, match=r"`storage_options\['config'\]` must be a "
                                        r"botocore\.config\.Config, got dict"):
        client_for(url, {"endpoint_url": s3_server.url, "config": {"s3": {}}})


# ---- an HTTP server that ignores Range requests ----------------------------------------------

def _ignored_range_message(port: int, rng: str, url: str) -> str:
    return (
        f"dataflow: the HTTP server 127.0.0.1:{port} ignores Range requests (it answered 200 "
        f"with the whole object to 'Range: {rng}' for {url}). The samples stay right, but "
        "every range request now downloads the shard from its first byte to the range's end, "
        "so each rank reads about whole shards, some several times, instead of its own "
        "samples' ranges. Serve the shards with a server that supports Range requests: nginx, "
        "Apache, Caddy, an object store (S3, MinIO), or `pip install rangehttpserver; python -m "
        "RangeHTTPServer` instead of `python -m http.server`; or pass cache_dir= so that each "
        "node downloads each shard once.")


def _range_warnings(record) -> list[str]:
    return [str(w.message) for w in record
            if w.category is RuntimeWarning and "ignores Range" in str(w.message)]


@contextlib.contextmanager
def _recording():
    """Every warning, from any thread (the fetcher's included), in a list."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        yield record


def test_a_server_that_ignores_range_is_read_right_and_named_once(data_dir):
    expected = (data_dir / "b.bin").read_bytes()
    with PlainHTTPServer(str(data_dir)) as server:
        url = f"{server.url}/b.bin"
        with _recording() as record:
            client = client_for(url)
            _check_client(client, url, expected)  # every range, cut out of whole answers
            _check_client(client, url, expected)
            client.close()
            with ShardFetcher(retries=0) as f, f.open(url, 99_000, 99_100) as s:
                assert s.read() == expected[99_000:99_100]
        assert server.ranges[:3] == ["bytes=0-", "bytes=0-9", "bytes=5-99999"]
        assert _range_warnings(record) == [_ignored_range_message(server.port, "bytes=0-9",
                                                                 url)]
    with PlainHTTPServer(str(data_dir)) as other:  # another server: warned of in turn
        url = f"{other.url}/a.bin"
        with _recording() as record, ShardFetcher(retries=0) as f, f.open(url, 1 << 20) as s:
            assert s.read() == (data_dir / "a.bin").read_bytes()[1 << 20:]
        assert _range_warnings(record) == [_ignored_range_message(
            other.port, "bytes=1048576-", url)]


def test_whole_reads_and_range_servers_give_no_warning(data_dir, http_server):
    with _recording() as record:
        with PlainHTTPServer(str(data_dir)) as server, ShardFetcher(retries=0) as f:
            with f.open(f"{server.url}/b.bin") as s:  # the whole object: nothing wasted
                assert s.read() == (data_dir / "b.bin").read_bytes()
            with f.open(f"{server.url}/b.bin", 0, 100_000) as s:
                assert s.read() == (data_dir / "b.bin").read_bytes()
        client = client_for(f"{http_server.url}/b.bin")
        _check_client(client, f"{http_server.url}/b.bin", (data_dir / "b.bin").read_bytes())
        client.close()
    assert _range_warnings(record) == []


def test_streaming_shards_over_a_server_that_ignores_range(tmp_path):
    from dataflow.streaming.source import StreamingShards
    from tests.streaming._shards import write_shards

    paths = write_shards(tmp_path, 30, 7)
    kwargs = {"seed": 3, "window": 8, "world_size": 2}
    expected = []
    for rank in range(2):
        local = StreamingShards(paths, rank=rank, **kwargs)
        local.reset_state()
        expected.append([(d["__key__"], d["cls"], d["txt"]) for d in local])
        local.close()
    with PlainHTTPServer(str(tmp_path)) as server, _recording() as record:
        got = []
        for rank in range(2):
            ds = StreamingShards(f"{server.url}/t-{{0000..0004}}.tar", rank=rank, **kwargs)
            ds.reset_state()
            got.append([(d["__key__"], d["cls"], d["txt"]) for d in ds])
            ds.close()
    assert got == expected
    assert [len(g) for g in got] == [15, 15]
    assert len(_range_warnings(record)) == 1
    assert _range_warnings(record)[0].startswith(
        f"dataflow: the HTTP server 127.0.0.1:{server.port} ignores Range requests")
