"""Lazily imported readers for the optional formats: images (OpenCV) and MATLAB files (SciPy)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dataflow._optional import import_optional, install_hint

__all__ = ["import_cv2", "imread_bgr", "loadmat", "mat_array"]


def import_cv2(owner: str) -> Any:
    """The ``cv2`` module, or an ImportError that says how to install it."""
    return import_optional("cv2", f"{owner} (to decode images)")


def imread_bgr(path: str, owner: str) -> np.ndarray:
    """Decode the image file ``path`` as a BGR ``uint8`` array of shape (h, w, 3)."""
    cv2 = import_cv2(owner)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{owner}: image file {path!r} does not exist.")
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(
            f"{owner}: OpenCV cannot decode {path!r}; the file is damaged or not an image."
        )
    return img


def loadmat(path: str, owner: str) -> dict[str, Any]:
    """Read the MATLAB file ``path`` with ``scipy.io.loadmat``, with clear errors."""
    try:
        import scipy.io
    except ImportError as e:
        raise ImportError(
            f"{owner} reads MATLAB .mat files with SciPy, which is not installed: "
            f"{install_hint('scipy')}"
        ) from e
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{owner}: file {path!r} does not exist.")
    try:
        return scipy.io.loadmat(path)
    except NotImplementedError as e:  # MATLAB v7.3 files are HDF5
        raise ValueError(
            f"{owner}: {path!r} is a MATLAB v7.3 (HDF5) file, which scipy cannot read; save "
            "it again in the v5 format (MATLAB: save(..., '-v7')) or use the original file."
        ) from e
    except Exception as e:  # scipy raises IndexError, MatReadError, ValueError... on bad files
        raise ValueError(
            f"{owner}: cannot read {path!r} as a MATLAB file ({type(e).__name__}: {e}); "
            "the file is damaged or not a .mat file."
        ) from e


def mat_array(mat: dict[str, Any], key: str, path: str, owner: str) -> np.ndarray:
    """``mat[key]`` as an ndarray, or a ValueError naming the missing variable."""
    if key not in mat:
        found = sorted(k for k in mat if not k.startswith("__"))
        raise ValueError(
            f"{owner}: {path!r} has no variable {key!r} (it has {found}); it is not the "
            "expected dataset file."
        )
    return np.asarray(mat[key])
