"""Autotuned parallelism against a hand grid, today's defaults and tf.data's AUTOTUNE, in one run.

    flock /tmp/dataflow-bench.lock env PYTHONPATH=src .venv/bin/python \\
        benchmarks/bench_autotune.py [--quick] [--cpus 0 0,1] [--seconds 3]

For each CPU set (each run in its own subprocess pinned with ``taskset -c``), each workload, with
and without a slow consumer (20 ms of CPU work per item, a trainer's step), it measures the
steady-state throughput (items/s) and CPU seconds per item (the process and its worker
processes) of:

* every configuration of a hand grid: back end (threads, processes) x workers x buffer size;
* today's defaults: ``MultiProcessMapDataZMQ(ds, os.cpu_count(), f)`` (buffer 200);
* ``ParallelMapData(ds, "auto", f, backend="auto", buffer_size="auto")``: measured after it
  converged (or after ``--converge`` seconds), with its time to converge (the last decision);
* tf.data: ``Dataset.range(n).map(py_function(f), num_parallel_calls=AUTOTUNE).prefetch(
  AUTOTUNE)`` (the peer figure; its own subprocess).

Workloads: ``gil`` (pure Python, ~1 ms, holds the GIL), ``cv2`` (OpenCV resize + blur of a
1024x768 image, one OpenCV thread, releases the GIL), ``io5`` / ``io20`` (waits 5 / 20 ms,
like a read from remote storage). The table gives the ratios auto / best hand setting
(throughput; CPU per item) and auto / defaults, and tf.data / best hand setting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

WORKLOADS = ("gil", "cv2", "io5", "io20")
CONSUMER_MS = (0, 20)
_IMAGE: Any = None


def gil(dp: Any) -> Any:
    n = 0
    for i in range(20_000):
        n += i * i % 7
    return [dp[0], n]


def cv2_work(dp: Any) -> Any:
    import cv2

    global _IMAGE
    if _IMAGE is None:
        import numpy as np

        cv2.setNumThreads(1)
        _IMAGE = np.random.default_rng(0).integers(0, 255, (768, 1024, 3), dtype=np.uint8)
    out = cv2.GaussianBlur(cv2.resize(_IMAGE, (640, 480)), (5, 5), 0)
    return [dp[0], int(out[0, 0, 0])]


def io5(dp: Any) -> Any:
    time.sleep(0.005)
    return dp


def io20(dp: Any) -> Any:
    time.sleep(0.020)
    return dp


FUNCS: dict[str, Callable[[Any], Any]] = {"gil": gil, "cv2": cv2_work, "io5": io5, "io20": io20}


def _spin_cpu(ms: float) -> None:
    """The consumer's step: ``ms`` of CPU time (takes longer when starved of CPU)."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


def _cpu_seconds() -> float:
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def _measure(make: Callable[[], Any], consumer_ms: int, seconds: float,
             converge: float = 0.0) -> dict[str, Any]:
    flow = make()
    flow.reset_state()
    itr = iter(flow)
    start = time.perf_counter()
    warm_end = start + max(0.5, min(1.0, seconds / 3))
    converged_s = None
    while True:  # warm up (an autotuned flow: until it converged, at most `converge` s)
        next(itr)
        _spin_cpu(consumer_ms)
        now = time.perf_counter()
        tuned = flow.autotune_state() if hasattr(flow, "autotune_state") else None
        if tuned is None:
            if now >= warm_end:
                break
            continue
        windows = tuned["window"]
        steady = tuned["converged_at"] is not None and windows - tuned["converged_at"] >= 4
        if (steady and now >= warm_end) or now - start >= converge:
            last = tuned["decisions"][-1]["window"] if tuned["decisions"] else 0
            converged_s = (now - start) * last / max(1, windows)
            break
    cpu0, t0, n = _cpu_seconds(), time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        next(itr)
        _spin_cpu(consumer_ms)
        n += 1
    elapsed = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    tuned = flow.autotune_state() if hasattr(flow, "autotune_state") else None
    flow.close()
    return {"rate": n / elapsed, "cpu_per_item": cpu / max(1, n), "converge_s": converged_s,
            "workers": getattr(flow, "num_workers", None), "autotune": tuned,
            "backend": type(flow).__name__}


def _grid(quick: bool) -> list[tuple[str, int, int]]:
    threads = (1, 2, 4, 8) if quick else (1, 2, 4, 8, 16)
    procs = (1, 2) if quick else (1, 2, 4)
    buffers = (200,) if quick else (50, 200, 800)
    return ([("thread", w, b) for w in threads for b in buffers]
            + [("process", w, b) for w in procs for b in buffers])


