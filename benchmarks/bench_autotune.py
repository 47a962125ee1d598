"""Autotuned parallelism against a hand grid, today's defaults and tf.data's AUTOTUNE, in one run.

    flock /tmp/dataflow-bench.lock env PYTHONPATH=src .venv/bin/python \\
        benchmarks/bench_autotune.py [--quick] [--cpus 0 0,1] [--seconds 1.5] [--rounds 3]

For each CPU set (each run in its own subprocess pinned with ``taskset -c``), each workload, with
and without a slow consumer (20 ms of CPU work per item, a trainer's step), it measures the
steady-state throughput (items/s) and CPU seconds per item (the process and its worker
processes) of:

* every configuration of a hand grid: back end (threads, processes) x workers x buffer size,
  once each, to find the best hand configuration;
* then, in ``--rounds`` interleaved rounds (best hand, defaults, auto; the order rotating from
  round to round), so that load that comes and goes hits all three alike, and the medians are
  compared (the grid's maximum over many noisy configurations is biased upward):

  * the best hand configuration found by the grid;
  * today's defaults: ``MultiProcessMapDataZMQ(ds, os.cpu_count(), f)`` (buffer 200);
  * ``ParallelMapData(ds, "auto", f, backend="auto", buffer_size="auto")``: measured after it
    converged (or after ``--converge`` seconds), with its time to converge (when its last
    decision was first seen: its state is read every 50 ms);
* tf.data: ``Dataset.range(n).map(py_function(f), num_parallel_calls=AUTOTUNE).prefetch(
  AUTOTUNE)`` (the peer figure; its own subprocess), the same map function.

Workloads: ``gil`` (pure Python, ~1 ms, holds the GIL), ``cv2`` (OpenCV resize + blur of a
1024x768 image, one OpenCV thread, releases the GIL), ``io5`` / ``io20`` (waits 5 / 20 ms,
like a read from remote storage), ``lmdb`` (the ImageNet-style pipeline of ``bench_e2e.py``:
an LMDB of 500x375 JPEG records read in order, ``LocallyShuffleData``, then the map:
``cv2.imdecode`` + GoogleNetRandomCropAndResize(224) + Flip + Lighting; the LMDB, 256 images, is
built in a temporary directory and removed afterwards) and ``jpeg`` (the same with the fused
path, ``AugmentorList.augment_jpeg``: only the crop window is decoded). One item is one image
(no batching, so that the mapper is the flow the consumer iterates). The table gives the ratios
auto / best hand setting (throughput; CPU per item) and auto / defaults, and tf.data / best
hand setting.

``--short`` (default ``--cpus 0,1``, 5 rounds) measures short passes instead, where a tuner
has no time to converge first: a fresh strict stage maps one pass of ``io10`` (4,000 inputs
of a 10 ms wait, an evaluation pass) or ``gil2`` (1,200 inputs of 2 ms of pure Python); the
hand settings of ``SHORT`` once each, then the best of them (by the rate over the second half
of the pass) and ``ParallelMapData(ds, "auto", f, buffer_size="auto", strict=True)`` in
interleaved rounds (the order alternating). The table gives the medians' ratio over the
second half of the pass and over the whole pass (from ``reset_state()``), and when the
autotuned pass first ran a tenth of its inputs at 0.9x the best's second-half rate.

``--epochs N`` (default ``--cpus 0,1``) compares one ``"auto"`` stage over ``N`` strict epochs
of 3,000 ``io10`` inputs with one over a single epoch of ``N`` x 3,000: the worker count and
the controller's window after each 3,000 inputs, and the rate over the last quarter of the
inputs. An autotuned stage should settle as well over many short epochs as over one long one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

WORKLOADS = ("gil", "cv2", "io5", "io20", "lmdb", "jpeg")
E2E = ("lmdb", "jpeg")  # read from the LMDB of JPEG records
E2E_IMAGES = 256  # records in the temporary LMDB (built in a few seconds)
E2E_SHUFFLE = 100  # LocallyShuffleData's buffer
CONSUMER_MS = (0, 20)
KINDS = ("best", "default", "auto")  # measured in interleaved rounds
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


def gil2(dp: Any) -> Any:
    n = 0
    for i in range(44_000):  # ~2 ms of pure Python on this machine
        n += i * i % 7
    return [dp[0], n]


def io10(dp: Any) -> Any:
    time.sleep(0.010)
    return dp


FUNCS: dict[str, Callable[[Any], Any]] = {"gil": gil, "cv2": cv2_work, "io5": io5, "io20": io20,
                                          "gil2": gil2, "io10": io10}

#: the short-epoch workloads (``--short``): a fresh stage maps one strict pass of ``items``
#: inputs, like an evaluation pass; the hand settings tried for each (back end, workers,
#: buffer: the default 200, and 512 where 200 bounds the inputs in flight)
SHORT: dict[str, dict[str, Any]] = {
    "io10": {"items": 4000, "grid": [("thread", w, 200) for w in (16, 32, 64, 128, 256)]
             + [("thread", 256, 512)]},
    "gil2": {"items": 1200, "grid": [("thread", 1, 200), ("thread", 2, 200),
                                     ("process", 1, 200), ("process", 2, 200)]},
}


def _func(name: str) -> Callable[[Any], Any]:
    """The map function of workload ``name`` (the e2e ones: bench_e2e's, picklable)."""
    if name not in E2E:
        return FUNCS[name]
    import bench_e2e
    from dataflow import imgaug

    cls = bench_e2e.FusedDecodeAugment if name == "jpeg" else bench_e2e.DecodeAugment
    return cls(imgaug)


def _source(name: str, lmdb: str | None) -> Any:
    """A fresh input flow of workload ``name``."""
    from dataflow import DataFromList, LMDBSerializer, LocallyShuffleData

    if name in E2E:
        assert lmdb is not None
        return LocallyShuffleData(LMDBSerializer.load(lmdb, shuffle=False), E2E_SHUFFLE, seed=0)
    return DataFromList([[i] for i in range(10_000)], shuffle=False)


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
    converged_s, steady = None, None
    polled = start
    seen, decided = 0, start  # the last decision's window, and when it was first seen
    while True:  # warm up (an autotuned flow: until it converged, at most `converge` s)
        next(itr)
        _spin_cpu(consumer_ms)
        now = time.perf_counter()
        # the tuner's state is read every 50 ms, not per item: building it per item made the
        # consumer the bottleneck of work that waits (17,000 items/s on two cores, more
        # decisions to copy each time), and the windows the tuner measured fell behind
        if now - polled < 0.05 and now - start < converge:
            continue
        polled = now
        tuned = flow.autotune_state() if hasattr(flow, "autotune_state") else None
        if tuned is None:
            if now >= warm_end:
                break
            continue
        windows = tuned["window"]
        steady = tuned["converged_at"] is not None and windows - tuned["converged_at"] >= 4
        last = tuned["decisions"][-1]["window"] if tuned["decisions"] else 0
        if last != seen:  # (windows differ in length: the quick start's are short)
            seen, decided = last, now
        if (steady and now >= warm_end) or now - start >= converge:
            converged_s = decided - start
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
            "steady": steady, "workers": getattr(flow, "num_workers", None),
            "autotune": tuned, "backend": getattr(flow, "backend", type(flow).__name__)}


