"""End-to-end ImageNet-style input pipeline, side by side with the peers, in one run.

    .venv/bin/python benchmarks/bench_e2e.py [--images 3000] [--batches 40]

Workload: a few thousand generated JPEGs (500x375, quality 90) stored as encoded bytes in an LMDB
written with LMDBSerializer; read sequentially, LocallyShuffleData, cv2.imdecode,
GoogleNetRandomCropAndResize(224), Flip(horiz), AlexNet PCA Lighting, BatchData(64), in parallel
over the machine's cores. Each implementation runs in its own subprocess:

  ours-default   what a newcomer writes: MultiProcessMapDataZMQ(decode+augment) -> BatchData
  ours-mapbatch  map and batch in the workers: MultiProcessMapAndBatchDataZMQ
  ours-threads   MultiThreadMapData(decode+augment) -> BatchData: cv2 releases the GIL while it
                 decodes and resizes, so threads use every core without any transport
                 ("ours" in the ratios is the fastest of the three in the same run)
  tensorpack     tensorpack 0.11 (black box, its own virtualenv), the newcomer pipeline
  torch          torch.utils.data.DataLoader, 2 workers, the same cv2/NumPy work per image
  tfdata-py      tf.data with tf.py_function doing the same work, AUTOTUNE
  tfdata-native  tf.data with tf.io.decode_jpeg and tf.image ops, AUTOTUNE
  decode-limit   cv2.imdecode alone on every core, no pipeline: the faster of a process Pool
                 (decode-limit-procs) and a thread pool (decode-limit-threads) in the same run
  cost-split     one core, no pipeline: milliseconds per image to decode, and to decode and
                 augment; from them, the share of the decode-limit that a pipeline with no
                 overhead at all would reach with this augmentation

Peers that are not installed are skipped with a note. PyTorch (CPU): `pip install torch==2.13.0`
into .venv; tensorpack: see benchmarks/_common.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

DATA_DIR = Path(__file__).resolve().parent / "_data"
BATCH = 64
SHUFFLE_BUFFER = 500
EIGVAL = [0.2175 * 255, 0.0188 * 255, 0.0045 * 255]
EIGVEC = [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]
LIMITS = ["decode-limit-procs", "decode-limit-threads"]
OURS = ["ours-threads", "ours-mapbatch", "ours-default"]
IMPLS = [*LIMITS, "cost-split", *OURS, "tensorpack", "torch", "tfdata-py", "tfdata-native"]


def lmdb_path(n: int) -> Path:
    return DATA_DIR / f"jpeg{n}.lmdb"


def make_data(n: int) -> Path:
    """Generate ``n`` JPEGs into an LMDB (once; reused by later runs)."""
    import cv2
    import numpy as np

    import dataflow as df
    from dataflow.serialize import LMDBSerializer

    path = lmdb_path(n)
    if path.exists():
        return path
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:375, 0:500].astype(np.float32)

    def gen():
        for i in range(n):
            fx, fy, ph = rng.uniform(0.005, 0.05), rng.uniform(0.005, 0.05), rng.uniform(0, 6)
            base = np.stack([np.sin(xx * fx + ph + c) * np.cos(yy * fy - c) for c in range(3)], -1)
            img = (base * 90 + 128 + rng.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
            ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
            assert ok
            yield [buf.tobytes(), i % 1000]

    LMDBSerializer.save(df.FixedSizeData(df.DataFromGenerator(gen), n), str(path))
    return path


class DecodeAugment:
    """bytes -> uint8 224x224x3 with the given imgaug module's augmentors (picklable)."""

    def __init__(self, imgaug) -> None:
        import numpy as np

        self.augs = imgaug.AugmentorList([
            imgaug.GoogleNetRandomCropAndResize(),
            imgaug.Flip(horiz=True),
            imgaug.Lighting(0.1, np.asarray(EIGVAL), np.asarray(EIGVEC)),
        ])

    def __call__(self, dp):
        import cv2
        import numpy as np

        img = cv2.imdecode(np.frombuffer(dp[0], np.uint8), cv2.IMREAD_COLOR)
        img = self.augs.augment(img)
        if img.dtype != np.uint8:  # tensorpack's Lighting returns float32
            img = np.clip(img, 0, 255).astype(np.uint8)
        return [img, dp[1]]


