"""Contract helpers for augmentors and transforms."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from dataflow.imgaug import ImageAugmentor
from dataflow.imgaug.transform import BaseTransform


def check_augmentor(
    aug: ImageAugmentor,
    img: np.ndarray,
    coords: np.ndarray | None = None,
    dtype: Any = None,
    marks: bool = False,
) -> tuple[np.ndarray, BaseTransform]:
    """Checks the augmentor contract on ``img`` and returns ``(output, transform)``.

    * the augmentor pickles, and the copy has the same repr;
    * ``get_transform`` + ``apply_image`` (twice) + ``apply_coords`` leave ``img`` and
      ``coords`` unchanged, and the transform gives the same result both times;
    * the output dtype is ``dtype`` (default: the input's);
    * with ``marks``, points marked on the image land at their transformed coordinates.
    """
    copy = pickle.loads(pickle.dumps(aug))
    assert repr(copy) == repr(aug)
    before = img.copy()
    tfm = aug.get_transform(img)
    out = tfm.apply_image(img)
    again = tfm.apply_image(img)
    np.testing.assert_array_equal(img, before)
    np.testing.assert_array_equal(out, again)
    assert out.dtype == np.dtype(dtype or img.dtype)
    assert out.ndim == img.ndim
    if coords is not None:
        c_before = coords.copy()
        new = tfm.apply_coords(coords)
        np.testing.assert_array_equal(coords, c_before)
        assert new.shape == coords.shape
        assert new.dtype == coords.dtype
    if marks:
        check_marks(tfm, img.shape[:2])
    return out, tfm


def _blob_image(shape: tuple[int, int], i: int, j: int) -> np.ndarray:
    img = np.zeros(shape, dtype=np.float32)
    k = np.array([1.0, 2.0, 1.0], dtype=np.float32)
    img[i - 1 : i + 2, j - 1 : j + 2] = np.outer(k, k)
    return img


def measure_mark(img: np.ndarray) -> tuple[float, float] | None:
    """The intensity-weighted centre of ``img`` in continuous (x, y), or None if empty."""
    v = np.asarray(img, dtype=np.float64).reshape(img.shape[0], img.shape[1])
    total = v.sum()
    if total < 1e-3:
        return None
    ys, xs = np.indices(v.shape)
    return float(((xs + 0.5) * v).sum() / total), float(((ys + 0.5) * v).sum() / total)


def check_marks(
    tfm: BaseTransform,
    shape: tuple[int, int],
    points: list[tuple[int, int]] | None = None,
    margin: float = 5.0,
    tol: float = 1.0,
) -> int:
    """Marks pixel centres (``points`` = (row, col) list, default a grid) on blank images of
    ``shape``, applies ``tfm`` to each image and to the coordinates, and checks that every mark
    that stays ``margin`` px inside the output lands within ``tol`` px of its coordinate.
    Returns how many marks were checked."""
    h, w = shape
    if points is None:
        points = [(i, j) for i in range(2, h - 2, max(1, (h - 4) // 3))
                  for j in range(2, w - 2, max(1, (w - 4) // 3))]
    coords = np.array([[j + 0.5, i + 0.5] for i, j in points], dtype=np.float64).reshape(-1, 2)
    first = tfm.apply_image(_blob_image(shape, *points[0]))
    expected = tfm.apply_coords(coords)
    oh, ow = first.shape[:2]
    checked = 0
    for (i, j), (ex, ey) in zip(points, expected):
        if not (margin <= ex <= ow - margin and margin <= ey <= oh - margin):
            continue
        got = measure_mark(tfm.apply_image(_blob_image(shape, i, j)))
        assert got is not None, f"mark at row {i}, col {j} vanished; expected at {(ex, ey)}"
        dist = float(np.hypot(got[0] - ex, got[1] - ey))
        assert dist <= tol, (
            f"mark at row {i}, col {j} landed at {got}, coordinates say {(ex, ey)} "
            f"(off by {dist:.3f} px) for {tfm!r}"
        )
        checked += 1
    return checked
