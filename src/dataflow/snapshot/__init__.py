"""Persistent snapshots of a pipeline's deterministic part, read by position.

* :class:`SnapshotData` (``data``): the outputs ``map_func(ds[i])`` of a position-readable flow,
  computed once, stored under ``path/<key>/`` and read back by position, verified;
* ``dataflow.snapshot(ds, path)`` (``cut``): the same at the end of a chain's longest
  deterministic prefix. This package is itself callable: ``dataflow.snapshot`` is both the
  package (``import dataflow.snapshot.store`` works) and that function, so ``dataflow.snapshot(ds,
  path)`` calls :func:`dataflow.snapshot.cut.snapshot`;
* ``key``: the stable digest of the source and the function (``explain``: what changed);
  ``determinism``: the randomness test; ``budget``: what to store under a bound on the bytes on
  disk (a replacement needs a clear margin; evicted records are reclaimed by compaction);
* the on-disk format: ``store`` (one snapshot's records, written by many processes at once;
  :class:`SnapshotFullError` / :class:`SnapshotFullWarning` when the disk is full), ``shard``
  (the files: records with their checksums, the sealed index, ``meta.json``), ``codec`` (values
  to bytes and back without pickle, arrays aligned for zero-copy reads; compression),
  ``locations`` (the in-memory index of where each record lives);
* ``source``: the shared by-position reader of flows (also used by the data service, which reads
  this layer and is never imported by it).

``SnapshotFullError`` and ``SnapshotFullWarning`` are imported from ``store`` on first use.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from dataflow.snapshot.data import SnapshotData, StaleSnapshotError
from dataflow.snapshot.determinism import NondeterministicError

__all__ = ["NondeterministicError", "SnapshotData", "SnapshotFullError", "SnapshotFullWarning",
           "StaleSnapshotError", "snapshot"]

_FROM_STORE = ("SnapshotFullError", "SnapshotFullWarning")


def __getattr__(name: str) -> Any:
    if name in _FROM_STORE:
        from dataflow.snapshot import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def snapshot(ds: Any, path: Any, **kwargs: Any) -> Any:
    """``ds`` with its longest deterministic prefix replaced by a :class:`SnapshotData` under
    ``path``: see :func:`dataflow.snapshot.cut.snapshot`."""
    from dataflow.snapshot.cut import snapshot as cut

    return cut(ds, path, **kwargs)


class _CallablePackage(types.ModuleType):
    """The package's class: calling the package calls :func:`snapshot`."""

    def __call__(self, ds: Any, path: Any, **kwargs: Any) -> Any:
        return snapshot(ds, path, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
