"""SVHNDigit on tiny MATLAB files."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dataflow.dataset import DatasetNotFoundError, SVHNDigit
from tests.dataset.writers import savemat


def write_svhn(folder, name, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
    y = rng.integers(1, 11, size=(n, 1), dtype=np.uint8)
    y[0, 0] = 10
    savemat(folder / f"{name}_32x32.mat", {"X": x, "y": y})
    return x, y


def test_values_and_label_mapping(tmp_path):
    x, y = write_svhn(tmp_path, "train", 5, 0)
    df = SVHNDigit("train", data_dir=tmp_path, shuffle=False)
    assert len(df) == 5
    df.reset_state()
    got = list(df)
    assert len(got) == 5
    for k, (img, label) in enumerate(got):
        assert img.shape == (32, 32, 3)
        assert img.dtype == np.uint8
        np.testing.assert_array_equal(img, x[:, :, :, k])
        expected = 0 if y[k, 0] == 10 else y[k, 0]
        assert label == expected
        assert isinstance(label, np.integer)
    assert got[0][1] == 0


def test_each_instance_honours_its_data_dir(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    xa, _ = write_svhn(a, "test", 2, 1)
    xb, _ = write_svhn(b, "test", 4, 2)
    da = SVHNDigit("test", data_dir=a, shuffle=False)
    db = SVHNDigit("test", data_dir=b, shuffle=False)
    assert (len(da), len(db)) == (2, 4)
    np.testing.assert_array_equal(next(iter(da))[0], xa[:, :, :, 0])
    np.testing.assert_array_equal(next(iter(db))[0], xb[:, :, :, 0])
    # the same unchanged file is shared, not read again
    assert SVHNDigit("test", data_dir=a).X is da.X


def test_per_pixel_mean(tmp_path):
    x1, _ = write_svhn(tmp_path, "train", 3, 3)
    x2, _ = write_svhn(tmp_path, "extra", 2, 4)
    mean = SVHNDigit.get_per_pixel_mean(("train", "extra"), data_dir=tmp_path)
    assert mean.dtype == np.float32
    expected = np.concatenate([x1, x2], axis=3).mean(axis=3).astype(np.float32)
    np.testing.assert_array_equal(mean, expected)


def test_missing_file_without_network(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        SVHNDigit("extra", data_dir=tmp_path)
    assert "'extra_32x32.mat'" in str(info.value)
    assert "http://ufldl.stanford.edu/housenumbers/extra_32x32.mat" in str(info.value)
    assert "`data_dir` argument" in str(info.value)


@pytest.mark.parametrize(
    ("variables", "match"),
    [
        ({"y": np.ones((1, 1))}, "has no variable 'X'"),
        ({"X": np.zeros((32, 32, 1, 2), np.uint8), "y": np.ones((2, 1))}, r"\(32, 32, 3, n\)"),
        ({"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.ones((3, 1))}, "has 2 images"),
    ],
)
def test_malformed_files(tmp_path, variables, match):
    savemat(tmp_path / "test_32x32.mat", variables)
    with pytest.raises(ValueError, match=match):
        SVHNDigit("test", data_dir=tmp_path)


def test_not_a_mat_file(tmp_path):
    (tmp_path / "test_32x32.mat").write_bytes(b"garbage" * 30)
    with pytest.raises(ValueError, match=r"cannot read .* as a MATLAB file"):
        SVHNDigit("test", data_dir=tmp_path)


def test_without_scipy(tmp_path, monkeypatch):
    write_svhn(tmp_path / "fresh", "test", 1, 5)
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.io", None)
    with pytest.raises(ImportError, match=r"pip install 'scipy>=1\.10' \(the extra \[datasets\]"):
        SVHNDigit("test", data_dir=tmp_path / "fresh")


def test_download_is_checked_against_the_published_md5(tmp_path, monkeypatch):
    write_svhn(tmp_path / "server", "test", 2, 6)
    monkeypatch.setattr(SVHNDigit, "_URL_BASE", (tmp_path / "server").as_uri() + "/")
    with pytest.raises(DatasetNotFoundError, match="expected eb5a983be6a315427106f1b164d9cef3"):
        SVHNDigit("test", data_dir=tmp_path / "local")
    assert not (tmp_path / "local").exists()
    monkeypatch.setattr(SVHNDigit, "_MD5", {})
    assert len(SVHNDigit("test", data_dir=tmp_path / "local")) == 2
