"""tensorpack's ``utils.fs``: folders, downloads and the dataset folder.

:func:`download` and :func:`get_dataset_path` are the ones of :mod:`dataflow.dataset` (atomic
downloads; the dataset root is ``$DATAFLOW_DATASET``, else ``$TENSORPACK_DATASET``, else
``~/dataflow_data``, and unlike tensorpack's it is not created until a download needs it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from dataflow.dataset._download import download, get_dataset_path

__all__ = ["download", "get_dataset_path", "mkdir_p", "recursive_walk"]


def mkdir_p(dirname: str | os.PathLike) -> None:
    """Like ``mkdir -p``: make ``dirname`` and its parents; nothing if it exists already."""
    if dirname is None or os.fspath(dirname) == "":
        raise ValueError(f"`dirname` must be a folder path, got {dirname!r}.")
    os.makedirs(dirname, exist_ok=True)


def recursive_walk(rootdir: str | os.PathLike) -> Iterator[str]:
    """Every file under ``rootdir``, recursively (paths joined to ``rootdir``)."""
    for root, _dirs, files in os.walk(os.fspath(rootdir)):
        for f in files:
            yield os.path.join(root, f)
