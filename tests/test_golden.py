"""Golden outputs of the seeded random paths, recorded from the implementation: a refactor that
moves code must not change an augmentor's stream, a mapper's draws, an order, an epoch plan or a
saved state. Values are exact (a digest of the raw bytes and reprs, plus a few readable ones)."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import time

import numpy as np
import pytest

import dataflow as df
from dataflow import imgaug
from dataflow.streaming import EpochPlan, global_order

IMG = np.random.RandomState(0).randint(0, 256, (24, 32, 3), dtype=np.uint8)
PTS = np.array([[0, 0], [31, 23], [10.5, 7.25], [16, 12]], np.float32)


def _feed(h, obj) -> None:
    if isinstance(obj, np.ndarray):
        h.update(f"a{obj.dtype.str}{obj.shape}".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, list | tuple):
        h.update(f"l{len(obj)}".encode())
        for x in obj:
            _feed(h, x)
    elif isinstance(obj, np.generic):
        h.update(f"s{obj.dtype.str}{obj.item()!r}".encode())
    else:
        h.update(f"{type(obj).__name__}{obj!r}".encode())


def digest(obj) -> str:
    """The first 16 hex digits of a sha256 over ``obj``'s arrays (dtype, shape, bytes) and
    scalars (type, repr), walked recursively through lists and tuples."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- augmentors on their own
AUGMENTORS = {
    "RandomCrop": lambda **kw: imgaug.RandomCrop((16, 20), **kw),
    "FlipH": lambda **kw: imgaug.Flip(horiz=True, **kw),
    "FlipV": lambda **kw: imgaug.Flip(vert=True, prob=0.7, **kw),
    "Brightness": lambda **kw: imgaug.Brightness(30, **kw),
    "Contrast": lambda **kw: imgaug.Contrast((0.6, 1.4), **kw),
    "Rotation": lambda **kw: imgaug.Rotation(25, **kw),
    "ResizeShortestEdge": lambda **kw: imgaug.ResizeShortestEdge(16, **kw),
    "RandomResize": lambda **kw: imgaug.RandomResize((0.6, 1.4), (0.7, 1.3), **kw),
    "GaussianNoise": lambda **kw: imgaug.GaussianNoise(8, **kw),
    "GoogleNetCrop": lambda **kw: imgaug.GoogleNetRandomCropAndResize(target_shape=12, **kw),
    "AugmentorList": lambda **kw: imgaug.AugmentorList(
        [imgaug.RandomCrop((20, 28)), imgaug.Flip(horiz=True), imgaug.Brightness(20),
         imgaug.Brightness(20), imgaug.GaussianNoise(3)], **kw),
    "RandomApplyAug": lambda **kw: imgaug.RandomApplyAug(imgaug.Rotation(30), 0.5, **kw),
    "RandomChooseAug": lambda **kw: imgaug.RandomChooseAug(
        [imgaug.Flip(horiz=True), imgaug.Brightness(40), imgaug.Contrast((0.5, 1.5))], **kw),
    "RandomOrderAug": lambda **kw: imgaug.RandomOrderAug(
        [imgaug.Brightness(40), imgaug.Contrast((0.5, 1.5)), imgaug.RandomCrop(18)], **kw),
}

# name: (digest with seed=7, digest with no seed= under df.set_seed(11))
AUGMENTOR_GOLDENS = {
    "AugmentorList": ("bb6fddbc20802aca", "e7b7d903b788b301"),
    "Brightness": ("db861351e4d6f229", "80c592cc179f691c"),
    "Contrast": ("655ff5aaa3f6fab5", "ac2749ee01c3229c"),
    "FlipH": ("7bd19ed564f91702", "a0160a417beef15f"),
    "FlipV": ("d2cdf01b2911b334", "1f4fb7e57630d5e4"),
    "GaussianNoise": ("bf6fa1e4b1cf3104", "8228980bc61efc81"),
    "GoogleNetCrop": ("bb88d763435bd6ed", "de4d65446bdcd515"),
    "RandomApplyAug": ("fcaacf195bfc7f82", "39a72939c717b699"),
    "RandomChooseAug": ("2b7019fccf890d3a", "c578962ca481cb80"),
    "RandomCrop": ("38d4391f7ab46be0", "19f5e9184d76536f"),
    "RandomOrderAug": ("1ba08c8087db5959", "8649758006baa7fa"),
    "RandomResize": ("91f01919a16ae05a", "be29e51702354b27"),
    "ResizeShortestEdge": ("170eefde7e15d376", "170eefde7e15d376"),  # draws nothing
    "Rotation": ("d27acc1322d51081", "2849727aa482fd26"),
}


