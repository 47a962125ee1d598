"""Places365Standard on a tiny "easy format" tree."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow.dataset import Places365Standard
from tests.dataset.writers import write_png_as

TRAIN = ["train/bakery/00000001.jpg", "train/airfield/00000001.jpg", "train/bakery/00000002.jpg"]


@pytest.fixture
def places_dir(tmp_path):
    images = {}
    for k, rel in enumerate(TRAIN):
        images[rel] = np.full((4, 4, 3), (k, 2 * k, 3 * k), np.uint8)
        write_png_as(tmp_path / rel, images[rel])
    (tmp_path / "train.txt").write_text("\n".join(TRAIN) + "\n")
    val = "val/airfield/Places365_val_00000001.jpg"
    images[val] = np.zeros((4, 4, 3), np.uint8)
    write_png_as(tmp_path / val, images[val])
    (tmp_path / "val.txt").write_text(val + " 0\n")
    return tmp_path, images


def test_values_and_labels(places_dir):
    d, images = places_dir
    df = Places365Standard(d, "train", shuffle=False)
    assert len(df) == 3
    assert df.get_label_names() == ["airfield", "bakery"]
    got = list(df)
    assert [label for _, label in got] == [1, 0, 1]
    for (img, _), rel in zip(got, TRAIN):
        assert img.dtype == np.uint8
        np.testing.assert_array_equal(img, images[rel])
    assert Places365Standard(d, "train").shuffle is True
    val = Places365Standard(d, "val")
    assert val.shuffle is False
    assert [label for _, label in val] == [0]


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside/x/y.jpg", "train/../../x.jpg"])
def test_refuses_paths_escaping_dir(places_dir, bad):
    d, _ = places_dir
    (d / "train.txt").write_text(TRAIN[0] + "\n" + bad + "\n")
    with pytest.raises(ValueError, match=r"line 2 of .* points outside"):
        Places365Standard(d, "train")


def test_malformed_lists(places_dir, tmp_path):
    d, _ = places_dir
    (d / "train.txt").write_text("flat.jpg\n")
    with pytest.raises(ValueError, match="expected '<split>/<class>/<file>'"):
        Places365Standard(d, "train")
    (d / "train.txt").write_text("\n")
    with pytest.raises(ValueError, match="lists no images"):
        Places365Standard(d, "train")
    (d / "train.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"train\.txt"):
        Places365Standard(d, "train")
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        Places365Standard(tmp_path / "nowhere", "val")
