"""Places365-Standard, low resolution (256x256), in its "easy directory structure"."""

from __future__ import annotations

import os

from dataflow.dataset._base import ImageListDataset
from dataflow.dataset._io import import_cv2

__all__ = ["Places365Standard"]


class Places365Standard(ImageListDataset):
    """Places365-Standard (http://places2.csail.mit.edu/download.html, easy format).

    Yields ``[image, label]``: a BGR ``uint8`` (256, 256, 3) image and an ``int`` label, the
    index of the class name among the sorted class names.

    Args:
        dir: the folder with ``train.txt``, ``val.txt`` and the images they list.
        name: ``'train'`` or ``'val'``. Each line of ``<name>.txt`` starts with a path relative
            to ``dir`` such as ``train/airfield/00000001.jpg``; the class is its second
            component. Paths that would leave ``dir`` (absolute, or with ``..``) are refused.
        shuffle: random order every epoch; ``None`` means True for ``'train'`` only.
        seed: seed of the shuffling order.
    """

    def __init__(self, dir: str | os.PathLike, name: str, shuffle: bool | None = None,
                 seed: int | None = None) -> None:
        owner = self._open(dir, name, ("train", "val"))
        if not os.path.isdir(self.dir):
            raise FileNotFoundError(f"{owner}: `dir` {self.dir!r} is not a folder.")
        import_cv2(owner)
        list_file = os.path.join(self.dir, name + ".txt")
        if not os.path.isfile(list_file):
            raise FileNotFoundError(f"{owner}: the list {list_file!r} does not exist.")
        entries: list[tuple[str, str]] = []
        with open(list_file, encoding="utf-8") as f:
            for lineno, raw in enumerate(f, 1):
                line = raw.strip()
                if not line:
                    continue
                rel = line.split()[0]
                parts = rel.split("/")
                # a lexical check: symlinked image folders inside `dir` stay allowed
                if os.path.isabs(rel) or ".." in parts or "\\" in rel:
                    raise ValueError(
                        f"{owner}: line {lineno} of {list_file!r} is {rel!r}, which points "
                        f"outside {self.dir!r}; paths must be relative to `dir`."
                    )
                if len(parts) < 3 or not parts[1]:
                    raise ValueError(
                        f"{owner}: line {lineno} of {list_file!r} is {rel!r}; expected "
                        "'<split>/<class>/<file>'."
                    )
                entries.append((os.path.join(self.dir, rel), parts[1]))
        if not entries:
            raise ValueError(f"{owner}: {list_file!r} lists no images.")
        self._labels = sorted({cls for _, cls in entries})
        label_of = {cls: i for i, cls in enumerate(self._labels)}
        self.imglist = [(path, label_of[cls]) for path, cls in entries]
        self._ready(name, shuffle, seed)

    def get_label_names(self) -> list[str]:
        """The class names, indexed by label."""
        return list(self._labels)

