"""ImageAugmentor, AugmentorList, PhotometricAugmentor: contracts, legacy API, determinism."""

from __future__ import annotations

import multiprocessing as mp
import pickle

import numpy as np
import pytest

from dataflow import imgaug
from dataflow.imgaug.transform import LazyTransform, NoOpTransform, TransformList
from dataflow.rng import set_seed, set_worker_info

IMG = np.arange(20 * 20, dtype=np.float32).reshape(20, 20) / 400.0


def _crop_offsets(aug, n=5, shape=(10, 12)):
    img = np.zeros(shape, np.uint8)
    return [(t.y0, t.x0) for t in (aug.get_transform(img) for _ in range(n))]


# ---------------------------------------------------------------- AugmentorList
def test_augmentor_list_like_tensorpack_test():
    set_seed(0)
    augs = imgaug.AugmentorList(
        [imgaug.Contrast((0.8, 1.2)), imgaug.Flip(horiz=True), imgaug.Resize((30, 30)),
         imgaug.SaltPepperNoise()]
    )
    assert repr(augs) == (
        "imgaug.AugmentorList([imgaug.Contrast(factor_range=(0.8, 1.2)), imgaug.Flip(horiz=True),"
        " imgaug.Resize(shape=(30, 30)), imgaug.SaltPepperNoise()])"
    )
    tfm = augs.get_transform(IMG)
    assert "LazyTransform(not created yet)" in repr(tfm)
    out = tfm.apply_image(IMG)
    assert "LazyTransform" not in repr(tfm)
    assert out.shape == (30, 30)
    np.testing.assert_array_equal(tfm.apply_image(IMG.copy()), out)
    coords = tfm.apply_coords(np.array([[0, 0], [10, 12]], np.float32))
    assert coords.dtype == np.float32
    np.testing.assert_allclose(coords[:, 1], [0, 18])  # y scaled by 30/20
    assert coords[1, 0] in (15.0, 30.0 - 15.0)


def test_augmentor_list_coords_before_image_is_a_clear_error():
    tfm = imgaug.AugmentorList([imgaug.Identity(), imgaug.Flip(horiz=True)]).get_transform(IMG)
    with pytest.raises(RuntimeError, match="before `apply_image`"):
        tfm.apply_coords(np.zeros((1, 2), np.float32))


def test_augmentor_list_flattens_the_first_transform_list_and_augment_matches():
    set_seed(1)
    a = imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(target_shape=8),
                              imgaug.Brightness(0.1)])
    tfm = a.get_transform(IMG)
    assert isinstance(tfm, TransformList)
    assert len(tfm) == 3 and isinstance(tfm.tfms[2], LazyTransform)
    out1 = tfm.apply_image(IMG)
    set_seed(1)
    b = imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(target_shape=8),
                              imgaug.Brightness(0.1)])
    np.testing.assert_array_equal(b.augment(IMG), out1)


def test_augmentor_list_validates_arguments_and_images():
    with pytest.raises(TypeError, match="list or tuple"):
        imgaug.AugmentorList(imgaug.Flip(horiz=True))
    with pytest.raises(TypeError, match="ImageAugmentor objects"):
        imgaug.AugmentorList([lambda x: x])
    augs = imgaug.AugmentorList([])
    assert isinstance(augs.get_transform(IMG), NoOpTransform)
    with pytest.raises(TypeError, match=r"numpy.ndarray.*got list"):
        augs.augment([[1, 2]])
    with pytest.raises(ValueError, match=r"got shape \(2, 3, 4, 5\)"):
        augs.augment(np.zeros((2, 3, 4, 5), np.uint8))
    with pytest.raises(TypeError, match=r"got dtype int64.*astype\(np.float32\)"):
        augs.augment(np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="h, w > 0"):
        imgaug.Flip(horiz=True).augment(np.zeros((0, 3), np.uint8))


# ---------------------------------------------------------------- determinism
def test_seeded_sequences_repeat_across_runs_and_after_reset_state():
    set_seed(7)
    first = _crop_offsets(imgaug.RandomCrop((4, 5)))
    set_seed(7)
    aug = imgaug.RandomCrop((4, 5))
    assert _crop_offsets(aug) == first
    aug.reset_state()
    assert _crop_offsets(aug) == first
    set_seed(8)
    assert _crop_offsets(imgaug.RandomCrop((4, 5))) != first


