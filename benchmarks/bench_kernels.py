"""The hot image kernels, each timed against its alternatives on the installed OpenCV and NumPy.

    .venv/bin/python benchmarks/bench_kernels.py [--json] [--threads N] [--repeats 9]

    # the oldest and the newest OpenCV / NumPy that pyproject.toml allows (git-ignored venvs):
    make kernel-venvs
    PYTHONPATH=src .venv-kernels-old/bin/python benchmarks/bench_kernels.py
    PYTHONPATH=src .venv-kernels-new/bin/python benchmarks/bench_kernels.py

A dependency upgrade can make one call many times slower while an equivalent call stays fast
(OpenCV 5's ``cv2.add`` with a negative scalar, or on a non-contiguous view, is 5-30x slower than
its ``cv2.subtract`` of the positive scalar or ``cv2.add`` on a contiguous copy). This script
times, for each kernel the augmentation chains and the JPEG fallback spend their time in, every
way of computing the same result (each alternative's output is checked equal to the first's,
so only equal work is compared), then the call ``dataflow`` makes ("ours"), and prints which
is fastest, and ours against it. A row where ours is more than 1.25x the fastest (and more
than 5 us slower: a few us are the Python around the call) is marked ``SLOW``: the kernel to
revisit on this version.

Inputs are those of the ImageNet-style chains: 224x224x3 uint8 images, contiguous or a
CenterCrop view of a 256x320 image (what a crop hands the next augmentor), 64 distinct images
per pass so that caches see what a pipeline sees. Times are the best of ``--repeats`` passes,
microseconds per image. OpenCV runs with its default thread count unless ``--threads``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

N = 64  # distinct images per pass
#: rows whose alternatives filter differently (only their shapes are checked equal)
INEXACT = {"JPEG 2048x1536 at 1/4 (no C extension)"}


def _best_us(alts: dict[str, Callable[[Any], Any]], inputs: list[Any], repeats: int
             ) -> dict[str, float]:
    """Microseconds per input of each alternative: the best of ``repeats`` passes, the
    alternatives interleaved pass by pass, so that a burst of load elsewhere on the machine hits
    them all alike instead of one."""
    passes = {}
    for name, fn in alts.items():
        t0 = time.perf_counter()
        for x in inputs:  # warm up, and size a pass at about 0.05 s
            fn(x)
        passes[name] = max(1, int(0.05 / max(time.perf_counter() - t0, 1e-9)))
    best = dict.fromkeys(alts, float("inf"))
    for _ in range(repeats):
        for name, fn in alts.items():
            t0 = time.perf_counter()
            for _ in range(passes[name]):
                for x in inputs:
                    fn(x)
            elapsed = (time.perf_counter() - t0) / (passes[name] * len(inputs))
            best[name] = min(best[name], elapsed * 1e6)
    return best


def _inputs() -> dict[str, list[Any]]:
    import cv2
    import numpy as np

    r = np.random.RandomState(0)
    big = [r.randint(0, 256, (256, 320, 3)).astype(np.uint8) for _ in range(N)]
    views = [b[16:240, 48:272] for b in big]
    jpegs = []
    yy, xx = np.mgrid[0:375, 0:500].astype(np.float32)
    for i in range(16):  # the bench_e2e generator's images: waves and pixel noise, q90
        base = np.stack([np.sin(xx * (0.01 + i / 900) + c) * np.cos(yy * 0.02 - c)
                         for c in range(3)], -1)
        img = (base * 90 + 128 + r.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
        jpegs.append(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1])
    big2 = []
    yy, xx = np.mgrid[0:1536, 0:2048].astype(np.float32)
    for i in range(4):
        base = np.stack([np.sin(xx * (0.005 + i / 900) + c) * np.cos(yy * 0.01 - c)
                         for c in range(3)], -1)
        img = (base * 90 + 128 + r.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
        big2.append(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1])
    return {
        "contiguous": [np.ascontiguousarray(v) for v in views],
        "view": views,
        "256x320": big,
        "jpeg500": jpegs,
        "jpeg2048": big2,
    }


def _kernels() -> list[tuple[str, str, dict[str, Callable[[Any], Any]], str]]:
    """(kernel, input set, {alternative: callable}, the alternative dataflow uses)."""
    import cv2
    import numpy as np

    from dataflow.imgaug import functional as fn
    from dataflow.jpeg import _whole_window

    out: list[tuple[str, str, dict[str, Callable[[Any], Any]], str]] = []

    def sat(d: float) -> np.ndarray:
        return np.clip(np.arange(256) + d, 0, 255).astype(np.uint8)

    for d in (17.0, -17.0):
        table = sat(d)
        alts = {
            "cv2.add(img, (d,)*4)": lambda x, d=d: cv2.add(x, (d, d, d, d)),
            "cv2.add / cv2.subtract by sign": (
                (lambda x, d=d: cv2.add(x, (d, d, d, d))) if d >= 0 else
                (lambda x, d=d: cv2.subtract(x, (-d, -d, -d, -d)))),
            "contiguous copy, then add/subtract": (
                (lambda x, d=d: cv2.add(np.ascontiguousarray(x), (d, d, d, d))) if d >= 0 else
                (lambda x, d=d: cv2.subtract(np.ascontiguousarray(x), (-d, -d, -d, -d)))),
            "cv2.LUT": lambda x, t=table: cv2.LUT(x, t),
            "numpy int16": lambda x, d=d: np.clip(x.astype(np.int16) + int(d), 0, 255).astype(
                np.uint8),
            "ours": lambda x, d=d: fn.add_scalar(x, d),
        }
        for inp in ("contiguous", "view"):
            out.append((f"brightness {d:+.0f}", inp, alts, "ours"))

    inc = (9.0, -13.0, 4.0)  # PCA lighting: per-channel offsets of both signs
    up, down = tuple(max(v, 0) for v in inc), tuple(max(-v, 0) for v in inc)
    table3 = np.stack([sat(v) for v in inc], -1).reshape(1, 256, 3)
    alts = {
        "cv2.add(+) then cv2.subtract(-)": lambda x: cv2.subtract(cv2.add(x, (*up, 0)),
                                                                   (*down, 0)),
        "contiguous copy, then add, subtract": lambda x: cv2.subtract(
            cv2.add(np.ascontiguousarray(x), (*up, 0)), (*down, 0)),
        "cv2.LUT (256x3 table)": lambda x: cv2.LUT(np.ascontiguousarray(x), table3),
        "ours": lambda x: fn.lighting(x, inc),
    }
    for inp in ("contiguous", "view"):
        out.append(("lighting (9, -13, 4)", inp, alts, "ours"))

    mtable = np.clip(np.rint(np.arange(256, dtype=np.float32) * np.float32(1.3)), 0,
                     255).astype(np.uint8)
    alts = {
        "cv2.LUT": lambda x: cv2.LUT(x, mtable),
        "contiguous copy, then cv2.LUT": lambda x: cv2.LUT(np.ascontiguousarray(x), mtable),
        "numpy take": lambda x: mtable[x],
        "ours": lambda x: fn.multiply(x, 1.3),
    }
    for inp in ("contiguous", "view"):
        out.append(("multiply 1.3 (table)", inp, alts, "ours"))

    alts = {
        "cv2.flip": lambda x: cv2.flip(x, 1),
        "numpy copy of x[:, ::-1]": lambda x: np.ascontiguousarray(x[:, ::-1]),
        "ours": lambda x: fn.flip(x, True),
    }
    for inp in ("contiguous", "view"):
        out.append(("flip horizontal", inp, alts, "ours"))

    alts = {
        "cv2.cvtColor BGR2RGB": lambda x: cv2.cvtColor(x, cv2.COLOR_BGR2RGB),
        "numpy copy of x[..., ::-1]": lambda x: np.ascontiguousarray(x[..., ::-1]),
    }
    out.append(("BGR -> RGB", "contiguous", alts, ""))

    alts = {
        "cv2.resize": lambda x: cv2.resize(x, (200, 200), interpolation=cv2.INTER_LINEAR),
        "contiguous copy, then cv2.resize": lambda x: cv2.resize(
            np.ascontiguousarray(x), (200, 200), interpolation=cv2.INTER_LINEAR),
        "ours": lambda x: fn.resize(x, 200, 200),
    }
    for inp in ("contiguous", "view"):
        out.append(("resize 224 -> 200 bilinear", inp, alts, "ours"))

    alts = {
        "cv2.resize": lambda x: cv2.resize(x, (224, 224), interpolation=cv2.INTER_LINEAR),
        "ours": lambda x: fn.resize(x, 224, 224),
    }
    out.append(("resize 256x320 -> 224 bilinear", "256x320", alts, "ours"))

    # the decoder's fallback (no C extension): the whole image at the DCT scale, then the window.
    # At 1/4 (a 2048x1536 JPEG, window wanted at >= 224): the full decode then INTER_AREA, or a
    # DCT-scaled decode by OpenCV or simplejpeg (shapes checked, pixels differ from the first)
    try:
        import simplejpeg
    except ImportError:  # (the imgaug extra installs it)
        simplejpeg = None
    flag = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
    reduced = cv2.IMREAD_REDUCED_COLOR_4 | cv2.IMREAD_IGNORE_ORIENTATION
    alts = {
        "cv2.imdecode, then resize INTER_AREA": lambda b: cv2.resize(
            cv2.imdecode(b, flag), (512, 384), interpolation=cv2.INTER_AREA),
        "cv2.imdecode, then resize INTER_LINEAR": lambda b: cv2.resize(
            cv2.imdecode(b, flag), (512, 384), interpolation=cv2.INTER_LINEAR),
        "cv2.imdecode(IMREAD_REDUCED_COLOR_4)": lambda b: cv2.imdecode(b, reduced),
    }
    if simplejpeg is not None:
        alts["simplejpeg(min_factor=4)"] = lambda b: simplejpeg.decode_jpeg(
            b, "BGR", min_height=384, min_width=512, min_factor=4)
    alts["ours (decode_jpeg's fallback)"] = lambda b: _whole_window(
        b, (0, 0, 512, 384), 4, "bgr", False, 1536, 2048, 0, "auto")
    out.append(("JPEG 2048x1536 at 1/4 (no C extension)", "jpeg2048", alts,
                "ours (decode_jpeg's fallback)"))
    # at scale 1 (no window of a 500x375 image is twice 224): the decoder is the whole cost
    alts = {"cv2.imdecode": lambda b: cv2.imdecode(b, flag)}
    if simplejpeg is not None:
        alts["simplejpeg"] = lambda b: simplejpeg.decode_jpeg(b, "BGR")
    alts["ours (decode_jpeg's fallback)"] = lambda b: _whole_window(
        b, (0, 0, 500, 375), 1, "bgr", False, 375, 500, 0, "auto")
    out.append(("JPEG 500x375 whole (no C extension)", "jpeg500", alts,
                "ours (decode_jpeg's fallback)"))
    alts = {"cv2.imdecode(IMREAD_REDUCED_COLOR_2)": lambda b: cv2.imdecode(
        b, cv2.IMREAD_REDUCED_COLOR_2 | cv2.IMREAD_IGNORE_ORIENTATION)}
    if simplejpeg is not None:
        alts["simplejpeg(min_factor=2)"] = lambda b: simplejpeg.decode_jpeg(
            b, "BGR", min_height=188, min_width=250, min_factor=2)
    out.append(("JPEG 500x375 at 1/2", "jpeg500", alts, ""))
    return out


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def main() -> None:
    import cv2
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="cv2.setNumThreads")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    if args.threads is not None:
        cv2.setNumThreads(args.threads)
    inputs = _inputs()
    rows = []
    for kernel, inp, alts, ours in _kernels():
        xs = inputs[inp]
        ref = None
        for name, f in alts.items():
            res = f(xs[0])
            if ref is None:
                ref = res
            elif kernel in INEXACT:
                if np.asarray(res).shape != np.asarray(ref).shape:
                    raise AssertionError(f"{kernel}: {name} has another shape")
            elif not _same(res, ref):
                raise AssertionError(f"{kernel}: {name} differs from {next(iter(alts))}")
        times = _best_us(alts, xs, args.repeats)
        fastest = min((n for n in times if n != ours), key=times.__getitem__)
        rows.append({"kernel": kernel, "input": inp, "us": times, "fastest": fastest,
                     "ours": ours, "ours_over_fastest": times[ours] / times[fastest]
                     if ours else None})
    head = {"opencv": cv2.__version__, "numpy": np.__version__,
            "cv2_threads": cv2.getNumThreads(), "python": sys.version.split()[0]}
    if args.json:
        print(json.dumps({"versions": head, "rows": rows}))
        return
    print(f"OpenCV {head['opencv']}, NumPy {head['numpy']}, Python {head['python']}, "
          f"cv2 threads {head['cv2_threads']}; us per image, best of {args.repeats}\n")
    print("| kernel | input | alternatives (us per image) | fastest | ours / fastest |")
    print("|---|---|---|---|---|")
    for r in rows:
        alts = "; ".join(f"{n} {t:.1f}" for n, t in r["us"].items())
        ratio = "" if r["ours_over_fastest"] is None else f"{r['ours_over_fastest']:.2f}"
        if r["ours"] and r["us"][r["ours"]] > max(1.25 * r["us"][r["fastest"]],
                                                   r["us"][r["fastest"]] + 5.0):
            ratio += " SLOW"
        print(f"| {r['kernel']} | {r['input']} | {alts} | {r['fastest']} | {ratio} |")


if __name__ == "__main__":
    main()
