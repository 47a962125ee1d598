"""Epoch 1 of a snapshot, accounted: wall time and this process's CPU (user and system) per image
for the uncached pipeline and for the first (writing) epoch of the snapshot, each in a process
of its own, alternating; ``-only`` variants leave out the augmentation.

    .venv/bin/python benchmarks/bench_snapshot_epoch1.py [--rounds 3] [--images 2000]
    perf record -F 999 -g .venv/bin/python benchmarks/bench_snapshot_epoch1.py --impl snap-only

The pipelines are bench_snapshot.py's ``plain`` and ``snap`` (500x375 JPEGs in an LMDB, the
decode in the snapshot, RandomResizedCrop + flip + lighting in 2 threads after it). "cores
busy" is CPU seconds over wall seconds: below 2, threads waited on each other.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

IMPLS = ["plain", "snap", "plain-only", "snap-only"]


def measure(impl: str, n: int) -> dict:
    import cv2

    import bench_e2e
    import bench_snapshot as bs
    import dataflow as df
    from dataflow.serialize import LMDBSerializer

    cv2.setNumThreads(1)  # (the threads are the parallelism, as in bench_snapshot.py)
    src = LMDBSerializer.load(str(bench_e2e.lmdb_path(n, (500, 375))), shuffle=False)
    tmp = tempfile.mkdtemp(prefix="dataflow-bench-epoch1-")
    nproc = len(os.sched_getaffinity(0))
    try:
        if impl.startswith("snap"):
            flow = df.SnapshotData(src, tmp, map_func=bs.Decode(False), shuffle=True, seed=0)
            if impl == "snap":
                flow = df.MultiThreadMapData(flow, nproc, bs.Augment(), buffer_size=200,
                                             strict=True)
        else:
            func = bs.Decode(False) if impl == "plain-only" else bs.DecodeAugment(False)
            shuffled = df.LocallyShuffleData(src, min(bs.SHUFFLE_BUFFER, n // 2), finite=True)
            flow = df.MultiThreadMapData(shuffled, nproc, func, buffer_size=200, strict=True)
        flow.reset_state()
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        k = sum(1 for _ in flow)
        dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        flow.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    user, system = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    return {"img_s": k / dt, "user_ms": 1e3 * user / k, "sys_ms": 1e3 * system / k,
            "cpu_ms": 1e3 * (user + system) / k, "cores_busy": (user + system) / dt}


def main() -> None:
    import argparse

    from bench_e2e import make_data

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=IMPLS)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=IMPLS)
    args = ap.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl, args.images)))
        return
    make_data(args.images, (500, 375))
    print("| run | img/s | CPU-ms per image | of it sys | cores busy |\n|---|---|---|---|---|")
    for _ in range(args.rounds):
        for impl in args.only or IMPLS:
            out = subprocess.run([sys.executable, __file__, "--impl", impl, "--images",
                                  str(args.images)], capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {impl} | {r['img_s']:,.0f} | {r['cpu_ms']:.2f} | {r['sys_ms']:.2f} | "
                  f"{r['cores_busy']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
