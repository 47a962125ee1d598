"""The snapshot store alone: write and read records of ``[uint8 224x224x3 image, int label]``.

    .venv/bin/python benchmarks/bench_snapshot_store.py [--n 2000] [--dir DIR]

For each compression (none, lz4, zstd): ``put`` all N records into a new store and close it
(the shard synced and its index written), then, in a new store (what another process sees),
``get`` every record in order twice: the first read of a record in a process checks its
CRC-32s, the second does not. "read + copy" gets every record and copies its image into a batch
buffer (so every byte is read); uncompressed, ``get`` alone returns a view of the memory map and
touches only the header. The files stay in the page cache (they were just written): these are
the store's costs, not the disk's. Times are this process's CPU time (``time.process_time``:
the machine is shared, and CPU time does not count the waits for a core), best of 5 runs.

Two kinds of images (see ``images``): decoded photos, which compress little (a record that
compression would not make 10% smaller is stored as it is), and flat ones, which compress well.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table
from dataflow.snapshot.store import SnapshotStore

REPEATS = 5


def images(n: int, kind: str) -> list[np.ndarray]:
    """``n`` images 224x224 (4 distinct ones, reused: making 2000 would cost more than storing
    them). ``photo``: bench_e2e.py's synthetic photos (smooth waves plus noise, through JPEG at
    quality 90) decoded; ``flat``: the waves quantized to 8 levels, without noise (renders,
    masks)."""
    import cv2

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:224, 0:224].astype(np.float32)
    out = []
    for _ in range(4):
        fx, fy, ph = rng.uniform(0.005, 0.05), rng.uniform(0.005, 0.05), rng.uniform(0, 6)
        base = np.stack([np.sin(xx * fx + ph + c) * np.cos(yy * fy - c) for c in range(3)], -1)
        if kind == "flat":
            out.append((np.round(base * 3.5) * 32 + 128).clip(0, 255).astype(np.uint8))
            continue
        img = (base * 90 + 128 + rng.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
        jpeg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1]
        out.append(cv2.imdecode(jpeg, cv2.IMREAD_COLOR))
    return [out[i % 4] for i in range(n)]


def best(fn, setup=None) -> float:
    t = float("inf")
    for _ in range(REPEATS):
        if setup is not None:
            setup()
        gc.collect()
        t0 = time.process_time()
        fn()
        t = min(t, time.process_time() - t0)
    return t


def measure(work: Path, n: int, kind: str, compression: str | None) -> dict:
    imgs = images(n, kind)
    root = work / f"store-{kind}-{compression}"
    raw_mb = n * imgs[0].nbytes / 1e6

    def fresh():
        shutil.rmtree(root, ignore_errors=True)

    def write():
        with SnapshotStore(root, n, compression=compression) as store:
            for i in range(n):
                store.put(i, [imgs[i], i])

    t_write = best(write, fresh)
    write()
    nbytes = sum(os.path.getsize(root / f) for f in os.listdir(root) if f.endswith(".shard"))
    batch = np.empty((64, 224, 224, 3), np.uint8)
    times: dict[str, float] = {}

    def read_twice():
        with SnapshotStore(root, n) as store:
            t0 = time.process_time()
            for i in range(n):
                store.get(i)
            t1 = time.process_time()
            for i in range(n):
                store.get(i)
            t2 = time.process_time()
            for i in range(n):
                batch[i % 64] = store.get(i)[1][0]
            t3 = time.process_time()
        for k, t in (("first", t1 - t0), ("warm", t2 - t1), ("copy", t3 - t2)):
            times[k] = min(times.get(k, float("inf")), t)

    for _ in range(REPEATS):
        gc.collect()
        read_twice()
    shutil.rmtree(root, ignore_errors=True)
    return {
        "data": kind,
        "compression": compression or "none",
        "write_mb_s": raw_mb / t_write,
        "first_us": times["first"] / n * 1e6,
        "warm_us": times["warm"] / n * 1e6,
        "copy_mb_s": raw_mb / times["copy"],
        "bytes_per_record": nbytes / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-snapshot-", dir=args.dir))
    try:
        rows = [measure(work, args.n, kind, c) for kind in ("photo", "flat")
                for c in (None, "lz4", "zstd")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.n} records of [uint8 224x224x3, int] ({224 * 224 * 3} bytes of pixels each)")
    print(markdown_table(
        ["images", "compression", "write MB/CPU-s", "first get CPU-us (checks CRC)",
         "warm get CPU-us", "get + copy MB/CPU-s", "bytes/record"],
        [[r["data"], r["compression"], f"{r['write_mb_s']:.0f}", f"{r['first_us']:.1f}",
          f"{r['warm_us']:.1f}", f"{r['copy_mb_s']:.0f}", f"{r['bytes_per_record']:.0f}"]
         for r in rows]))


if __name__ == "__main__":
    main()
