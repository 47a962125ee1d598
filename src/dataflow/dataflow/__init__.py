"""The standalone ``dataflow`` package's path of its DataFlow modules: ``dataflow.dataflow``.

That package (synced from tensorpack) keeps its DataFlow modules under ``dataflow.dataflow``
(``dataflow.dataflow.base``, ``.common``, ``.raw``, ``.format``, ``.image``, ``.parallel``,
``.parallel_map``, ``.remote``, ``.serialize``, ``.imgaug``, ``.dataset``, ...). Here every
``dataflow.dataflow.<name>`` *is* the module ``dataflow.<name>`` (the same module object, so the
same classes, not copies): an import finder maps the names, and submodules load when first
imported or accessed, as at the top level. This package's own names are those of
:mod:`dataflow`, with the same ``__all__``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

import dataflow as _top

_PREFIX = __name__ + "."
_TOP = "dataflow."

__all__ = list(_top.__all__)

# the top level's names, except its lazily loaded submodules (they load on first access)
globals().update({name: getattr(_top, name) for name in __all__
                  if name not in _top._STAR_SUBMODULES})


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``dataflow.dataflow.<path>`` as the module ``dataflow.<path>`` itself."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if not fullname.startswith(_PREFIX):
            return None
        if importlib.util.find_spec(_TOP + fullname[len(_PREFIX):]) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # the real module: the import system files it under the alias name too, and (module
        # attributes already set) leaves its __name__ and __spec__ as they are
        return importlib.import_module(_TOP + spec.name[len(_PREFIX):])

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # already executed under its own name


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())  # before the path finder: no second copy


def __getattr__(name: str) -> Any:
    if not name.startswith("_"):
        try:
            return importlib.import_module(_PREFIX + name)
        except ModuleNotFoundError as e:
            if e.name not in (_PREFIX + name, _TOP + name):
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
