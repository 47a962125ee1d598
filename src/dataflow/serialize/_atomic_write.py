"""Atomic saves: every serializer writes through :func:`atomic_output`.

A save writes a temporary file in its target's directory, which replaces the target only once
it is complete and on disk (synced, then renamed; the rename is atomic). Until then an existing
target is untouched: a save that fails or is interrupted (an exception from the dataflow, the
codec or the disk; ``KeyboardInterrupt`` included) leaves the old file byte-identical and no
temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

__all__ = ["atomic_output", "check_output"]


def check_output(path: str, what: str, overwrite: bool) -> str:
    """Check a save's target before any work is done (and before a progress bar is shown):
    its directory exists, it is not a directory, and it does not exist unless ``overwrite``.
    Returns ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"{what}: the directory {directory!r} of `path` {path!r} does not exist; create it "
            "first (e.g. os.makedirs(directory, exist_ok=True))."
        )
    if os.path.isdir(path):
        raise IsADirectoryError(f"{what}: `path` {path!r} is a directory; give a file path.")
    if not overwrite and os.path.lexists(path):
        raise FileExistsError(
            f"{what}: `path` {path!r} already exists; pass overwrite=True to replace it, or "
            "choose another path."
        )
    return path


def _sync_path(path: str) -> None:
    """Flush a closed file's data to disk (``fdatasync`` where the platform has it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        getattr(os, "fdatasync", os.fsync)(fd)
    finally:
        os.close(fd)


def _sync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable, where the platform can."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # directories cannot be opened on this platform
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(path: str, what: str, overwrite: bool) -> Iterator[str]:
    """Yield a temporary path next to ``path`` for the caller to write and close; then sync it
    and rename it onto ``path``, replacing an existing file (with ``overwrite``).

    On an exception inside the ``with`` block the temporary file is removed and the exception
    propagates; ``path`` is untouched. Without ``overwrite``, a ``path`` that appeared while
    the caller wrote is not replaced (FileExistsError).
    """
    check_output(path, what, overwrite)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        yield tmp
        _sync_path(tmp)
        check_output(path, what, overwrite)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    _sync_dir(directory)
