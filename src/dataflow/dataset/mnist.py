"""MNIST and Fashion-MNIST, read from their gzip IDX files."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import numpy as np

from dataflow.dataset._base import IndexedDataset, check_choice
from dataflow.dataset._download import ensure_files, resolve_dir

__all__ = ["FashionMnist", "Mnist", "read_idx"]

IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049


def read_idx(path: str, magic: int, owner: str = "read_idx") -> np.ndarray:
    """Read a gzip IDX file of unsigned bytes: images (``magic`` 2051, shape (n, rows, cols))
    or labels (``magic`` 2049, shape (n,)). Returns a ``uint8`` array.

    A wrong magic number, a damaged gzip stream, or a payload whose size does not match the
    header raises ``ValueError`` naming the file.
    """
    if magic not in (IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC):
        raise ValueError(f"`magic` must be 2051 (images) or 2049 (labels), got {magic!r}.")
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(
            f"{owner}: cannot decompress {path!r} ({type(e).__name__}: {e}); it is not a "
            "complete gzip file. Delete it and download it again."
        ) from e
    ndim = 3 if magic == IDX_IMAGES_MAGIC else 1
    header = 4 * (1 + ndim)
    if len(raw) < 4:
        raise ValueError(f"{owner}: {path!r} is too short ({len(raw)} bytes) for an IDX header.")
    (got,) = struct.unpack(">I", raw[:4])
    if got != magic:
        kind = "images" if magic == IDX_IMAGES_MAGIC else "labels"
        raise ValueError(
            f"{owner}: {path!r} has IDX magic number {got}, expected {magic} ({kind}); "
            "the file is not an IDX file of that kind, or images and labels were swapped."
        )
    if len(raw) < header:
        raise ValueError(f"{owner}: {path!r} is too short ({len(raw)} bytes) for an IDX header.")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    count = int(np.prod(dims))
    if len(raw) - header != count:
        raise ValueError(
            f"{owner}: {path!r} holds {len(raw) - header} bytes of data but its header "
            f"{dims} needs {count}; the file is truncated or damaged."
        )
    return np.frombuffer(raw, dtype=np.uint8, count=count, offset=header).reshape(dims)


class Mnist(IndexedDataset):
    """The MNIST handwritten digits (http://yann.lecun.com/exdb/mnist/).

    Yields ``[image, label]``: ``image`` is a (28, 28) ``float32`` array in [0, 1] and
    ``label`` a numpy ``uint8`` scalar. 60000 training / 10000 test datapoints.

    Args:
        train_or_test: ``'train'`` or ``'test'``.
        shuffle: visit the datapoints in a new random order every epoch.
        dir: the folder with the four ``*-idx?-ubyte.gz`` files; default
            ``get_dataset_path('mnist_data')``. Missing files are downloaded.
        seed: seed of the shuffling order (see :class:`~dataflow.base.RNGDataFlow`).

    Attributes ``images`` (n, 28, 28) float32 and ``labels`` (n,) uint8 hold the whole split.
    """

    _DIR_NAME = "mnist_data"
    _URL_BASE = "http://yann.lecun.com/exdb/mnist/"
    _FILES = {
        "train": {"train-images-idx3-ubyte.gz": 9912422, "train-labels-idx1-ubyte.gz": 28881},
        "test": {"t10k-images-idx3-ubyte.gz": 1648877, "t10k-labels-idx1-ubyte.gz": 4542},
    }

    def __init__(self, train_or_test: str, shuffle: bool = True,
                 dir: str | os.PathLike | None = None, seed: int | None = None) -> None:
        owner = type(self).__name__
        self.train_or_test = check_choice("train_or_test", train_or_test, ("train", "test"))
        self.dir = resolve_dir(dir, self._DIR_NAME)
        files = self._FILES[train_or_test]
        ensure_files(owner, self.dir, self._URL_BASE, files)
        image_file, label_file = (os.path.join(self.dir, name) for name in files)
        images = read_idx(image_file, IDX_IMAGES_MAGIC, owner)
        labels = read_idx(label_file, IDX_LABELS_MAGIC, owner)
        if len(images) != len(labels):
            raise ValueError(
                f"{owner}: {image_file!r} has {len(images)} images but {label_file!r} has "
                f"{len(labels)} labels; the two files do not belong together."
            )
        self.images = images.astype(np.float32)
        self.images /= 255.0
        self.labels = labels
        self._init_iteration(shuffle, seed)

    def __len__(self) -> int:
        return len(self.labels)

    def _datapoint(self, index: int) -> list:
        return [self.images[index], self.labels[index]]


class FashionMnist(Mnist):
    """Fashion-MNIST (Zalando): same format and API as :class:`Mnist`.

    Default folder ``get_dataset_path('fashion_mnist_data')``.
    """

    _DIR_NAME = "fashion_mnist_data"
    _URL_BASE = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
    _FILES = {
        "train": {"train-images-idx3-ubyte.gz": 26421880, "train-labels-idx1-ubyte.gz": 29515},
        "test": {"t10k-images-idx3-ubyte.gz": 4422102, "t10k-labels-idx1-ubyte.gz": 5148},
    }
    LABEL_NAMES = (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    )

    def get_label_names(self) -> list[str]:
        """The 10 class names, indexed by label."""
        return list(self.LABEL_NAMES)
