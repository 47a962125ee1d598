"""Caltech101Silhouettes on a tiny split file."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow.dataset import Caltech101Silhouettes, DatasetNotFoundError
from tests.dataset.writers import savemat

FILE = "caltech101_silhouettes_28_split1.mat"


@pytest.fixture
def caltech_dir(tmp_path):
    rng = np.random.default_rng(0)
    variables, expected = {}, {}
    for split, n in (("train", 4), ("test", 2), ("val", 3)):
        data = rng.integers(0, 2, size=(n, 784)).astype(np.float64)
        labels = rng.integers(1, 102, size=(n, 1)).astype(np.float64)
        labels[0, 0] = 101
        variables[f"{split}_data"] = data
        variables[f"{split}_labels"] = labels
        expected[split] = (data.reshape(n, 28, 28), labels.ravel() - 1)
    variables["classnames"] = np.array([f"class{i}" for i in range(101)], dtype=object)
    savemat(tmp_path / FILE, variables)
    return tmp_path, expected


@pytest.mark.parametrize("split", ["train", "test", "val"])
def test_values(caltech_dir, split):
    folder, expected = caltech_dir
    images, labels = expected[split]
    df = Caltech101Silhouettes(split, shuffle=False, dir=folder)
    assert len(df) == len(labels)
    got = list(df)
    assert len(got) == len(labels)
    for (img, label), ex_img, ex_label in zip(got, images, labels):
        assert img.shape == (28, 28)
        assert img.dtype == np.float64
        np.testing.assert_array_equal(img, ex_img)
        assert label == ex_label
    assert got[0][1] == 100


def test_shuffled_permutation(caltech_dir):
    folder, expected = caltech_dir
    df = Caltech101Silhouettes("train", dir=folder, seed=0)
    df.reset_state()
    assert sorted(int(dp[1]) for dp in df) == sorted(expected["train"][1].astype(int).tolist())


def test_missing_without_network(tmp_path):
    with pytest.raises(
        DatasetNotFoundError, match=f"https://people.cs.umass.edu/~marlin/data/{FILE}"
    ):
        Caltech101Silhouettes("train", dir=tmp_path)


def test_malformed(tmp_path):
    savemat(tmp_path / FILE, {"train_data": np.zeros((2, 100)), "train_labels": np.ones((2, 1))})
    with pytest.raises(ValueError, match=r"train_data of shape \(2, 100\)"):
        Caltech101Silhouettes("train", dir=tmp_path)
    with pytest.raises(ValueError, match="has no variable 'val_data'"):
        Caltech101Silhouettes("val", dir=tmp_path)
    savemat(tmp_path / FILE, {"test_data": np.zeros((1, 784)), "test_labels": np.zeros((1, 1))})
    with pytest.raises(ValueError, match="should be 1-based"):
        Caltech101Silhouettes("test", dir=tmp_path)
