"""OpenCV for the augmentors: ``import dataflow.imgaug`` needs ``cv2``; ``import dataflow``
does not. The import (and its fork safety) is :func:`dataflow._optional.import_cv2`'s."""

from __future__ import annotations

from dataflow._optional import import_cv2

__all__ = ["cv2"]

cv2 = import_cv2("dataflow.imgaug")
