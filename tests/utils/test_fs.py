"""dataflow.utils.fs: folders and the dataset folder."""

from __future__ import annotations

import os

import pytest

from dataflow.dataset import _download
from dataflow.utils import fs
from dataflow.utils.utils import change_env


def test_mkdir_p(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    fs.mkdir_p(target)
    assert target.is_dir()
    fs.mkdir_p(str(target))  # exists: nothing happens
    assert target.is_dir()
    with pytest.raises(ValueError, match="`dirname` must be a folder path"):
        fs.mkdir_p("")


def test_recursive_walk(tmp_path):
    for rel in ("x.txt", "d/y.txt", "d/e/z.bin"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    got = sorted(os.path.relpath(p, tmp_path) for p in fs.recursive_walk(str(tmp_path)))
    assert got == ["d/e/z.bin", "d/y.txt", "x.txt"]


def test_download_and_dataset_path_are_the_packages(tmp_path):
    assert fs.download is _download.download
    assert fs.get_dataset_path is _download.get_dataset_path
    with change_env("DATAFLOW_DATASET", None), change_env("TENSORPACK_DATASET", str(tmp_path)):
        assert fs.get_dataset_path("mnist", "x") == os.path.join(str(tmp_path), "mnist", "x")
