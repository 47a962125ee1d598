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
  tfdata-roi     tf.data's region recipe: extract_jpeg_shape + sample_distorted_bounding_box +
                 decode_and_crop_jpeg, then the same tf.image ops, AUTOTUNE
  fused-threads  the fused path: MultiThreadMapData(AugmentorList.augment_jpeg) -> BatchData: the
                 crop window is sampled from the JPEG header and only it is decoded (at 1/2,
                 1/4 or 1/8 scale where it is at least twice 224), then resized, flipped, lit
  fused-procs    the same in MultiProcessMapDataZMQ -> BatchData
  ours-default-skip, fused-threads-skip
                 the same pipelines with the bad-sample policy on (on_error="skip", no input
                 failing): what the policy costs when nothing goes wrong
  decode-limit   cv2.imdecode alone on every core, no pipeline: the faster of a process Pool
                 (decode-limit-procs) and a thread pool (decode-limit-threads) in the same run
  cost-split     one core, no pipeline: milliseconds per image to decode, to decode and
                 augment, to decode only the crop window (at the fused path's scale), and to
                 run the fused path; from them, the ratios that pipelines with no overhead at
                 all would reach: the ceiling of the technique on this machine

``--size 2048x1536`` (or 1024x768) runs the same pipelines on larger generated JPEGs (the same
generator, so the same ~3 bits per pixel), where the DCT scaling applies; fewer images are
generated (``--images``) and the shuffle buffer holds at most half of them.

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
FUSED = ["fused-threads", "fused-procs"]
POLICY = ["ours-default-skip", "fused-threads-skip"]  # with on_error="skip", nothing failing
IMPLS = [*LIMITS, "cost-split", *FUSED, *OURS, *POLICY, "tensorpack", "torch", "tfdata-py",
         "tfdata-native", "tfdata-roi"]
SIZE = (500, 375)  # width, height of the generated JPEGs (--size)


def lmdb_path(n: int, size: tuple[int, int] = (500, 375)) -> Path:
    suffix = "" if size == (500, 375) else f"_{size[0]}x{size[1]}"
    return DATA_DIR / f"jpeg{n}{suffix}.lmdb"


def make_data(n: int, size: tuple[int, int] = (500, 375)) -> Path:
    """Generate ``n`` JPEGs of ``size`` (w, h) into an LMDB (once; reused by later runs)."""
    import cv2
    import numpy as np

    import dataflow as df
    from dataflow.serialize import LMDBSerializer

    path = lmdb_path(n, size)
    if path.exists():
        return path
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0 : size[1], 0 : size[0]].astype(np.float32)

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


class FusedDecodeAugment(DecodeAugment):
    """The same augmentors, run by ``augment_jpeg`` on the encoded bytes (picklable)."""

    def __call__(self, dp):
        return [self.augs.augment_jpeg(dp[0]), dp[1]]


