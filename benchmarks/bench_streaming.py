"""Streaming tar shards: ``StreamingShards`` against ``webdataset`` on the same local shards.

    flock /tmp/dataflow-bench.lock PYTHONPATH=src .venv/bin/python benchmarks/bench_streaming.py \\
        [--part local|ranks|s3|all] [--n-small 20000] [--n-jpeg 600]

Workloads (written once per run with ``TarShardSerializer``, read by both implementations):

* ``small``: 1 KB samples (``bin`` 1000 random bytes + ``cls``), 2000 per shard;
* ``jpeg``: about 100 KB JPEGs (random-noise 192x176 images) + ``cls``, 100 per shard.

Parts:

* ``local``: one reader, one epoch, samples/s, best of 3, raw bytes (no decoding): ``ours``
  (``StreamingShards(shuffle=False)``), ``ours-shuffled`` (the two-level shuffle, window 4096)
  and ``webdataset`` (``wds.WebDataset(urls, shardshuffle=False)``);
* ``ranks``: 8 ranks simulated as 8 processes at once (``RANK``/``WORLD_SIZE``), one epoch of
  the shuffled plan each: aggregate samples/s and the per-rank counts;
* ``s3``: runs ``benchmarks/bench_streaming_s3.py`` (loopback S3 server) when it exists.

MosaicML Streaming on MDS shards is not measured yet (its virtualenv and MDS conversion are not
written); see benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPEATS = 3


def _write(directory: str, name: str, n: int, per_shard: int) -> list[str]:
    from dataflow import DataFromGenerator
    from dataflow.streaming.writer import TarShardSerializer

    rng = np.random.default_rng(0)
    if name == "small":
        def gen():
            for i in range(n):
                yield {"__key__": f"{i:09d}", "bin": rng.bytes(1000), "cls": i % 1000}
    else:
        import cv2

        img = rng.integers(0, 256, (192, 176, 3), dtype=np.uint8)
        _, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
        jpeg = buf.tobytes()

        def gen():
            for i in range(n):
                yield {"__key__": f"{i:09d}", "jpg": jpeg, "cls": i % 1000}
    return TarShardSerializer.save(DataFromGenerator(gen), f"{directory}/{name}-%06d.tar",
                                   max_count=per_shard, progress=False)


def _time(fn) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(REPEATS):
        gc.collect()
        t0 = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - t0)
    return best, count


def _ours(urls: list[str], shuffle: bool) -> int:
    from dataflow.streaming.source import StreamingShards

    ds = StreamingShards(urls, shuffle=shuffle, seed=0, rank=0, world_size=1)
    ds.reset_state()
    try:
        return sum(1 for _ in ds)
    finally:
        ds.close()


def _webdataset(urls: list[str]) -> int:
    import webdataset as wds

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n = sum(1 for _ in wds.WebDataset(urls, shardshuffle=False))
        gc.collect()
    return n


def part_local(work: str, n_small: int, n_jpeg: int) -> list[dict]:
    rows = []
    for name, n, per in (("small", n_small, 2000), ("jpeg", n_jpeg, 100)):
        urls = _write(work, name, n, per)
        size = sum(os.path.getsize(u) for u in urls)
        impls = {"ours": lambda u=urls: _ours(u, False),
                 "ours-shuffled": lambda u=urls: _ours(u, True)}
        try:
            import webdataset  # noqa: F401
            impls["webdataset"] = lambda u=urls: _webdataset(u)
        except ImportError:
            print("webdataset is not installed: skipped", file=sys.stderr)
        for impl, fn in impls.items():
            seconds, count = _time(fn)
            assert count == n, (impl, count, n)
            rows.append({"workload": name, "impl": impl, "samples": count,
                         "samples_per_s": count / seconds, "mb_per_s": size / seconds / 1e6})
            print(json.dumps(rows[-1]), flush=True)
    return rows


_RANK_SCRIPT = """
import json, os, sys, time
from dataflow.streaming.source import StreamingShards
ds = StreamingShards(json.loads(sys.argv[1]), seed=0)
ds.reset_state()
t0 = time.perf_counter()
n = sum(1 for _ in ds)
ds.close()
print(json.dumps({"rank": ds.rank, "count": n, "seconds": time.perf_counter() - t0}))
"""


def part_ranks(work: str, n_small: int, world: int = 8) -> list[dict]:
    urls = _write(work, "ranks", n_small, 2000)
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"), WORLD_SIZE=str(world))
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", _RANK_SCRIPT, json.dumps(urls)],
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - t0  # includes each process's start-up and index reads
    counts = [o["count"] for o in outs]
    row = {"workload": "small", "impl": f"ours x{world} ranks", "samples": sum(counts),
           "per_rank": counts, "samples_per_s": sum(counts) / wall,
           "samples_per_s_reading": sum(counts) / max(o["seconds"] for o in outs)}
    print(json.dumps(row), flush=True)
    return [row]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["local", "ranks", "s3", "all"], default="all")
    ap.add_argument("--n-small", type=int, default=20000)
    ap.add_argument("--n-jpeg", type=int, default=600)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as work:
        if args.part in ("local", "all"):
            part_local(work, args.n_small, args.n_jpeg)
        if args.part in ("ranks", "all"):
            part_ranks(work, args.n_small)
    if args.part in ("s3", "all"):
        s3 = HERE / "bench_streaming_s3.py"
        if s3.exists():
            subprocess.run([sys.executable, str(s3)], check=True)
        else:
            print("benchmarks/bench_streaming_s3.py is not there: the s3 part is skipped")


if __name__ == "__main__":
    main()