def test_golden_sequence():
    set_seed(0)
    assert _crop_offsets(imgaug.RandomCrop((4, 5)), n=6) == [
        (4, 4), (5, 4), (6, 2), (3, 4), (5, 4), (3, 0)
    ]


def test_augmentors_in_a_list_get_distinct_streams():
    set_seed(0)
    a, b = imgaug.RandomCrop((4, 5)), imgaug.RandomCrop((4, 5))
    imgaug.AugmentorList([a, b]).reset_state()  # their paths: positions in the list
    assert _crop_offsets(a) != _crop_offsets(b)
    # on their own, two augmentors of one class share the stream of their class name
    set_seed(0)
    c, d = imgaug.RandomCrop((4, 5)), imgaug.RandomCrop((4, 5))
    assert _crop_offsets(c) == _crop_offsets(d)
    set_seed(0)
    assert _crop_offsets(imgaug.RandomCrop((4, 5), seed=1)) != _crop_offsets(c)


def test_pickled_copy_rederives_its_stream():
    set_seed(3)
    aug = imgaug.RandomCrop((4, 5))
    first = _crop_offsets(aug)
    copy = pickle.loads(pickle.dumps(aug))
    assert _crop_offsets(copy) == first  # same seed and ordinal: the stream restarts


def test_rng_can_be_replaced_like_tensorpack():
    aug = imgaug.RandomCrop((4, 5))
    aug.rng = np.random.RandomState(5)
    first = _crop_offsets(aug)
    aug.rng = np.random.RandomState(5)
    assert _crop_offsets(aug) == first


def _worker(aug, worker_id, conn):
    set_worker_info(worker_id)
    conn.send(_crop_offsets(aug, n=8, shape=(40, 40)))
    conn.close()


def _streams_from_forked_workers(seed):
    set_seed(seed)
    aug = imgaug.RandomCrop((4, 5))
    parent = _crop_offsets(aug, n=8, shape=(40, 40))  # the parent has drawn already
    ctx = mp.get_context("fork")
    out = []
    for wid in range(2):
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(aug, wid, w))
        p.start()
        out.append(r.recv())
        p.join(10)
        assert p.exitcode == 0
    return parent, out


def test_forked_workers_get_distinct_reproducible_streams():
    parent, (w0, w1) = _streams_from_forked_workers(11)
    assert w0 != w1 and w0 != parent and w1 != parent
    assert _streams_from_forked_workers(11) == (parent, [w0, w1])


# ---------------------------------------------------------------- legacy API
class _OldBrightness(imgaug.ImageAugmentor):
    def __init__(self, delta):
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, img):
        return self.rng.uniform(-self.delta, self.delta)

    def _augment(self, img, v):
        return img + v


class _OldFlip(imgaug.ImageAugmentor):
    def _get_augment_params(self, img):
        return img.shape[1]

    def _augment(self, img, w):
        return img[:, ::-1]

    def _augment_coords(self, coords, w):
        out = coords.copy()
        out[:, 0] = w - out[:, 0]
        return out


def test_legacy_augmentors_through_get_transform():
    set_seed(0)
    augs = imgaug.AugmentorList([_OldBrightness(0.5), _OldFlip(), imgaug.Resize((10, 10))])
    assert repr(augs.augmentors[0]) == "imgaug._OldBrightness(delta=0.5)"
    tfm = augs.get_transform(IMG)
    out = tfm.apply_image(IMG)
    assert out.shape == (10, 10)
    np.testing.assert_array_equal(tfm.apply_image(IMG), out)
    coords = tfm.apply_coords(np.array([[1.0, 2.0]], np.float64))
    np.testing.assert_allclose(coords, [[(20 - 1.0) / 2, 1.0]])


class _OldShiftRight(imgaug.ImageAugmentor):
    """tensorpack 0.9 style with no parameters: only ``_augment(img, _)`` (and coords)."""

    def _augment(self, img, _):
        return np.roll(img, 1, axis=1)

    def _augment_coords(self, coords, _):
        return coords + np.array([1, 0])


