"""CIFAR-10 and CIFAR-100, read from the "python version" pickles of the official archives."""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from dataflow.dataset._base import IndexedDataset, check_choice
from dataflow.dataset._download import ensure_extracted, resolve_dir

__all__ = ["Cifar10", "Cifar100", "CifarBase", "load_cifar_pickle"]

_URL_BASE = "http://www.cs.toronto.edu/~kriz/"
_LAYOUT = {
    # classnum: (default dir, archive, its size, extracted folder, label key, meta file,
    #            label-names key)
    10: (
        "cifar10_data",
        "cifar-10-python.tar.gz",
        170498071,
        "cifar-10-batches-py",
        b"labels",
        "batches.meta",
        b"label_names",
    ),
    100: (
        "cifar100_data",
        "cifar-100-python.tar.gz",
        169001437,
        "cifar-100-python",
        b"fine_labels",
        "meta",
        b"fine_label_names",
    ),
}
_SPLIT_FILES = {
    10: {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
    100: {"train": ["train"], "test": ["test"]},
}

# The only globals a CIFAR pickle needs: numpy array reconstruction and Python 3's bytes codec.
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _CifarUnpickler(pickle.Unpickler):
    """Loads CIFAR pickles but refuses any other object type (pickles can run code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed")
        return super().find_class(module, name)


def load_cifar_pickle(path: str, owner: str = "load_cifar_pickle") -> dict:
    """Load one CIFAR pickle (Python-2 format, byte-string keys) into a dict.

    Only numpy arrays, lists, dicts, numbers and strings are accepted; anything else, or a file
    that is not a pickle of a dict, raises ``ValueError`` naming the file.
    """
    with open(path, "rb") as f:
        try:
            obj = _CifarUnpickler(f, encoding="bytes").load()
        except Exception as e:  # UnpicklingError, EOFError, ValueError... on damaged files
            raise ValueError(
                f"{owner}: cannot load {path!r} as a CIFAR pickle ({type(e).__name__}: {e}); "
                "the file is damaged or not from the CIFAR 'python version' archive."
            ) from e
    if not isinstance(obj, dict):
        raise ValueError(
            f"{owner}: {path!r} holds a {type(obj).__name__}, expected a dict; it is not a "
            "CIFAR batch file."
        )
    return obj


def _get(obj: dict, key: bytes, path: str, owner: str) -> Any:
    if key in obj:
        return obj[key]
    skey = key.decode()
    if skey in obj:  # pickles re-saved by Python 3 have str keys
        return obj[skey]
    raise ValueError(
        f"{owner}: {path!r} has no {skey!r} entry (keys: {sorted(map(repr, obj))}); it is "
        "not the expected CIFAR file."
    )


def _read_batch(path: str, label_key: bytes, owner: str) -> tuple[np.ndarray, np.ndarray]:
    obj = load_cifar_pickle(path, owner)
    data = np.asarray(_get(obj, b"data", path, owner))
    labels = np.asarray(_get(obj, label_key, path, owner))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(
            f"{owner}: 'data' of {path!r} is {data.dtype} with shape {data.shape}, expected "
            "uint8 of shape (n, 3072); the file is damaged."
        )
    if labels.shape != (len(data),) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"{owner}: {path!r} has {len(data)} images but labels of shape {labels.shape} and "
            f"dtype {labels.dtype}; the file is damaged."
        )
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels.astype(np.int64)


class CifarBase(IndexedDataset):
    """CIFAR-10 or CIFAR-100 (https://www.cs.toronto.edu/~kriz/cifar.html), all in memory.

    Yields ``[image, label]``: a (32, 32, 3) ``uint8`` **RGB** image and an ``int`` label
    (CIFAR-100: the fine label). 50000 training / 10000 test datapoints.

    Args:
        train_or_test: ``'train'`` or ``'test'``.
        shuffle: random order every epoch; ``None`` means True for ``'train'`` only.
        dir: the folder that holds the extracted ``cifar-10-batches-py`` /
            ``cifar-100-python`` folder (or the ``.tar.gz`` archive, which is then extracted);
            default ``get_dataset_path('cifar10_data')`` / ``('cifar100_data')``.
        cifar_classnum: 10 or 100.
        seed: seed of the shuffling order.
    """

    def __init__(
        self,
        train_or_test: str,
        shuffle: bool | None = None,
        dir: str | os.PathLike | None = None,
        cifar_classnum: int = 10,
        seed: int | None = None,
    ) -> None:
        if isinstance(cifar_classnum, bool) or cifar_classnum not in (10, 100):
            raise ValueError(f"`cifar_classnum` must be 10 or 100, got {cifar_classnum!r}.")
        self.train_or_test = check_choice("train_or_test", train_or_test, ("train", "test"))
        self.cifar_classnum = cifar_classnum
        dir_name, archive, size, folder, self._label_key, self._meta_file, self._names_key = (
            _LAYOUT[cifar_classnum]
        )
        self.dir = resolve_dir(dir, dir_name)
        self._folder = ensure_extracted(
            type(self).__name__, self.dir, folder, _URL_BASE + archive, archive, size
        )
        self.images, self.labels = self._load([train_or_test])
        if shuffle is None:
            shuffle = train_or_test == "train"
        self._init_iteration(shuffle, seed)

    def _load(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        owner = type(self).__name__
        images, labels = [], []
        for name in names:
            for fname in _SPLIT_FILES[self.cifar_classnum][name]:
                path = os.path.join(self._folder, fname)
                if not os.path.isfile(path):
                    raise FileNotFoundError(
                        f"{owner}: {path!r} is missing from the extracted dataset; delete "
                        f"{self._folder!r} so that the archive is extracted again."
                    )
                img, lbl = _read_batch(path, self._label_key, owner)
                images.append(img)
                labels.append(lbl)
        return np.concatenate(images), np.concatenate(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def _datapoint(self, index: int) -> list:
        return [self.images[index], int(self.labels[index])]

    def _check_names(self, names: Sequence[str]) -> list[str]:
        if isinstance(names, str):
            names = [names]
        names = list(names)
        if not names:
            raise ValueError("`names` must name at least one split: 'train' and/or 'test'.")
        for name in names:
            check_choice("names", name, ("train", "test"))
        return names

    def get_per_pixel_mean(self, names: Sequence[str] = ("train", "test")) -> np.ndarray:
        """The mean image of the splits ``names``: a (32, 32, 3) ``float32`` RGB array."""
        names = self._check_names(names)
        images = self.images if names == [self.train_or_test] else self._load(names)[0]
        return images.mean(axis=0, dtype=np.float64).astype(np.float32)

    def get_per_channel_mean(self, names: Sequence[str] = ("train", "test")) -> np.ndarray:
        """The mean R, G and B values of the splits ``names``: a (3,) ``float32`` array."""
        return self.get_per_pixel_mean(names).mean(axis=(0, 1), dtype=np.float64).astype(np.float32)

    def get_label_names(self) -> list[str]:
        """The class names, indexed by label (CIFAR-100: the fine label names)."""
        path = os.path.join(self._folder, self._meta_file)
        owner = type(self).__name__
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{owner}: the metadata file {path!r} is missing.")
        names = _get(load_cifar_pickle(path, owner), self._names_key, path, owner)
        return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


class Cifar10(CifarBase):
    """CIFAR-10; see :class:`CifarBase`. Default folder ``get_dataset_path('cifar10_data')``."""

    def __init__(self, train_or_test: str, shuffle: bool | None = None,
                 dir: str | os.PathLike | None = None, seed: int | None = None) -> None:
        super().__init__(train_or_test, shuffle, dir, 10, seed=seed)


class Cifar100(CifarBase):
    """CIFAR-100 (fine labels); see :class:`CifarBase`. Default folder
    ``get_dataset_path('cifar100_data')``."""

    def __init__(self, train_or_test: str, shuffle: bool | None = None,
                 dir: str | os.PathLike | None = None, seed: int | None = None) -> None:
        super().__init__(train_or_test, shuffle, dir, 100, seed=seed)
