"""See what an augmentor list does: ``preview()`` and the ``python -m dataflow preview`` CLI.

``preview(img, augmentors, n=8, coords=None, path="preview.png")`` writes a PNG grid: the
original image, then ``n`` random draws of ``augmentors``; the points ``coords`` (float ``Nx2``
of ``(x, y)``) are drawn on every tile, moved by the same transform as the image, so a point
that does not sit on its feature shows a coordinate bug at a glance.

The CLI takes an image path (or draws a test image), an augmentor spec such as
``"ResizeShortestEdge(256); RandomCrop(224); Flip(horiz=True); Brightness(30)"`` (names from
:mod:`dataflow.imgaug`, bare or written as in Python code, ``imgaug.Flip(...)`` or
``dataflow.imgaug.Flip(...)``; literal arguments, ``cv2.NAME`` constants, nested augmentors), a
number of draws, an output path and an optional seed; ``--list`` prints the augmentor names.
The spec is parsed, never evaluated: only those names can be called, with literal arguments.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from dataflow.imgaug._cv2 import cv2
from dataflow.imgaug.base import AugmentorList, ImageAugmentor
from dataflow.imgaug.functional import check_coords, check_image
from dataflow.imgaug.viz import stack_patches, to_display, write_image

__all__ = ["augmentor_names", "make_test_image", "parse_augmentors", "preview", "preview_main"]

_COLORS = [(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60)]


def make_test_image(h: int = 240, w: int = 320) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic RGB uint8 test image (gradient, checkerboard, shapes, an asymmetric "F") and
    float32 ``(x, y)`` coordinates of five of its landmarks."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([xx / w * 255, yy / h * 255, np.full_like(xx, 96)], axis=2).astype(np.uint8)
    cell = max(4, min(h, w) // 12)
    checker = ((yy[: h // 2, : w // 3] // cell + xx[: h // 2, : w // 3] // cell) % 2) * 255
    img[: h // 2, : w // 3] = checker[:, :, np.newaxis].astype(np.uint8)
    cv2.circle(img, (int(w * 0.7), int(h * 0.3)), max(3, min(h, w) // 8), (255, 255, 0), -1)
    # an "F" shows mirroring and rotation
    x0, y0, t = int(w * 0.55), int(h * 0.55), max(2, min(h, w) // 30)
    fh, fw = int(h * 0.35), int(w * 0.2)
    cv2.rectangle(img, (x0, y0), (x0 + t, y0 + fh), (20, 20, 20), -1)
    cv2.rectangle(img, (x0, y0), (x0 + fw, y0 + t), (20, 20, 20), -1)
    cv2.rectangle(img, (x0, y0 + fh // 2), (x0 + fw * 2 // 3, y0 + fh // 2 + t), (20, 20, 20), -1)
    coords = np.array(
        [[w * 0.7, h * 0.3], [x0 + 0.5, y0 + 0.5], [x0 + fw, y0 + t * 0.5],
         [x0 + t * 0.5, y0 + fh], [w / 3, h / 2]],
        dtype=np.float32,
    )
    return img, coords


def _draw_points(tile: np.ndarray, coords: np.ndarray | None) -> np.ndarray:
    if coords is None:
        return tile
    tile = tile.copy()
    r = max(2, min(tile.shape[:2]) // 60)
    for k, (x, y) in enumerate(coords):
        if np.isfinite(x) and np.isfinite(y):
            center = (round(float(x) - 0.5), round(float(y) - 0.5))  # continuous -> pixel
            cv2.circle(tile, center, r + 1, (0, 0, 0), -1)
            cv2.circle(tile, center, r, _COLORS[k % len(_COLORS)], -1)
    return tile


def _as_list(augmentors: Any) -> AugmentorList:
    if isinstance(augmentors, AugmentorList):
        return augmentors
    if isinstance(augmentors, ImageAugmentor):
        return AugmentorList([augmentors])
    return AugmentorList(list(augmentors))


def preview(
    img: np.ndarray,
    augmentors: Any,
    n: int = 8,
    coords: np.ndarray | None = None,
    path: str | None = "preview.png",
    include_original: bool = True,
) -> np.ndarray:
    """Write (to ``path``, unless None) and return a uint8 RGB grid of ``img`` under ``n``
    random draws of ``augmentors``, with ``coords`` drawn on every tile."""
    check_image(img)
    if coords is not None:
        check_coords(coords)
    if n < 1:
        raise ValueError(f"`n` must be >= 1, got {n!r}.")
    augs = _as_list(augmentors)
    tiles = [_draw_points(to_display(img), coords)] if include_original else []
    for _ in range(n):
        tfm = augs.get_transform(img)
        out = tfm.apply_image(img)
        moved = None if coords is None else tfm.apply_coords(coords)
        tiles.append(_draw_points(to_display(out), moved))
    grid = stack_patches(tiles)
    if path is not None:
        write_image(str(path), grid, rgb=True)
    return grid


# ---------------------------------------------------------------- augmentor specs
def _spec_names() -> dict[str, Any]:
    """The names a spec may call: the public names of the augmentor modules (those of
    :mod:`dataflow.imgaug`, taken from its modules, not from the package that imports this
    one)."""
    from dataflow.imgaug import (
        base,
        boxes,
        convert,
        crop,
        external,
        geometry,
        imgproc,
        meta,
        misc,
        noise,
        paste,
        transform,
    )

    modules = (base, boxes, convert, crop, external, geometry, imgproc, meta, misc, noise, paste,
               transform)
    return {name: getattr(m, name) for m in modules for name in m.__all__}


#: the module paths a spec may put before a name, as Python code does: imgaug.Flip(...)
_PREFIXES = ("imgaug.", "dataflow.imgaug.")
#: the classes augmentors derive from: callable in a spec, but not augmentors to offer
_BASES = frozenset({"Augmentor", "ImageAugmentor", "PhotometricAugmentor"})
_LIST_HINT = "`python -m dataflow preview --list` lists them all"


def augmentor_names() -> list[str]:
    """The names of the augmentors a spec may use (sorted): the augmentor classes of
    :mod:`dataflow.imgaug`, without the bases they derive from."""
    return sorted(
        name for name, obj in _spec_names().items()
        if isinstance(obj, type) and issubclass(obj, ImageAugmentor) and name not in _BASES
    )


class _UnknownNameError(ValueError):
    """A spec calls a name that is not one of :func:`_spec_names` (the message says which)."""


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of plain names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _either(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _unknown(written: str) -> _UnknownNameError:
    name = written.rpartition(".")[2]  # suggest for the name whatever prefix was written
    if name != written and name in _spec_names():  # a known name after another prefix
        spellings = _either([name, *(prefix + name for prefix in _PREFIXES)])
        return _UnknownNameError(f"unknown augmentor {written!r}; write {spellings}.")
    close = difflib.get_close_matches(name, augmentor_names(), n=3)
    if not close:
        return _UnknownNameError(f"unknown augmentor {written!r}; {_LIST_HINT}.")
    return _UnknownNameError(
        f"unknown augmentor {written!r}; did you mean {_either(close)}? {_LIST_HINT}.")


def _callee(func: ast.AST) -> Any:
    """What a spec's call calls: a name of :func:`_spec_names`, bare or after one of
    :data:`_PREFIXES`; resolved from that table, never looked up elsewhere."""
    names = _spec_names()
    written = _dotted(func)
    if written is None:
        raise _unknown(ast.unparse(func))
    name = written
    for prefix in _PREFIXES:
        if written.startswith(prefix):
            name = written[len(prefix):]
            break
    if name not in names:
        raise _unknown(written)
    return names[name]


def _eval_node(node: ast.AST) -> Any:
    if isinstance(node, ast.Call):
        cls = _callee(node.func)
        args = [_eval_node(a) for a in node.args]
        kwargs = {k.arg: _eval_node(k.value) for k in node.keywords if k.arg is not None}
        return cls(*args, **kwargs)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
        node.value.id == "cv2" and node.attr.isupper()
    ):
        return getattr(cv2, node.attr)
    if isinstance(node, ast.List | ast.Tuple):
        items = [_eval_node(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    return ast.literal_eval(node)


def parse_augmentors(spec: str) -> list[ImageAugmentor]:
    """Parse ``"Name(args); Name(args); ..."`` into augmentors (no arbitrary code runs).

    A name may be written bare (``Flip``) or as in Python code (``imgaug.Flip``,
    ``dataflow.imgaug.Flip``); an unknown one raises a ``ValueError`` that names it and the
    closest augmentor names.
    """
    augs = []
    for part in (p.strip() for p in spec.replace("\n", ";").split(";")):
        if not part:
            continue
        try:
            node = ast.parse(part, mode="eval").body
            aug = _eval_node(node)
        except _UnknownNameError:
            raise
        except Exception as e:  # whatever the spec or the constructor it calls raised
            raise ValueError(
                f"cannot parse augmentor {part!r}: {type(e).__name__}: {str(e).rstrip('.')}. "
                "Write e.g. "
                "\"ResizeShortestEdge(256); Flip(horiz=True); Brightness(30)\"."
            ) from e
        if not isinstance(aug, ImageAugmentor):
            raise ValueError(f"{part!r} is not an augmentor.")
        augs.append(aug)
    if not augs:
        raise ValueError(f"the augmentor spec {spec!r} holds no augmentor.")
    return augs


def _parse_coords(text: str) -> np.ndarray:
    try:
        pts = [[float(v) for v in p.split(",")] for p in text.split(";") if p.strip()]
        arr = np.asarray(pts, dtype=np.float32).reshape(-1, 2)
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"--coords must look like 'x1,y1;x2,y2', got {text!r}"
        ) from e
    return arr


class _Parser(argparse.ArgumentParser):
    """Its errors (a bad option or value) are one line on stderr with status 2, like the
    command's other usage errors (``python -m dataflow``'s parser does the same)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def preview_main(argv: Sequence[str] | None = None) -> int:
    """``python -m dataflow preview``: write a grid of random augmentations of one image."""
    parser = _Parser(
        prog="python -m dataflow preview",
        description="Write a PNG grid of an image under random draws of an augmentor list.",
    )
    parser.add_argument("image", nargs="?", help="image file (default: a generated test image)")
    parser.add_argument(
        "-a", "--augs", default="Flip(horiz=True); Rotation(20); Brightness(40)",
        help="augmentors, e.g. \"ResizeShortestEdge(256); RandomCrop(224); Flip(horiz=True)\" "
             "(imgaug.Flip(...) and dataflow.imgaug.Flip(...) work too; --list names them)",
    )
    parser.add_argument("-n", "--num", type=int, default=8, help="number of random draws")
    parser.add_argument("-o", "--output", default="preview.png", help="output PNG path")
    parser.add_argument("--coords", type=_parse_coords, default=None,
                        help="points to follow, 'x1,y1;x2,y2' (the test image has its own)")
    parser.add_argument("--seed", type=int, default=None, help="seed for reproducible draws")
    parser.add_argument("--list", action="store_true",
                        help="print the augmentor names a spec may use, one a line, and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(augmentor_names()))
        return 0

    def fail(message: str) -> int:  # one line on stderr, status 2 (a usage error)
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return 2

    try:
        augs = parse_augmentors(args.augs)
    except ValueError as e:
        return fail(f"-a/--augs: {e}")
    if args.num < 1:
        return fail(f"-n/--num must be >= 1, got {args.num}.")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        return fail(f"-o/--output: the directory {out_dir!r} does not exist; create it first.")
    coords = args.coords
    if args.image is None:
        img, test_coords = make_test_image()
        coords = test_coords if coords is None else coords
    else:
        bgr = cv2.imread(args.image, cv2.IMREAD_COLOR)
        if bgr is None:
            return fail(f"cannot read an image from {args.image!r}.")
        img = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    if args.seed is not None:
        from dataflow.rng import set_seed

        set_seed(args.seed)
    try:
        preview(img, augs, n=args.num, coords=coords, path=args.output)
    except (ValueError, TypeError) as e:  # e.g. an augmentor that cannot take this image
        return fail(f"{type(e).__name__}: {e}")
    print(f"wrote {args.output}")
    return 0
