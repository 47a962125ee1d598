"""Per-datapoint cost of the core wrappers, side by side with tensorpack 0.11 and plain Python.

    .venv/bin/python benchmarks/bench_core.py

Measures, best of several repeats, the nanoseconds per datapoint of
  1. DataFromList -> MapDataComponent (a trivial map), and
  2. DataFromList -> BatchData(32) of small datapoints ([int, float, 4-float32 array]),
for `dataflow`, a plain Python generator doing the same work, and tensorpack 0.11 run as a black
box in its own virtualenv (benchmarks/.venv-tensorpack; see _common.TENSORPACK_SETUP).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

N_MAP = 300_000
N_BATCH = 100_000
REPEATS = 7


def _inc(x):
    return x + 1


def _best_ns_per_item(make_iter, n):
    best = float("inf")
    for _ in range(REPEATS):
        it = make_iter()
        gc.collect()
        t0 = time.perf_counter_ns()
        for _ in it:
            pass
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def measure(impl: str) -> dict:
    import numpy as np

    map_points = [[i, i] for i in range(N_MAP)]
    arr = np.zeros(4, np.float32)
    batch_points = [[i, float(i), arr] for i in range(N_BATCH)]
    if impl == "plain":

        def map_iter():
            for dp in map_points:
                dp = list(dp)
                dp[0] = _inc(dp[0])
                yield dp

        def batch_iter():
            holder = []
            for dp in batch_points:
                holder.append(dp)
                if len(holder) == 32:
                    yield [
                        np.asarray([d[0] for d in holder], dtype=np.int32),
                        np.asarray([d[1] for d in holder], dtype=np.float32),
                        np.stack([d[2] for d in holder]),
                    ]
                    holder = []

        return {"map_ns": _best_ns_per_item(map_iter, N_MAP),
                "batch_ns": _best_ns_per_item(batch_iter, N_BATCH)}

    if impl == "tensorpack":
        import tensorpack.dataflow as tp
    else:
        import dataflow as tp
    mflow = tp.MapDataComponent(tp.DataFromList(map_points, shuffle=False), _inc, 0)
    bflow = tp.BatchData(tp.DataFromList(batch_points, shuffle=False), 32)
    mflow.reset_state()
    bflow.reset_state()
    return {"map_ns": _best_ns_per_item(lambda: iter(mflow), N_MAP),
            "batch_ns": _best_ns_per_item(lambda: iter(bflow), N_BATCH)}


def main() -> None:
    from _common import TENSORPACK_SETUP, markdown_table, run_impl

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["ours", "plain", "tensorpack"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl)))
        return
    script = Path(__file__).resolve()
    res = {impl: run_impl(script, impl) for impl in ("ours", "plain", "tensorpack")}
    ours = res["ours"]
    rows = []
    for key, label in (("map_ns", "DataFromList -> MapDataComponent"),
                       ("batch_ns", "DataFromList -> BatchData(32), small datapoints")):
        tp = res["tensorpack"]
        row = [label, f"{ours[key]:.0f}", f"{res['plain'][key]:.0f}",
               f"{tp[key]:.0f}" if tp else "n/a",
               f"{res['plain'][key] / ours[key]:.2f}",
               f"{tp[key] / ours[key]:.2f}" if tp else "n/a"]
        rows.append(row)
    print(markdown_table(
        ["chain", "dataflow ns/dp", "plain generator ns/dp", "tensorpack ns/dp",
         "speed vs plain (plain/ours)", "speed vs tensorpack (tp/ours)"], rows))
    if res["tensorpack"] is None:
        print(f"\ntensorpack 0.11 not installed: skipped. Set it up with:\n  {TENSORPACK_SETUP}")


if __name__ == "__main__":
    main()
