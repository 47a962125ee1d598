"""ImageFromFile, AugmentImageComponent, AugmentImageComponents, AugmentImageCoordinates."""

from __future__ import annotations

import ast
import logging
import pickle
import subprocess
import sys

import cv2
import numpy as np
import pytest

from dataflow import imgaug
from dataflow.errors import ErrorBudgetError, ImageDecodeError
from dataflow.rng import set_seed
from dataflow.sources import DataFromList
from dataflow.wrappers.image import (
    AugmentImageComponent,
    AugmentImageComponents,
    AugmentImageCoordinates,
    ImageFromFile,
)
from tests.helpers import check_dataflow

RGB = np.zeros((4, 6, 3), np.uint8)
RGB[..., 0] = 200  # red in RGB
RGB[1, 2] = (10, 20, 30)


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(3):
        img = RGB.copy()
        img[0, 0] = (i, i, i)
        p = tmp_path / f"{i}.png"
        assert cv2.imwrite(str(p), img[:, :, ::-1])  # OpenCV writes BGR
        paths.append(str(p))
    return paths


def test_image_from_file_reads_rgb_and_gray(files):
    df = ImageFromFile(files)
    got = check_dataflow(df)
    assert len(got) == 3
    out = next(iter(df))[0]
    assert out.dtype == np.uint8 and out.shape == (4, 6, 3)
    np.testing.assert_array_equal(out[1:], RGB[1:])
    gray = next(iter(ImageFromFile(files, channel=1)))[0]
    assert gray.shape == (4, 6, 1)
    assert gray[1, 2, 0] == cv2.cvtColor(RGB, cv2.COLOR_RGB2GRAY)[1, 2]


def test_image_from_file_resize_is_h_w(files):
    out = next(iter(ImageFromFile(files, resize=(2, 3))))[0]
    assert out.shape == (2, 3, 3)
    out = next(iter(ImageFromFile(files, channel=1, resize=5)))[0]
    assert out.shape == (5, 5, 1)


def test_image_from_file_shuffle_is_seeded_and_keeps_the_callers_list(files):
    original = list(files)
    df = ImageFromFile(files, shuffle=True, seed=3)
    df.reset_state()
    orders = [[int(dp[0][0, 0, 0]) for dp in df] for _ in range(4)]
    assert files == original
    assert all(sorted(o) == [0, 1, 2] for o in orders)
    assert len({tuple(o) for o in orders}) > 1
    again = ImageFromFile(files, shuffle=True, seed=3)
    again.reset_state()
    assert [[int(dp[0][0, 0, 0]) for dp in again] for _ in range(4)] == orders


def test_image_from_file_errors(tmp_path):
    with pytest.raises(ValueError, match="non-empty list"):
        ImageFromFile([])
    with pytest.raises(ValueError, match="`channel` must be 1"):
        ImageFromFile(["x.png"], channel=2)
    df = ImageFromFile([str(tmp_path / "missing.png")])
    with pytest.raises(FileNotFoundError, match=r"missing\.png"):
        next(iter(df))


