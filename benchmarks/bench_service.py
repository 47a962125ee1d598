"""The data service against the in-process mapper, on one machine, in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_service.py [--images 512] [--workers 2]

1. The ImageNet-style pipeline (JPEG bytes in an LMDB -> decode, Inception crop, flip, PCA
   lighting -> batches of 64): ``DataService`` with N process workers feeding one consumer,
   against ``MultiProcessMapDataZMQ(N)`` in the trainer's process: throughput as a ratio, and
   the CPU-seconds per sample of each (this process and its children).
2. Two jobs on one pool against two separate in-process pipelines running at once.
3. The dispatcher's own cost: CPU-seconds per 10,000 positions (the consumers' heartbeats and
   the worker addresses it serves), and from it how many trainers one dispatcher core feeds.
4. Stalls: the longest gap between two outputs when a worker is SIGKILLed mid-epoch, and the
   time to the first batch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import psutil

import dataflow as df
from dataflow.demo import DecodeAndAugment, make_jpegs
from dataflow.service import DataService, ServiceData


def cpu_seconds() -> float:
    """CPU seconds of this process and every descendant alive now or reaped."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:4])
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def run(flow: df.DataFlow, batches: int) -> tuple[float, float, float]:
    """(images/s, CPU-seconds per image, seconds to the first batch) over ``batches``."""
    flow.reset_state()
    t0 = time.perf_counter()
    it = iter(flow)
    first = next(it)
    t_first = time.perf_counter() - t0
    n = len(first[1])
    c0, t1 = cpu_seconds(), time.perf_counter()
    for _ in range(batches):
        try:
            n += len(next(it)[1])
        except StopIteration:
            it = iter(flow)
    dt = time.perf_counter() - t1
    cpu = cpu_seconds() - c0
    flow.close()
    return (n - len(first[1])) / dt, cpu / max(n - len(first[1]), 1), t_first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=24)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dataflow-bench-service-")
    try:
        _bench(args, os.path.join(tmp, "train.lmdb"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench(args: argparse.Namespace, path: str) -> None:
    df.LMDBSerializer.save(df.DataFromList(make_jpegs(args.images), shuffle=False), path)
    fn, n = DecodeAndAugment(), args.workers

    def inproc() -> df.DataFlow:
        src = df.LocallyShuffleData(df.LMDBSerializer.load(path, shuffle=False), 256,
                                    finite=True)
        return df.BatchData(df.MultiProcessMapDataZMQ(src, n, fn, strict=True, ordered=True,
                                                      buffer_size=256), 64)

    print(f"# {args.images} JPEGs 500x375 -> 224x224, {n} workers, batches of 64, "
          f"{args.batches} batches timed; python {sys.version.split()[0]}")
    ref = run(inproc(), args.batches)
    with DataService(df.LMDBSerializer.load(path, shuffle=False), fn, num_workers=n,
                     seed=0) as svc:
        ours = run(df.BatchData(ServiceData(svc.address, prefetch=256), 64), args.batches)
    print(f"1. one consumer: service {ours[0]:,.0f} img/s vs in-process mapper "
          f"{ref[0]:,.0f} img/s: {ours[0] / ref[0]:.2f}x; CPU-s per image {ours[1] * 1e3:.2f} ms "
          f"vs {ref[1] * 1e3:.2f} ms; first batch {ours[2]:.2f} s vs {ref[2]:.2f} s")

    # 2. two jobs on one pool vs two pipelines at once
    results: dict[str, tuple[float, float, float]] = {}

    def go(key: str, flow: df.DataFlow) -> None:
        results[key] = run(flow, args.batches // 2)

    c0, t0 = cpu_seconds(), time.perf_counter()
    ts = [threading.Thread(target=go, args=(k, inproc())) for k in ("a", "b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    sep = (sum(r[0] for r in results.values()), (cpu_seconds() - c0) / (time.perf_counter() - t0))
    with DataService(df.LMDBSerializer.load(path, shuffle=False), fn, num_workers=n,
                     seed=0) as svc:
        results.clear()
        c0, t0 = cpu_seconds(), time.perf_counter()
        ts = [threading.Thread(target=go, args=(k, df.BatchData(
            ServiceData(svc.address, job=k, prefetch=128), 64))) for k in ("a", "b")]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        shared = (sum(r[0] for r in results.values()),
                  (cpu_seconds() - c0) / (time.perf_counter() - t0))
        share = min(r[0] for r in results.values()) / max(r[0] for r in results.values())
    print(f"2. two jobs: one pool of {n} {shared[0]:,.0f} img/s in all (the slower job at "
          f"{share:.2f}x the faster) vs two pipelines of {n} workers each {sep[0]:,.0f} img/s: "
          f"{shared[0] / sep[0]:.2f}x, using {shared[1]:.2f} vs {sep[1]:.2f} cores")

    # 3. the dispatcher's own CPU per 10,000 positions: a pool of trivial work
    with DataService(df.DataFromList([[i] for i in range(20_000)], shuffle=False),
                     _identity, num_workers=n, seed=0) as svc:
        disp0 = svc.stats()["dispatcher_cpu_seconds"]
        c = ServiceData(svc.address, prefetch=256)
        c.reset_state()
        t0 = time.perf_counter()
        count = sum(1 for _ in c)
        dt = time.perf_counter() - t0
        disp = svc.stats()["dispatcher_cpu_seconds"] - disp0
        c.close()
    per10k = disp / count * 1e4
    rate = ours[0]
    print(f"3. dispatcher: {per10k:.3f} CPU-s per 10,000 positions ({count / dt:,.0f} trivial "
          f"outputs/s to one consumer); at {rate:,.0f} img/s per trainer one dispatcher core "
          f"could feed ~{1e4 / max(per10k, 1e-9) / rate:,.0f} trainers")

    # 4. a worker SIGKILLed mid-epoch: the consumer's longest stall
    with DataService(df.LMDBSerializer.load(path, shuffle=False), fn, num_workers=n,
                     seed=0) as svc:
        c = ServiceData(svc.address, prefetch=128)
        c.reset_state()
        gap, last, k = 0.0, time.monotonic(), 0
        for _ in c:
            now = time.monotonic()
            gap, last, k = max(gap, now - last), now, k + 1
            if k == 100:
                os.kill(svc.worker_pids()[0], signal.SIGKILL)
        c.close()
    print(f"4. a worker SIGKILLed mid-epoch: {k} of {args.images} outputs, longest stall "
          f"{gap:.2f} s; first batch {ours[2]:.2f} s")


def _identity(dp: list) -> list:
    return dp


if __name__ == "__main__":
    main()
