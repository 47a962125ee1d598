"""Caltech-101 silhouettes (28x28, split 1) from Benjamin Marlin's ``.mat`` file."""

from __future__ import annotations

import os

from dataflow.dataset._base import IndexedDataset, check_choice
from dataflow.dataset._download import ensure_files, resolve_dir
from dataflow.dataset._io import loadmat, mat_array

__all__ = ["Caltech101Silhouettes"]

_FILE = "caltech101_silhouettes_28_split1.mat"


class Caltech101Silhouettes(IndexedDataset):
    """Caltech-101 silhouettes (https://people.cs.umass.edu/~marlin/data.shtml).

    Yields ``[image, label]``: a (28, 28) image (the file's dtype) and a numpy integer label
    in 0..100 (the file's labels are 1-based). 4100 train / 2307 test / 2264 val datapoints.

    Args:
        name: ``'train'``, ``'test'`` or ``'val'``.
        shuffle: random order every epoch.
        dir: the folder with ``caltech101_silhouettes_28_split1.mat``; default
            ``get_dataset_path('caltech101_data')``. A missing file is downloaded.
        seed: seed of the shuffling order.
    """

    _DIR_NAME = "caltech101_data"
    _URL_BASE = "https://people.cs.umass.edu/~marlin/data/"

    def __init__(self, name: str, shuffle: bool = True, dir: str | os.PathLike | None = None,
                 seed: int | None = None) -> None:
        owner = type(self).__name__
        self.name = check_choice("name", name, ("train", "test", "val"))
        self.dir = resolve_dir(dir, self._DIR_NAME)
        ensure_files(owner, self.dir, self._URL_BASE, {_FILE: None})
        path = os.path.join(self.dir, _FILE)
        mat = loadmat(path, owner)
        data = mat_array(mat, f"{name}_data", path, owner)
        labels = mat_array(mat, f"{name}_labels", path, owner).reshape(-1)
        if data.ndim != 2 or data.shape[1] != 28 * 28 or len(data) != len(labels):
            raise ValueError(
                f"{owner}: {path!r} has {name}_data of shape {data.shape} and {len(labels)} "
                f"{name}_labels; expected (n, 784) and n labels."
            )
        if len(labels) and labels.min() < 1:
            raise ValueError(
                f"{owner}: {name}_labels of {path!r} contain {labels.min()}; they should be "
                "1-based class ids."
            )
        self.images = data.reshape(-1, 28, 28)
        self.labels = labels - 1
        self._init_iteration(shuffle, seed)

    def __len__(self) -> int:
        return len(self.labels)

    def _datapoint(self, index: int) -> list:
        return [self.images[index], self.labels[index]]
