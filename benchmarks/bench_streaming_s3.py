"""Streaming shards from moto's S3 server on loopback: the S3 clients' raw GET throughput
(boto3, obstore, s3fs: the measurement behind the choice of client), our ShardFetcher against
the raw-GET limit of the client it uses and against the same raw GETs delivered to one reader
in object order (what the fetcher does: the least any in-order reader of concurrent GETs does),
webdataset reading the same objects (over HTTP with curl, its documented way for URLs), and the
time to the first sample of a 256 MB shard. The benchmark process's minor page faults during
the boto3 runs show what holding bytes for an in-order reader costs.

    flock /tmp/dataflow-bench.lock env PYTHONPATH=src benchmarks/.venv-s3/bin/python \\
        benchmarks/bench_streaming_s3.py [--shard-mb 64 --shards 4 --big-mb 256 --rounds 2]

in a virtualenv of its own (s3fs pins an older botocore than the test install's boto3 needs):

    python3 -m venv benchmarks/.venv-s3
    benchmarks/.venv-s3/bin/pip install --upgrade "pip>=25.1"
    benchmarks/.venv-s3/bin/pip install -e . --group bench "moto[server]>=5" psutil

(while nothing runs from the tree: the editable install rebuilds the C extensions in place)

``benchmarks/bench_streaming.py --part s3`` calls :func:`run` and prints the same table.
Everything listens on 127.0.0.1 and is stopped at the end.
"""

from __future__ import annotations

import argparse
import collections
import gc
import io
import os
import resource
import statistics
import sys
import tarfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "src")]

from tests.streaming.servers import MotoS3  # noqa: E402

from dataflow.streaming.fetch import ShardFetcher  # noqa: E402

BUCKET = "bench"
SAMPLE = 100_000
CHUNK = 1 << 20
CONCURRENCY = 4


