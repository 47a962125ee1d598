"""The Berkeley Segmentation Data Set (BSDS500): images and edge probability maps."""

from __future__ import annotations

import os

import numpy as np

from dataflow.dataset._base import IndexedDataset, check_choice
from dataflow.dataset._download import ensure_extracted, resolve_dir
from dataflow.dataset._io import import_cv2, imread_bgr, loadmat, mat_array

__all__ = ["BSDS500"]

_URL = "http://www.eecs.berkeley.edu/Research/Projects/CS/vision/grouping/BSR/BSR_bsds500.tgz"
_ARCHIVE = "BSR_bsds500.tgz"
_ARCHIVE_SIZE = 70763455
_DATA = os.path.join("BSR", "BSDS500", "data")


def read_boundaries(path: str, owner: str = "read_boundaries") -> np.ndarray:
    """The edge map of a BSDS ground-truth ``.mat``: the fraction of annotators who marked
    each pixel as a boundary, ``float32`` (h, w)."""
    gt = mat_array(loadmat(path, owner), "groundTruth", path, owner).reshape(-1)
    maps = []
    try:
        for annotation in gt:
            maps.append(np.asarray(annotation["Boundaries"].reshape(-1)[0], dtype=np.float32))
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ValueError(
            f"{owner}: 'groundTruth' of {path!r} is not a cell array of structs with a "
            f"'Boundaries' field ({type(e).__name__}: {e})."
        ) from e
    if not maps or any(m.ndim != 2 or m.shape != maps[0].shape for m in maps):
        raise ValueError(
            f"{owner}: {path!r} has {len(maps)} annotations of shapes "
            f"{[m.shape for m in maps]}; expected at least one, all (h, w) of one size."
        )
    return np.asarray(np.sum(maps, axis=0, dtype=np.float32) / np.float32(len(maps)),
                      dtype=np.float32)


class BSDS500(IndexedDataset):
    """BSDS500 (https://www2.eecs.berkeley.edu/Research/Projects/CS/vision/grouping/), in memory.

    Yields ``[image, edges]``: a BGR ``uint8`` (321, 481, 3) image and a ``float32`` (321, 481)
    map, the fraction of annotators marking each pixel as an edge. Portrait images and their
    maps are transposed to landscape.

    Args:
        name: ``'train'``, ``'test'`` or ``'val'``.
        data_dir: the folder that holds ``BSR/BSDS500/data`` (or the ``BSR_bsds500.tgz``
            archive, which is then extracted); default ``get_dataset_path('bsds500_data')``.
        shuffle: random order every epoch.
        seed: seed of the shuffling order.

    Images are read in sorted file order (tensorpack used unsorted glob order).
    """

    def __init__(self, name: str, data_dir: str | os.PathLike | None = None,
                 shuffle: bool = True, seed: int | None = None) -> None:
        owner = type(self).__name__
        self.name = check_choice("name", name, ("train", "test", "val"))
        self.data_dir = resolve_dir(data_dir, "bsds500_data")
        import_cv2(owner)
        self.data_root = ensure_extracted(
            owner, self.data_dir, _DATA, _URL, _ARCHIVE, _ARCHIVE_SIZE, "data_dir"
        )
        image_dir = os.path.join(self.data_root, "images", name)
        if not os.path.isdir(image_dir):
            raise FileNotFoundError(f"{owner}: the image folder {image_dir!r} is missing.")
        files = sorted(f for f in os.listdir(image_dir) if f.lower().endswith(".jpg"))
        if not files:
            raise FileNotFoundError(f"{owner}: no .jpg images in {image_dir!r}.")
        self.images: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []
        for f in files:
            image_id = os.path.splitext(f)[0]
            im = imread_bgr(os.path.join(image_dir, f), owner)
            gt_file = os.path.join(self.data_root, "groundTruth", name, image_id + ".mat")
            gt = read_boundaries(gt_file, owner)
            if gt.shape[0] > gt.shape[1]:
                gt = gt.T
                im = im.transpose(1, 0, 2)
            if im.shape[:2] != gt.shape:
                raise ValueError(
                    f"{owner}: image {f!r} is {im.shape[:2]} but its ground truth "
                    f"{gt_file!r} is {gt.shape}."
                )
            self.images.append(np.ascontiguousarray(im))
            self.labels.append(np.ascontiguousarray(gt))
        self._init_iteration(shuffle, seed)

    def __len__(self) -> int:
        return len(self.images)

    def _datapoint(self, index: int) -> list:
        return [self.images[index], self.labels[index]]
