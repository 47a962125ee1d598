"""Snapshots of the deterministic part: epochs from a complete snapshot against the same pipeline
without one, the fused-decode pipeline and tf.data's ``cache(filename)`` / ``snapshot``, in one run.

    .venv/bin/python benchmarks/bench_snapshot.py [--images 2000] [--epochs 5] [--rounds 3]
    .venv/bin/python benchmarks/bench_snapshot.py --size 2048x1536 --images 300
    .venv/bin/python benchmarks/bench_snapshot.py --only sweep-snap sweep-plain

Workload (bench_e2e.py's generator): JPEGs in an LMDB written with LMDBSerializer; every pipeline
delivers uint8 224x224x3 images in batches of 64 after RandomResizedCrop(224) (GoogleNet's crop),
a horizontal flip and PCA lighting, each in its own subprocess, ``nproc`` threads in strict mode
(one epoch per pass; cv2 releases the GIL; bench_e2e.py measures threads as today's fastest
dataflow pipeline on this workload):

  plain          LMDB -> LocallyShuffleData -> threads(decode + augment) -> BatchData(64)
  fused          the same with the fused path (augment_jpeg: only the crop window is decoded,
                 at a DCT scale where it can be)
  snap           SnapshotData(LMDB, map_func=decode, shuffle=True) -> threads(augment) ->
                 BatchData(64): epoch 1 fills the snapshot, epochs 2.. read it
  snap-noverify  the same with verify=0: what verify=0.01 costs
  snap-budget30  the same with budget= 30% of the decoded size
  snap-lz4, snap-zstd   the same, compressed: bytes on disk per image
  tfdata-cache   tf.data: decode -> cache(filename) -> shuffle -> the same augmentation in TF ops
                 (sample_distorted_bounding_box, resize, flip, lighting) -> batch, AUTOTUNE
  tfdata-snapshot   the same with ``snapshot(path)`` in place of ``cache``
  sweep-snap     4 jobs (different augmentation seeds) from one DataService over one snapshot,
                 3 epochs each: CPU-seconds per delivered image over all jobs (this process and
                 every descendant: the service's workers)
  sweep-plain    4 separate pipelines (plain), 3 epochs each: the same figure

At ``--size 2048x1536`` the deterministic part is decode + a resize to 512 on the short side (in
the snapshot, and before the augmentation in ``plain``; ``fused`` crops from the JPEG itself).
An epoch's rate is images over wall seconds for the whole epoch (start-up included); epochs
2.. are the mean rate of epochs 2 to ``--epochs``. ``--rounds`` runs every pipeline that many
times, interleaved, and reports the median of each figure.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_e2e
from bench_e2e import EIGVAL, EIGVEC, lmdb_path, make_data

BATCH = 64
SHUFFLE_BUFFER = 500
SHORT_SIDE = 512
SWEEP_JOBS = 4
SWEEP_EPOCHS = 3
IMPLS = ["plain", "fused", "snap", "snap-noverify", "snap-budget30", "snap-lz4", "snap-zstd",
         "tfdata-cache", "tfdata-snapshot", "sweep-snap", "sweep-plain"]


def decoded_shape(size: tuple[int, int]) -> tuple[int, int, int]:
    """(h, w, 3) of what the deterministic part makes of a ``size`` = (w, h) JPEG."""
    w, h = size
    if max(w, h) <= 1000:
        return h, w, 3
    s = SHORT_SIDE / min(w, h)
    return round(h * s), round(w * s), 3


class Decode:
    """The deterministic part: bytes -> uint8 HxWx3 (resized to SHORT_SIDE on the short side for
    large images). A module-level class, so that its key is the same in every process."""

    def __init__(self, large: bool) -> None:
        self.large = large

    def __call__(self, dp):
        import cv2
        import numpy as np

        img = cv2.imdecode(np.frombuffer(dp[0], np.uint8), cv2.IMREAD_COLOR)
        if self.large:
            h, w = img.shape[:2]
            s = SHORT_SIDE / min(h, w)
            img = cv2.resize(img, (round(w * s), round(h * s)), interpolation=cv2.INTER_AREA)
        return [img, dp[1]]


class Augment:
    """The random part: GoogleNet's crop to 224, a flip, PCA lighting (uint8 out)."""

    def __init__(self) -> None:
        from dataflow import imgaug

        self.augs = bench_e2e.DecodeAugment(imgaug).augs  # (the same augmentors as bench_e2e's)

    def __call__(self, dp):
        import numpy as np

        img = self.augs.augment(dp[0])
        if img.dtype != np.uint8:
            img = np.clip(img, 0, 255).astype(np.uint8)
        return [img, dp[1]]


