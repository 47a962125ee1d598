"""Streaming tar shards: ``StreamingShards`` against ``webdataset`` on the same local shards.

    flock /tmp/dataflow-bench.lock env PYTHONPATH=src .venv/bin/python \\
        benchmarks/bench_streaming.py [--part local|mosaic|ranks|s3|all] [--n-small 20000] \\
        [--n-jpeg 600] [--mosaic-batch-size 256 2048]

Workloads (written once per run with ``TarShardSerializer``, read by both implementations):

* ``small``: 1 KB samples (``bin`` 1000 random bytes + ``cls``), 2000 per shard;
* ``jpeg``: JPEGs of a random-noise 304x288 image at quality 95 (103 KB encoded; noise keeps
  JPEG from compressing it much) + ``cls``, 100 per shard.

Parts:

* ``local``: one reader, one epoch, samples/s, best of 3, raw bytes (no decoding): ``ours``
  (``StreamingShards(shuffle=False)``), ``ours-shuffled`` (the two-level shuffle, window 4096)
  and ``webdataset`` (``wds.WebDataset(urls, shardshuffle=False)``), and MosaicML Streaming
  (``mosaic``, ``mosaic-shuffled``) on MDS shards of the same samples, all in interleaved rounds;
* ``mosaic``: the same with MosaicML Streaming only (a quick check of its virtualenv);
* ``ranks``: 8 ranks simulated as 8 processes at once (``RANK``/``WORLD_SIZE``), one epoch of
  the shuffled plan each: aggregate samples/s and the per-rank counts;
* ``s3``: runs ``benchmarks/bench_streaming_s3.py`` (loopback S3 server) when it exists.

MosaicML Streaming (``mosaicml-streaming``, a black box) pins ``numpy<2.2``, so it runs in its own
virtualenv, ``benchmarks/.venv-mosaic`` (or ``$MOSAIC_PYTHON``), set up with (it pulls torch; from
PyPI's CUDA wheels that is about 6 GB)::

    python3 -m venv benchmarks/.venv-mosaic && benchmarks/.venv-mosaic/bin/pip install \\
        'mosaicml-streaming==0.13.0'

Without it the mosaic rows are skipped with a note. One worker process in that virtualenv writes
the MDS shards with ``streaming.MDSWriter`` (columns ``key: str``, ``bin``/``jpg: bytes``,
``cls: int``, no compression, ``size_limit`` chosen so each MDS shard holds the samples of one
tar shard; the samples are read from the tar shards, so both hold the same bytes) and then reads
one epoch per request with ``streaming.StreamingDataset(local=<MDS dir>, remote=None,
shuffle=..., batch_size=B)``, iterating samples in the process (no DataLoader workers, as ours
is measured); the timed part is the dataset's construction and its epoch, as for ours.
``batch_size`` is only a hint to mosaic's partitioning, but it must be given and its epochs are
faster the larger it is (1 KB samples: about 30x slower at 1 than at 256, and 256 -> 2048 -> 8192
gave 16k -> 29k -> 40k samples/s in one run), so each B of ``--mosaic-batch-size`` (default 256,
a usual training batch, and 2048) is measured and the ratios take mosaic's best.
Its ``TMPDIR`` (file locks, torch's caches) is the run's temporary directory; its shared memory
(``/dev/shm``) is released with ``clean_stale_shared_memory()`` when it ends and checked after.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPEATS = 3
MOSAIC_PYTHON = Path(os.environ.get("MOSAIC_PYTHON", HERE / ".venv-mosaic" / "bin" / "python"))


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

        img = rng.integers(0, 256, (304, 288, 3), dtype=np.uint8)  # 103,332 bytes as JPEG
        _, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
        jpeg = buf.tobytes()

        def gen():
            for i in range(n):
                yield {"__key__": f"{i:09d}", "jpg": jpeg, "cls": i % 1000}
    return TarShardSerializer.save(DataFromGenerator(gen), f"{directory}/{name}-%06d.tar",
                                   max_count=per_shard, progress=False)


def _time(fn) -> tuple[float, int]:
    """``(seconds, samples)`` of one epoch; ``fn`` returns ``(seconds it measured itself or None,
    samples)``."""
    gc.collect()
    t0 = time.perf_counter()
    own, count = fn()
    return (time.perf_counter() - t0 if own is None else own), count


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


# The MosaicML Streaming worker, run by its virtualenv's python: one JSON request a line on stdin,
# one answer a line on stdout (prefixed, so that anything else printed there is ignored).
_MOSAIC_WORKER = r"""
import gc, json, os, sys, tarfile, time, warnings
warnings.simplefilter("ignore")
import streaming
from streaming import MDSWriter, StreamingDataset
from streaming.base.util import clean_stale_shared_memory