def test_image_from_file_undecodable_and_truncated_files_are_decode_errors(tmp_path):
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"this is not an image")
    with pytest.raises(ImageDecodeError, match=r"garbage\.jpg' does not decode: .*cv2.imdecode"):
        next(iter(ImageFromFile([str(garbage)])))
    noise = np.random.default_rng(0).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(".jpg", noise)
    assert ok
    data = buf.tobytes()
    whole, cut = tmp_path / "whole.jpg", tmp_path / "cut.jpg"
    whole.write_bytes(data)
    cut.write_bytes(data[: len(data) // 2])  # OpenCV 4's cv2.imread returned it half grey
    got = next(iter(ImageFromFile([str(whole)])))[0]
    np.testing.assert_array_equal(got, cv2.imread(str(whole))[:, :, ::-1])
    for channel in (3, 1):
        with pytest.raises(ImageDecodeError, match=r"cut\.jpg' does not decode: .*truncated"):
            next(iter(ImageFromFile([str(cut)], channel=channel)))
    assert issubclass(ImageDecodeError, ValueError)


def _ds(items):
    return DataFromList(items, shuffle=False)


def test_augment_image_component_exact_and_copy_semantics():
    img = np.arange(12, dtype=np.uint8).reshape(3, 4)
    df = AugmentImageComponent(_ds([[img, "label"]]), [imgaug.Flip(horiz=True, prob=1.0)])
    got = check_dataflow(df)
    assert got[0][1] == "label"
    np.testing.assert_array_equal(next(iter(df))[0], img[:, ::-1])

    class Inplace(imgaug.ImageAugmentor):
        def get_transform(self, x):
            return imgaug.TransformFactory(apply_image=self._zero)

        @staticmethod
        def _zero(x):
            x[...] = 0
            return x

    before = img.copy()
    df = AugmentImageComponent(_ds([[img]]), [Inplace()])
    df.reset_state()
    assert next(iter(df))[0].sum() == 0
    np.testing.assert_array_equal(img, before)  # copy=True protected the source
    df = AugmentImageComponent(_ds([[img]]), [Inplace()], copy=False)
    df.reset_state()
    next(iter(df))
    assert img.sum() == 0


def test_augment_image_component_dict_datapoints_and_index():
    img = np.ones((2, 2), np.float32)
    df = AugmentImageComponent(_ds([{"a": 1, "img": img}]), imgaug.Resize(3), index="img")
    df.reset_state()
    dp = next(iter(df))
    assert dp["a"] == 1 and dp["img"].shape == (3, 3)


def test_augment_image_component_errors_and_catch(caplog):
    bad = [[np.zeros((2, 2), np.int64)], [np.zeros((4, 4), np.uint8)], [[1, 2]]]
    df = AugmentImageComponent(_ds(bad), [imgaug.CenterCrop(3)])
    df.reset_state()
    with pytest.raises(TypeError, match=r"`dp\[0\]` must be uint8.*got dtype int64"):
        list(df)
    df = AugmentImageComponent(_ds(bad), [imgaug.CenterCrop(3)], catch_exceptions=True)
    assert df.on_error == "warn"  # tensorpack's catch_exceptions: log and drop
    df.reset_state()
    with caplog.at_level(logging.WARNING, logger="dataflow"):
        out = list(df)
    assert [dp[0].shape for dp in out] == [(3, 3)]
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0] for line in lines] == [
        "AugmentImageComponent: skipped input index 0",
        "AugmentImageComponent: skipped input index 2"]
    assert "TypeError: `dp[0]` must be uint8" in lines[0]
    assert df.error_policy.state() == {"seen": 3, "skipped": 2, "total": 2}
    skip = AugmentImageComponent(_ds(bad), [imgaug.CenterCrop(3)], on_error="skip",
                                 max_errors=1)
    skip.reset_state()
    with pytest.raises(ErrorBudgetError, match=r"AugmentImageComponent: 2 inputs failed in "
                                                r"this epoch \(of 3 seen\), more than "
                                                r"max_errors=1\. First: input index 0"):
        list(skip)
    with pytest.raises(ValueError, match=r"`catch_exceptions=True` .* contradicts "
                                         r"on_error='raise'"):
        AugmentImageComponent(_ds(bad), [imgaug.CenterCrop(3)], catch_exceptions=True,
                              on_error="raise")
    with pytest.raises(TypeError, match="`augmentors` must be a list"):
        AugmentImageComponent(_ds(bad), "Flip")


def test_augment_image_coordinates():
    img = np.zeros((4, 6), np.uint8)
    pts = np.array([[0.5, 1.5], [5.0, 3.0]], np.float32)
    df = AugmentImageCoordinates(_ds([(img, pts, 7)]), [imgaug.Flip(horiz=True, prob=1.0)])
    check_dataflow(df)
    out_img, out_pts, label = next(iter(df))
    assert out_img.shape == (4, 6) and label == 7
    np.testing.assert_array_equal(out_pts, [[5.5, 1.5], [1.0, 3.0]])
    np.testing.assert_array_equal(pts, [[0.5, 1.5], [5.0, 3.0]])  # input untouched
    ints = AugmentImageCoordinates(_ds([(img, np.array([[0, 1], [5, 3]], np.int32), 7)]),
                                   [imgaug.Flip(horiz=True, prob=1.0)])
    ints.reset_state()
    out_pts = next(iter(ints))[1]  # integer coordinates, as tensorpack's examples pass them
    assert out_pts.dtype == np.float32 and out_pts.tolist() == [[6.0, 1.0], [1.0, 3.0]]
    bad = AugmentImageCoordinates(_ds([[img, np.zeros((2, 2), np.bool_)]]), [imgaug.Identity()])
    bad.reset_state()
    with pytest.raises(TypeError, match=r"`dp\[1\]` must have a float or integer dtype, got bool"):
        list(bad)
    bad = AugmentImageCoordinates(_ds([[img, np.zeros((2, 3))]]), [imgaug.Identity()])
    bad.reset_state()
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        list(bad)


def test_augment_image_components_applies_one_transform_to_all():
    set_seed(0)
    img = np.arange(64, dtype=np.float32).reshape(8, 8)
    mask = (img % 3 == 0).astype(np.uint8)
    pts = np.array([[4.5, 4.5]], np.float64)  # inside every 5x5 crop
    augs = [imgaug.RandomCrop(5), imgaug.Flip(horiz=True, prob=1.0)]
    df = AugmentImageComponents(_ds([[img, mask, pts]]), augs, index=(0, 1), coords_index=(2,))
    df.reset_state()
    out_img, out_mask, out_pts = next(iter(df))
    np.testing.assert_array_equal(out_mask, (out_img % 3 == 0).astype(np.uint8))
    x, y = out_pts[0]
    assert out_img[int(y), int(x)] == img[4, 4]
    with pytest.raises(ValueError, match="non-empty list"):
        AugmentImageComponents(_ds([[img]]), augs, index=())