def _grid(quick: bool) -> list[tuple[str, int, int]]:
    threads = (1, 4, 16) if quick else (1, 2, 4, 16, 32)
    procs = (1,) if quick else (1, 2)
    return [("thread", w, 200) for w in threads] + [("process", w, 200) for w in procs]


def run_dataflow(args: argparse.Namespace) -> list[dict[str, Any]]:
    import logging

    import cv2

    from dataflow.parallel import MultiProcessMapDataZMQ, MultiThreadMapData, ParallelMapData

    cv2.setNumThreads(1)  # the workers are the parallelism
    logging.basicConfig(level=logging.WARNING)
    rows: list[dict[str, Any]] = []
    for name in args.workloads:
        func = _func(name)
        for consumer_ms in CONSUMER_MS:
            cell = {"workload": name, "consumer_ms": consumer_ms}

            def hand(backend: str, workers: int, buf: int, f: Any = func,
                     name: str = name) -> Callable[[], Any]:
                cls = MultiThreadMapData if backend == "thread" else MultiProcessMapDataZMQ
                return lambda: cls(_source(name, args.lmdb), workers, f, buffer_size=buf)

            grid = []
            for backend, workers, buf in _grid(args.quick):
                r = _measure(hand(backend, workers, buf), consumer_ms, args.seconds)
                grid.append({"kind": "hand", **cell, "config": f"{backend} x{workers}",
                             "spec": (backend, workers, buf), **r})
            rows += grid
            best = max(grid, key=lambda r: r["rate"])
            makers: dict[str, tuple[str, Callable[[], Any]]] = {
                "best": (best["config"], hand(*best["spec"])),
                "default": (f"process x{os.cpu_count()}",
                            hand("process", os.cpu_count() or 1, 200)),
                "auto": ("auto", lambda f=func, name=name: ParallelMapData(
                    _source(name, args.lmdb), "auto", f, buffer_size="auto")),
            }
            for rnd in range(args.rounds):  # interleaved: best, default, auto, rotating
                for kind in KINDS[rnd % 3:] + KINDS[: rnd % 3]:
                    config, make = makers[kind]
                    r = _measure(make, consumer_ms, args.seconds,
                                 converge=args.converge if kind == "auto" else 0.0)
                    if kind == "auto":
                        config = f"{r['backend']} x{r['workers']}"  # (after any move)
                    rows.append({"kind": kind, **cell, "round": rnd, "config": config, **r})
            print(json.dumps(rows[-1], default=str), file=sys.stderr, flush=True)
    return rows


