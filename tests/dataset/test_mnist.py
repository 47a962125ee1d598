"""Mnist / FashionMnist on tiny gzip IDX files."""

from __future__ import annotations

import gzip
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.dataset import DatasetNotFoundError, FashionMnist, Mnist
from dataflow.dataset.mnist import read_idx
from tests.dataset.writers import write_idx_gz
from tests.helpers import check_dataflow

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def _write_split(folder, split, n, seed):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    img_name, lbl_name = FILES[split]
    os.makedirs(folder, exist_ok=True)
    write_idx_gz(folder / img_name, images)
    write_idx_gz(folder / lbl_name, labels)
    return images, labels


@pytest.fixture
def mnist_dir(tmp_path):
    folder = tmp_path / "mnist"
    data = {
        "train": _write_split(folder, "train", 5, 0),
        "test": _write_split(folder, "test", 3, 1),
    }
    return folder, data


@pytest.mark.parametrize("cls", [Mnist, FashionMnist])
@pytest.mark.parametrize("split", ["train", "test"])
def test_values_dtypes_and_length(cls, split, mnist_dir):
    folder, data = mnist_dir
    images, labels = data[split]
    df = cls(split, shuffle=False, dir=folder)
    assert len(df) == len(labels)
    df.reset_state()
    got = list(df)
    assert len(got) == len(labels)
    for (img, label), raw, lbl in zip(got, images, labels):
        assert img.shape == (28, 28)
        assert img.dtype == np.float32
        np.testing.assert_array_equal(img, raw.astype(np.float32) / 255.0)
        assert isinstance(label, np.uint8)
        assert label == lbl
    assert got[0][0].min() >= 0.0
    assert got[0][0].max() <= 1.0
    assert df.images.shape == (len(labels), 28, 28)


def test_shuffled_is_a_permutation_and_contract(mnist_dir):
    folder, data = mnist_dir
    df = Mnist("train", dir=folder, seed=1)
    first = check_dataflow(df, epochs=2)
    assert sorted(dp[1] for dp in first) == sorted(int(x) for x in data["train"][1])


def test_fashion_label_names(mnist_dir):
    folder, _ = mnist_dir
    names = FashionMnist("test", dir=folder).get_label_names()
    assert names == [
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    ]  # fmt: skip


def test_env_vars_locate_the_data(mnist_dir, monkeypatch):
    folder, _ = mnist_dir
    folder.rename(folder.parent / "mnist_data")
    monkeypatch.setenv("TENSORPACK_DATASET", str(folder.parent))
    assert len(Mnist("test")) == 3
    monkeypatch.setenv("DATAFLOW_DATASET", str(folder.parent / "nowhere"))
    with pytest.raises(DatasetNotFoundError):
        Mnist("test")


def test_missing_files_without_network(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        Mnist("train", dir=tmp_path / "empty")
    msg = str(info.value)
    assert "'train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'" in msg
    assert "http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz" in msg
    assert repr(str(tmp_path / "empty")) in msg
    assert os.listdir(tmp_path) == []  # no folder is left behind


def test_missing_files_leave_no_nested_folders_and_keep_existing_ones(tmp_path):
    (tmp_path / "kept").mkdir()
    with pytest.raises(DatasetNotFoundError):
        Mnist("train", dir=tmp_path / "kept" / "a" / "b")
    assert os.listdir(tmp_path) == ["kept"]
    assert os.listdir(tmp_path / "kept") == []


def test_download_checks_known_sizes(mnist_dir, tmp_path, monkeypatch):
    source, _ = mnist_dir
    monkeypatch.setattr(Mnist, "_URL_BASE", source.as_uri() + "/")
    dest = tmp_path / "dest"
    # the tiny files do not have MNIST's published sizes: refused, nothing left behind
    with pytest.raises(DatasetNotFoundError, match=r"expected 1648877"):
        Mnist("test", dir=dest)
    assert not dest.exists()
    sizes = {name: os.path.getsize(source / name) for name in FILES["test"]}
    monkeypatch.setattr(Mnist, "_FILES", {**Mnist._FILES, "test": sizes})
    df = Mnist("test", dir=dest, shuffle=False)
    assert len(df) == 3
    assert sorted(os.listdir(dest)) == sorted(FILES["test"])


def test_wrong_magic(tmp_path):
    write_idx_gz(tmp_path / "x.gz", np.zeros((2, 28, 28), np.uint8), magic=2049 + 2)
    with pytest.raises(ValueError, match=r"magic number 2051, expected 2049 \(labels\)"):
        read_idx(str(tmp_path / "x.gz"), 2049)


def test_swapped_files_are_reported(mnist_dir):
    folder, _ = mnist_dir
    img, lbl = FILES["test"]
    os.replace(folder / img, folder / "tmp")
    os.replace(folder / lbl, folder / img)
    os.replace(folder / "tmp", folder / lbl)
    with pytest.raises(ValueError, match=r"magic number 2049, expected 2051"):
        Mnist("test", dir=folder)


def test_truncated_payload(tmp_path):
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"\x00\x00\x08\x03" + (3).to_bytes(4, "big") + (2).to_bytes(4, "big") * 2 + b"1")
    with pytest.raises(ValueError, match=r"holds 1 bytes of data but its header \(3, 2, 2\)"):
        read_idx(str(path), 2051)


def test_not_gzip(tmp_path):
    (tmp_path / "x.gz").write_bytes(b"plain bytes, not gzip")
    with pytest.raises(ValueError, match="cannot decompress"):
        read_idx(str(tmp_path / "x.gz"), 2051)


def test_count_mismatch(mnist_dir):
    folder, _ = mnist_dir
    write_idx_gz(folder / FILES["test"][1], np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match=r"has 3 images but .* has 2 labels"):
        Mnist("test", dir=folder)


def test_bad_split_name(tmp_path):
    with pytest.raises(ValueError, match="`train_or_test` must be one of 'train', 'test'"):
        Mnist("val", dir=tmp_path)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(0, 4),
    rows=st.integers(1, 5),
    cols=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_idx_round_trip(n, rows, cols, seed):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, rows, cols), dtype=np.uint8)
    labels = rng.integers(0, 256, size=n, dtype=np.uint8)
    with tempfile.TemporaryDirectory() as d:
        write_idx_gz(Path(d) / "i.gz", images)
        write_idx_gz(Path(d) / "l.gz", labels)
        got_images = read_idx(os.path.join(d, "i.gz"), 2051)
        got_labels = read_idx(os.path.join(d, "l.gz"), 2049)
    assert got_images.dtype == np.uint8
    assert got_images.shape == (n, rows, cols)
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)


def test_default_folder_is_under_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DatasetNotFoundError) as info:
        Mnist("test")
    assert repr(str(tmp_path / "dataflow_data" / "mnist_data")) in str(info.value)


def test_legacy_names(mnist_dir):
    folder, data = mnist_dir
    df = Mnist("test", shuffle=False, dir=folder)
    assert df.size() == 3
    df.reset_state()
    assert [int(dp[1]) for dp in df.get_data()] == data["test"][1].tolist()