def samples(tars, field):
    for url in tars:
        with tarfile.open(url) as tf:
            sample = {}
            for m in tf:
                key, ext = m.name.split(".", 1)
                if sample and sample["key"] != key:
                    yield sample
                    sample = {}
                data = tf.extractfile(m).read()
                sample["key"] = key
                if ext == "cls":
                    sample["cls"] = int(data)
                else:
                    assert ext == field, m.name
                    sample[field] = data
            if sample:
                yield sample

def write(out, tars, field, size_limit, limit_samples=None):
    columns = {"key": "str", field: "bytes", "cls": "int"}
    with MDSWriter(out=out, columns=columns, compression=None, size_limit=size_limit) as w:
        for i, s in enumerate(samples(tars, field)):
            if i == limit_samples:
                break
            w.write(s)
    with open(os.path.join(out, "index.json")) as f:
        shards = json.load(f)["shards"]
    return [s["samples"] for s in shards], [s["raw_data"]["bytes"] for s in shards]

def convert(out, tars, field, per_shard):
    # size_limit: the bytes of one MDS shard of per_shard samples (all samples have one size)
    # and half a sample more
    _, size = write(out + "-probe", tars[:1], field, None, per_shard)
    for name in os.listdir(out + "-probe"):
        os.remove(os.path.join(out + "-probe", name))
    os.rmdir(out + "-probe")
    limit = size[0] + size[0] // (2 * per_shard)
    counts, sizes = write(out, tars, field, limit)
    return {"counts": counts, "bytes": sum(sizes), "size_limit": limit}

def epoch(local, shuffle, batch_size):
    t0 = time.perf_counter()
    ds = StreamingDataset(local=local, remote=None, shuffle=shuffle, batch_size=batch_size)
    n = 0
    for _ in ds:
        n += 1
    seconds = time.perf_counter() - t0
    del ds
    gc.collect()
    return {"count": n, "seconds": seconds}

