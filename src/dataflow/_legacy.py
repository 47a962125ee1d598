"""Old module paths: one table, and the one import hook that serves it.

Code written for tensorpack imports its DataFlow modules by tensorpack's file names
(``dataflow.common``, ``dataflow.raw``, ``dataflow.image``, ...); code written for the standalone
``dataflow`` package imports them under ``dataflow.dataflow.<path>``; and objects pickled by an
earlier version of this package name the modules their classes lived in then. Each of these
names imports the module that holds the code now: the same module object under both names
(not a copy), so classes, ``isinstance`` and pickles agree, and nothing but this table knows the
old names. Paths this project documents as its own (``dataflow.torch``, ``dataflow.jpeg``,
``dataflow.streaming.storage``, ``dataflow.parallel.shared_memory``, ...) are real modules, not
entries here, so type checkers see them.

This module imports nothing of the package: :mod:`dataflow` installs the hook when it loads.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

__all__ = ["LEGACY", "PREFIXES", "install", "real_name"]

#: old module path -> the module that holds its code now
LEGACY: dict[str, str] = {
    # tensorpack's module paths
    "dataflow.common": "dataflow.wrappers",
    "dataflow.raw": "dataflow.sources",
    "dataflow.format": "dataflow.serialize",
    "dataflow.image": "dataflow.wrappers.image",
    "dataflow.parallel_map": "dataflow.parallel",
    "dataflow.remote": "dataflow.parallel.remote",
    "dataflow.input_source.input_source": "dataflow.input_source",
    "dataflow.input_source.input_source_base": "dataflow.input_source.base",
    # this package's own earlier paths of modules that moved (pickles made before name them)
    "dataflow._protobuf": "dataflow.serialize._protobuf",
    "dataflow.parallel._autotune": "dataflow.parallel.autotuning.stage",
    "dataflow.parallel._budget": "dataflow.parallel.autotuning.budget",
    "dataflow.parallel._controller": "dataflow.parallel.autotuning.controller",
    "dataflow.parallel._ring": "dataflow.parallel.shared_memory._ring",
    "dataflow.parallel._segments": "dataflow.parallel.shared_memory._segments",
    "dataflow.parallel._shm_reaper": "dataflow.parallel.shared_memory._reaper",
    "dataflow.parallel._shm_space": "dataflow.parallel.shared_memory._space",
    "dataflow.streaming._fsspec": "dataflow.streaming.storage._fsspec",
    "dataflow.streaming._http": "dataflow.streaming.storage._http",
    "dataflow.streaming._s3": "dataflow.streaming.storage._s3",
}

#: old package path -> the package it names: the standalone ``dataflow`` package keeps its
#: DataFlow modules under ``dataflow.dataflow`` (``dataflow.dataflow.base``, ``.imgaug``, ...)
PREFIXES: dict[str, str] = {"dataflow.dataflow": "dataflow"}


def real_name(name: str) -> str | None:
    """The module that the old path ``name`` names, or None if ``name`` is no old path."""
    found = None
    for _ in range(8):  # an old path may lead to another (dataflow.dataflow.common)
        if name in LEGACY:
            name = LEGACY[name]
        else:
            for old, new in PREFIXES.items():
                if name == old or name.startswith(old + "."):
                    name = new + name[len(old):]
                    break
            else:
                return found
        found = name
    raise ImportError(f"the old module path table loops at {name!r}")  # (a bad table entry)


class _LegacyFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path as the module that holds its code now."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        real = real_name(fullname)
        if real is None or (real not in sys.modules and importlib.util.find_spec(real) is None):
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # the real module: the import system files it under the old name too and, its
        # attributes being set already, leaves its __name__ and __spec__ as they are
        real = real_name(spec.name)
        assert real is not None
        return importlib.import_module(real)

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # already executed under its own name


def install() -> None:
    """Put the hook first on ``sys.meta_path`` (once): before the path finder, which would
    otherwise find nothing, or a second copy of a package under the old prefix."""
    if not any(isinstance(f, _LegacyFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _LegacyFinder())
