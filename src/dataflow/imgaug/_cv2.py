"""Guarded OpenCV import: ``import dataflow.imgaug`` needs ``cv2``; ``import dataflow`` does not.

Fork safety. With OpenCV 5, once the parent has run a parallel operation (its thread pool is
up), a forked child that calls ``cv2.setNumThreads`` blocks forever: it waits for pool threads
that were not copied by ``fork`` (worker start-up code and PyTorch-style ``worker_init_fn``
do exactly that). So around every ``fork`` the pool is stopped (``setNumThreads(1)`` in the
parent just before), and the previous thread count is restored right after, in the parent and
in the child; the child then starts a fresh pool of its own when it needs one.
"""

from __future__ import annotations

import os

try:
    import cv2
except ImportError as e:  # pragma: no cover - exercised only without OpenCV
    raise ImportError(
        "dataflow.imgaug needs OpenCV (`cv2`), which is not installed; install it with "
        "pip install 'dataflow-reloaded[imgaug]'"
    ) from e

__all__ = ["cv2"]

_saved_threads: list[int] = []


def _stop_pool_before_fork() -> None:
    try:
        n = cv2.getNumThreads()
        if n != 1:
            cv2.setNumThreads(1)
            _saved_threads.append(n)
    except Exception:  # never break a fork
        pass


def _restore_pool_after_fork() -> None:
    if _saved_threads:
        n = _saved_threads.pop()
        try:
            cv2.setNumThreads(n)
        except Exception:  # never break a fork
            pass


if hasattr(os, "register_at_fork"):  # pragma: no branch
    os.register_at_fork(
        before=_stop_pool_before_fork,
        after_in_parent=_restore_pool_after_fork,
        after_in_child=_restore_pool_after_fork,
    )
