"""ImageNet (ILSVRC12) metadata, file lists and images; Tiny ImageNet."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from dataflow.dataset._base import ImageListDataset, check_choice
from dataflow.dataset._binaryproto import read_blob_proto
from dataflow.dataset._download import ensure_extracted, resolve_dir
from dataflow.dataset._io import import_cv2, imread_bgr

__all__ = ["ILSVRC12", "ILSVRC12Files", "ILSVRCMeta", "TinyImageNet"]

_CAFFE_URL = "http://dl.caffe.berkeleyvision.org/caffe_ilsvrc12.tar.gz"
_CAFFE_ARCHIVE = "caffe_ilsvrc12.tar.gz"
_CAFFE_SIZE = 17858008
_SPLITS = ("train", "val", "test")
_DIR_STRUCTURES = ("original", "train")


def _read_lines(path: str, owner: str) -> list[str]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{owner}: {path!r} does not exist.")
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


class ILSVRCMeta:
    """The ILSVRC12 metadata of the Caffe distribution (``caffe_ilsvrc12.tar.gz``).

    Args:
        dir: the folder with ``synsets.txt``, ``synset_words.txt``, ``train.txt``, ``val.txt``,
            ``test.txt`` and ``imagenet_mean.binaryproto``; default
            ``get_dataset_path('ilsvrc_metadata')``. When ``synsets.txt`` is missing, the
            archive is downloaded (unless already there) and extracted.
    """

    def __init__(self, dir: str | os.PathLike | None = None) -> None:
        self.dir = resolve_dir(dir, "ilsvrc_metadata")
        ensure_extracted(
            "ILSVRCMeta", self.dir, "synsets.txt", _CAFFE_URL, _CAFFE_ARCHIVE, _CAFFE_SIZE
        )
        self._synset: dict[int, str] | None = None

    def get_synset_words_1000(self) -> dict[int, str]:
        """``{label: "nXXXXXXXX words, more words"}`` from ``synset_words.txt``."""
        lines = _read_lines(os.path.join(self.dir, "synset_words.txt"), "ILSVRCMeta")
        return dict(enumerate(lines))

    def get_synset_1000(self) -> dict[int, str]:
        """``{label: wnid}`` from ``synsets.txt`` (line order is label order)."""
        if self._synset is None:
            lines = _read_lines(os.path.join(self.dir, "synsets.txt"), "ILSVRCMeta")
            self._synset = {i: line.split()[0] for i, line in enumerate(lines)}
        return dict(self._synset)

    def get_image_list(self, name: str, dir_structure: str = "original") -> list[tuple[str, int]]:
        """``[(relative_path, label), ...]`` from ``<name>.txt`` (lines ``"path label"``).

        With ``dir_structure='train'``, the wnid folder is prepended to the paths of the
        ``val``/``test`` lists (``train.txt`` paths already contain it).
        """
        check_choice("name", name, _SPLITS)
        check_choice("dir_structure", dir_structure, _DIR_STRUCTURES)
        path = os.path.join(self.dir, f"{name}.txt")
        add_wnid = name != "train" and dir_structure == "train"
        synset = self.get_synset_1000() if add_wnid else {}
        ret = []
        for lineno, line in enumerate(_read_lines(path, "ILSVRCMeta"), 1):
            parts = line.rsplit(maxsplit=1)
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise ValueError(
                    f"ILSVRCMeta: line {lineno} of {path!r} is {line!r}; expected "
                    "'<relative path> <integer label>'."
                )
            fname, label = parts[0], int(parts[1])
            if add_wnid:
                if label not in synset:
                    raise ValueError(
                        f"ILSVRCMeta: line {lineno} of {path!r} has label {label}, which "
                        f"synsets.txt does not list (it has {len(synset)} classes)."
                    )
                fname = os.path.join(synset[label], fname)
            ret.append((fname, label))
        if not ret:
            raise ValueError(f"ILSVRCMeta: {path!r} lists no images.")
        return ret

    def get_per_pixel_mean(self, size: int | Sequence[int] | None = None) -> np.ndarray:
        """The mean image of ``imagenet_mean.binaryproto``: ``float32`` BGR, (256, 256, 3),
        resized to ``size`` = ``(h, w)`` (or an int for a square) when given."""
        path = os.path.join(self.dir, "imagenet_mean.binaryproto")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"ILSVRCMeta: {path!r} does not exist.")
        with open(path, "rb") as f:
            raw = f.read()
        try:
            blob = read_blob_proto(raw)
        except (ValueError, IndexError) as e:
            raise ValueError(f"ILSVRCMeta: {path!r} is not a Caffe BlobProto: {e}.") from e
        if blob.ndim == 4:
            blob = blob[0]
        if blob.ndim != 3:
            raise ValueError(f"ILSVRCMeta: the blob in {path!r} has shape {blob.shape}, not CHW.")
        arr = np.ascontiguousarray(blob.transpose(1, 2, 0))
        if size is not None:
            if isinstance(size, int):
                size = (size, size)
            if len(size) != 2:
                raise ValueError(f"`size` must be an int or (h, w), got {size!r}.")
            cv2 = import_cv2("ILSVRCMeta.get_per_pixel_mean")
            arr = cv2.resize(arr, (int(size[1]), int(size[0])))
        return arr

    @staticmethod
    def guess_dir_structure(dir: str | os.PathLike) -> str:
        """``'train'`` if ``dir`` holds wnid folders (``n*``), else ``'original'``.

        Looks at the first entry in sorted order (tensorpack: the first listed).
        """
        dir = os.fspath(dir)
        entries = sorted(os.listdir(dir))
        if not entries:
            raise ValueError(f"`dir` {dir!r} is empty; cannot guess its layout.")
        first = entries[0]
        if first.startswith("n") and os.path.isdir(os.path.join(dir, first)):
            return "train"
        return "original"


class ILSVRC12Files(ImageListDataset):
    """ILSVRC12 image files: yields ``[path, label]`` with ``path`` joined onto ``dir/name``.

    Args:
        dir: the folder with ``train/``, ``val/``, ``test/``.
        name: ``'train'``, ``'val'`` or ``'test'``.
        meta_dir: the :class:`ILSVRCMeta` folder (default: its default).
        shuffle: random order every epoch; ``None`` means True for ``'train'`` only.
        dir_structure: ``'original'`` (all files in ``dir/name``) or ``'train'`` (in wnid
            subfolders); ``'train'`` is always used for the training set, and for the others
            ``None`` guesses it from the folder.
        seed: seed of the shuffling order.

    Labels of ``'test'`` are whatever ``test.txt`` says (placeholders in Caffe's metadata).
    """

    _needs_cv2 = False  # whether the flow decodes the images (it needs OpenCV then)

    def __init__(
        self,
        dir: str | os.PathLike,
        name: str,
        meta_dir: str | os.PathLike | None = None,
        shuffle: bool | None = None,
        dir_structure: str | None = None,
        seed: int | None = None,
    ) -> None:
        owner = type(self).__name__
        if self._needs_cv2:
            import_cv2(owner)
        self.name = check_choice("name", name, _SPLITS)
        self.full_dir = os.path.join(os.path.expanduser(os.fspath(dir)), name)
        if not os.path.isdir(self.full_dir):
            raise FileNotFoundError(
                f"{owner}: {self.full_dir!r} is not a folder; `dir` must hold the "
                "'train', 'val' and 'test' image folders."
            )
        if name == "train":
            dir_structure = "train"
        elif dir_structure is None:
            dir_structure = ILSVRCMeta.guess_dir_structure(self.full_dir)
        self.dir_structure = check_choice("dir_structure", dir_structure, _DIR_STRUCTURES)
        self.imglist = ILSVRCMeta(meta_dir).get_image_list(name, self.dir_structure)
        for fname, _ in self.imglist[:10]:
            path = os.path.join(self.full_dir, fname)
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"{owner}: {path!r} (listed in {name}.txt) does not exist; check `dir` and "
                    f"`dir_structure` (now {self.dir_structure!r})."
                )
        self._ready(name, shuffle, seed)

    def _datapoint(self, index: int) -> list:
        fname, label = self.imglist[index]
        return [self._path(fname), label]  # the file name: ILSVRC12 decodes it

    def _path(self, path: str) -> str:
        return os.path.join(self.full_dir, path)


class ILSVRC12(ILSVRC12Files):
    """ILSVRC12 images: yields ``[image, label]``, a BGR ``uint8`` (h, w, 3) array decoded with
    OpenCV and an ``int`` label. Same arguments as :class:`ILSVRC12Files`."""

    _needs_cv2 = True  # checked in ILSVRC12Files.__init__, before any file is read

    def _datapoint(self, index: int) -> list:
        path, label = super()._datapoint(index)
        return [imread_bgr(path, type(self).__name__), label]

    @staticmethod
    def get_training_bbox(
        bbox_dir: str | os.PathLike, imglist: Sequence[tuple[str, int]]
    ) -> list[np.ndarray | None]:
        """The first box of each training image, from Pascal-VOC XML files.

        For each ``(path, label)`` of ``imglist``, reads ``bbox_dir/<path without extension>.xml``
        and returns ``float32 [xmin, ymin, xmax, ymax]``, or ``None`` where there is no XML file
        (most training images have none). A file that exists but cannot be parsed raises
        ``ValueError`` naming it.
        """
        bbox_dir = os.fspath(bbox_dir)
        return [
            _parse_bbox(os.path.join(bbox_dir, os.path.splitext(fname)[0] + ".xml"))
            for fname, _ in imglist
        ]


def _parse_bbox(path: str) -> np.ndarray | None:
    import xml.etree.ElementTree as ET  # only box parsing needs it

    if not os.path.isfile(path):
        return None
    try:
        root = ET.parse(path).getroot()
        box = root.find("object/bndbox")
        if box is None:
            raise ValueError("no <object><bndbox> element")
        values = []
        for tag in ("xmin", "ymin", "xmax", "ymax"):
            elem = box.find(tag)
            if elem is None or elem.text is None:
                raise ValueError(f"<bndbox> has no <{tag}>")
            values.append(float(elem.text))
    except (ET.ParseError, ValueError) as e:
        raise ValueError(
            f"ILSVRC12.get_training_bbox: {path!r} is not a Pascal-VOC box file: {e}."
        ) from e
    return np.asarray(values, dtype=np.float32)


class TinyImageNet(ImageListDataset):
    """Tiny ImageNet (200 classes, 64x64): yields ``[image, label]``, a BGR ``uint8``
    (64, 64, 3) array and an ``int`` label (the line of the wnid in ``wnids.txt``).

    Args:
        dir: the extracted ``tiny-imagenet-200`` folder.
        name: ``'train'`` (``train/<wnid>/images/*``) or ``'val'``
            (``val/val_annotations.txt`` and ``val/images/``).
        shuffle: random order every epoch; ``None`` means True for ``'train'`` only.
        seed: seed of the shuffling order.
    """

    def __init__(self, dir: str | os.PathLike, name: str, shuffle: bool | None = None,
                 seed: int | None = None) -> None:
        owner = self._open(dir, name, ("train", "val"))
        import_cv2(owner)
        wnids_file = os.path.join(self.dir, "wnids.txt")
        wnids = [line.split()[0] for line in _read_lines(wnids_file, owner)]
        self.wnids = wnids
        label_of = {wnid: i for i, wnid in enumerate(wnids)}
        self.imglist: list[tuple[str, int]] = []
        if name == "train":
            for label, wnid in enumerate(wnids):
                folder = os.path.join(self.dir, "train", wnid, "images")
                if not os.path.isdir(folder):
                    raise FileNotFoundError(f"{owner}: {folder!r} (for wnid {wnid}) is missing.")
                self.imglist.extend(
                    (os.path.join(folder, f), label) for f in sorted(os.listdir(folder))
                )
        else:
            ann = os.path.join(self.dir, "val", "val_annotations.txt")
            for lineno, line in enumerate(_read_lines(ann, owner), 1):
                parts = line.split()
                if len(parts) < 2 or parts[1] not in label_of:
                    raise ValueError(
                        f"{owner}: line {lineno} of {ann!r} is {line!r}; expected "
                        "'<file> <wnid> ...' with a wnid listed in wnids.txt."
                    )
                path = os.path.join(self.dir, "val", "images", parts[0])
                self.imglist.append((path, label_of[parts[1]]))
        self._ready(name, shuffle, seed)
