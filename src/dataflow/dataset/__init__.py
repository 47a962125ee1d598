"""Loaders of common datasets, read from their original file formats.

Every loader is a finite :class:`~dataflow.base.RNGDataFlow` with an exact ``len()``. Files are
looked up in the ``dir`` argument, else under :func:`get_dataset_path` (``$DATAFLOW_DATASET``,
else ``$TENSORPACK_DATASET``, else ``~/dataflow_data``); missing files are downloaded once and
checked, and a failed download raises :class:`DatasetNotFoundError` that says where to put them.

SciPy (``.mat`` files) and OpenCV (JPEG images) are imported only by the loaders that need them.
"""

from dataflow.dataset._download import (
    DatasetNotFoundError,
    DownloadError,
    download,
    get_dataset_path,
)
from dataflow.dataset.bsds500 import BSDS500
from dataflow.dataset.caltech101 import Caltech101Silhouettes
from dataflow.dataset.cifar import Cifar10, Cifar100, CifarBase
from dataflow.dataset.ilsvrc import ILSVRC12, ILSVRC12Files, ILSVRCMeta, TinyImageNet
from dataflow.dataset.mnist import FashionMnist, Mnist
from dataflow.dataset.places import Places365Standard
from dataflow.dataset.svhn import SVHNDigit

__all__ = [
    "BSDS500",
    "ILSVRC12",
    "Caltech101Silhouettes",
    "Cifar10",
    "Cifar100",
    "CifarBase",
    "DatasetNotFoundError",
    "DownloadError",
    "FashionMnist",
    "ILSVRC12Files",
    "ILSVRCMeta",
    "Mnist",
    "Places365Standard",
    "SVHNDigit",
    "TinyImageNet",
    "download",
    "get_dataset_path",
]
