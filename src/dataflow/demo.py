"""The demo pipeline behind ``python -m dataflow demo``: ImageNet-like, on generated data."""

from __future__ import annotations

import platform
from dataclasses import dataclass

import numpy as np

from dataflow.base import DataFlow
from dataflow.rng import set_seed
from dataflow.sources import DataFromList
from dataflow.wrappers import BatchData, MapDataComponent, TestDataSpeed

__all__ = ["DemoReport", "build_demo_pipeline", "make_images", "run_demo"]

IMAGE_SHAPE = (256, 320, 3)
CROP = 224
MEAN = np.array([123.68, 116.78, 103.94], dtype=np.float32)
STD = np.array([58.4, 57.1, 57.4], dtype=np.float32)


def make_images(n: int, seed: int = 0) -> list[list]:
    """``n`` generated datapoints ``[uint8 256x320x3 image, int label]`` (smooth gradients plus
    noise, so they look like photos to the augmentation, not like constant arrays)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0 : IMAGE_SHAPE[0], 0 : IMAGE_SHAPE[1]]
    base = (xx[..., None] * 0.5 + yy[..., None] * 0.3).astype(np.float32)
    out = []
    for i in range(n):
        tint = rng.uniform(0, 80, size=3).astype(np.float32)
        noise = rng.integers(0, 40, size=IMAGE_SHAPE, dtype=np.uint8)
        img = np.clip(base + tint, 0, 215).astype(np.uint8) + noise
        out.append([img, int(i % 1000)])
    return out


class RandomCropFlipNormalize:
    """A random 224x224 crop, a random horizontal flip, and per-channel normalization to
    float32 CHW-free HWC, with its own seeded stream (picklable, so it can go to workers)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        h, w = img.shape[:2]
        y = int(self.rng.integers(0, h - CROP + 1))
        x = int(self.rng.integers(0, w - CROP + 1))
        crop = img[y : y + CROP, x : x + CROP]
        if self.rng.random() < 0.5:
            crop = crop[:, ::-1]
        return (crop.astype(np.float32) - MEAN) / STD


def build_demo_pipeline(images: list[list], batch_size: int = 64, seed: int = 0) -> DataFlow:
    """source (shuffled list) -> map (crop, flip, normalize) -> batch."""
    ds: DataFlow = DataFromList(images, shuffle=True, seed=seed)
    ds = MapDataComponent(ds, RandomCropFlipNormalize(seed), index=0)
    return BatchData(ds, batch_size, remainder=False)


@dataclass(frozen=True)
class DemoReport:
    """What the demo measured."""

    images: int
    batch_size: int
    batches: int
    seconds: float
    batches_per_second: float
    first_batch_shapes: tuple[tuple[int, ...], ...]
    first_batch_dtypes: tuple[str, ...]

    @property
    def images_per_second(self) -> float:
        return self.batches_per_second * self.batch_size

    def format(self) -> str:
        mb = self.images_per_second * CROP * CROP * 3 * 4 / 1e6
        rows = [
            ("pipeline", "DataFromList(shuffle) -> MapDataComponent(crop+flip+norm) -> "
                         f"BatchData({self.batch_size})"),
            ("generated images", f"{self.images} x {IMAGE_SHAPE} uint8"),
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
    progress: bool = True,
) -> DemoReport:
    """Build the demo pipeline on generated data and time it with :class:`TestDataSpeed`."""
    if num_images < batch_size:
        raise ValueError(
            f"`num_images`={num_images} is smaller than `batch_size`={batch_size}: no batch "
            "could be produced; raise num_images or lower batch_size."
        )
    set_seed(seed)
    pipeline = build_demo_pipeline(make_images(num_images, seed), batch_size, seed)
    pipeline.reset_state()
    first = next(iter(pipeline))
    speed = TestDataSpeed(pipeline, size=batches, warmup=1)
    speed.reset_state()
    rate = speed.start(progress=progress)
    assert speed.result is not None
    return DemoReport(
        images=num_images,
        batch_size=batch_size,
        batches=speed.result.items,
        seconds=speed.result.seconds,
        batches_per_second=rate,
        first_batch_shapes=tuple(tuple(c.shape) for c in first),
        first_batch_dtypes=tuple(str(c.dtype) for c in first),
    )
