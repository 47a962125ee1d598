"""The data service against the in-process mapper, on one machine, in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_service.py [--images 512] [--workers 2]

1. The ImageNet-style pipeline (JPEG bytes in an LMDB -> decode, Inception crop, flip, PCA
   lighting -> batches of 64): ``DataService`` with N process workers feeding one consumer,
   against ``MultiProcessMapDataZMQ(N)`` in the trainer's process: throughput as a ratio, and
   the CPU-seconds per sample of each (this process and its children).
2. Two jobs on one pool against two separate in-process pipelines running at once.
3. The dispatcher's own cost: CPU-seconds per 10,000 positions (the consumers' heartbeats and
   the worker addresses it serves), and from it how many trainers one dispatcher core feeds.
4. Stalls, on the same pipeline: the longest gap between two outputs of a consumer when a
   worker is SIGKILLed mid-epoch, when the service's process (dispatcher and pool) is
   SIGKILLed and started again on its address (``python -m dataflow serve``), and the time
   to the first output of a consumer restarted from its saved state and of three ranks that
   take over from two; each with the count of missing and repeated outputs; and the time to
   the first batch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

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
    # (the dispatcher's work is per consumer and second, its heartbeats and reports, not per
    # position: both figures, and the smaller count of trainers they allow)
    per_consumer_second = disp / dt
    trainers = min(1e4 / max(per10k, 1e-9) / rate, 1 / max(per_consumer_second, 1e-9))
    print(f"3. dispatcher: {per10k:.4f} CPU-s per 10,000 positions ({count / dt:,.0f} trivial "
          f"outputs/s to one consumer), {per_consumer_second * 1e3:.3f} CPU-ms per consumer "
          f"and second; at {rate:,.0f} img/s per trainer one dispatcher core could feed "
          f"~{trainers:,.0f} trainers")

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
    _faults(path, n)


def make() -> DataService:
    """The benchmark's service, for ``python -m dataflow serve bench_service:make``: the
    LMDB at ``$BENCH_LMDB`` (its labels are the images' numbers: the outputs are counted by
    them)."""
    return DataService(df.LMDBSerializer.load(os.environ["BENCH_LMDB"], shuffle=False),
                       DecodeAndAugment(), num_workers=int(os.environ.get("BENCH_WORKERS", "2")),
                       seed=0)


def _serve(address: str, path: str, n: int) -> subprocess.Popen:
    env = {**os.environ, "BENCH_LMDB": path, "BENCH_WORKERS": str(n),
           "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.abspath(__file__)),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "dataflow", "serve", "bench_service:make",
                             "--address", address], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("serving"):
        raise RuntimeError(f"python -m dataflow serve did not start: {line!r}")
    return proc


def _counts(keys: list, want: list) -> str:
    got, expected = Counter(keys), Counter(want)
    missing = sum((expected - got).values())
    repeated = sum((got - expected).values())
    return f"{missing} missing, {repeated} repeated"


def _faults(path: str, n: int) -> None:
    """Stalls and counts in the faults a service survives, on the benchmark's pipeline."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    procs = [_serve(address, path, n)]
    try:
        ref = ServiceData(address, rank=0, world_size=1)
        ref.reset_state()
        want = [dp[1] for dp in ref]
        ref.close()
        # 4b. the service's process SIGKILLed, started again on its address
        c = ServiceData(address, rank=0, world_size=1)
        c.reset_state()
        keys, gap, last, up = [], 0.0, time.monotonic(), 0.0
        for dp in c:
            now = time.monotonic()
            gap, last = max(gap, now - last), now
            keys.append(dp[1])
            if len(keys) == 100:
                os.kill(procs[0].pid, signal.SIGKILL)
                procs[0].wait()
                t0 = time.monotonic()
                procs.append(_serve(address, path, n))
                up = time.monotonic() - t0
                last = time.monotonic()  # (the stall counts from the new service up)
        c.close()
        print(f"4b. the service's process SIGKILLed at output 100, started again on its address "
              f"(up in {up:.2f} s): {_counts(keys, want)}, longest stall after it was up "
              f"{gap:.2f} s")
        # 4c. a consumer restarted from its saved state (here: a new one in this process)
        c = ServiceData(address, rank=0, world_size=1)
        c.reset_state()
        head = []
        for dp in c:
            head.append(dp[1])
            if len(head) == 150:
                break
        state = json.loads(json.dumps(c.state_dict()))
        c.close()
        t0 = time.monotonic()
        again = ServiceData(address, rank=0, world_size=1)
        again.reset_state()
        again.load_state_dict(state)
        it = iter(again)
        rest = [next(it)[-1]]
        first = time.monotonic() - t0
        rest.extend(dp[1] for dp in it)
        again.close()
        print(f"4c. a consumer restarted from its state: first output {first:.2f} s after it "
              f"started, {_counts(head + rest, want)}")
        # 4d. two ranks saved at the same step, three take over
        old = [ServiceData(address, rank=r, world_size=2) for r in range(2)]
        before = []
        for c in old:
            c.reset_state()
            for k, dp in enumerate(c, 1):
                before.append(dp[1])
                if k == 60:
                    break
        states = [c.state_dict() for c in old]
        for c in old:
            c.close()
        t0 = time.monotonic()
        new = [ServiceData(address, rank=r, world_size=3) for r in range(3)]
        firsts, after = [], []
        for c in new:
            c.reset_state()
            c.load_state_dict(states[0])
            it = iter(c)
            after.append(next(it)[-1])
            firsts.append(time.monotonic() - t0)
            after.extend(dp[1] for dp in it)
            c.close()
        dropped = (len(want) - 120) % 3  # (partial="drop": at most world_size - 1)
        print(f"4d. 2 ranks -> 3 ranks from their states: first outputs within "
              f"{max(firsts):.2f} s, {_counts(before + after, want[:len(want) - dropped])} "
              f"(the epoch's last {dropped} dropped, as partial='drop' says)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)
            if p.stdout is not None:
                p.stdout.close()


def _identity(dp: list) -> list:
    return dp


if __name__ == "__main__":
    main()