print("@@" + json.dumps({"version": streaming.__version__}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    op = req.pop("op")
    if op == "quit":
        break
    ans = convert(**req) if op == "convert" else epoch(**req)
    print("@@" + json.dumps(ans), flush=True)
clean_stale_shared_memory()
"""

_MOSAIC_SHM = re.compile(r"^\d{6}_[a-z_]+$")  # the names its segments had in /dev/shm


class _Mosaic:
    """The MosaicML Streaming worker process (see the module's docstring)."""

    def __init__(self, work: str):
        self.tmp = os.path.join(work, "mosaic-tmp")
        os.makedirs(self.tmp, exist_ok=True)
        self.shm_before = set(os.listdir("/dev/shm"))
        self.env = dict(os.environ, TMPDIR=self.tmp, PYTHONWARNINGS="ignore")
        self.env.pop("PYTHONPATH", None)
        self.proc = subprocess.Popen([str(MOSAIC_PYTHON), "-c", _MOSAIC_WORKER], env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.version = self._answer()["version"]

    def _answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise RuntimeError(f"the mosaic worker ended (exit status {self.proc.wait()})")

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
        self.proc.wait()
        # once no process of it is alive, its segments are all stale
        subprocess.run([str(MOSAIC_PYTHON), "-c", "from streaming.base.util import "
                        "clean_stale_shared_memory as c; c()"], env=self.env, check=False)
        left = sorted(set(os.listdir("/dev/shm")) - self.shm_before)
        for name in left:
            if _MOSAIC_SHM.match(name):
                os.remove(os.path.join("/dev/shm", name))
        if left:
            print(f"/dev/shm entries the mosaic run left (those named like its segments are "
                  f"removed): {left}", file=sys.stderr)


def part_local(work: str, n_small: int, n_jpeg: int, only_mosaic: bool = False,
               mosaic_batch_sizes: tuple[int, ...] = (256, 2048)) -> list[dict]:
    mosaic = None
    if MOSAIC_PYTHON.exists():
        mosaic = _Mosaic(work)
        print(f"mosaicml-streaming {mosaic.version}, batch_size {mosaic_batch_sizes}", flush=True)
    else:
        print(f"{MOSAIC_PYTHON} is missing (see the docstring): mosaic skipped", file=sys.stderr)
    rows = []
    try:
        for name, n, per, field in (("small", n_small, 2000, "bin"),
                                    ("jpeg", n_jpeg, 100, "jpg")):
            urls = _write(work, name, n, per)
            sizes = {"tar": sum(os.path.getsize(u) for u in urls)}
            impls = {}
            if not only_mosaic:
                impls["ours"] = lambda u=urls: (None, _ours(u, False))
                impls["ours-shuffled"] = lambda u=urls: (None, _ours(u, True))
                try:
                    import webdataset  # noqa: F401
                    impls["webdataset"] = lambda u=urls: (None, _webdataset(u))
                except ImportError:
                    print("webdataset is not installed: skipped", file=sys.stderr)
            if mosaic is not None:
                mds = os.path.join(work, f"{name}-mds")
                conv = mosaic.ask(op="convert", out=mds, tars=urls, field=field, per_shard=per)
                sizes["mds"] = conv["bytes"]
                print(json.dumps({"workload": name, "mds_shards": len(conv["counts"]),
                                  "mds_samples_per_shard": sorted(set(conv["counts"])),
                                  "mds_bytes": conv["bytes"], "tar_bytes": sizes["tar"]}),
                      flush=True)
                for bs in mosaic_batch_sizes:
                    for impl, shuffle in (("mosaic", False), ("mosaic-shuffled", True)):
                        def run(d=mds, sh=shuffle, bs=bs):
                            a = mosaic.ask(op="epoch", local=d, shuffle=sh, batch_size=bs)
                            return a["seconds"], a["count"]
                        impls[f"{impl} bs={bs}"] = run
            best = dict.fromkeys(impls, float("inf"))
            for _ in range(REPEATS):  # interleaved rounds, the best of each kept
                for impl, fn in impls.items():
                    seconds, count = _time(fn)
                    assert count == n, (impl, count, n)
                    best[impl] = min(best[impl], seconds)
            for impl, seconds in best.items():
                size = sizes["mds" if impl.startswith("mosaic") else "tar"]
                rows.append({"workload": name, "impl": impl, "samples": n,
                             "samples_per_s": round(n / seconds),
                             "mb_per_s": round(size / seconds / 1e6, 1)})
                print(json.dumps(rows[-1]), flush=True)
            rates = {r["impl"]: r["samples_per_s"] for r in rows if r["workload"] == name}
            for kind in ("mosaic", "mosaic-shuffled"):  # its best batch_size
                best_bs = [v for k, v in rates.items() if k.split(" ")[0] == kind]
                if best_bs:
                    rates[kind] = max(best_bs)
            ratios = {f"{a} / {b}": round(rates[a] / rates[b], 2)
                      for a, b in (("ours", "webdataset"), ("ours-shuffled", "webdataset"),
                                   ("ours", "mosaic"), ("ours-shuffled", "mosaic-shuffled"))
                      if a in rates and b in rates}
            if ratios:
                print(json.dumps({"workload": name, "ratios": ratios}), flush=True)
    finally:
        if mosaic is not None:
            mosaic.close()
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
    ap.add_argument("--part", choices=["local", "mosaic", "ranks", "s3", "all"], default="all")
    ap.add_argument("--n-small", type=int, default=20000)
    ap.add_argument("--n-jpeg", type=int, default=600)
    ap.add_argument("--mosaic-batch-size", type=int, nargs="+", default=[256, 2048],
                    help="StreamingDataset's batch_size hints, each measured (samples are still "
                         "read one by one); the ratios take mosaic's best")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as work:
        if args.part in ("local", "mosaic", "all"):
            part_local(work, args.n_small, args.n_jpeg, only_mosaic=args.part == "mosaic",
                       mosaic_batch_sizes=tuple(args.mosaic_batch_size))
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