def _crop_flow():
    imgs = [[np.random.RandomState(i).rand(6, 6).astype(np.float32)] for i in range(4)]
    return AugmentImageComponent(_ds(imgs), [imgaug.RandomCrop(3), imgaug.Brightness(0.5)])


def _assert_same(xs, ys):
    assert len(xs) == len(ys)
    for a, b in zip(xs, ys):
        np.testing.assert_array_equal(a, b)


def test_flows_reproduce_with_a_seed_and_after_reset_and_pickle():
    set_seed(5)
    df = _crop_flow()
    df.reset_state()
    first = [dp[0] for dp in df]
    df.reset_state()
    _assert_same(first, [dp[0] for dp in df])
    set_seed(5)
    again = _crop_flow()
    again.reset_state()
    _assert_same(first, [dp[0] for dp in again])
    copy = pickle.loads(pickle.dumps(df))  # the streams were derived: the copy restarts them
    copy.reset_state()
    _assert_same(first, [dp[0] for dp in copy])


def test_import_dataflow_does_not_import_cv2():
    code = (
        "import sys, dataflow, dataflow.wrappers.image; "
        "assert 'cv2' not in sys.modules, 'cv2 imported'; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_copy_never_hands_out_the_source_image():
    img = np.arange(16, dtype=np.uint8).reshape(4, 4)
    for augs in ([imgaug.Identity()], [imgaug.CenterCrop(2)], [imgaug.Flip(horiz=True, prob=0)]):
        df = AugmentImageComponent(_ds([[img]]), augs)
        df.reset_state()
        out = next(iter(df))[0]
        assert not np.may_share_memory(out, img)
        df = AugmentImageComponent(_ds([[img]]), augs, copy=False)
        df.reset_state()
        assert np.may_share_memory(next(iter(df))[0], img)
    mask = img.copy()
    df = AugmentImageComponents(_ds([[img, mask]]), [imgaug.CenterCrop(2)], index=(0, 1))
    df.reset_state()
    a, b = next(iter(df))
    assert not np.may_share_memory(a, img) and not np.may_share_memory(b, mask)
    df = AugmentImageCoordinates(_ds([[img, np.zeros((1, 2))]]), [imgaug.Identity()])
    df.reset_state()
    assert not np.may_share_memory(next(iter(df))[0], img)


def test_copy_is_made_first_for_user_augmentors_inside_meta_augmentors():
    class Zero(imgaug.ImageAugmentor):
        def get_transform(self, img):
            return imgaug.TransformFactory(apply_image=self._zero)

        @staticmethod
        def _zero(x):
            x[...] = 0
            return x

    img = np.ones((3, 3), np.uint8)
    for augs in (imgaug.AugmentorList([imgaug.RandomApplyAug(Zero(), 1.0)]),
                 [imgaug.RandomChooseAug([Zero()])], [imgaug.RandomOrderAug([Zero()])]):
        df = AugmentImageComponent(_ds([[img]]), augs)
        df.reset_state()
        assert next(iter(df))[0].sum() == 0
        assert img.sum() == 9


def _tag_worker(dp):
    from dataflow.rng import get_worker_info

    return [*dp, get_worker_info()]


def _per_worker_crops(seed, start_method):
    from dataflow.parallel import MultiProcessRunnerZMQ
    from dataflow.wrappers import MapData

    set_seed(seed)
    img = np.arange(100, dtype=np.uint8).reshape(10, 10)
    ds = AugmentImageComponent(_ds([[img]] * 4), [imgaug.RandomCrop(3)])
    runner = MultiProcessRunnerZMQ(MapData(ds, _tag_worker), num_proc=2, start_method=start_method)
    streams: dict[int, list[int]] = {0: [], 1: []}
    with runner:
        runner.reset_state()
        while min(len(s) for s in streams.values()) < 4:
            for crop, wid in runner:  # each epoch yields len(ds) datapoints
                streams[wid].append(int(crop[0, 0]))  # the top-left pixel gives the offset
    return [s[:4] for s in streams.values()]


def test_forked_workers_get_distinct_reproducible_augmentation_streams():
    first = _per_worker_crops(21, "fork")
    assert first[0] != first[1]
    assert _per_worker_crops(21, "fork") == first


_SPAWN_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from tests.wrappers.test_image import _per_worker_crops

if __name__ == "__main__":  # spawn re-imports the main module
    print(_per_worker_crops(21, "spawn"))
"""


@pytest.mark.slow
def test_spawned_workers_get_distinct_reproducible_augmentation_streams(tmp_path):
    # in a subprocess: spawn leaves multiprocessing's resource tracker running until exit
    from pathlib import Path

    script = tmp_path / "spawn_streams.py"
    script.write_text(_SPAWN_SCRIPT.format(root=str(Path(__file__).resolve().parents[2])))
    runs = [
        subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       check=True, timeout=120).stdout.strip()
        for _ in range(2)
    ]
    streams = ast.literal_eval(runs[0])  # a printed list of two lists of ints
    assert streams[0] != streams[1]
    assert runs[0] == runs[1]