def _augment_run(aug) -> list:
    """Transforms and outputs of several draws, a reset, and the ``augment`` shortcut."""
    out = []
    for _ in range(3):
        tfm = aug.get_transform(IMG)
        out += [tfm.apply_image(IMG), tfm.apply_coords(PTS)]
    aug.reset_state()
    out += [aug.augment(IMG) for _ in range(3)]
    return out


@pytest.mark.parametrize("name", sorted(AUGMENTORS))
def test_augmentor_with_its_own_seed(name):
    assert digest(_augment_run(AUGMENTORS[name](seed=7))) == AUGMENTOR_GOLDENS[name][0]


@pytest.mark.parametrize("name", sorted(AUGMENTORS))
def test_augmentor_under_the_global_seed_keyed_by_its_class_name(name):
    df.set_seed(11)
    assert digest(_augment_run(AUGMENTORS[name]())) == AUGMENTOR_GOLDENS[name][1]


def test_crop_offsets_of_an_augmentor_never_placed_in_a_pipeline():
    df.set_seed(11)
    crop = imgaug.RandomCrop((16, 20))
    assert [(t.y0, t.x0) for t in (crop.get_transform(IMG) for _ in range(6))] == [
        (6, 11), (8, 5), (5, 6), (1, 2), (5, 1), (7, 8)
    ]


# ---------------------------------------------------------------- augmentors inside pipelines
def _images(n: int = 6) -> list:
    rs = np.random.RandomState(0)
    return [[rs.randint(0, 256, (20, 24, 3), dtype=np.uint8),
             rs.randint(0, 2, (20, 24), dtype=np.uint8), i, PTS[:3] + i] for i in range(n)]


def _photo_and_geometry() -> list:
    return [imgaug.RandomCrop((14, 18)), imgaug.Flip(horiz=True), imgaug.Rotation(20),
            imgaug.Brightness(25), imgaug.GaussianNoise(4)]


PIPELINES = {
    "component": lambda src: df.AugmentImageComponent(src, _photo_and_geometry(), index=0),
    "components": lambda src: df.AugmentImageComponents(
        src, [imgaug.RandomCrop((14, 18)), imgaug.Flip(horiz=True), imgaug.Rotation(20)],
        index=(0, 1), coords_index=(3,)),
    "coordinates": lambda src: df.AugmentImageCoordinates(
        src, _photo_and_geometry(), img_index=0, coords_index=3),
    "shuffled_component": lambda src: df.AugmentImageComponent(
        df.LocallyShuffleData(src, 3, finite=True), [imgaug.RandomResize((0.5, 1.5))], index=0),
}

