"""JPEG decoder micro-benchmark: milliseconds per image on one core, full vs region vs region at
a DCT scale, against cv2.imdecode and simplejpeg, in one run.

    .venv/bin/python benchmarks/bench_jpeg.py [--images 40] [--repeats 5]

Workload: the bench_e2e.py generator (smooth waves plus pixel noise, quality 90, ~3 bits per
pixel) at 500x375, 1024x768 and 2048x1536. The windows are those GoogleNetRandomCropAndResize
(224) samples from each image's shape (seeded; about 44% of the area on average); "at scale" is
the coarsest DCT scale at which the window still has 224 pixels (at 500x375 that is always 1).

  cv2 full          cv2.imdecode(IMREAD_COLOR)
  simplejpeg full   simplejpeg.decode_jpeg(BGR), its default (accurate) DCT and upsampling
  simplejpeg scaled the whole image at the window's DCT scale (min_factor; simplejpeg has no
                    region decode)
  ours full         dataflow.jpeg.decode_jpeg(data)
  ours region       decode_jpeg(data, crop): only the window
  ours region+scale decode_jpeg(data, crop, min_size=224): the window at its DCT scale
  entropy floor     ours, a 1x1 window on the last row: every row entropy-decoded, nothing else
                    (what a window that reaches the bottom of the image cannot go below)

Every step runs ``--repeats`` alternating passes over the images in this process (one thread,
OpenCV limited to one thread); the best pass counts. simplejpeg: ``pip install simplejpeg`` (the
``bench`` dependency group), else its rows are skipped.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = [(500, 375), (1024, 768), (2048, 1536)]


def synthetic_jpegs(n: int, w: int, h: int) -> list[bytes]:
    """``n`` JPEGs of the bench_e2e.py workload at ``w`` x ``h``."""
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = []
    for _ in range(n):
        fx, fy, ph = rng.uniform(0.005, 0.05), rng.uniform(0.005, 0.05), rng.uniform(0, 6)
        base = np.stack([np.sin(xx * fx + ph + c) * np.cos(yy * fy - c) for c in range(3)], -1)
        img = (base * 90 + 128 + rng.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
        out.append(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes())
    return out


def windows(blobs: list[bytes], w: int, h: int) -> list[tuple[int, int, int, int]]:
    import numpy as np

    from dataflow import imgaug

    aug = imgaug.GoogleNetRandomCropAndResize()
    aug.rng = np.random.RandomState(0)
    dummy = np.broadcast_to(np.zeros((), np.uint8), (h, w, 3))
    out = []
    for _ in blobs:
        first = aug.get_transform(dummy).tfms[0]
        crop = isinstance(first, imgaug.CropTransform)
        out.append((first.x0, first.y0, first.w, first.h) if crop else (0, 0, w, h))
    return out


def measure(n: int, repeats: int) -> list[list[str]]:
    import cv2
    import numpy as np

    from dataflow import jpeg

    try:
        import simplejpeg
    except ImportError:
        simplejpeg = None
    cv2.setNumThreads(1)
    try:
        ctypes.CDLL("libc.so.6").mallopt(-2, 64 << 20)  # M_TOP_PAD: no page faults per image
    except (OSError, AttributeError):
        pass
    rows = []
    for w, h in SIZES:
        blobs = synthetic_jpegs(n, w, h)
        wins = windows(blobs, w, h)
        scales = [jpeg.dct_scale((c[3], c[2]), 224) for c in wins]
        steps = {
            "cv2 full": lambda b, c, d: cv2.imdecode(np.frombuffer(b, np.uint8), 1),
            "ours full": lambda b, c, d: jpeg.decode_jpeg(b),
            "ours region": lambda b, c, d: jpeg.decode_jpeg(b, c),
            "ours region+scale": lambda b, c, d: jpeg.decode_jpeg(b, c, min_size=224),
            "entropy floor": lambda b, c, d, h=h: jpeg.decode_jpeg(b, (0, h - 1, 1, 1)),
        }
        if simplejpeg is not None:
            steps["simplejpeg full"] = lambda b, c, d: simplejpeg.decode_jpeg(b, "BGR")
            steps["simplejpeg scaled"] = lambda b, c, d: simplejpeg.decode_jpeg(
                b, "BGR", min_factor=d)
        best = dict.fromkeys(steps, float("inf"))
        for _ in range(repeats):
            for name, step in steps.items():
                t0 = time.perf_counter()
                for b, c, d in zip(blobs, wins, scales):
                    step(b, c, d)
                best[name] = min(best[name], 1e3 * (time.perf_counter() - t0) / len(blobs))
        area = np.mean([c[2] * c[3] / (w * h) for c in wins])
        kb = np.mean([len(b) for b in blobs]) / 1024
        note = f"{w}x{h} ({kb:.0f} KB, windows {100 * area:.0f}% of the area, scale " + "/".join(
            f"1/{d}: {scales.count(d)}" for d in (1, 2, 4, 8) if scales.count(d)) + ")"
        print(note + ": " + ", ".join(f"{k} {v:.3f}" for k, v in best.items()), file=sys.stderr)
        full = best["cv2 full"]
        rows.append([note] + [f"{best[k]:.3f} ({full / best[k]:.2f}x)" if k in best else "n/a"
                              for k in COLUMNS])
    return rows


COLUMNS = ["cv2 full", "simplejpeg full", "ours full", "ours region", "ours region+scale",
           "simplejpeg scaled", "entropy floor"]


def main() -> None:
    from _common import markdown_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=40, help="images per size")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = measure(args.images, args.repeats)
    print("ms per image, one core (speed-up over cv2.imdecode)\n")
    print(markdown_table(["workload", *COLUMNS], rows))


if __name__ == "__main__":
    main()
