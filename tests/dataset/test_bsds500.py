"""BSDS500 on a tiny BSR tree: PNG-in-.jpg images and ground-truth cell arrays."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dataflow.dataset import BSDS500, DatasetNotFoundError
from tests.dataset.writers import bsds_ground_truth, make_tar_gz, savemat, write_png_as

H, W = 5, 7


def write_bsds(root):
    data = root / "BSR" / "BSDS500" / "data"
    expected = {}
    rng = np.random.default_rng(0)
    for split, ids in (("train", ["100075", "2092"]), ("test", ["3063"]), ("val", ["101085"])):
        for k, image_id in enumerate(ids):
            portrait = split == "train" and k == 1
            shape = (W, H) if portrait else (H, W)
            img = rng.integers(0, 256, size=(*shape, 3), dtype=np.uint8)
            annotators = [rng.integers(0, 2, size=shape, dtype=np.uint8) for _ in range(3)]
            write_png_as(data / "images" / split / f"{image_id}.jpg", img)
            savemat(
                data / "groundTruth" / split / f"{image_id}.mat",
                {"groundTruth": bsds_ground_truth(annotators)},
            )
            edges = (np.sum(annotators, axis=0) / 3).astype(np.float32)
            if portrait:
                img, edges = img.transpose(1, 0, 2), edges.T
            expected.setdefault(split, []).append((img, edges))
    (data / "images" / "train" / "Thumbs.db").write_bytes(b"")
    return expected


def test_values_shapes_and_portrait_transpose(tmp_path):
    expected = write_bsds(tmp_path)
    for split in ("train", "test", "val"):
        df = BSDS500(split, data_dir=tmp_path, shuffle=False)
        assert len(df) == len(expected[split])
        df.reset_state()
        got = list(df)
        assert len(got) == len(expected[split])
        for (img, edges), (ex_img, ex_edges) in zip(got, expected[split]):
            assert img.dtype == np.uint8
            assert img.shape == (H, W, 3)
            assert edges.dtype == np.float32
            assert edges.shape == (H, W)
            np.testing.assert_array_equal(img, ex_img)
            np.testing.assert_array_equal(edges, ex_edges)
    # 3 annotators: fractions are multiples of 1/3
    all_edges = np.concatenate([e.ravel() for _, e in expected["train"]])
    assert set(np.round(all_edges * 3).astype(int).tolist()) <= {0, 1, 2, 3}


def test_extracts_archive(tmp_path):
    src = tmp_path / "src"
    expected = write_bsds(src)
    dest = tmp_path / "dest"
    dest.mkdir()
    make_tar_gz(dest / "BSR_bsds500.tgz", src, "BSR")
    got = list(BSDS500("test", data_dir=dest, shuffle=False))
    np.testing.assert_array_equal(got[0][0], expected["test"][0][0])
    assert sorted(os.listdir(dest)) == ["BSR", "BSR_bsds500.tgz"]


def test_missing_without_network(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        BSDS500("train", data_dir=tmp_path)
    msg = str(info.value)
    assert "'BSR_bsds500.tgz'" in msg
    assert "BSR/BSR_bsds500.tgz" in msg
    assert "`data_dir` argument" in msg


def test_missing_ground_truth(tmp_path):
    write_bsds(tmp_path)
    gt = tmp_path / "BSR" / "BSDS500" / "data" / "groundTruth" / "val" / "101085.mat"
    gt.unlink()
    with pytest.raises(FileNotFoundError, match=r"101085\.mat"):
        BSDS500("val", data_dir=tmp_path)


def test_malformed_ground_truth(tmp_path):
    write_bsds(tmp_path)
    gt = tmp_path / "BSR" / "BSDS500" / "data" / "groundTruth" / "val" / "101085.mat"
    savemat(gt, {"groundTruth": np.zeros((1, 2))})
    with pytest.raises(ValueError, match="cell array of structs with a 'Boundaries' field"):
        BSDS500("val", data_dir=tmp_path)
    savemat(gt, {"groundTruth": bsds_ground_truth([np.zeros((3, 3), np.uint8)])})
    with pytest.raises(ValueError, match=r"is \(5, 7\) but its ground truth"):
        BSDS500("val", data_dir=tmp_path)
    savemat(gt, {"seg": np.zeros(3)})
    with pytest.raises(ValueError, match="has no variable 'groundTruth'"):
        BSDS500("val", data_dir=tmp_path)
