"""Cifar10 / Cifar100 on tiny Python-2 style pickles."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from dataflow.dataset import Cifar10, Cifar100, CifarBase, DatasetNotFoundError
from tests.dataset.writers import make_tar_gz, py2_pickle, write_cifar_batch
from tests.helpers import check_dataflow

C10_NAMES = [f"class{i}" for i in range(10)]
C100_NAMES = [f"fine{i}" for i in range(100)]


def _images(rng, n):
    return rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)


def write_cifar10(folder, per_batch=2, n_test=3, seed=0):
    rng = np.random.default_rng(seed)
    root = folder / "cifar-10-batches-py"
    root.mkdir(parents=True)
    train_x, train_y = [], []
    for i in range(1, 6):
        x, y = _images(rng, per_batch), rng.integers(0, 10, per_batch)
        write_cifar_batch(root / f"data_batch_{i}", x, y, b"labels")
        train_x.append(x)
        train_y.append(y)
    test_x, test_y = _images(rng, n_test), rng.integers(0, 10, n_test)
    write_cifar_batch(root / "test_batch", test_x, test_y, b"labels")
    meta = {b"label_names": [n.encode() for n in C10_NAMES], b"num_vis": 3072}
    (root / "batches.meta").write_bytes(py2_pickle(meta))
    return {
        "train": (np.concatenate(train_x), np.concatenate(train_y)),
        "test": (test_x, test_y),
    }


def write_cifar100(folder, n_train=4, n_test=3, seed=1):
    rng = np.random.default_rng(seed)
    root = folder / "cifar-100-python"
    root.mkdir(parents=True)
    data = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x, y = _images(rng, n), rng.integers(0, 100, n)
        write_cifar_batch(root / split, x, y, b"fine_labels")
        data[split] = (x, y)
    meta = {
        b"fine_label_names": [n.encode() for n in C100_NAMES],
        b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
    }
    (root / "meta").write_bytes(py2_pickle(meta))
    return data


@pytest.fixture
def c10(tmp_path):
    return tmp_path, write_cifar10(tmp_path)


@pytest.mark.parametrize("split", ["train", "test"])
def test_cifar10_values(split, c10):
    folder, data = c10
    x, y = data[split]
    df = Cifar10(split, shuffle=False, dir=folder)
    assert len(df) == len(y) == (10 if split == "train" else 3)
    df.reset_state()
    got = list(df)
    assert len(got) == len(y)
    for (img, label), ex, ey in zip(got, x, y):
        assert img.shape == (32, 32, 3)
        assert img.dtype == np.uint8
        np.testing.assert_array_equal(img, ex)
        assert type(label) is int
        assert label == ey


def test_channel_order_is_rgb_from_planes(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    row = np.concatenate([np.full(1024, 10), np.full(1024, 20), np.full(1024, 30)])
    obj = {b"data": row.astype(np.uint8)[None], b"labels": [7]}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (root / name).write_bytes(py2_pickle(obj))
    img, label = next(iter(Cifar10("test", dir=tmp_path)))
    assert img[0, 0].tolist() == [10, 20, 30]
    assert img[31, 31].tolist() == [10, 20, 30]
    assert label == 7


def test_shuffle_defaults(c10):
    folder, _ = c10
    assert Cifar10("train", dir=folder).shuffle is True
    assert Cifar10("test", dir=folder).shuffle is False
    first = check_dataflow(Cifar10("train", dir=folder, seed=5), epochs=2)
    assert len(first) == 10


def test_means_and_label_names(c10):
    folder, data = c10
    df = Cifar10("test", dir=folder)
    all_x = np.concatenate([data["train"][0], data["test"][0]])
    ppm = df.get_per_pixel_mean()
    assert ppm.dtype == np.float32
    assert ppm.shape == (32, 32, 3)
    np.testing.assert_array_equal(ppm, all_x.mean(axis=0).astype(np.float32))
    np.testing.assert_array_equal(
        df.get_per_pixel_mean(("test",)), data["test"][0].mean(axis=0).astype(np.float32)
    )
    pcm = df.get_per_channel_mean()
    assert pcm.dtype == np.float32
    np.testing.assert_allclose(pcm, all_x.reshape(-1, 3).mean(axis=0), rtol=1e-6)
    assert df.get_label_names() == C10_NAMES
    with pytest.raises(ValueError, match="`names` must be one of 'train', 'test'; got 'val'"):
        df.get_per_pixel_mean(("val",))


def test_cifar100_fine_labels_and_train_in_path(tmp_path):
    # the data folder's path contains "train": the test split must still be the test split
    folder = tmp_path / "my_train_data"
    data = write_cifar100(folder)
    for split, n in (("train", 4), ("test", 3)):
        df = Cifar100(split, shuffle=False, dir=folder)
        assert len(df) == n
        got = list(df)
        np.testing.assert_array_equal(np.stack([g[0] for g in got]), data[split][0])
        assert [g[1] for g in got] == data[split][1].tolist()
    assert Cifar100("test", dir=folder).get_label_names() == C100_NAMES
    assert CifarBase("test", dir=folder, cifar_classnum=100).cifar_classnum == 100


def test_python3_pickles_with_str_keys(tmp_path):
    root = tmp_path / "cifar-100-python"
    root.mkdir()
    x = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    for split in ("train", "test"):
        (root / split).write_bytes(pickle.dumps({"data": x, "fine_labels": [5, 99]}))
    got = list(Cifar100("test", dir=tmp_path, shuffle=False))
    assert [g[1] for g in got] == [5, 99]
    np.testing.assert_array_equal(got[1][0][:, :, 0].ravel(), x[1, :1024])


def test_extracts_a_preplaced_archive(tmp_path):
    src = tmp_path / "src"
    data = write_cifar10(src)
    dest = tmp_path / "dest"
    dest.mkdir()
    make_tar_gz(dest / "cifar-10-python.tar.gz", src, "cifar-10-batches-py")
    df = Cifar10("test", dir=dest, shuffle=False)
    np.testing.assert_array_equal(np.stack([dp[0] for dp in df]), data["test"][0])
    assert sorted(os.listdir(dest)) == ["cifar-10-batches-py", "cifar-10-python.tar.gz"]


def test_download_size_is_checked(tmp_path, monkeypatch):
    src = tmp_path / "src"
    write_cifar10(src)
    make_tar_gz(tmp_path / "cifar-10-python.tar.gz", src, "cifar-10-batches-py")
    monkeypatch.setattr("dataflow.dataset.cifar._URL_BASE", tmp_path.as_uri() + "/")
    dest = tmp_path / "dest"
    with pytest.raises(DatasetNotFoundError, match="expected 170498071") as info:
        Cifar10("train", dir=dest)
    assert "cifar-10-batches-py" in str(info.value)
    assert not dest.exists()  # no empty folder left behind


def test_missing_without_network(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        Cifar100("train", dir=tmp_path)
    msg = str(info.value)
    assert "'cifar-100-python'" in msg
    assert "http://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz" in msg
    assert repr(str(tmp_path)) in msg


def test_missing_batch_file(c10):
    folder, _ = c10
    os.remove(folder / "cifar-10-batches-py" / "data_batch_3")
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        Cifar10("train", dir=folder)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_pickles_cannot_run_code(c10):
    folder, _ = c10
    path = folder / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(pickle.dumps({b"data": _Exploit()}, protocol=2))
    with pytest.raises(ValueError, match=r"global 'posix.system' is not allowed"):
        Cifar10("test", dir=folder)


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        ([1, 2], "holds a list, expected a dict"),
        ({b"labels": [1]}, "no 'data' entry"),
        ({b"data": np.zeros((1, 100), np.uint8), b"labels": [1]}, r"shape \(1, 100\)"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, "has 2 images but labels"),
    ],
)
def test_malformed_batches(c10, obj, match):
    folder, _ = c10
    (folder / "cifar-10-batches-py" / "test_batch").write_bytes(py2_pickle(obj))
    with pytest.raises(ValueError, match=match):
        Cifar10("test", dir=folder)


def test_truncated_pickle(c10):
    folder, _ = c10
    path = folder / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(ValueError, match=r"cannot load .* as a CIFAR pickle"):
        Cifar10("test", dir=folder)


def test_bad_classnum(tmp_path):
    with pytest.raises(ValueError, match="`cifar_classnum` must be 10 or 100, got 20"):
        CifarBase("train", dir=tmp_path, cifar_classnum=20)
