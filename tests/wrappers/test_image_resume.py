"""Exact resume of the image flows: ``ImageFromFile`` and the augmentation flows,
whose augmentors' random streams are part of the state."""

from __future__ import annotations

import json
import logging
import os

import cv2
import numpy as np
import pytest

from dataflow import imgaug
from dataflow.rng import set_seed
from dataflow.sources import DataFromList
from dataflow.state import StateMismatchError
from dataflow.wrappers.image import (
    AugmentImageComponent,
    AugmentImageComponents,
    AugmentImageCoordinates,
    ImageFromFile,
)
from tests.helpers import check_resume


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(5):
        img = np.full((3, 4, 3), 10 * i, np.uint8)
        p = tmp_path / f"{i}.png"
        assert cv2.imwrite(str(p), img)
        paths.append(str(p))
    return paths


@pytest.mark.parametrize("shuffle", [False, True])
def test_image_from_file(files, shuffle):
    seq = check_resume(lambda: ImageFromFile(files, shuffle=shuffle, seed=3), epochs=2)
    firsts = [dp[0]["__array__"][0][0][0] for dp in seq]
    assert sorted(firsts[:5]) == sorted(firsts[5:]) == [0, 10, 20, 30, 40]
    if not shuffle:
        assert firsts[:5] == [0, 10, 20, 30, 40]


def test_image_from_file_resume_reads_no_delivered_file(files):
    df = ImageFromFile(files, shuffle=True)
    df.reset_state()
    it = iter(df)
    delivered = [int(next(it)[0][0, 0, 0]) for _ in range(3)]
    state = json.loads(json.dumps(df.state_dict()))
    assert (state["epoch"], state["pos"], state["done"], state["size"]) == (0, 3, False, 5)
    rest = [int(dp[0][0, 0, 0]) for dp in it]
    for value in delivered:  # a restored flow would fail on any of these
        os.remove(files[value // 10])
    fresh = ImageFromFile(files, shuffle=True)
    fresh.reset_state()
    fresh.load_state_dict(state)
    assert [int(dp[0][0, 0, 0]) for dp in fresh] == rest


def test_image_from_file_inside_wrappers(files):
    from dataflow.wrappers import FixedSizeData, RandomMixData

    check_resume(lambda: RandomMixData([ImageFromFile(files, shuffle=True, seed=1),
                                        ImageFromFile(files[:2])], seed=2), epochs=2)
    check_resume(lambda: FixedSizeData(ImageFromFile(files, shuffle=True, seed=1), 3,
                                       keep_state=False), epochs=3)


def _images(n=6):
    rng = np.random.default_rng(0)
    return [[rng.integers(0, 255, (8, 10, 3), dtype=np.uint8), i] for i in range(n)]


def _augmentors():
    return [
        imgaug.RandomCrop((6, 7)),
        imgaug.Flip(horiz=True),
        imgaug.RandomApplyAug(imgaug.Brightness(30), 0.5),
        imgaug.RandomChooseAug([imgaug.Contrast((0.5, 1.5)), imgaug.GaussianNoise(5)]),
        imgaug.RandomOrderAug([imgaug.Saturation(0.3), imgaug.Hue((0, 30))]),
    ]


def test_augment_image_component_without_seed():
    """No seed anywhere: the augmentors' streams come from OS entropy; only the saved
    streams make the rest exact."""
    def make():
        return AugmentImageComponent(DataFromList(_images(), shuffle=True), _augmentors())

    seq = check_resume(make, epochs=2)
    assert len(seq) == 12
    assert sorted(dp[1] for dp in seq[:6]) == sorted(dp[1] for dp in seq[6:]) == list(range(6))


def test_augment_image_component_with_global_seed():
    set_seed(11)
    seq = check_resume(
        lambda: AugmentImageComponent(DataFromList(_images(), shuffle=True),
                                      imgaug.AugmentorList(_augmentors()), copy=False),
        epochs=2)
    assert sorted(dp[1] for dp in seq[:6]) == list(range(6))


def _with_coords(n=5):
    coords = np.array([[1.0, 2.0], [5.5, 3.0]], np.float32)
    return [[img, img[:, :, 0].copy(), coords + i, i] for img, i in _images(n)]


def test_augment_image_coordinates_and_components():
    geo = [imgaug.RandomCrop((6, 7)), imgaug.Flip(horiz=True, prob=0.5)]
    check_resume(lambda: AugmentImageCoordinates(DataFromList(_with_coords(), shuffle=False),
                                                 geo, img_index=0, coords_index=2), epochs=2)
    check_resume(lambda: AugmentImageComponents(DataFromList(_with_coords(), shuffle=True),
                                                geo, index=(0, 1), coords_index=(2,)),
                 epochs=2)


def test_dropped_datapoints_keep_the_streams_in_step():
    class FailOnOdd(imgaug.ImageAugmentor):
        def get_transform(self, img):
            if self.rng.randint(2):
                raise ValueError("odd")
            return imgaug.NoOpTransform()

    def make():
        augs = [FailOnOdd(), imgaug.RandomCrop(5)]
        return AugmentImageComponent(DataFromList(_images(8), shuffle=False), augs,
                                     catch_exceptions=True)

    set_seed(3)  # a fixed stream: some datapoints are dropped, not all
    logging.disable(logging.WARNING)
    try:
        seq = check_resume(make, epochs=2)
    finally:
        logging.disable(logging.NOTSET)
    assert 0 < len(seq) < 16


def test_state_layout_and_mismatch():
    df = AugmentImageComponent(DataFromList(_images(), shuffle=False), _augmentors())
    df.reset_state()
    state = json.loads(json.dumps(df.state_dict()))
    # the list itself, then depth first: crop, flip, apply + brightness, choose + 2, order + 2
    assert len(state["augmentors"]) == 1 + 2 + 2 + 3 + 3
    assert state["child"]["type"] == "DataFromList"
    fewer = AugmentImageComponent(DataFromList(_images(), shuffle=False), _augmentors()[:2])
    with pytest.raises(StateMismatchError, match=r"stage AugmentImageComponent: expected 3 "
                                                 r"augmentor streams .* found 11"):
        fewer.load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"stage AugmentImageComponents: expected type "
                                                 r"'AugmentImageComponents', found "
                                                 r"'AugmentImageComponent'"):
        AugmentImageComponents(DataFromList(_images(), shuffle=False),
                               _augmentors()).load_state_dict(state)
    other = AugmentImageComponent(DataFromList(_images(4), shuffle=False), _augmentors())
    with pytest.raises(StateMismatchError, match=r"stage DataFromList: expected size=4, found "
                                                 r"size=6"):
        other.load_state_dict(state)
    bad = {**state, "augmentors": [{"key": [1]}] * 11}
    with pytest.raises(StateMismatchError, match=r"expected augmentor streams saved by "
                                                 r"dataflow.state.rng_state"):
        AugmentImageComponent(DataFromList(_images(), shuffle=False),
                              _augmentors()).load_state_dict(bad)


def test_image_from_file_mismatch(files):
    state = ImageFromFile(files, shuffle=True).state_dict()
    with pytest.raises(StateMismatchError, match=r"stage ImageFromFile: expected size=4, found "
                                                 r"size=5"):
        ImageFromFile(files[:4], shuffle=True).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"expected shuffle=False, found shuffle=True"):
        ImageFromFile(files).load_state_dict(state)
