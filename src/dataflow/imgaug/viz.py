"""Looking at images: ``stack_patches`` (a grid of images) and ``dump_dataflow_images``."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from dataflow.imgaug._cv2 import cv2

__all__ = ["dump_dataflow_images", "stack_patches", "to_display", "write_image"]


def to_display(img: np.ndarray) -> np.ndarray:
    """A uint8 ``(h, w, 3)`` copy of ``img`` for display: floats in [0, 1] are scaled by 255,
    values are rounded and clipped, gray images get three channels."""
    img = np.asarray(img)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] not in (3, 4)):
        raise ValueError(
            f"cannot display an image of shape {img.shape}: need (h, w), (h, w, 1), (h, w, 3) "
            "or (h, w, 4)."
        )
    if img.dtype != np.uint8:
        x = img.astype(np.float64)
        if x.size and np.nanmax(x) <= 1.0 and np.nanmin(x) >= 0.0:
            x = x * 255.0
        img = np.clip(np.rint(np.nan_to_num(x)), 0, 255).astype(np.uint8)
    if img.ndim == 2:
        img = np.repeat(img[:, :, np.newaxis], 3, axis=2)
    return np.ascontiguousarray(img[:, :, :3])


def stack_patches(
    patches: Sequence[np.ndarray],
    nr_row: int | None = None,
    nr_col: int | None = None,
    border: int = 4,
    bgcolor: tuple[int, int, int] = (255, 255, 255),
) -> np.ndarray:
    """Tile ``patches`` (any sizes; each is centred in a cell of the largest size) into one
    uint8 ``(H, W, 3)`` image with ``border`` pixels of ``bgcolor`` between cells."""
    tiles = [to_display(p) for p in patches]
    if not tiles:
        raise ValueError("`patches` is empty: nothing to stack.")
    n = len(tiles)
    if nr_col is None:
        nr_col = math.ceil(math.sqrt(n)) if nr_row is None else math.ceil(n / nr_row)
    if nr_row is None:
        nr_row = math.ceil(n / nr_col)
    if nr_row * nr_col < n:
        raise ValueError(f"a {nr_row}x{nr_col} grid cannot hold {n} patches.")
    ch = max(t.shape[0] for t in tiles)
    cw = max(t.shape[1] for t in tiles)
    canvas = np.empty(
        (nr_row * ch + (nr_row + 1) * border, nr_col * cw + (nr_col + 1) * border, 3), np.uint8
    )
    canvas[...] = np.asarray(bgcolor, dtype=np.uint8)
    for k, t in enumerate(tiles):
        r, c = divmod(k, nr_col)
        y = border + r * (ch + border) + (ch - t.shape[0]) // 2
        x = border + c * (cw + border) + (cw - t.shape[1]) // 2
        canvas[y : y + t.shape[0], x : x + t.shape[1]] = t
    return canvas


def write_image(path: str, img: np.ndarray, rgb: bool = True) -> None:
    """``cv2.imwrite`` an (h, w, 3) uint8 image given in RGB (``rgb``) or BGR order."""
    if not cv2.imwrite(path, np.ascontiguousarray(img[:, :, ::-1] if rgb else img)):
        raise OSError(f"cv2.imwrite could not write {path!r}; check the directory and extension.")


def dump_dataflow_images(
    df: Any,
    index: int = 0,
    batched: bool = True,
    number: int = 1000,
    output_dir: str | None = None,
    scale: float = 1,
    resize: Any = None,
    viz: tuple[int, int] | None = None,
    flipRGB: bool = False,  # noqa: N803 (tensorpack's name)
) -> list[str]:
    """Write ``number`` images taken from component ``index`` of ``df``'s datapoints.

    ``batched``: the component is a batch of images. Each image is multiplied by ``scale``,
    resized to ``resize = (h, w)`` (an int for a square), its channels reversed if ``flipRGB``
    (images are written as BGR, OpenCV's order, as in tensorpack), and written as
    ``<output_dir>/<k:03d>.jpg`` (from ``001.jpg``). With ``viz = (rows, cols)``
    the images are also written in grids, ``<output_dir>/grid_<k:03d>.jpg`` (this build of
    OpenCV has no window to show them in). ``df`` is reset first and iterated for as many
    epochs as needed. Returns the written paths.

    Unlike tensorpack, exactly ``number`` images are written (not ``number - 1``), ``resize`` is
    honoured as ``(h, w)``, and an empty flow raises instead of looping forever.
    """
    from dataflow.imgaug._args import shape2d

    if output_dir is None:
        raise ValueError(
            "`output_dir` is required: dump_dataflow_images writes files (this OpenCV build "
            "cannot show windows); pass output_dir='some/dir'."
        )
    if number <= 0:
        raise ValueError(f"`number` must be positive, got {number!r}.")
    size = None if resize is None else shape2d(resize, "resize")
    if viz is not None and (len(viz) != 2 or min(viz) <= 0):
        raise ValueError(f"`viz` must be (rows, cols) of positive ints, got {viz!r}.")
    os.makedirs(output_dir, exist_ok=True)
    df.reset_state()
    written: list[str] = []
    grid: list[np.ndarray] = []
    grids = [0]

    def flush_grid() -> None:
        if grid and viz is not None:
            grids[0] += 1
            path = os.path.join(output_dir, f"grid_{grids[0]:03d}.jpg")
            write_image(path, stack_patches(grid, viz[0], viz[1]), rgb=False)
            written.append(path)
            grid.clear()

    count = 0
    while count < number:
        produced = False
        for dp in df:
            produced = True
            imgs = dp[index] if batched else [dp[index]]
            for img in imgs:
                img = np.asarray(img)
                if scale != 1:
                    img = img * scale
                img = to_display(img)
                if size is not None:
                    img = cv2.resize(img, (size[1], size[0]))
                if flipRGB:
                    img = img[:, :, ::-1]
                count += 1
                path = os.path.join(output_dir, f"{count:03d}.jpg")
                write_image(path, img, rgb=False)
                written.append(path)
                if viz is not None:
                    grid.append(img)
                    if len(grid) == viz[0] * viz[1]:
                        flush_grid()
                if count >= number:
                    break
            if count >= number:
                break
        if not produced:
            raise ValueError(
                f"the dataflow produced no datapoint, so {number} images cannot be dumped."
            )
    if viz is not None:
        flush_grid()
    return written
