"""SVHN cropped digits (format 2), read from the official ``*_32x32.mat`` files."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

from dataflow.dataset._base import IndexedDataset, check_choice
from dataflow.dataset._download import ensure_files, resolve_dir
from dataflow.dataset._io import loadmat, mat_array

__all__ = ["SVHNDigit"]

_SPLITS = ("train", "test", "extra")


class SVHNDigit(IndexedDataset):
    """The Street View House Numbers digits, 32x32 crops (http://ufldl.stanford.edu/housenumbers/).

    Yields ``[image, label]``: a (32, 32, 3) ``uint8`` **RGB** image and a numpy integer
    label in 0..9 (the file's label 10 for the digit "0" becomes 0).

    Args:
        name: ``'train'``, ``'test'`` or ``'extra'``; the file is ``<name>_32x32.mat``.
        data_dir: the folder with the ``.mat`` files; default ``get_dataset_path('svhn_data')``.
            Missing files are downloaded.
        shuffle: random order every epoch.
        seed: seed of the shuffling order.

    Arrays are shared between instances that read the same, unchanged file; unlike tensorpack,
    the cache is keyed by the file, so every instance honours its ``data_dir``.
    """

    _DIR_NAME = "svhn_data"
    _URL_BASE = "http://ufldl.stanford.edu/housenumbers/"
    _MD5 = {
        "train_32x32.mat": "e26dedcc434d2e4c54c9b2d4a06d8373",
        "test_32x32.mat": "eb5a983be6a315427106f1b164d9cef3",
        "extra_32x32.mat": "a93ce644f1a588dc4d68dda5feec44a7",
    }
    _cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    _cache_lock = threading.Lock()

    def __init__(self, name: str, data_dir: str | os.PathLike | None = None,
                 shuffle: bool = True, seed: int | None = None) -> None:
        self.name = check_choice("name", name, _SPLITS)
        self.data_dir = resolve_dir(data_dir, self._DIR_NAME)
        filename = f"{name}_32x32.mat"
        ensure_files(
            type(self).__name__,
            self.data_dir,
            self._URL_BASE,
            {filename: None},
            "data_dir",
            self._MD5,
        )
        self.X, self.Y = self._read(os.path.join(self.data_dir, filename))
        self._init_iteration(shuffle, seed)

    @classmethod
    def _read(cls, path: str) -> tuple[np.ndarray, np.ndarray]:
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        with cls._cache_lock:
            if key in cls._cache:
                return cls._cache[key]
        owner = cls.__name__
        mat = loadmat(path, owner)
        x = mat_array(mat, "X", path, owner)
        y = mat_array(mat, "y", path, owner)
        if x.ndim != 4 or x.shape[:3] != (32, 32, 3):
            raise ValueError(
                f"{owner}: 'X' of {path!r} has shape {x.shape}, expected (32, 32, 3, n); it is "
                "not an SVHN format-2 (cropped digits) file."
            )
        n = x.shape[3]
        if y.size != n or not np.issubdtype(y.dtype, np.number):
            raise ValueError(
                f"{owner}: {path!r} has {n} images but 'y' has shape {y.shape} ({y.dtype}); "
                "the file is damaged."
            )
        images = np.ascontiguousarray(x.transpose(3, 0, 1, 2)).astype(np.uint8, copy=False)
        labels = y.reshape(-1).copy()
        labels[labels == 10] = 0
        with cls._cache_lock:
            cls._cache[key] = (images, labels)
        return images, labels

    def __len__(self) -> int:
        return len(self.Y)

    def _datapoint(self, index: int) -> list:
        return [self.X[index], self.Y[index]]

    @staticmethod
    def get_per_pixel_mean(
        names: Sequence[str] = ("train", "test", "extra"),
        data_dir: str | os.PathLike | None = None,
    ) -> np.ndarray:
        """The mean image of the splits ``names``: a (32, 32, 3) ``float32`` RGB array.

        ``data_dir`` (an addition to tensorpack's signature) is the folder of the files.
        """
        if isinstance(names, str):
            names = [names]
        names = list(names)
        if not names:
            raise ValueError("`names` must name at least one of 'train', 'test', 'extra'.")
        total = np.zeros((32, 32, 3), np.float64)
        count = 0
        for name in names:
            ds = SVHNDigit(name, data_dir=data_dir, shuffle=False)
            total += ds.X.sum(axis=0, dtype=np.float64)
            count += len(ds.X)
        return (total / max(count, 1)).astype(np.float32)