class DecodeAugment:
    def __init__(self, large: bool) -> None:
        self.decode, self.augment = Decode(large), Augment()

    def __call__(self, dp):
        return self.augment(self.decode(dp))


class Fused(Augment):
    def __call__(self, dp):
        return [self.augs.augment_jpeg(dp[0]), dp[1]]


def _nproc() -> int:
    return len(os.sched_getaffinity(0))


def _epochs(flow, epochs: int, n_images: int) -> list[float]:
    """Images/s of each of ``epochs`` full passes of ``flow`` (batches of BATCH)."""
    rates = []
    flow.reset_state()
    for _ in range(epochs):
        t0 = time.perf_counter()
        n = sum(len(b[1]) for b in flow)
        dt = time.perf_counter() - t0
        assert n >= n_images - BATCH, (n, n_images)
        rates.append(n / dt)
    return rates


def _du(path: str) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def run_dataflow(impl: str, path: Path, n: int, epochs: int, large: bool, decoded: int) -> dict:
    import cv2

    import dataflow as df
    from dataflow.serialize import LMDBSerializer

    cv2.setNumThreads(1)  # the threads are the parallelism
    nproc = _nproc()
    src = LMDBSerializer.load(str(path), shuffle=False)
    tmp = tempfile.mkdtemp(prefix="dataflow-bench-snapshot-")
    snap = None
    try:
        if impl.startswith("snap"):
            kw: dict = {"shuffle": True, "seed": 0}
            if impl == "snap-noverify":
                kw["verify"] = 0
            if impl == "snap-budget30":
                kw["budget"] = int(0.3 * decoded * n)
            if impl in ("snap-lz4", "snap-zstd"):
                kw["compression"] = impl.removeprefix("snap-")
            snap = df.SnapshotData(src, tmp, map_func=Decode(large), **kw)
            flow = df.MultiThreadMapData(snap, nproc, Augment(), buffer_size=200, strict=True)
        else:
            func = Fused() if impl == "fused" else DecodeAugment(large)
            shuffled = df.LocallyShuffleData(src, min(SHUFFLE_BUFFER, n // 2), finite=True)
            flow = df.MultiThreadMapData(shuffled, nproc, func, buffer_size=200, strict=True)
        flow = df.BatchData(flow, BATCH, remainder=True)
        rates = _epochs(flow, epochs, n)
        flow.close()
        out = {"rates": rates}
        if snap is not None:
            out["bytes_per_image"] = _du(tmp) / n
            out["stats"] = {k: v for k, v in snap.stats().items()
                            if isinstance(v, int | float)}
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_tfdata(impl: str, path: Path, n: int, epochs: int, large: bool) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    from bench_e2e import _read_lmdb

    nproc = _nproc()
    tf.config.threading.set_inter_op_parallelism_threads(nproc)
    tf.config.threading.set_intra_op_parallelism_threads(nproc)
    items = _read_lmdb(path)
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.constant([it[0] for it in items]), tf.constant([it[1] for it in items], tf.int32)))

    def decode(b, y):
        img = tf.io.decode_jpeg(b, channels=3)
        if large:
            shape = tf.cast(tf.shape(img)[:2], tf.float32)
            s = SHORT_SIDE / tf.reduce_min(shape)
            img = tf.cast(tf.image.resize(img, tf.cast(tf.round(shape * s), tf.int32),
                                          method="area"), tf.uint8)
        return img, y

    eigval, eigvec = tf.constant(EIGVAL, tf.float32), tf.constant(EIGVEC, tf.float32)

    def augment(img, y):
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(img), tf.zeros([0, 0, 4]), area_range=(0.08, 1.0),
            aspect_ratio_range=(0.75, 1.333), max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        img = tf.image.resize(tf.slice(img, begin, size), (224, 224))
        img = tf.image.random_flip_left_right(img)
        img = img + tf.linalg.matvec(eigvec, tf.random.normal([3]) * 0.1 * eigval)
        return tf.cast(tf.clip_by_value(img, 0, 255), tf.uint8), y

    tmp = tempfile.mkdtemp(prefix="dataflow-bench-tfsnapshot-")
    try:
        ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        if impl == "tfdata-cache":
            ds = ds.cache(os.path.join(tmp, "cache"))
        else:
            # uncompressed: with its default (snappy) compression tf.data 2.21 fails on a
            # 500x375x3 element ("Output buffer(size: 262144 bytes) too small")
            ds = ds.snapshot(os.path.join(tmp, "snap"), compression=None)
        ds = ds.shuffle(min(SHUFFLE_BUFFER, n // 2))
        ds = ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH)
        ds = ds.prefetch(tf.data.AUTOTUNE)
        rates = []
        for _ in range(epochs):
            t0 = time.perf_counter()
            got = sum(int(y.shape[0]) for _, y in ds)
            rates.append(got / (time.perf_counter() - t0))
        return {"rates": rates, "bytes_per_image": _du(tmp) / n}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_sweep(impl: str, path: Path, n: int, large: bool) -> dict:
    """CPU-seconds per delivered image of SWEEP_JOBS jobs reading SWEEP_EPOCHS epochs each."""
    import cv2

    import dataflow as df
    from bench_service import cpu_seconds
    from dataflow.serialize import LMDBSerializer

    cv2.setNumThreads(1)
    nproc = _nproc()
    c0, t0 = cpu_seconds(), time.perf_counter()
    delivered = 0
    tmp = tempfile.mkdtemp(prefix="dataflow-bench-sweep-")
    try:
        if impl == "sweep-plain":
            for _job in range(SWEEP_JOBS):
                src = LMDBSerializer.load(str(path), shuffle=False)
                flow = df.MultiThreadMapData(
                    df.LocallyShuffleData(src, min(SHUFFLE_BUFFER, n // 2), finite=True),
                    nproc,
                    DecodeAugment(large), buffer_size=200, strict=True)
                flow = df.BatchData(flow, BATCH, remainder=True)
                flow.reset_state()
                for _ in range(SWEEP_EPOCHS):
                    delivered += sum(len(b[1]) for b in flow)
                flow.close()
        else:
            from dataflow.service import DataService, ServiceData

            src = LMDBSerializer.load(str(path), shuffle=False)
            snap = df.SnapshotData(src, tmp, map_func=Decode(large))
            jobs = {f"job{j}": {"seed": j} for j in range(SWEEP_JOBS)}
            counts = [0] * SWEEP_JOBS
            with DataService(snap, Augment(), num_workers=nproc, jobs=jobs) as svc:
                def read(j: int) -> None:
                    c = ServiceData(svc.address, rank=0, world_size=1, job=f"job{j}")
                    c.reset_state()
                    for _ in range(SWEEP_EPOCHS):
                        counts[j] += sum(1 for _ in c)
                    c.close()

                threads = [threading.Thread(target=read, args=(j,)) for j in range(SWEEP_JOBS)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            delivered = sum(counts)
            assert delivered == SWEEP_JOBS * SWEEP_EPOCHS * n, (counts, n)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = cpu_seconds() - c0
    return {"cpu_per_image_ms": 1e3 * cpu / delivered, "seconds": time.perf_counter() - t0,
            "delivered": delivered}


def measure(impl: str, n: int, epochs: int, size: tuple[int, int]) -> dict:
    path = lmdb_path(n, size)
    large = decoded_shape(size)[:2] != (size[1], size[0])
    h, w, c = decoded_shape(size)
    if impl.startswith("tfdata"):
        return run_tfdata(impl, path, n, epochs, large)
    if impl.startswith("sweep"):
        return run_sweep(impl, path, n, large)
    return run_dataflow(impl, path, n, epochs, large, h * w * c)


def _later(rates: list[float]) -> float:
    return statistics.fmean(rates[1:]) if len(rates) > 1 else rates[0]


def main() -> None:
    import argparse

    from _common import markdown_table, run_impl

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=IMPLS)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", default="500x375")
    ap.add_argument("--only", nargs="*", choices=IMPLS)
    args = ap.parse_args()
    size = (int(args.size.split("x")[0]), int(args.size.split("x")[1]))
    if args.impl:
        print(json.dumps(measure(args.impl, args.images, args.epochs, size)))
        return
    make_data(args.images, size)
    script = Path(__file__).resolve()
    runs: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        for impl in args.only or IMPLS:
            try:
                res = run_impl(script, impl, "--images", str(args.images), "--epochs",
                               str(args.epochs), "--size", args.size, timeout=1800)
            except RuntimeError as e:  # (one pipeline's failure is reported, the rest run)
                print(f"round {r + 1} {impl}: FAILED {str(e)[-2000:]}", file=sys.stderr,
                      flush=True)
                continue
            runs.setdefault(impl, []).append(res)
            print(f"round {r + 1} {impl}: {json.dumps(res)}", file=sys.stderr, flush=True)

    def med(impl: str, f) -> float | None:
        return statistics.median(f(x) for x in runs[impl]) if impl in runs else None

    first = {k: med(k, lambda x: x["rates"][0]) for k in runs if "rates" in runs[k][0]}
    later = {k: med(k, lambda x: _later(x["rates"])) for k in runs if "rates" in runs[k][0]}

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}x" if a and b else "n/a"

    rows = []
    for k in first:
        rows.append([k, f"{first[k]:,.0f}", f"{later[k]:,.0f}", ratio(later[k], later.get("plain")),
                     ratio(later[k], later.get("fused")), ratio(first[k], first.get("plain")),
                     f"{med(k, lambda x: x.get('bytes_per_image', 0)) / 1e3:,.1f}"])
    print(f"{args.size} JPEGs, {args.images} images, {args.epochs} epochs, median of "
          f"{args.rounds} rounds, {_nproc()} cores\n")
    print(markdown_table(["pipeline", "epoch 1 img/s", f"epochs 2-{args.epochs} img/s",
                          "2.. / plain", "2.. / fused", "epoch 1 / plain", "kB on disk/img"],
                         rows))
    tf_best = max((later[k] for k in ("tfdata-cache", "tfdata-snapshot") if k in later),
                  default=None)
    if "snap" in later and tf_best:
        print(f"\nsnap / the faster tf.data (epochs 2..): {ratio(later['snap'], tf_best)}")
    if "snap" in later and "snap-noverify" in later:
        print(f"verify=0.01 costs {100 * (1 - later['snap'] / later['snap-noverify']):.1f}% "
              "(epochs 2..)")
    sweep = {k: med(k, lambda x: x["cpu_per_image_ms"]) for k in ("sweep-snap", "sweep-plain")
             if k in runs}
    if len(sweep) == 2:
        print(f"\nsweep of {SWEEP_JOBS} jobs x {SWEEP_EPOCHS} epochs: CPU ms per delivered image "
              f"{sweep['sweep-snap']:.3f} (one service over one snapshot) vs "
              f"{sweep['sweep-plain']:.3f} (separate pipelines): "
              f"{sweep['sweep-snap'] / sweep['sweep-plain']:.2f}x")


if __name__ == "__main__":
    main()