def _time_batches(itr, batches: int, warmup: int = 3, warmup_s: float = 1.0) -> float:
    """Images/s over ``batches`` batches, after at least ``warmup`` batches and ``warmup_s``
    seconds (start-up: workers starting, queues filling, first checkpoints)."""
    t0 = time.perf_counter()
    n = 0
    while n < warmup or time.perf_counter() - t0 < warmup_s:
        next(itr)
        n += 1
    t0 = time.perf_counter()
    for _ in range(batches):
        next(itr)
    return batches * BATCH / (time.perf_counter() - t0)


def run_dataflow_like(impl: str, path: Path, batches: int, nproc: int) -> float:
    if impl == "tensorpack":
        import tensorpack.dataflow as tp
        from tensorpack.dataflow import imgaug
        from tensorpack.dataflow.serialize import LMDBSerializer
    else:
        import dataflow as tp
        from dataflow import imgaug
        from dataflow.parallel import MultiProcessMapAndBatchDataZMQ
        from dataflow.serialize import LMDBSerializer
        tp.MultiProcessMapAndBatchDataZMQ = MultiProcessMapAndBatchDataZMQ
    ds = LMDBSerializer.load(str(path), shuffle=False)
    ds = tp.LocallyShuffleData(ds, SHUFFLE_BUFFER)
    func = DecodeAugment(imgaug)
    if impl == "ours-mapbatch":
        ds = tp.MultiProcessMapAndBatchDataZMQ(ds, nproc, func, BATCH)
    elif impl == "ours-threads":
        import cv2

        cv2.setNumThreads(1)  # the threads are the parallelism
        ds = tp.MultiThreadMapData(ds, nproc, func, buffer_size=200)
        ds = tp.BatchData(ds, BATCH)
    else:
        ds = tp.MultiProcessMapDataZMQ(ds, nproc, func, buffer_size=200)
        ds = tp.BatchData(ds, BATCH)
    ds.reset_state()
    try:
        itr = iter(ds) if impl == "ours-mapbatch" else iter(tp.RepeatedData(ds, -1))
        return _time_batches(itr, batches)
    finally:
        if hasattr(ds, "close"):
            ds.close()


def _read_lmdb(path: Path):
    import lmdb
    import numpy as np  # noqa: F401

    from dataflow.serialize import loads

    env = lmdb.open(str(path), subdir=path.is_dir(), readonly=True, lock=False)
    with env.begin() as txn:
        items = [loads(v) for k, v in txn.cursor() if k != b"__keys__"]
    env.close()
    return items


