"""ILSVRCMeta, ILSVRC12Files, ILSVRC12 (+ training boxes) and TinyImageNet on tiny trees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.dataset import (
    ILSVRC12,
    DatasetNotFoundError,
    ILSVRC12Files,
    ILSVRCMeta,
    TinyImageNet,
)
from dataflow.dataset._binaryproto import read_blob_proto
from tests.dataset.writers import blob_proto_bytes, write_jpeg, write_png_as
from tests.helpers import check_dataflow

WNIDS = ["n01440764", "n01443537", "n01484850"]
WORDS = ["tench, Tinca tinca", "goldfish, Carassius auratus", "great white shark"]
TRAIN = [("n01440764/n01440764_1.JPEG", 0), ("n01440764/n01440764_2.JPEG", 0),
         ("n01443537/n01443537_7.JPEG", 1), ("n01484850/n01484850_3.JPEG", 2)]  # fmt: skip
VAL = [("ILSVRC2012_val_00000001.JPEG", 2), ("ILSVRC2012_val_00000002.JPEG", 0)]
TEST = [("ILSVRC2012_test_00000001.JPEG", 0)]
MEAN = (np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5) * 1.5) + 0.25


def _image(seed):
    return np.random.default_rng(seed).integers(0, 256, size=(6, 8, 3), dtype=np.uint8)


@pytest.fixture
def meta_dir(tmp_path):
    d = tmp_path / "meta"
    d.mkdir()
    (d / "synsets.txt").write_text("".join(w + "\n" for w in WNIDS))
    (d / "synset_words.txt").write_text("".join(f"{w} {t}\n" for w, t in zip(WNIDS, WORDS)))
    for name, lst in (("train", TRAIN), ("val", VAL), ("test", TEST)):
        (d / f"{name}.txt").write_text("".join(f"{p} {label}\n" for p, label in lst))
    (d / "imagenet_mean.binaryproto").write_bytes(blob_proto_bytes(MEAN))
    return d


@pytest.fixture
def image_dir(tmp_path):
    d = tmp_path / "imagenet"
    images = {}
    for i, (path, _) in enumerate(TRAIN):
        images["train/" + path] = _image(i)
        write_png_as(d / "train" / path, images["train/" + path])
    for i, (path, _) in enumerate(VAL):
        images["val/" + path] = _image(100 + i)
        write_png_as(d / "val" / path, images["val/" + path])
    for i, (path, _) in enumerate(TEST):
        write_png_as(d / "test" / path, _image(200 + i))
    return d, images


def test_meta_synsets_and_lists(meta_dir):
    meta = ILSVRCMeta(meta_dir)
    assert meta.get_synset_1000() == dict(enumerate(WNIDS))
    assert meta.get_synset_words_1000() == {
        i: f"{w} {t}" for i, (w, t) in enumerate(zip(WNIDS, WORDS))
    }
    assert meta.get_image_list("train") == TRAIN
    assert meta.get_image_list("train", "train") == TRAIN
    assert meta.get_image_list("val") == VAL
    assert meta.get_image_list("val", dir_structure="train") == [
        ("n01484850/ILSVRC2012_val_00000001.JPEG", 2),
        ("n01440764/ILSVRC2012_val_00000002.JPEG", 0),
    ]
    assert meta.get_image_list("test") == TEST


def test_meta_per_pixel_mean(meta_dir):
    meta = ILSVRCMeta(meta_dir)
    mean = meta.get_per_pixel_mean()
    assert mean.dtype == np.float32
    assert mean.shape == (4, 5, 3)
    np.testing.assert_array_equal(mean, MEAN.transpose(1, 2, 0))
    resized = meta.get_per_pixel_mean((8, 10))
    assert resized.shape == (8, 10, 3)
    assert resized.dtype == np.float32
    assert meta.get_per_pixel_mean(2).shape == (2, 2, 3)


def test_blob_with_shape_field():
    blob = read_blob_proto(blob_proto_bytes(MEAN, legacy=False))
    assert blob.shape == (1, 3, 4, 5)
    np.testing.assert_array_equal(blob[0], MEAN)
    with pytest.raises(ValueError, match="does not match"):
        read_blob_proto(b"\x08\x02\x10\x03")  # num=2, channels=3, no data


def test_meta_bad_mean_file(meta_dir):
    (meta_dir / "imagenet_mean.binaryproto").write_bytes(b"\xff\xff\xff")
    with pytest.raises(ValueError, match="is not a Caffe BlobProto"):
        ILSVRCMeta(meta_dir).get_per_pixel_mean()


def test_meta_missing_without_network(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        ILSVRCMeta(tmp_path / "meta")
    msg = str(info.value)
    assert "'synsets.txt'" in msg
    assert "http://dl.caffe.berkeleyvision.org/caffe_ilsvrc12.tar.gz" in msg


def test_meta_malformed_list(meta_dir):
    (meta_dir / "val.txt").write_text("a.JPEG 1\nb.JPEG one\n")
    with pytest.raises(ValueError, match=r"line 2 of .*val\.txt' is 'b\.JPEG one'"):
        ILSVRCMeta(meta_dir).get_image_list("val")
    (meta_dir / "val.txt").write_text("a.JPEG 7\n")
    with pytest.raises(ValueError, match=r"has label 7, which synsets\.txt does not list"):
        ILSVRCMeta(meta_dir).get_image_list("val", "train")
    with pytest.raises(ValueError, match="`dir_structure` must be one of"):
        ILSVRCMeta(meta_dir).get_image_list("val", "flat")


def test_guess_dir_structure(image_dir, tmp_path):
    d, _ = image_dir
    assert ILSVRCMeta.guess_dir_structure(d / "train") == "train"
    assert ILSVRCMeta.guess_dir_structure(d / "val") == "original"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is empty"):
        ILSVRCMeta.guess_dir_structure(tmp_path / "empty")


def test_files_train_and_val(image_dir, meta_dir):
    d, _ = image_dir
    df = ILSVRC12Files(d, "train", meta_dir=meta_dir, shuffle=False)
    assert df.shuffle is False
    assert len(df) == 4
    assert list(df) == [[str(d / "train" / p), label] for p, label in TRAIN]
    assert ILSVRC12Files(d, "train", meta_dir=meta_dir).shuffle is True
    val = ILSVRC12Files(d, "val", meta_dir=meta_dir)
    assert val.shuffle is False
    assert val.dir_structure == "original"
    assert list(val) == [[str(d / "val" / p), label] for p, label in VAL]


def test_files_val_in_wnid_folders(tmp_path, meta_dir):
    d = tmp_path / "imagenet"
    for i, (p, label) in enumerate(VAL):
        write_png_as(d / "val" / WNIDS[label] / p, _image(i))
    df = ILSVRC12Files(d, "val", meta_dir=meta_dir)
    assert df.dir_structure == "train"
    assert [dp[0] for dp in df] == [str(d / "val" / WNIDS[label] / p) for p, label in VAL]


def test_files_missing_image(image_dir, meta_dir):
    d, _ = image_dir
    (d / "val" / VAL[1][0]).unlink()
    with pytest.raises(FileNotFoundError, match=r"ILSVRC2012_val_00000002.JPEG.*`dir_structure`"):
        ILSVRC12Files(d, "val", meta_dir=meta_dir)
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        ILSVRC12Files(d / "nowhere", "val", meta_dir=meta_dir)
    with pytest.raises(ValueError, match="`name` must be one of 'train', 'val', 'test'"):
        ILSVRC12Files(d, "validation", meta_dir=meta_dir)


def test_ilsvrc12_images(image_dir, meta_dir):
    d, images = image_dir
    df = ILSVRC12(d, "train", meta_dir=meta_dir, shuffle=False)
    got = list(df)
    assert [label for _, label in got] == [label for _, label in TRAIN]
    for (img, _), (p, _) in zip(got, TRAIN):
        assert img.dtype == np.uint8
        assert img.shape == (6, 8, 3)
        np.testing.assert_array_equal(img, images["train/" + p])
    first = check_dataflow(ILSVRC12(d, "train", meta_dir=meta_dir, seed=2), epochs=2)
    assert sorted(dp[1] for dp in first) == [0, 0, 1, 2]


def test_ilsvrc12_damaged_image(image_dir, meta_dir):
    d, _ = image_dir
    (d / "val" / VAL[0][0]).write_bytes(b"not an image")
    df = ILSVRC12(d, "val", meta_dir=meta_dir)
    with pytest.raises(ValueError, match="OpenCV cannot decode"):
        list(df)


BOX_XML = """<annotation>
  <folder>{wnid}</folder><filename>{name}</filename>
  <size><width>500</width><height>375</height><depth>3</depth></size>
  <object><name>{wnid}</name><bndbox>
    <xmin>{box[0]}</xmin><ymin>{box[1]}</ymin><xmax>{box[2]}</xmax><ymax>{box[3]}</ymax>
  </bndbox></object>
  <object><name>{wnid}</name><bndbox>
    <xmin>1</xmin><ymin>2</ymin><xmax>3</xmax><ymax>4</ymax>
  </bndbox></object>
