"""Guarded OpenCV import: ``import dataflow.imgaug`` needs ``cv2``; ``import dataflow`` does not."""

from __future__ import annotations

try:
    import cv2
except ImportError as e:  # pragma: no cover - exercised only without OpenCV
    raise ImportError(
        "dataflow.imgaug needs OpenCV (`cv2`), which is not installed; install it with "
        "pip install 'dataflow-reloaded[imgaug]'"
    ) from e

__all__ = ["cv2"]