def make_shard(total: int, seed: int) -> bytes:
    """A WebDataset tar of ``total`` bytes or so: samples ``k.bin`` of 100 KB each."""
    buf = io.BytesIO()
    payload = os.urandom(SAMPLE) if seed == 0 else bytes([seed % 256]) * SAMPLE
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(max(1, total // (SAMPLE + 1024))):
            info = tarfile.TarInfo(f"{seed:04d}{i:06d}.bin")
            info.size = SAMPLE
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _drain(read: Any) -> int:
    """Bytes returned by ``read(CHUNK)`` until it returns nothing."""
    n = 0
    while True:
        b = read(CHUNK)
        if not b:
            return n
        n += len(b)


def _parallel(keys: list[str], read_one: Any) -> float:
    """MB/s of ``read_one(key) -> bytes`` over ``keys``, CONCURRENCY at a time."""
    todo = list(keys)
    lock = threading.Lock()
    total = [0]

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                key = todo.pop(0)
            n = read_one(key)
            with lock:
                total[0] += n

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return total[0] / 1e6 / (time.perf_counter() - t0)


def _boto3_client(endpoint: str) -> Any:
    """A boto3 S3 client of ``endpoint`` with a connection for each concurrent GET."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, config=Config(max_pool_connections=CONCURRENCY * 2))


def raw_boto3(endpoint: str, keys: list[str]) -> float:
    client = _boto3_client(endpoint)

    def read(key: str) -> int:
        return _drain(client.get_object(Bucket=BUCKET, Key=key)["Body"].read)

    try:
        return _parallel(keys, read)
    finally:
        client.close()


def raw_boto3_in_order(endpoint: str, keys: list[str]) -> float:
    """boto3's raw GETs, as in :func:`raw_boto3`, with their bytes taken by one reader in
    object order, as the fetcher delivers them. Bytes of an object the reader has not reached
    wait in memory (no byte budget, no retries: the least any in-order reader of concurrent
    GETs does)."""
    client = _boto3_client(endpoint)
    todo = list(keys)
    queues: dict[str, collections.deque[bytes]] = {k: collections.deque() for k in keys}
    ended: dict[str, BaseException | None] = {}  # key -> the GET's error, None if it ended
    cond = threading.Condition()

    def worker() -> None:
        while True:
            with cond:
                if not todo:
                    return
                key = todo.pop(0)
            error: BaseException | None = None
            try:
                read = client.get_object(Bucket=BUCKET, Key=key)["Body"].read
                while data := read(CHUNK):
                    with cond:
                        queues[key].append(data)
                        cond.notify_all()
            except BaseException as e:  # handed to the reader, which raises it
                error = e
            with cond:
                ended[key] = error
                cond.notify_all()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
    for t in threads:
        t.start()
    n = 0
    try:
        for key in keys:
            queue = queues[key]
            while True:
                with cond:
                    while not queue and key not in ended:
                        cond.wait()
                    if not queue:
                        if ended[key] is not None:
                            raise RuntimeError(f"GET {key} failed") from ended[key]
                        break
                    data = queue.popleft()
                n += len(data)
        return n / 1e6 / (time.perf_counter() - t0)
    finally:
        for t in threads:
            t.join()
        client.close()


def raw_obstore(endpoint: str, keys: list[str]) -> float:
    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=endpoint, region="us-east-1",
                    client_options={"allow_http": True},
                    access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                    secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])

    def read(key: str) -> int:
        return sum(len(b) for b in obstore.get(store, key).stream(min_chunk_size=CHUNK))

    return _parallel(keys, read)


def raw_s3fs(endpoint: str, keys: list[str]) -> float:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint)

    def read(key: str) -> int:
        with fs.open(f"{BUCKET}/{key}", "rb", block_size=8 * CHUNK) as f:
            return _drain(f.read)

    return _parallel(keys, read)


def ours(endpoint: str, keys: list[str]) -> float:
    urls = [f"s3://{BUCKET}/{k}" for k in keys]
    n = 0
    with ShardFetcher(prefetch_bytes=256 << 20, concurrency=CONCURRENCY,
                      storage_options={"endpoint_url": endpoint}) as f:
        f.size(urls[0])  # the client is made outside the timing, as for the raw GETs
        t0 = time.perf_counter()
        f.prefetch([(u, 0, None) for u in urls])
        for u in urls:
            with f.open(u) as s:
                n += _drain(s.read1)
    return n / 1e6 / (time.perf_counter() - t0)


def webdataset_http(endpoint: str, keys: list[str]) -> float:
    import boto3
    import webdataset as wds

    client = boto3.session.Session().client("s3", endpoint_url=endpoint)
    urls = [client.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": k})
            for k in keys]  # plain HTTPS-style URLs with the signature in the query
    client.close()
    t0 = time.perf_counter()
    n = 0
    for sample in wds.WebDataset(urls, shardshuffle=False):
        n += len(sample["bin"])
    return n / 1e6 / (time.perf_counter() - t0)


def first_sample(endpoint: str, key: str) -> float:
    """Seconds from a new fetcher to the bytes of the shard's first sample."""
    t0 = time.perf_counter()
    with ShardFetcher(storage_options={"endpoint_url": endpoint}) as f:
        s = f.open(f"s3://{BUCKET}/{key}")
        with tarfile.open(fileobj=s, mode="r|") as tar:
            member = tar.next()
            assert member is not None
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
        assert len(data) == SAMPLE
        elapsed = time.perf_counter() - t0
        s.close()
    return elapsed


class MotoS3Process:
    """moto's S3 server in a process of its own on 127.0.0.1, as a real store is never in the
    reader's process (:class:`MotoS3` runs it in a thread of this one, where its Python work
    and the reader's share one GIL: every byte's handling on the client side then slows the
    server down too)."""

    def __init__(self) -> None:
        from tests.streaming.servers import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: Any = None

    def __enter__(self) -> MotoS3Process:
        import socket
        import subprocess

        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from moto.server import main; "
             "main(['-H', '127.0.0.1', '-p', sys.argv[1]])", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
            self._proc = None

    client = MotoS3.client


def run(shard_mb: int = 64, shards: int = 4, big_mb: int = 256, rounds: int = 2,
        server_process: bool = True) -> dict:
    """The best figure of each measure over ``rounds`` interleaved rounds; the server in a
    process of its own, or (``server_process=False``) in a thread of this one."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench-secret")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with (MotoS3Process() if server_process else MotoS3()) as server:
        c = server.client()
        c.create_bucket(Bucket=BUCKET)
        keys = [f"train-{i:06d}.tar" for i in range(shards)]
        for i, k in enumerate(keys):
            c.put_object(Bucket=BUCKET, Key=k, Body=make_shard(shard_mb << 20, i + 1))
        c.put_object(Bucket=BUCKET, Key="big.tar", Body=make_shard(big_mb << 20, 0))
        c.close()
        results: dict[str, list[float]] = {}
        faults: dict[str, list[int]] = {}
        for _ in range(rounds):  # interleaved: every candidate sees the same machine load
            for name, fn in [("boto3 raw GET", raw_boto3),
                             ("boto3 raw GET, in order", raw_boto3_in_order),
                             ("obstore raw GET", raw_obstore), ("s3fs raw GET", raw_s3fs),
                             ("ShardFetcher (boto3)", ours),
                             ("webdataset (http, curl)", webdataset_http)]:
                # A full collection of the cyclic GC owed by the runs before (this process
                # holds every client library's objects: one took 0.1 s here) would otherwise
                # land in whichever run allocates next, e.g. in the first sample's client
                # creation; each run starts with none owed.
                gc.collect()
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                results.setdefault(name, []).append(fn(server.url, keys))
                faults.setdefault(name, []).append(
                    resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
            gc.collect()
            results.setdefault("first sample, 256 MB shard (s)", []).append(
                first_sample(server.url, "big.tar"))
    best = {k: (min(v) if k.startswith("first") else max(v)) for k, v in results.items()}
    best["ShardFetcher / boto3 raw"] = best["ShardFetcher (boto3)"] / best["boto3 raw GET"]
    best["ShardFetcher / boto3 raw, in order"] = (
        best["ShardFetcher (boto3)"] / best["boto3 raw GET, in order"])
    best["boto3 raw, in order / boto3 raw"] = (
        best["boto3 raw GET, in order"] / best["boto3 raw GET"])
    best["ShardFetcher / webdataset"] = best["ShardFetcher (boto3)"] / best[
        "webdataset (http, curl)"]
    for name in ("boto3 raw GET", "boto3 raw GET, in order", "ShardFetcher (boto3)"):
        best[f"minor page faults, {name} (median)"] = statistics.median(faults[name])
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shard-mb", type=int, default=64)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--big-mb", type=int, default=256)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--server-thread", action="store_true",
                   help="run moto's server in a thread of this process (it shares the GIL)")
    a = p.parse_args()
    best = run(a.shard_mb, a.shards, a.big_mb, a.rounds, not a.server_thread)
    print(f"{a.shards} shards x {a.shard_mb} MB, {CONCURRENCY} concurrent GETs, best of "
          f"{a.rounds} interleaved rounds, the server in "
          f"{'a thread of this process' if a.server_thread else 'a process of its own'}")
    print("| measure | value |\n|---|---|")
    for k, v in best.items():
        if k.startswith("minor page faults"):
            print(f"| {k} | {v:,.0f} |")
            continue
        unit = "" if ("/" in k or "(s)" in k) else " MB/s"
        print(f"| {k} | {v:.3f}{unit} |")


if __name__ == "__main__":
    main()