def run_dataflow(args: argparse.Namespace) -> list[dict[str, Any]]:
    import logging

    from dataflow import DataFromList
    from dataflow.parallel import MultiProcessMapDataZMQ, MultiThreadMapData, ParallelMapData

    logging.basicConfig(level=logging.WARNING)
    ds_n = 1_000_000
    rows = []
    for name in args.workloads:
        func = FUNCS[name]
        for consumer_ms in CONSUMER_MS:
            def ds() -> Any:
                return DataFromList([[i] for i in range(ds_n // 100)], shuffle=False)

            for backend, workers, buf in _grid(args.quick):
                cls = MultiThreadMapData if backend == "thread" else MultiProcessMapDataZMQ
                r = _measure(lambda cls=cls, w=workers, b=buf, f=func: cls(ds(), w, f,
                                                                           buffer_size=b),
                             consumer_ms, args.seconds)
                rows.append({"kind": "hand", "workload": name, "consumer_ms": consumer_ms,
                             "config": f"{backend} x{workers} buf{buf}", **r})
            r = _measure(lambda f=func: MultiProcessMapDataZMQ(ds(), os.cpu_count(), f),
                         consumer_ms, args.seconds)
            rows.append({"kind": "default", "workload": name, "consumer_ms": consumer_ms,
                         "config": f"process x{os.cpu_count()} buf200", **r})
            r = _measure(lambda f=func: ParallelMapData(ds(), "auto", f, buffer_size="auto"),
                         consumer_ms, args.seconds, converge=args.converge)
            rows.append({"kind": "auto", "workload": name, "consumer_ms": consumer_ms,
                         "config": f"auto -> {r['backend']} x{r['workers']}", **r})
            print(json.dumps(rows[-1], default=str), file=sys.stderr, flush=True)
    return rows


def run_tf(args: argparse.Namespace) -> list[dict[str, Any]]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    rows = []
    for name in args.workloads:
        func = FUNCS[name]

        def np_func(i: Any, func: Callable[[Any], Any] = func) -> Any:
            return np.int64(func([int(i)])[0])

        for consumer_ms in CONSUMER_MS:
            ds = tf.data.Dataset.range(10**7).map(
                lambda i, f=np_func: tf.py_function(f, [i], tf.int64),
                num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
            itr = iter(ds.as_numpy_iterator())
            t_end = time.perf_counter() + max(0.5, min(1.0, args.seconds / 3))
            while time.perf_counter() < t_end:
                next(itr)
                _spin_cpu(consumer_ms)
            cpu0, t0, n = _cpu_seconds(), time.perf_counter(), 0
            while time.perf_counter() - t0 < args.seconds:
                next(itr)
                _spin_cpu(consumer_ms)
                n += 1
            elapsed = time.perf_counter() - t0
            rows.append({"kind": "tf.data", "workload": name, "consumer_ms": consumer_ms,
                         "config": "tf.data AUTOTUNE", "rate": n / elapsed,
                         "cpu_per_item": (_cpu_seconds() - cpu0) / max(1, n)})
    return rows


def table(rows: list[dict[str, Any]], cpus: str) -> str:
    out = [f"\ncores {cpus}:",
           "| workload | consumer | best hand (items/s, CPU ms/item) | auto: config | "
           "auto / best | auto CPU / best | converge s | auto / defaults | tf.data / best |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["workload"] for r in rows):
        for consumer_ms in CONSUMER_MS:
            sel = [r for r in rows if r["workload"] == name and r["consumer_ms"] == consumer_ms]
            hand = [r for r in sel if r["kind"] == "hand"]
            if not hand:
                continue
            best = max(hand, key=lambda r: r["rate"])
            auto = next(r for r in sel if r["kind"] == "auto")
            default = next(r for r in sel if r["kind"] == "default")
            tfr = next((r for r in sel if r["kind"] == "tf.data"), None)
            conv = auto.get("converge_s")
            peer = "-" if tfr is None else f"{tfr['rate'] / best['rate']:.2f}"
            out.append(
                f"| {name} | {consumer_ms} ms | {best['config']}: {best['rate']:.0f}, "
                f"{1000 * best['cpu_per_item']:.2f} | {auto['config']} | "
                f"{auto['rate'] / best['rate']:.2f} | "
                f"{auto['cpu_per_item'] / best['cpu_per_item']:.2f} | "
                f"{'-' if conv is None else f'{conv:.1f}'} | "
                f"{auto['rate'] / default['rate']:.2f} | "
                f"{peer} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a smaller grid, shorter runs")
    p.add_argument("--cpus", nargs="+", default=["0", "0,1"], help="taskset CPU lists")
    p.add_argument("--seconds", type=float, default=None, help="measured seconds per config")
    p.add_argument("--converge", type=float, default=None,
                   help="the most seconds an autotuned run may take to converge")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    p.add_argument("--part", choices=["dataflow", "tf"], help=argparse.SUPPRESS)
    p.add_argument("--no-tf", action="store_true", help="skip the tf.data peer figure")
    args = p.parse_args()
    if args.seconds is None:
        args.seconds = 1.5 if args.quick else 4.0
    if args.converge is None:
        args.converge = 8.0 if args.quick else 15.0
    if args.part is not None:  # a child: one CPU set, one part
        rows = run_dataflow(args) if args.part == "dataflow" else run_tf(args)
        print(json.dumps(rows, default=str))
        return
    forward = [*(["--quick"] if args.quick else []), "--seconds", str(args.seconds),
               "--converge", str(args.converge), "--workloads", *args.workloads]
    results = {}
    for cpus in args.cpus:
        rows: list[dict[str, Any]] = []
        for part in ["dataflow"] + ([] if args.no_tf else ["tf"]):
            cmd = ["taskset", "-c", cpus, sys.executable, __file__, "--part", part, *forward]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                print(res.stderr[-3000:], file=sys.stderr)
                continue
            rows += json.loads(res.stdout.strip().splitlines()[-1])
        results[cpus] = rows
        print(table(rows, cpus), flush=True)
    with open(os.environ.get("BENCH_AUTOTUNE_JSON", "/tmp/bench_autotune.json"), "w") as f:
        json.dump(results, f, default=str)


if __name__ == "__main__":
    main()
