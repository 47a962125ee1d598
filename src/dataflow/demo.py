"""The demo behind ``python -m dataflow demo``: an ImageNet-style pipeline on generated data.

Generated JPEGs (500x375, quality 90) are saved as encoded bytes into an LMDB with
:class:`~dataflow.serialize.LMDBSerializer`, then read back the way an ImageNet training job
reads them: sequential LMDB scan -> ``LocallyShuffleData`` -> ``cv2.imdecode`` +
``GoogleNetRandomCropAndResize(224)`` + ``Flip`` + AlexNet PCA ``Lighting`` in worker processes
(``MultiProcessMapDataZMQ``) -> ``BatchData(64)``. :func:`run_demo` times it with
:class:`~dataflow.TestDataSpeed`; the CLI then prints :func:`dataflow.profile`'s table.
Needs the ``imgaug`` and ``lmdb`` extras (``make demo`` installs them, and only them).
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataflow._optional import extra_hint
from dataflow.base import DataFlow
from dataflow.rng import set_seed
from dataflow.sources import DataFromList
from dataflow.wrappers import BatchData, LocallyShuffleData, TestDataSpeed

__all__ = ["PROFILE_BATCHES", "DecodeAndAugment", "DemoReport", "build_demo_pipeline",
           "make_jpegs", "run_demo"]

JPEG_SHAPE = (375, 500, 3)
PROFILE_BATCHES = 20  # batches the CLI's profile times (worker start-up included)
CROP = 224
EIGVAL = np.array([0.2175, 0.0188, 0.0045]) * 255
EIGVEC = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140],
                   [-0.5836, -0.6948, 0.4203]])


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as e:
        raise ImportError(
            f"the demo decodes JPEGs with OpenCV: {extra_hint('imgaug', 'lmdb')} (or run "
            "`make demo` in a clone, which installs them)"
        ) from e
    return cv2


def make_jpegs(n: int, seed: int = 0) -> list[list[Any]]:
    """``n`` datapoints ``[JPEG bytes, int label]`` of generated 500x375 photos-like images
    (smooth colour fields, a few shapes and sensor noise), quality 90."""
    cv2 = _cv2()
    rng = np.random.default_rng(seed)
    h, w, _ = JPEG_SHAPE
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = []
    for i in range(n):
        a, b = rng.uniform(-0.4, 0.4, size=2)
        base = np.stack([xx * a + yy * b + c for c in rng.uniform(40, 200, size=3)], axis=-1)
        img = np.clip(base, 0, 255).astype(np.uint8)
        for _ in range(3):
            center = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            color = tuple(int(v) for v in rng.integers(0, 256, size=3))
            cv2.circle(img, center, int(rng.integers(10, 80)), color, -1)
        img = cv2.add(img, rng.integers(0, 12, size=JPEG_SHAPE, dtype=np.uint8))
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        out.append([buf.tobytes(), int(i % 1000)])
    return out


class DecodeAndAugment:
    """``[JPEG bytes, label] -> [uint8 224x224x3 image, label]``: decode, Inception crop,
    horizontal flip, PCA lighting. Picklable, so it runs in worker processes."""

    def __init__(self) -> None:
        from dataflow import imgaug

        self.augs = imgaug.AugmentorList([
            imgaug.GoogleNetRandomCropAndResize(target_shape=CROP),
            imgaug.Flip(horiz=True),
            imgaug.Lighting(0.1, EIGVAL, EIGVEC),
        ])

    def __call__(self, dp: list[Any]) -> list[Any]:
        cv2 = _cv2()
        img = cv2.imdecode(np.frombuffer(dp[0], np.uint8), cv2.IMREAD_COLOR)
        return [self.augs.augment(img), dp[1]]


def build_demo_pipeline(
    lmdb_path: str, batch_size: int = 64, num_proc: int | None = None, shuffle_buffer: int = 256
) -> DataFlow:
    """LMDB (sequential) -> LocallyShuffleData -> decode + augment in processes -> BatchData."""
    from dataflow.parallel import MultiProcessMapDataZMQ
    from dataflow.serialize import LMDBSerializer

    ds: DataFlow = LMDBSerializer.load(lmdb_path, shuffle=False)
    ds = LocallyShuffleData(ds, shuffle_buffer)
    ds = MultiProcessMapDataZMQ(ds, num_proc or os.cpu_count() or 2, DecodeAndAugment(),
                                buffer_size=4 * batch_size)
    return BatchData(ds, batch_size)


@dataclass(frozen=True)
class DemoReport:
    """What the demo measured."""

    images: int
    batch_size: int
    num_proc: int
    batches: int
    seconds: float
    batches_per_second: float
    first_batch_shapes: tuple[tuple[int, ...], ...]
    first_batch_dtypes: tuple[str, ...]

    @property
    def images_per_second(self) -> float:
        return self.batches_per_second * self.batch_size

    def format(self) -> str:
        mb = self.images_per_second * CROP * CROP * 3 / 1e6
        rows = [
            ("pipeline", "LMDB -> LocallyShuffleData -> MultiProcessMapDataZMQ(decode, crop, "
                         f"flip, lighting; {self.num_proc} proc{'' if self.num_proc == 1 else 's'})"
                         f" -> BatchData({self.batch_size})"),
            ("generated JPEGs", f"{self.images} x {JPEG_SHAPE[1]}x{JPEG_SHAPE[0]}, quality 90"),
            ("batch", ", ".join(f"{s} {d}" for s, d in
                                zip(self.first_batch_shapes, self.first_batch_dtypes))),
            ("timed batches", f"{self.batches} in {self.seconds:.2f} s"),
            ("batches/s", f"{self.batches_per_second:,.1f}"),
            ("images/s", f"{self.images_per_second:,.0f}"),
            ("output MB/s", f"{mb:,.0f}"),
            ("python", platform.python_version()),
        ]
        width = max(len(k) for k, _ in rows)
        lines = ["", "TestDataSpeed report", "=" * 20]
        lines += [f"{k.ljust(width)} : {v}" for k, v in rows]
        return "\n".join(lines)


def run_demo(
    num_images: int = 512, batch_size: int = 64, batches: int = 40, seed: int = 0,
    progress: bool = True, num_proc: int | None = None, profile_batches: int = 0,
) -> tuple[DemoReport, str | None]:
    """Generate the data, build the pipeline, time it with :class:`TestDataSpeed`, and (with
    ``profile_batches``) profile it. Returns the report and the profile table (or None)."""
    if num_images < batch_size:
        raise ValueError(
            f"`num_images`={num_images} is smaller than `batch_size`={batch_size}: no batch "
            "could be produced; raise num_images or lower batch_size."
        )
    from dataflow.serialize import LMDBSerializer

    set_seed(seed)
    tmp = tempfile.mkdtemp(prefix="dataflow-demo-")
    try:
        path = os.path.join(tmp, "demo.lmdb")
        LMDBSerializer.save(DataFromList(make_jpegs(num_images, seed), shuffle=False), path,
                            progress=False)
        nproc = num_proc or os.cpu_count() or 2
        with build_demo_pipeline(path, batch_size, nproc) as pipeline:
            pipeline.reset_state()
            first = next(iter(pipeline))
            speed = TestDataSpeed(pipeline, size=batches, warmup=2)
            speed._reset_called = True  # already reset above, in this process
            rate = speed.start(progress=progress)
            assert speed.result is not None
        table = None
        if profile_batches:
            from dataflow.profiler import profile

            # A fresh pipeline, profiled from its first datapoint (warmup=0): the profiler sees
            # the stages' iterators being created, so every stage, down to the LMDB reader,
            # shows what it delivered. (Over an already running pipeline, or after a warm-up,
            # the stages below the parallel mapper keep iterators made before profiling began,
            # and show 0 items.) Worker start-up is then part of the profile: profile enough
            # batches (the CLI: PROFILE_BATCHES) that it does not dominate.
            with build_demo_pipeline(path, batch_size, nproc) as fresh:
                table = profile(fresh, num=profile_batches, warmup=0).format()
        report = DemoReport(
            images=num_images, batch_size=batch_size, num_proc=nproc,
            batches=speed.result.items, seconds=speed.result.seconds,
            batches_per_second=rate,
            first_batch_shapes=tuple(tuple(c.shape) for c in first),
            first_batch_dtypes=tuple(str(c.dtype) for c in first),
        )
        return report, table
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