</annotation>
"""


def test_training_bbox(tmp_path):
    bbox_dir = tmp_path / "bbox"
    boxes = {TRAIN[0][0]: (10, 20, 300, 200.5), TRAIN[2][0]: (0, 0, 499, 374)}
    for path, box in boxes.items():
        wnid, name = path.split("/")
        xml = bbox_dir / wnid / name.replace(".JPEG", ".xml")
        xml.parent.mkdir(parents=True, exist_ok=True)
        xml.write_text(BOX_XML.format(wnid=wnid, name=name[:-5], box=box))
    got = ILSVRC12.get_training_bbox(bbox_dir, TRAIN)
    assert len(got) == 4
    assert got[1] is None
    assert got[3] is None
    for i in (0, 2):
        assert got[i].dtype == np.float32
        assert got[i].tolist() == list(boxes[TRAIN[i][0]])
    bad = bbox_dir / "n01440764" / "n01440764_2.xml"
    bad.write_text("<annotation><object><bndbox><xmin>1</xmin></bndbox></object></annotation>")
    with pytest.raises(ValueError, match=r"n01440764_2.xml.*has no <ymin>"):
        ILSVRC12.get_training_bbox(bbox_dir, TRAIN)
    bad.write_text("<annotation><unclosed></annotation>")
    with pytest.raises(ValueError, match="is not a Pascal-VOC box file"):
        ILSVRC12.get_training_bbox(bbox_dir, TRAIN)


@pytest.fixture
def tiny_dir(tmp_path):
    d = tmp_path / "tiny-imagenet-200"
    d.mkdir()
    wnids = ["n02124075", "n04067472"]
    (d / "wnids.txt").write_text("\n".join(wnids) + "\n")
    images = {}
    for label, wnid in enumerate(wnids):
        for k in range(2):
            name = f"{wnid}_{k}.JPEG"
            images[name] = np.random.default_rng(label * 10 + k).integers(
                0, 256, size=(64, 64, 3), dtype=np.uint8
            )
            write_png_as(d / "train" / wnid / "images" / name, images[name])
        (d / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
    ann = []
    for k, label in enumerate([1, 0, 1]):
        name = f"val_{k}.JPEG"
        images[name] = np.full((64, 64, 3), 40 * k + 30, np.uint8)
        write_jpeg(d / "val" / "images" / name, images[name])
        ann.append(f"{name}\t{wnids[label]}\t0\t0\t63\t63\n")
    (d / "val" / "val_annotations.txt").write_text("".join(ann))
    return d, wnids, images


def test_tiny_imagenet_train(tiny_dir):
    d, wnids, images = tiny_dir
    df = TinyImageNet(d, "train", shuffle=False)
    assert len(df) == 4
    got = list(df)
    assert [label for _, label in got] == [0, 0, 1, 1]
    names = [f"{w}_{k}.JPEG" for w in wnids for k in range(2)]
    for (img, _), name in zip(got, names):
        assert img.shape == (64, 64, 3)
        np.testing.assert_array_equal(img, images[name])
    assert TinyImageNet(d, "train").shuffle is True


def test_tiny_imagenet_val_jpeg(tiny_dir):
    d, _, images = tiny_dir
    df = TinyImageNet(d, "val")
    assert df.shuffle is False
    got = list(df)
    assert [label for _, label in got] == [1, 0, 1]
    for k, (img, _) in enumerate(got):
        assert img.dtype == np.uint8
        assert img.shape == (64, 64, 3)
        # a flat colour survives JPEG within one grey level
        assert np.abs(img.astype(int) - images[f"val_{k}.JPEG"]).max() <= 1


def test_tiny_imagenet_errors(tiny_dir):
    d, _, _ = tiny_dir
    (d / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99999999\t0\t0\t1\t1\n")
    with pytest.raises(ValueError, match=r"line 1 of .* with a wnid listed in wnids\.txt"):
        TinyImageNet(d, "val")
    with pytest.raises(ValueError, match="`name` must be one of 'train', 'val'; got 'test'"):
        TinyImageNet(d, "test")
    with pytest.raises(FileNotFoundError, match=r"wnids\.txt"):
        TinyImageNet(d / "nowhere", "train")


@settings(max_examples=25, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4)),
    legacy=st.booleans(),
    data=st.data(),
)
def test_blob_round_trip(shape, legacy, data):
    n = int(np.prod(shape))
    values = data.draw(
        st.lists(st.floats(-1e6, 1e6, width=32, allow_nan=False), min_size=n, max_size=n)
    )
    chw = np.asarray(values, np.float32).reshape(shape)
    blob = read_blob_proto(blob_proto_bytes(chw, legacy=legacy))
    assert blob.dtype == np.float32
    np.testing.assert_array_equal(blob.reshape(shape), chw)
