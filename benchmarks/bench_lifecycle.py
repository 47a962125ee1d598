"""The cost of starting and stopping workers, side by side with tensorpack 0.11 (a black box).

    .venv/bin/python benchmarks/bench_lifecycle.py [--cycles 40] [--rounds 5]

One cycle: build ``BatchData(MultiProcessRunnerZMQ(DataFromList(100 small datapoints), 2), 8)``,
``reset_state()``, take one batch, delete the flow and collect garbage (its ``__del__`` stops the
workers: dataflow's also removes its sockets and shared memory, and waits for the workers to
exit). Each implementation runs in its own process; rounds alternate between them and the best
round of each counts (the machine is shared). Reported: milliseconds per cycle and the ratio
tensorpack / dataflow (above 1: dataflow is cheaper).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, run_impl, tensorpack_available


def measure(impl: str, cycles: int) -> dict:
    if impl == "tensorpack":
        import tensorpack.dataflow as tp
    else:
        import dataflow as tp

    def cycle() -> None:
        ds = tp.DataFromList([[i] for i in range(100)], shuffle=False)
        flow = tp.BatchData(tp.MultiProcessRunnerZMQ(ds, 2), 8)
        flow.reset_state()
        next(iter(flow))
        del flow
        gc.collect()

    for _ in range(3):  # warm up (imports, first forks)
        cycle()
    start = time.perf_counter()
    for _ in range(cycles):
        cycle()
    return {"ms_per_cycle": (time.perf_counter() - start) / cycles * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["dataflow", "tensorpack"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl, args.cycles)))
        return
    impls = ["dataflow"] + (["tensorpack"] if tensorpack_available() else [])
    runs: dict[str, list[float]] = {impl: [] for impl in impls}
    for _ in range(args.rounds):
        for impl in impls:
            out = run_impl(Path(__file__), impl, "--cycles", str(args.cycles))
            assert out is not None
            runs[impl].append(out["ms_per_cycle"])
    best = {impl: min(v) for impl, v in runs.items()}
    rows = [[impl, f"{best[impl]:.1f}", ", ".join(f"{v:.1f}" for v in runs[impl])]
            for impl in impls]
    print(markdown_table(["implementation", "ms per cycle (best)", "all rounds"], rows))
    if "tensorpack" in best:
        print(f"\ntensorpack / dataflow: {best['tensorpack'] / best['dataflow']:.2f}x")
    else:
        print("\n(tensorpack not installed: see _common.TENSORPACK_SETUP)")


if __name__ == "__main__":
    main()
