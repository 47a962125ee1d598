"""stack_patches, to_display, dump_dataflow_images."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dataflow.imgaug import dump_dataflow_images, stack_patches
from dataflow.imgaug.viz import to_display
from dataflow.sources import DataFromList


def test_to_display():
    assert to_display(np.array([[0.0, 1.0]])).tolist() == [[[0, 0, 0], [255, 255, 255]]]
    assert to_display(np.array([[2.0, 300.0]])).tolist() == [[[2, 2, 2], [255, 255, 255]]]
    assert to_display(np.zeros((2, 2, 1), np.uint8)).shape == (2, 2, 3)
    with pytest.raises(ValueError, match="cannot display"):
        to_display(np.zeros((2, 2, 2)))


def test_stack_patches_layout():
    a = np.full((2, 2, 3), 10, np.uint8)
    b = np.full((1, 3), 20, np.uint8)
    grid = stack_patches([a, b, a], border=1, bgcolor=(0, 0, 0))
    assert grid.shape == (1 + 2 * 3, 1 + 2 * 4, 3)  # 2x2 cells of 2x3
    assert grid[1, 1, 0] == 10 and grid[1, 5, 0] == 20 and grid[4, 1, 0] == 10
    assert stack_patches([a] * 3, nr_row=1).shape[1] == 4 * 4 + 3 * 2
    with pytest.raises(ValueError, match="cannot hold 3"):
        stack_patches([a] * 3, nr_row=1, nr_col=2)
    with pytest.raises(ValueError, match="empty"):
        stack_patches([])


def _batches():
    imgs = [np.full((2, 4, 6, 3), i * 10, np.uint8) for i in range(3)]
    return DataFromList([[b, 0] for b in imgs], shuffle=False)


def test_dump_writes_exactly_number_images_with_resize_h_w(tmp_path):
    paths = dump_dataflow_images(_batches(), number=5, output_dir=str(tmp_path), resize=(3, 8))
    assert [p.rsplit("/", 1)[1] for p in paths] == [f"{k:03d}.jpg" for k in range(1, 6)]
    img = cv2.imread(paths[-1])
    assert img.shape == (3, 8, 3)
    assert abs(int(img.mean()) - 20) <= 2  # fifth image = first of the third batch


def test_dump_loops_epochs_scales_flips_and_grids(tmp_path):
    img = np.zeros((4, 4, 3), np.uint8)
    img[..., 2] = 100  # blue in RGB
    df = DataFromList([[img]], shuffle=False)
    paths = dump_dataflow_images(df, batched=False, number=4, output_dir=str(tmp_path),
                                 scale=2, viz=(1, 2), flipRGB=True)
    images = [p for p in paths if "grid" not in p]
    grids = [p for p in paths if "grid" in p]
    assert len(images) == 4 and len(grids) == 2
    out = cv2.imread(images[0])  # BGR on disk; flipRGB turned the RGB image into BGR
    assert abs(int(out[..., 0].mean()) - 200) <= 2 and out[..., 2].max() <= 2
    assert cv2.imread(grids[0]).shape == (4 + 2 * 4, 2 * 4 + 3 * 4, 3)


def test_dump_errors(tmp_path):
    with pytest.raises(ValueError, match="`output_dir` is required"):
        dump_dataflow_images(_batches(), number=1)
    empty = DataFromList([], shuffle=False)
    with pytest.raises(ValueError, match="produced no datapoint"):
        dump_dataflow_images(empty, number=2, output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="`number` must be positive"):
        dump_dataflow_images(_batches(), number=0, output_dir=str(tmp_path))
