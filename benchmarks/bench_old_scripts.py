"""Two paths of tensorpack's own ImageNet loading scripts, side by side with tensorpack 0.11 on
the same NumPy version.

    .venv/bin/python benchmarks/bench_old_scripts.py [--rounds 3]

1. ``MultiProcessRunner`` (tensorpack's ``PrefetchData``) with one process and a 5000-deep
   queue, moving raw LMDB records (66 KB of bytes each) from ``LMDBData``: datapoints/s at the
   consumer, after a warm-up.
2. ``BatchData(64)`` over ``DataFromList`` of ``[float32 (32,), int64]`` datapoints: microseconds
   per batch (best of 7 passes over 1000 batches).

tensorpack runs in a virtualenv with the same NumPy as ours (tensorpack's BatchData on NumPy 2):
``benchmarks/.venv-tensorpack-np2``, set up with the command in ``TENSORPACK_NP2_SETUP`` (or
``TENSORPACK_NP2_PYTHON=...``). The implementations alternate for ``--rounds`` rounds; the best
round of each is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TP_PYTHON = Path(os.environ.get("TENSORPACK_NP2_PYTHON",
                                HERE / ".venv-tensorpack-np2" / "bin" / "python"))
TENSORPACK_NP2_SETUP = (
    "python3 -m venv benchmarks/.venv-tensorpack-np2 && benchmarks/.venv-tensorpack-np2/bin/pip "
    "install 'tensorpack==0.11' \"numpy==$(.venv/bin/python -c 'import numpy; "
    "print(numpy.__version__)')\" opencv-python-headless lmdb h5py msgpack msgpack-numpy pyzmq tqdm"
)
RECORDS, RECORD_BYTES, QUEUE_DPS = 3000, 66_000, 12_000


def make_lmdb(path: str) -> None:
    """Raw records as tensorpack's LMDBSerializer lays them out (8-digit keys, ``__keys__``)."""
    import pickle

    import lmdb
    import numpy as np

    env = lmdb.open(path, subdir=False, map_size=1 << 32, meminit=False, map_async=True)
    rs = np.random.RandomState(0)
    keys = [b"%08d" % i for i in range(RECORDS)]
    with env.begin(write=True) as txn:
        for k in keys:
            txn.put(k, rs.bytes(RECORD_BYTES))
        txn.put(b"__keys__", pickle.dumps(keys, protocol=-1))
    env.sync()
    env.close()


def measure(impl: str, part: str, path: str) -> dict:
    import gc

    import numpy as np

    if impl == "tensorpack":
        import tensorpack.dataflow as tp
    else:
        import dataflow as tp
    if part == "queue":
        ds = tp.MultiProcessRunner(tp.LMDBData(path, shuffle=False), 5000, 1)
        ds.reset_state()

        def endless():
            while True:
                yield from ds

        it = endless()
        for _ in range(500):  # warm-up: the worker is running and the queue filling
            next(it)
        t0 = time.perf_counter()
        for _ in range(QUEUE_DPS):
            next(it)
        rate = QUEUE_DPS / (time.perf_counter() - t0)
        return {"dps": rate}
    rs = np.random.RandomState(0)
    xs = rs.randn(64_000, 32).astype(np.float32)
    ys = rs.randint(0, 10, 64_000).astype(np.int64)
    flow = tp.BatchData(tp.DataFromList([[x, y] for x, y in zip(xs, ys)], shuffle=False), 64)
    flow.reset_state()
    best = float("inf")
    for _ in range(7):
        gc.collect()
        t0 = time.perf_counter()
        for _ in flow:
            pass
        best = min(best, time.perf_counter() - t0)
    return {"us_per_batch": best / 1000 * 1e6}


def _run(impl: str, part: str, path: str) -> dict:
    python = str(TP_PYTHON) if impl == "tensorpack" else sys.executable
    proc = subprocess.run(
        [python, __file__, "--impl", impl, "--part", part, "--path", path],
        capture_output=True, text=True, timeout=300, check=False,
        start_new_session=True,  # tensorpack's queue worker ends with its process group
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} {part} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    from _common import markdown_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["ours", "tensorpack"])
    parser.add_argument("--part", choices=["queue", "batch"])
    parser.add_argument("--path")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl, args.part, args.path)), flush=True)
        import multiprocessing

        for child in multiprocessing.active_children():  # tensorpack's worker holds stdout
            child.kill()
        os._exit(0)  # tensorpack's runner joins its worker at exit for ever
    if not TP_PYTHON.exists():
        sys.exit(f"tensorpack on NumPy 2 is not installed; set it up with:\n  "
                 f"{TENSORPACK_NP2_SETUP}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "raw.lmdb")
        make_lmdb(path)
        runs: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for part, key in (("queue", "dps"), ("batch", "us_per_batch")):
                for impl in ("ours", "tensorpack"):
                    runs.setdefault((part, impl), []).append(_run(impl, part, path)[key])
    q_ours, q_tp = max(runs["queue", "ours"]), max(runs["queue", "tensorpack"])
    b_ours, b_tp = min(runs["batch", "ours"]), min(runs["batch", "tensorpack"])
    print(markdown_table(
        ["workload", "unit", "dataflow", "tensorpack 0.11", "ours / tensorpack", "goal",
         "all rounds (ours; tensorpack)"],
        [["MultiProcessRunner(LMDBData raw, 5000, 1), 66 KB records", "datapoints/s",
          f"{q_ours:,.0f}", f"{q_tp:,.0f}", f"{q_ours / q_tp:.2f}x", ">= 1.5x",
          f"{', '.join(f'{v:,.0f}' for v in runs['queue', 'ours'])}; "
          f"{', '.join(f'{v:,.0f}' for v in runs['queue', 'tensorpack'])}"],
         ["BatchData(64) of [float32 (32,), int64]", "us/batch", f"{b_ours:.1f}",
          f"{b_tp:.1f}", f"{b_tp / b_ours:.2f}x", ">= 1.2x",
          f"{', '.join(f'{v:.1f}' for v in runs['batch', 'ours'])}; "
          f"{', '.join(f'{v:.1f}' for v in runs['batch', 'tensorpack'])}"]]))


if __name__ == "__main__":
    main()