def test_legacy_augmentor_with_only_augment_gets_none_params():
    augs = imgaug.AugmentorList([_OldShiftRight()])
    tfm = augs.get_transform(IMG)
    np.testing.assert_array_equal(tfm.apply_image(IMG), np.roll(IMG, 1, axis=1))
    np.testing.assert_array_equal(tfm.apply_coords(np.array([[1.0, 2.0]])), [[2.0, 2.0]])
    np.testing.assert_array_equal(_OldShiftRight().augment(IMG), np.roll(IMG, 1, axis=1))


def test_legacy_usage_of_the_deprecated_api():
    aug = imgaug.Flip(horiz=True, prob=1.0)
    out, tfm = aug.augment_return_params(IMG)
    np.testing.assert_array_equal(out, IMG[:, ::-1])
    np.testing.assert_array_equal(aug.augment_with_params(IMG, tfm), IMG[:, ::-1])
    np.testing.assert_array_equal(
        aug.augment_coords(np.array([[1.0, 2.0]]), tfm), np.array([[19.0, 2.0]])
    )


def test_augmentor_without_get_transform_says_what_to_implement():
    class Nothing(imgaug.ImageAugmentor):
        pass

    with pytest.raises(NotImplementedError, match="get_transform"):
        Nothing().augment(IMG)


def test_legacy_params_that_are_a_transform_are_returned_directly():
    class ReturnsTransform(imgaug.ImageAugmentor):
        def _get_augment_params(self, img):
            return imgaug.FlipTransform(img.shape[0], img.shape[1])

        def _augment(self, img, p):  # pragma: no cover - never called
            raise AssertionError

    tfm = ReturnsTransform().get_transform(IMG)
    assert isinstance(tfm, imgaug.FlipTransform)


# ---------------------------------------------------------------- PhotometricAugmentor
class _AddOne(imgaug.PhotometricAugmentor):
    def _augment(self, img, _):
        return img + 1


def test_photometric_augmentor_subclass():
    tfm = _AddOne().get_transform(IMG)
    np.testing.assert_array_equal(tfm.apply_image(IMG), IMG + 1)
    c = np.array([[1.5, 2.5]], np.float32)
    assert tfm.apply_coords(c) is c
    assert repr(tfm) == "imgaug.PhotometricTransform(_AddOne)"
    pickle.loads(pickle.dumps(tfm))


def test_rand_range():
    aug = _AddOne()
    aug.rng = np.random.RandomState(0)
    v = aug._rand_range(2.0)
    assert isinstance(v, np.float32) and 0 <= v < 2
    arr = aug._rand_range(1.0, 3.0, size=(4,))
    assert arr.dtype == np.float32 and ((arr >= 1) & (arr < 3)).all()


def test_repr_falls_back_when_attributes_do_not_match():
    class Odd(imgaug.ImageAugmentor):
        def __init__(self, x):
            super().__init__()
            self.y = x

    assert repr(Odd(1)).startswith("<")


def test_photometric_subclass_hooks_win_over_builtin_fast_paths():
    class Double(imgaug.Brightness):
        def _augment(self, img, v):
            return img * 2

    img = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(Double(5).augment(img), img * 2)
    np.testing.assert_array_equal(Double(5).get_transform(img).apply_image(img), img * 2)
    np.testing.assert_array_equal(imgaug.AugmentorList([Double(5)]).augment(img), img * 2)


def test_import_without_cv2_names_the_extra():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['cv2'] = None\n"
        "try:\n    import dataflow.imgaug\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert ("pip install 'opencv-python-headless>=4.8' 'simplejpeg>=1.7.6' (the extra "
            "[imgaug] of dataflow-reloaded; in a clone: pip install -e '.[imgaug]')"
            in out.stdout)


_RUN = """
import numpy as np
from dataflow import imgaug
from dataflow.rng import set_seed
set_seed(123)
augs = imgaug.AugmentorList([imgaug.RandomCrop(8), imgaug.Flip(horiz=True), imgaug.Rotation(30),
                             imgaug.Brightness(20), imgaug.GaussianNoise(3)])
img = np.arange(12 * 14 * 3, dtype=np.uint8).reshape(12, 14, 3)
out = [augs.augment(img) for _ in range(5)]
print(sum(int(o.astype(np.int64).sum()) * (k + 1) for k, o in enumerate(out)))
"""


def test_same_seed_same_transforms_in_separate_runs():
    import subprocess
    import sys

    runs = [
        subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, check=True)
        .stdout.strip()
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and runs[0].isdigit()