def run_limit(path: Path, batches: int, nproc: int, augment: bool, threads: bool) -> float:
    """Images/s of ``nproc`` processes (or threads: cv2 releases the GIL) that only decode
    (``augment=False``) or decode and augment each JPEG held in memory: no reading, shuffling,
    batching or transport in the timed work. The loop runs twice, freeing each image before or
    after the next one is made: which is faster depends on the malloc arena (a thread's frees
    each image's pages back to the OS and faults them in again); the faster one counts."""
    import multiprocessing as mp
    from concurrent.futures import ThreadPoolExecutor

    items = _read_lmdb(path)
    blobs = [it[0] for it in items]
    need = (batches + 3) * BATCH
    blobs = (blobs * (need // len(blobs) + 1))[:need]
    if threads:
        _init_limit(augment)
        pool = ThreadPoolExecutor(nproc)
        imap = pool.map
    else:
        pool = mp.get_context("fork").Pool(nproc, initializer=_init_limit, initargs=(augment,))
        imap = pool.imap_unordered
    best = 0.0
    with pool:
        for keep in (False, True):
            chunks = [(augment, keep, blobs[i:i + 16]) for i in range(0, need, 16)]
            list(imap(_limit_chunk, chunks[: 3 * BATCH // 16]))
            t0 = time.perf_counter()
            n = sum(imap(_limit_chunk, chunks[3 * BATCH // 16:]))
            best = max(best, n / (time.perf_counter() - t0))
    return best


_LIMIT_FUNC = None


def _init_limit(augment: bool) -> None:
    global _LIMIT_FUNC
    import cv2

    cv2.setNumThreads(1)
    if augment:
        from dataflow import imgaug

        _LIMIT_FUNC = DecodeAugment(imgaug)
        _LIMIT_FUNC.augs.reset_state()


def _limit_chunk(task: tuple[bool, bool, list[bytes]]) -> int:
    """Decode (and augment) each JPEG of the chunk; ``keep``: the previous image is freed only
    after the next one exists."""
    import cv2
    import numpy as np

    augment, keep, blobs = task
    img = None
    for b in blobs:
        if not keep:
            img = None
        if augment:
            # one DecodeAugment shared by the threads, as in ours-threads (its RNG is locked)
            img = _LIMIT_FUNC([b, 0])[0]
        else:
            img = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
    return len(blobs) if img is not None else 0


def run_cost_split(path: Path, n: int = 400, repeats: int = 3) -> dict:
    """Per image on one core (best of ``repeats`` alternating passes over ``n`` JPEGs): the
    decode, and the decode plus the augmentation, in milliseconds. malloc keeps 64 MB spare at
    the top of the heap, so that neither pays for pages given back to the OS and faulted in
    again after each image (on this machine that costs up to 0.5 ms per 500x375 image)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt(-2, 64 << 20)  # M_TOP_PAD (glibc)
    except (OSError, AttributeError):
        pass
    _init_limit(True)
    blobs = [it[0] for it in _read_lmdb(path)[:n]]
    best = {"decode_ms": float("inf"), "decode_augment_ms": float("inf")}
    for _ in range(repeats):
        for key, augment in (("decode_ms", False), ("decode_augment_ms", True)):
            t0 = time.perf_counter()
            _limit_chunk((augment, True, blobs))
            best[key] = min(best[key], 1e3 * (time.perf_counter() - t0) / n)
    return best


def run_torch(path: Path, batches: int, nproc: int) -> float:
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    from dataflow import imgaug

    items = _read_lmdb(path)

    class Stream(IterableDataset):
        def __iter__(self):
            import random

            import cv2

            cv2.setNumThreads(1)
            info = get_worker_info()
            wid, nw = (info.id, info.num_workers) if info else (0, 1)
            func = DecodeAugment(imgaug)
            rnd = random.Random(wid)
            shard = items[wid::nw]
            buf = []
            while True:
                for dp in shard:  # local shuffle buffer, as in the other pipelines
                    buf.append(dp)
                    if len(buf) >= SHUFFLE_BUFFER // nw:
                        out = buf.pop(rnd.randrange(len(buf)))
                        img, label = func(out)
                        yield torch.from_numpy(img), label

    torch.set_num_threads(1)
    loader = DataLoader(Stream(), batch_size=BATCH, num_workers=nproc, prefetch_factor=4,
                        persistent_workers=False)
    itr = iter(loader)
    try:
        return _time_batches(itr, batches)
    finally:
        del itr


def run_tfdata(path: Path, batches: int, nproc: int, native: bool) -> float:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    from dataflow import imgaug

    tf.config.threading.set_inter_op_parallelism_threads(nproc)
    tf.config.threading.set_intra_op_parallelism_threads(nproc)
    items = _read_lmdb(path)
    blobs = tf.constant([it[0] for it in items])
    labels = tf.constant([it[1] for it in items], dtype=tf.int32)
    ds = tf.data.Dataset.from_tensor_slices((blobs, labels)).repeat().shuffle(SHUFFLE_BUFFER)
    eigval = tf.constant(EIGVAL, tf.float32)
    eigvec = tf.constant(EIGVEC, tf.float32)
    if native:
        def aug(b, y):
            img = tf.io.decode_jpeg(b, channels=3)
            begin, size, _ = tf.image.sample_distorted_bounding_box(
                tf.shape(img), tf.zeros([0, 0, 4]), area_range=(0.08, 1.0),
                aspect_ratio_range=(0.75, 1.333), max_attempts=10,
                use_image_if_no_bounding_boxes=True)
            img = tf.slice(img, begin, size)
            img = tf.image.resize(img, (224, 224))
            img = tf.image.random_flip_left_right(img)
            alpha = tf.random.normal([3]) * 0.1 * eigval
            img = img + tf.linalg.matvec(eigvec, alpha)
            return tf.cast(tf.clip_by_value(img, 0, 255), tf.uint8), y
    else:
        func = DecodeAugment(imgaug)

        def py_aug(b, y):
            img, label = func([b.numpy(), int(y.numpy())])
            return img, np.int32(label)

        def aug(b, y):
            img, label = tf.py_function(py_aug, [b, y], [tf.uint8, tf.int32])
            img.set_shape((224, 224, 3))
            return img, label
    ds = ds.map(aug, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH).prefetch(tf.data.AUTOTUNE)
    return _time_batches(iter(ds), batches)


def measure(impl: str, n: int, batches: int) -> dict:
    path = lmdb_path(n)
    nproc = os.cpu_count() or 2
    if impl == "cost-split":
        return run_cost_split(path)
    if impl in LIMITS:
        rate = run_limit(path, batches, nproc, augment=False, threads=impl.endswith("threads"))
    elif impl == "torch":
        rate = run_torch(path, batches, nproc)
    elif impl in ("tfdata-py", "tfdata-native"):
        rate = run_tfdata(path, batches, nproc, native=impl == "tfdata-native")
    else:
        rate = run_dataflow_like(impl, path, batches, nproc)
    return {"images_per_second": rate}


def _available(impl: str) -> str | None:
    """None if the implementation can run, else why not."""
    import importlib.util

    from _common import TENSORPACK_SETUP, tensorpack_available

    if impl == "tensorpack" and not tensorpack_available():
        return f"tensorpack 0.11 not installed ({TENSORPACK_SETUP})"
    if impl == "torch" and importlib.util.find_spec("torch") is None:
        return "PyTorch not installed (`.venv/bin/pip install torch==2.13.0`)"
    if impl.startswith("tfdata") and importlib.util.find_spec("tensorflow") is None:
        return "TensorFlow not installed (`pip install 'dataflow-reloaded[tf]'`)"
    return None


def main() -> None:
    from _common import e2e_parser, markdown_table, run_impl

    parser = e2e_parser(__doc__, IMPLS, batches=40, rounds=1)
    args = parser.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl, args.images, args.batches)))
        return
    make_data(args.images)
    script = Path(__file__).resolve()
    results: dict[str, float] = {}
    split = {"decode_ms": float("inf"), "decode_augment_ms": float("inf")}
    notes = []
    impls = []
    for impl in args.only or IMPLS:
        why = _available(impl)
        if why:
            notes.append(f"- {impl}: skipped, {why}")
        else:
            impls.append(impl)
    for _ in range(args.rounds):
        for impl in impls:
            res = run_impl(script, impl, "--images", str(args.images), "--batches",
                           str(args.batches), timeout=900)
            if impl == "cost-split":
                split = {k: min(v, res[k]) for k, v in split.items()}
                print(f"{impl}: {res}", file=sys.stderr)
                continue
            rate = res["images_per_second"]
            results[impl] = max(rate, results.get(impl, 0.0))
            print(f"{impl}: {rate:,.0f} images/s", file=sys.stderr)
    limits = [results[k] for k in LIMITS if k in results]
    if limits:
        results["decode-limit"] = max(limits)
    ours = max((results[k] for k in OURS if k in results), default=None)
    rows = [[impl, f"{rate:,.0f}", f"{rate / ours:.2f}" if ours else "n/a"]
            for impl, rate in results.items()]
    print(markdown_table(["pipeline", "images/s", "ratio to ours (the fastest dataflow)"], rows))
    if "decode-limit" in results and ours:
        print(f"\ndataflow reaches {100 * ours / results['decode-limit']:.0f}% of the decode-limit")
    if split["decode_ms"] < float("inf"):
        dec, both = split["decode_ms"], split["decode_augment_ms"]
        print(f"\nOn one core an image takes {dec:.3f} ms to decode and {both:.3f} ms to decode "
              f"and augment: the augmentation adds {100 * (both - dec) / dec:.0f}% to each image, "
              f"so a pipeline with no overhead at all would reach {100 * dec / both:.0f}% of the "
              "decode-limit.")
    if notes:
        print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