def _epoch(make: Callable[[], Any], items: int) -> dict[str, Any]:
    """One strict pass of a fresh stage: when each result came (from ``reset_state()``)."""
    flow = make()
    t0 = time.perf_counter()
    flow.reset_state()
    times = [time.perf_counter() for _ in flow]
    tuned = flow.autotune_state() if hasattr(flow, "autotune_state") else None
    config = f"{getattr(flow, 'backend', '?')} x{getattr(flow, 'num_workers', '?')}"
    flow.close()
    assert len(times) == items, (len(times), items)
    half = items // 2
    step = max(1, items // 100)  # the curve: every 1 % of the pass
    return {"epoch_s": times[-1] - t0, "first_s": times[0] - t0,
            "second_rate": (items - half) / (times[-1] - times[half - 1]),
            "curve": [t - times[0] for t in times[::step]], "step": step, "config": config,
            "decisions": None if tuned is None else tuned["decisions"]}


def run_short(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The short-epoch workloads: the hand settings of ``SHORT`` once each, then the best of
    them and ``"auto"`` in ``--rounds`` interleaved rounds (the order alternating)."""
    from dataflow import DataFromList
    from dataflow.parallel import MultiProcessMapDataZMQ, MultiThreadMapData, ParallelMapData

    rows: list[dict[str, Any]] = []
    for name in args.short_workloads:
        func, items = FUNCS[name], SHORT[name]["items"]

        def source(items: int = items) -> Any:
            return DataFromList([[i] for i in range(items)], shuffle=False)

        def hand(backend: str, workers: int, buf: int, f: Any = func) -> Callable[[], Any]:
            cls = MultiThreadMapData if backend == "thread" else MultiProcessMapDataZMQ
            return lambda: cls(source(), workers, f, buffer_size=buf, strict=True)

        grid = []
        for backend, workers, buf in SHORT[name]["grid"]:
            r = _epoch(hand(backend, workers, buf), items)
            if buf != 200:
                r["config"] += f" (buffer {buf})"
            grid.append({"kind": "hand", "workload": name, "items": items,
                         "spec": (backend, workers, buf), **r})
            print(f"{name} {r['config']}: {r['epoch_s']:.2f} s, 2nd half "
                  f"{r['second_rate']:.0f}/s", file=sys.stderr)
        rows += grid
        best = max(grid, key=lambda r: r["second_rate"])
        makers: dict[str, Callable[[], Any]] = {
            "best": hand(*best["spec"]),
            "auto": lambda f=func: ParallelMapData(source(), "auto", f, buffer_size="auto",
                                                   strict=True),
        }
        for rnd in range(args.rounds):
            for kind in ("best", "auto") if rnd % 2 == 0 else ("auto", "best"):
                r = _epoch(makers[kind], items)
                if kind == "best":
                    r["config"] = best["config"]
                rows.append({"kind": kind, "workload": name, "items": items, "round": rnd,
                             **r})
                if kind == "auto":
                    moves = [(d["window"], d["old"], d["new"], d["reason"][:40])
                             for d in r["decisions"]]
                    print(f"{name} auto round {rnd}: {r['epoch_s']:.2f} s, {moves}",
                          file=sys.stderr, flush=True)
    return rows


#: inputs per epoch of ``--epochs`` (the short epochs that one long epoch is compared with)
EPOCH_ITEMS = 3000


def run_epochs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--epochs``: one "auto" stage over ``args.epochs`` epochs of :data:`EPOCH_ITEMS`
    ``io10`` inputs, and one over a single epoch of as many inputs; after each
    :data:`EPOCH_ITEMS` inputs, the worker count and the controller's window."""
    from dataflow import DataFromList
    from dataflow.parallel import ParallelMapData

    rows: list[dict[str, Any]] = []
    for kind, items, passes in (("short", EPOCH_ITEMS, args.epochs),
                                ("long", EPOCH_ITEMS * args.epochs, 1)):
        flow = ParallelMapData(DataFromList([[i] for i in range(items)], shuffle=False),
                               "auto", io10, buffer_size="auto", strict=True)
        flow.reset_state()
        times: list[float] = []
        marks = []
        for _ in range(passes):
            for _dp in flow:
                times.append(time.perf_counter())
                if len(times) % EPOCH_ITEMS == 0:
                    state = flow.autotune_state() or {}
                    marks.append((flow.num_workers, state.get("window")))
        flow.close()
        quarter = len(times) // 4
        rate = quarter / (times[-1] - times[-quarter - 1])
        rows.append({"kind": kind, "marks": marks, "last_quarter_rate": rate,
                     "seconds": times[-1] - times[0]})
        print(f"{kind}: {marks}, last quarter {rate:.0f}/s", file=sys.stderr, flush=True)
    return rows


def epochs_table(rows: list[dict[str, Any]], cpus: str) -> str:
    short, long = rows
    out = [f"\ncores {cpus}, io10, {len(short['marks'])} epochs of {EPOCH_ITEMS} inputs "
           "against one epoch of as many:\n", "| inputs | short epochs: workers (window) | "
           "one long epoch: workers (window) |", "|---|---|---|"]
    for k, ((sw, swin), (lw, lwin)) in enumerate(zip(short["marks"], long["marks"]), 1):
        out.append(f"| {k * EPOCH_ITEMS:,} | {sw} ({swin}) | {lw} ({lwin}) |")
    out.append(f"\nlast quarter: short epochs {short['last_quarter_rate']:.0f}/s, one long "
               f"epoch {long['last_quarter_rate']:.0f}/s")
    return "\n".join(out)


def _reach(row: dict[str, Any], rate: float) -> float | None:
    """Seconds from the first result until a tenth of the pass first ran at ``rate``."""
    curve, step = row["curve"], row["step"]
    span = 10  # (a tenth of the pass: ten points of the curve)
    for i in range(len(curve) - span):
        if step * span / max(1e-9, curve[i + span] - curve[i]) >= rate:
            return curve[i]
    return None


def short_table(rows: list[dict[str, Any]], cpus: str) -> str:
    out = [f"\ncores {cpus}, short epochs (a fresh stage per pass):\n",
           "| workload | items | best hand: config, pass s | best 2nd half items/s | "
           "auto 2nd half items/s (each round) | auto / best, 2nd half | auto / best, pass | "
           "auto at 0.9x best after s (each round) | auto ended at |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["workload"] for r in rows):
        sel = [r for r in rows if r["workload"] == name]
        best = [r for r in sel if r["kind"] == "best"]
        auto = [r for r in sel if r["kind"] == "auto"]
        if not best or not auto:
            continue
        b2, a2 = _median(best, "second_rate"), _median(auto, "second_rate")
        bp, ap = _median(best, "epoch_s"), _median(auto, "epoch_s")
        reach = ", ".join("-" if x is None else f"{x:.2f}"
                          for x in (_reach(r, 0.9 * b2) for r in auto))
        rates = ", ".join(f"{r['second_rate']:.0f}" for r in auto)
        ended = ", ".join(sorted({r["config"] for r in auto}))
        out.append(
            f"| {name} | {sel[0]['items']} | {best[0]['config']}, {bp:.2f} | {b2:.0f} | "
            f"{rates} | {a2 / b2:.2f} | {bp / ap:.2f} | {reach} | {ended} |")
    return "\n".join(out)


def run_tf(args: argparse.Namespace) -> list[dict[str, Any]]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import cv2
    import numpy as np
    import tensorflow as tf

    cv2.setNumThreads(1)
    rows = []
    for name in args.workloads:
        func = _func(name)
        if name in E2E:  # the same records, from memory, through the same map function
            import bench_e2e

            items = bench_e2e._read_lmdb(Path(args.lmdb))

            def np_func(i: Any, func: Callable[[Any], Any] = func, items: Any = items) -> Any:
                return np.int64(func(items[int(i) % len(items)])[1])
        else:
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


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload and consumer: the medians over the rounds and the ratios."""
    out = []
    for name in dict.fromkeys(r["workload"] for r in rows):
        for consumer_ms in CONSUMER_MS:
            sel = [r for r in rows if r["workload"] == name and r["consumer_ms"] == consumer_ms]
            got = {k: [r for r in sel if r["kind"] == k] for k in (*KINDS, "tf.data")}
            if not all(got[k] for k in KINDS):
                continue
            best, default, auto = (
                {"rate": _median(got[k], "rate"), "cpu": _median(got[k], "cpu_per_item")}
                for k in KINDS)
            # the time of the last decision; None: still deciding when the cap came
            conv = [r["converge_s"] if r.get("steady") else None for r in got["auto"]]
            tf_rate = _median(got["tf.data"], "rate") if got["tf.data"] else None
            out.append({
                "workload": name, "consumer_ms": consumer_ms, "best_config":
                got["best"][0]["config"], "best_rate": best["rate"], "best_cpu": best["cpu"],
                "auto_configs": [r["config"] for r in got["auto"]],
                "auto_best": auto["rate"] / best["rate"],
                "auto_cpu_best": auto["cpu"] / best["cpu"],
                "converge": conv, "auto_default": auto["rate"] / default["rate"],
                "tf_best": None if tf_rate is None else tf_rate / best["rate"],
                # the noise: how far apart the best hand configuration's own rounds were
                "spread": (max(r["rate"] for r in got["best"])
                           - min(r["rate"] for r in got["best"])) / best["rate"],
            })
    return out


def table(rows: list[dict[str, Any]], cpus: str, cap: float) -> str:
    out = [f"\ncores {cpus}:\n",
           "| workload | consumer | best hand: items/s, CPU ms/item | auto chose (each round) | "
           "auto / best | auto CPU / best | converge s (each round) | auto / defaults | "
           "tf.data / best | best's spread |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary(rows):
        conv = ", ".join(f">{cap:.0f}" if c is None else f"{c:.1f}" for c in s["converge"])
        peer = "-" if s["tf_best"] is None else f"{s['tf_best']:.2f}"
        out.append(
            f"| {s['workload']} | {s['consumer_ms']} ms | {s['best_config']}: "
            f"{s['best_rate']:.0f}, {1000 * s['best_cpu']:.2f} | "
            f"{', '.join(s['auto_configs'])} | {s['auto_best']:.2f} | "
            f"{s['auto_cpu_best']:.2f} | {conv} | {s['auto_default']:.2f} | {peer} | "
            f"{100 * s['spread']:.1f} % |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a smaller grid, one round")
    p.add_argument("--cpus", nargs="+", default=None,
                   help="taskset CPU lists (default: 0 and 0,1; --short: 0,1)")
    p.add_argument("--short", action="store_true",
                   help="the short-epoch workloads: one pass of a fresh stage, best hand "
                   "setting against auto over the second half of the pass")
    p.add_argument("--short-workloads", nargs="+", default=list(SHORT), choices=list(SHORT))
    p.add_argument("--epochs", type=int, default=0,
                   help="one auto stage over this many epochs of 3,000 io10 inputs against "
                   "one over a single epoch of as many")
    p.add_argument("--seconds", type=float, default=1.5, help="measured seconds per config")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds of best hand, defaults and auto (default 3)")
    p.add_argument("--converge", type=float, default=12.0,
                   help="the most seconds an autotuned run may take to converge")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    p.add_argument("--lmdb", help=argparse.SUPPRESS)
    p.add_argument("--part", choices=["dataflow", "tf", "short", "epochs"],
                   help=argparse.SUPPRESS)
    p.add_argument("--no-tf", action="store_true", help="skip the tf.data peer figure")
    p.add_argument("--table", metavar="JSON",
                   help="print the tables of a saved run ($BENCH_AUTOTUNE_JSON) and exit")
    args = p.parse_args()
    if args.table:
        with open(args.table) as f:
            for cpus, rows in json.load(f).items():
                short = rows and rows[0].get("kind") == "hand" and "second_rate" in rows[0]
                print(short_table(rows, cpus) if short else table(rows, cpus, args.converge))
        return
    if args.rounds is None:
        args.rounds = 5 if args.short else 1 if args.quick else 3
    if args.cpus is None:
        args.cpus = ["0,1"] if args.short or args.epochs else ["0", "0,1"]
    if args.part is not None:  # a child: one CPU set, one part
        parts = {"dataflow": run_dataflow, "tf": run_tf, "short": run_short,
                 "epochs": run_epochs}
        print(json.dumps(parts[args.part](args), default=str))
        return
    if args.epochs:
        for cpus in args.cpus:
            cmd = ["taskset", "-c", cpus, sys.executable, __file__, "--part", "epochs",
                   "--epochs", str(args.epochs)]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            print(res.stderr[-3000:], file=sys.stderr)
            if res.returncode == 0:
                rows = json.loads(res.stdout.strip().splitlines()[-1])
                print(epochs_table(rows, cpus), flush=True)
        return
    if args.short:
        results = {}
        for cpus in args.cpus:
            cmd = ["taskset", "-c", cpus, sys.executable, __file__, "--part", "short",
                   "--rounds", str(args.rounds), "--short-workloads", *args.short_workloads]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                print(res.stderr[-3000:], file=sys.stderr)
                continue
            print(res.stderr, file=sys.stderr)
            results[cpus] = json.loads(res.stdout.strip().splitlines()[-1])
            print(short_table(results[cpus], cpus), flush=True)
        with open(os.environ.get("BENCH_AUTOTUNE_JSON", "/tmp/bench_autotune_short.json"),
                  "w") as f:
            json.dump(results, f, default=str)
        return
    tmp = None
    try:
        if set(args.workloads) & set(E2E):
            import bench_e2e

            tmp = tempfile.mkdtemp(prefix="bench_autotune_")
            bench_e2e.DATA_DIR = Path(tmp)
            args.lmdb = str(bench_e2e.make_data(E2E_IMAGES))
        forward = [*(["--quick"] if args.quick else []), "--seconds", str(args.seconds),
                   "--rounds", str(args.rounds), "--converge", str(args.converge),
                   *(["--lmdb", args.lmdb] if args.lmdb else []),
                   "--workloads", *args.workloads]
        results = {}
        for cpus in args.cpus:
            rows: list[dict[str, Any]] = []
            for part in ["dataflow"] + ([] if args.no_tf else ["tf"]):
                t0 = time.perf_counter()
                cmd = ["taskset", "-c", cpus, sys.executable, __file__, "--part", part, *forward]
                res = subprocess.run(cmd, capture_output=True, text=True, check=False)
                print(f"cores {cpus}, {part}: {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                      flush=True)
                if res.returncode != 0:
                    print(res.stderr[-3000:], file=sys.stderr)
                    continue
                rows += json.loads(res.stdout.strip().splitlines()[-1])
            results[cpus] = rows
            print(table(rows, cpus, args.converge), flush=True)
        with open(os.environ.get("BENCH_AUTOTUNE_JSON", "/tmp/bench_autotune.json"), "w") as f:
            json.dump(results, f, default=str)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