def _shuffle_buffer(path: Path) -> int:
    """SHUFFLE_BUFFER, or half the records of a small LMDB of large images."""
    import lmdb

    env = lmdb.open(str(path), subdir=path.is_dir(), readonly=True, lock=False)
    n = env.stat()["entries"]
    env.close()
    return max(1, min(SHUFFLE_BUFFER, n // 2))


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
    policy = {}
    if impl in POLICY:
        impl, policy = impl.removesuffix("-skip"), {"on_error": "skip"}
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
    ds = tp.LocallyShuffleData(ds, _shuffle_buffer(path))
    func = (FusedDecodeAugment if impl in FUSED else DecodeAugment)(imgaug)
    if impl == "ours-mapbatch":
        ds = tp.MultiProcessMapAndBatchDataZMQ(ds, nproc, func, BATCH)
    elif impl in ("ours-threads", "fused-threads"):
        import cv2

        cv2.setNumThreads(1)  # the threads are the parallelism
        ds = tp.MultiThreadMapData(ds, nproc, func, buffer_size=200, **policy)
        ds = tp.BatchData(ds, BATCH)
    else:
        ds = tp.MultiProcessMapDataZMQ(ds, nproc, func, buffer_size=200, **policy)
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
    """Per image on one core (best of ``repeats`` alternating passes over ``n`` JPEGs), in
    milliseconds: the full decode, the decode plus the augmentation, the region decode alone
    (the window GoogleNetRandomCropAndResize samples, at the DCT scale the fused path picks, no
    augmentation) and the fused path (augment_jpeg). malloc keeps 64 MB spare at the top of the
    heap, so that none pays for pages given back to the OS and faulted in again after each
    image (on this machine that costs up to 0.5 ms per 500x375 image)."""
    import ctypes

    import numpy as np

    from dataflow import imgaug
    from dataflow.jpeg import decode_jpeg, jpeg_shape

    try:
        ctypes.CDLL("libc.so.6").mallopt(-2, 64 << 20)  # M_TOP_PAD (glibc)
    except (OSError, AttributeError):
        pass
    _init_limit(True)
    blobs = [it[0] for it in _read_lmdb(path)[:n]]
    fused = FusedDecodeAugment(imgaug)
    sampler = imgaug.GoogleNetRandomCropAndResize()
    sampler.rng = np.random.RandomState(0)
    windows = []
    for b in blobs:
        h, w, _ = jpeg_shape(b)
        first = sampler.get_transform(np.broadcast_to(np.zeros((), np.uint8), (h, w, 3))).tfms[0]
        if isinstance(first, imgaug.CropTransform):
            windows.append((b, (first.x0, first.y0, first.w, first.h)))
        else:  # the fallback branch resizes the whole image first
            windows.append((b, None))

    def region(items):
        for b, crop in items:
            decode_jpeg(b, crop, min_size=224)

    def fused_path(items):
        for b in items:
            fused([b, 0])

    steps = {
        "decode_ms": lambda: _limit_chunk((False, True, blobs)),
        "decode_augment_ms": lambda: _limit_chunk((True, True, blobs)),
        "region_decode_ms": lambda: region(windows),
        "fused_ms": lambda: fused_path(blobs),
    }
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(repeats):
        for key, step in steps.items():
            t0 = time.perf_counter()
            step()
            best[key] = min(best[key], 1e3 * (time.perf_counter() - t0) / len(blobs))
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


def run_tfdata(path: Path, batches: int, nproc: int, native: bool, roi: bool = False) -> float:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    from dataflow import imgaug

    tf.config.threading.set_inter_op_parallelism_threads(nproc)
    tf.config.threading.set_intra_op_parallelism_threads(nproc)
    items = _read_lmdb(path)
    blobs = tf.constant([it[0] for it in items])
    labels = tf.constant([it[1] for it in items], dtype=tf.int32)
    ds = tf.data.Dataset.from_tensor_slices((blobs, labels)).repeat()
    ds = ds.shuffle(_shuffle_buffer(path))
    eigval = tf.constant(EIGVAL, tf.float32)
    eigvec = tf.constant(EIGVEC, tf.float32)
    if native:
        def aug(b, y):
            shape = tf.io.extract_jpeg_shape(b) if roi else None
            if not roi:
                img = tf.io.decode_jpeg(b, channels=3)
                shape = tf.shape(img)
            begin, size, _ = tf.image.sample_distorted_bounding_box(
                shape, tf.zeros([0, 0, 4]), area_range=(0.08, 1.0),
                aspect_ratio_range=(0.75, 1.333), max_attempts=10,
                use_image_if_no_bounding_boxes=True)
            if roi:  # decode only the window
                window = tf.stack([begin[0], begin[1], size[0], size[1]])
                img = tf.io.decode_and_crop_jpeg(b, window, channels=3)
            else:
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


def measure(impl: str, n: int, batches: int, size: tuple[int, int] = SIZE) -> dict:
    path = lmdb_path(n, size)
    nproc = os.cpu_count() or 2
    if impl == "cost-split":
        return run_cost_split(path)
    if impl in LIMITS:
        rate = run_limit(path, batches, nproc, augment=False, threads=impl.endswith("threads"))
    elif impl == "torch":
        rate = run_torch(path, batches, nproc)
    elif impl.startswith("tfdata"):
        rate = run_tfdata(path, batches, nproc, native=impl != "tfdata-py",
                          roi=impl == "tfdata-roi")
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


def _ratio(results: dict, a: str, b: str) -> str:
    return f"{results[a] / results[b]:.2f}x" if a in results and b in results else "n/a"


def main() -> None:
    from _common import e2e_parser, markdown_table, run_impl

    parser = e2e_parser(__doc__, IMPLS, batches=40, rounds=1)
    parser.add_argument("--size", default="500x375", help="WxH of the generated JPEGs")
    args = parser.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    if args.impl:
        print(json.dumps(measure(args.impl, args.images, args.batches, size)))
        return
    make_data(args.images, size)
    script = Path(__file__).resolve()
    results: dict[str, float] = {}
    split: dict[str, float] = {}
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
                           str(args.batches), "--size", args.size, timeout=900)
            if impl == "cost-split":
                split = {k: min(v, split.get(k, v)) for k, v in res.items()}
                print(f"{impl}: {res}", file=sys.stderr)
                continue
            rate = res["images_per_second"]
            results[impl] = max(rate, results.get(impl, 0.0))
            print(f"{impl}: {rate:,.0f} images/s", file=sys.stderr)
    limits = [results[k] for k in LIMITS if k in results]
    if limits:
        results["decode-limit"] = max(limits)
    for name, group in (("ours", OURS), ("fused", FUSED)):
        best = [k for k in group if k in results]
        if best:
            results[name] = max(results[k] for k in best)
    rows = [[impl, f"{rate:,.0f}", _ratio(results, impl, "ours"), _ratio(results, impl, "fused")]
            for impl, rate in results.items() if impl not in ("ours", "fused")]
    print(f"{args.size} JPEGs, {args.images} in the LMDB\n")
    print(markdown_table(["pipeline", "images/s", "ratio to ours (today's fastest dataflow)",
                          "ratio to fused (the fastest fused)"], rows))
    if "fused" in results:
        print(f"\nfused / ours (today's fastest): {_ratio(results, 'fused', 'ours')}; "
              f"fused / decode-limit: {_ratio(results, 'fused', 'decode-limit')}; "
              f"fused / tfdata-roi: {_ratio(results, 'fused', 'tfdata-roi')}; "
              f"fused-threads / ours-threads: {_ratio(results, 'fused-threads', 'ours-threads')}")
    for skip in POLICY:
        if skip in results and skip.removesuffix("-skip") in results:
            print(f"{skip} / {skip.removesuffix('-skip')} (the policy on, nothing failing): "
                  f"{_ratio(results, skip, skip.removesuffix('-skip'))}")
    if "decode-limit" in results and "ours" in results:
        print(f"dataflow (today) reaches {100 * results['ours'] / results['decode-limit']:.0f}% "
              "of the decode-limit")
    if split:
        dec, both = split["decode_ms"], split["decode_augment_ms"]
        region, fus = split["region_decode_ms"], split["fused_ms"]
        print(f"\nOne core, per image: full decode {dec:.3f} ms, decode + augment {both:.3f} ms, "
              f"region decode alone {region:.3f} ms (full / region = {dec / region:.2f}x), "
              f"fused path {fus:.3f} ms (of which {fus - region:.3f} ms after the region "
              f"decode; {both - dec:.3f} ms after the full decode). Ceilings of pipelines with "
              f"no overhead: fused / today = {both / fus:.2f}x, fused / decode-limit = "
              f"{dec / fus:.2f}x, today / decode-limit = {dec / both:.2f}x.")
    if notes:
        print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