# name: (labels of two epochs, digest of the two epochs)
PIPELINE_GOLDENS = {
    "component": ([[0, 2, 3, 5, 4, 1], [1, 5, 4, 3, 0, 2]], "970489f92612539f"),
    "components": ([[0, 2, 3, 5, 4, 1], [1, 5, 4, 3, 0, 2]], "b77a5da563f15dbc"),
    "coordinates": ([[0, 2, 3, 5, 4, 1], [1, 5, 4, 3, 0, 2]], "3bc0d1d362a6dc12"),
    "shuffled_component": ([[0, 4, 2, 3, 1, 5], [0, 4, 3, 1, 2, 4]], "3b39ef4c48a7eae1"),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_augmentation_pipeline_under_the_global_seed(name):
    df.set_seed(3)
    flow = PIPELINES[name](df.DataFromList(_images(), shuffle=True))
    flow.reset_state()
    epochs = [list(flow) for _ in range(2)]
    assert [[dp[2] for dp in e] for e in epochs] == PIPELINE_GOLDENS[name][0]
    assert digest(epochs) == PIPELINE_GOLDENS[name][1]


def _augmentor_classes() -> list[type]:
    return [c for c in (getattr(imgaug, n) for n in imgaug.__all__)
            if isinstance(c, type) and issubclass(c, imgaug.ImageAugmentor)]


@pytest.fixture
def classes_in_other_files(monkeypatch):
    """Every augmentor class as if its file had moved (seed keys and the no-copy path of the
    image flows must not depend on where a class is defined)."""
    for cls in _augmentor_classes():
        monkeypatch.setattr(cls, "__module__", "dataflow.somewhere.else")


@pytest.mark.usefixtures("classes_in_other_files")
@pytest.mark.parametrize("name", ["AugmentorList", "RandomCrop", "RandomChooseAug", "Rotation"])
def test_a_class_in_another_file_draws_the_same(name):
    df.set_seed(11)
    assert digest(_augment_run(AUGMENTORS[name]())) == AUGMENTOR_GOLDENS[name][1]


@pytest.mark.usefixtures("classes_in_other_files")
def test_the_image_flows_skip_the_copy_whatever_file_an_augmentor_is_in():
    img = np.zeros((8, 8, 3), np.uint8)
    flow = df.AugmentImageComponent(df.DataFromList([[img]], shuffle=False),
                                    [imgaug.Flip(horiz=True, prob=0.0)], copy=True)
    # built-in augmentors never write into their input: no copy before, only unaliased after
    assert (flow._copy, flow._unalias) == (False, True)
    seen = []
    mapped = df.AugmentImageComponent(df.DataFromList([[img]], shuffle=False),
                                      [imgaug.MapImage(lambda x: seen.append(x) or x)], copy=True)
    mapped.reset_state()
    out = next(iter(mapped))[0]
    assert (mapped._copy, mapped._unalias) == (True, False)  # user code might write into it
    assert not np.shares_memory(seen[0], img) and not np.shares_memory(out, img)


def test_every_built_in_augmentor_pins_its_seed_name_and_input_contract():
    for cls in _augmentor_classes():
        own = cls.__dict__
        assert own["seed_name"] == f"{cls.__module__}.{cls.__qualname__}", cls
        assert own["keeps_input"] is (cls not in (imgaug.MapImage, imgaug.Albumentations,
                                                  imgaug.IAAugmentor)), cls

    class Mine(imgaug.RandomCrop):  # a user's subclass keys by its own name, copies its input
        pass

    assert "seed_name" not in Mine.__dict__ and "keeps_input" not in Mine.__dict__


# ---------------------------------------------------------------- parallel mappers
class RandomMap:
    """Draws, for each input, from an augmentor list, ``np.random`` and ``random``; it sleeps
    a little, unevenly, so that every worker takes part and results finish out of order."""

    def __init__(self) -> None:
        self.augs = imgaug.AugmentorList([imgaug.RandomCrop((6, 6)), imgaug.Flip(horiz=True),
                                          imgaug.Brightness(40), imgaug.Brightness(40)])

    def __call__(self, dp: list) -> list:
        time.sleep((dp[0] * 7919 % 5) * 0.0005)
        img = np.arange(100, dtype=np.uint8).reshape(10, 10) + np.uint8(dp[0])
        return [dp[0], self.augs.augment(img), int(np.random.randint(1 << 30)),
                random.getrandbits(30)]


MAPPERS = {"thread": df.MultiThreadMapData, "process_zmq": df.MultiProcessMapDataZMQ,
           "process": df.MultiProcessMapData}

# the same for every mapper and worker count: (under the global seed 5, with seed=5)
MAPPED_FIRST_DRAWS = ([197942633, 319315358, 169840488], [986778353, 520409906, 422875722])
MAPPED_GOLDENS = ("0c07d27e3574a81f", "430a1889a57530c7")


def _mapped(name: str, workers: int, seed: int | None) -> list:
    src = df.DataFromList([[i] for i in range(16)], shuffle=False)
    with MAPPERS[name](src, workers, RandomMap(), buffer_size=6, strict=True, ordered=True,
                       seed=seed) as mapper:
        mapper.reset_state()
        return [list(mapper) for _ in range(2)]


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("name", sorted(MAPPERS))
def test_strict_ordered_random_map(name, workers):
    df.set_seed(5)
    out = _mapped(name, workers, None)
    assert [dp[0] for dp in out[0]] == list(range(16))
    assert [dp[2] for dp in out[0][:3]] == MAPPED_FIRST_DRAWS[0]
    assert digest(out) == MAPPED_GOLDENS[0]
    seeded = _mapped(name, workers, 5)  # its own seed=, under the same global seed
    assert [dp[2] for dp in seeded[0][:3]] == MAPPED_FIRST_DRAWS[1]
    assert digest(seeded) == MAPPED_GOLDENS[1]


# ---------------------------------------------------------------- streaming epoch plan
def test_global_order():
    assert global_order([5, 3, 7], seed=0, epoch=0, window=4).tolist() == [
        11, 8, 9, 10, 12, 14, 13, 0, 1, 3, 2, 4, 7, 6, 5
    ]
    order = global_order([100, 37, 0, 250], seed=12, epoch=3, window=64)
    assert digest(order) == "8bdc3312eac8fbdf"


# (plan, (steps, first samples), digest of the samples, shards, indexes and two workers' shares)
PLANS = [
    (EpochPlan((5, 3, 7), seed=0, epoch=0, window=4),
     (15, [11, 8, 9, 10, 12, 14]), "45ade8dda6bc56fd"),
    (EpochPlan((10, 20, 5, 7), seed=3, epoch=2, window=8, rank=1, world_size=3, start=4,
               partial="pad"),
     (13, [12, 21, 20, 19, 28, 33]), "045e8e96b515f8fc"),
    (EpochPlan((10, 20, 5, 7), seed=3, epoch=2, window=8, rank=2, world_size=4),
     (10, [14, 17, 22, 19, 27, 31]), "40f30640e3add835"),
    (EpochPlan((64, 64, 64), seed=2024, epoch=1, window=32, rank=0, world_size=2, start=10),
     (91, [139, 128, 153, 130, 145, 140]), "c5a96a8d7b13c2fa"),
]


@pytest.mark.parametrize(("plan", "head", "golden"), PLANS)
def test_epoch_plan(plan, head, golden):
    samples = plan.samples()
    shard, index = plan.locate(samples)
    workers = [plan.samples(worker=w, num_workers=2) for w in range(2)]
    assert (plan.steps, samples[:6].tolist()) == head
    assert digest([samples, shard, index, workers]) == golden


# ---------------------------------------------------------------- resumed state
def _resumable(kind: str) -> df.DataFlow:
    src = df.DataFromList(_images(10), shuffle=True, seed=2)
    flow = df.LocallyShuffleData(src, 4, seed=3, finite=True)
    if kind == "augment":
        flow = df.AugmentImageComponent(flow, [imgaug.RandomCrop((12, 12)),
                                               imgaug.Brightness(30)], index=0)
    else:
        flow = df.MultiThreadMapData(flow, 2, _crop_component, buffer_size=4, strict=True,
                                     ordered=True, seed=4)
    return df.BatchData(df.SelectComponent(flow, [0, 2]), 3)


def _crop_component(dp: list) -> list:
    return [imgaug.RandomCrop((12, 12)).augment(dp[0]), *dp[1:]]  # keyed by the input's place


# kind: (labels of the two batches before the save, (length, digest) of the JSON state, digest
# of the whole epoch, the two batches and the rest after the restore)
RESUME_GOLDENS = {
    # (the states hold BatchData's batch_size and remainder, and the mapper's inputs' seed)
    "augment": ([[4, 5, 2], [5, 7, 3]], (41138, "a77881ac4d233860"), "55ad3533dbfaa971"),
    "thread": ([[4, 5, 2], [5, 7, 3]], (19146, "20da127ff10172c6"), "f7c5c025b6b0327c"),
}


@pytest.mark.parametrize("kind", ["augment", "thread"])
def test_state_mid_epoch_and_the_rest_after_restore(kind):
    df.set_seed(9)
    ref = _resumable(kind)
    ref.reset_state()
    first = list(ref)
    it = iter(ref)
    head = [next(it) for _ in range(2)]
    state = json.dumps(ref.state_dict(), sort_keys=True)
    tail = list(it)
    ref.close()
    fresh = _resumable(kind)
    fresh.reset_state()
    fresh.load_state_dict(json.loads(state))
    rest = list(fresh) + list(fresh)
    fresh.close()
    assert digest(rest[:len(tail)]) == digest(tail)
    assert [b[1].tolist() for b in head] == RESUME_GOLDENS[kind][0]
    assert (len(state), digest(state)) == RESUME_GOLDENS[kind][1]
    assert digest([first, head, rest]) == RESUME_GOLDENS[kind][2]


# ---------------------------------------------------------------- shuffling orders
def _labels(flow: df.DataFlow, n: int | None = None) -> list[int]:
    return [int(dp[0]) for dp in itertools.islice(flow, n)]


def test_orders_of_the_random_flows():
    df.set_seed(4)
    shuffled = df.DataFromList([[i] for i in range(10)])
    local = df.LocallyShuffleData(df.DataFromList([[i] for i in range(12)], shuffle=False), 4)
    mix = df.RandomMixData([df.DataFromList([[i] for i in range(6)]),
                            df.DataFromList([[100 + i] for i in range(4)], shuffle=False)])
    choose = df.RandomChooseData([(df.DataFromList([[i] for i in range(30)]), 0.3),
                                  (df.DataFromList([[200 + i] for i in range(30)]), 0.7)])
    for flow in (shuffled, local, mix, choose):
        flow.reset_state()
    got = {
        "shuffled": _labels(shuffled) + _labels(shuffled),
        "local": _labels(local, 24),
        "mix": _labels(mix) + _labels(mix),
        "choose": _labels(choose, 20),
    }
    own = df.DataFromList([[i] for i in range(10)], seed=1)
    own.reset_state()
    got["own_seed"] = _labels(own)
    assert got == {
        "shuffled": [7, 3, 2, 5, 0, 8, 6, 1, 4, 9, 3, 9, 8, 0, 5, 6, 4, 7, 1, 2],
        "local": [3, 0, 5, 2, 6, 7, 4, 10, 8, 1, 1, 9, 2, 4, 0, 11, 7, 5, 8, 9, 11, 6, 10, 1],
        "mix": [100, 1, 0, 3, 4, 101, 102, 5, 2, 103, 3, 100, 101, 0, 2, 102, 4, 103, 1, 5],
        "choose": [220, 217, 203, 210, 209, 216, 219, 218, 204, 212, 21, 201, 26, 207, 221, 0,
                   205, 226, 213, 12],
        "own_seed": [8, 0, 7, 3, 9, 4, 2, 5, 6, 1],
    }
