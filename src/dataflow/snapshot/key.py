"""The key of a snapshot: a stable digest of what its outputs depend on.

A snapshot of ``map_func(ds[i])`` lives under ``path/<key>/``. The key digests three things:

* **the source** (:func:`source_parts`): for in-memory items (a list, ``DataFromList``,
  ``NumpyData``) their content; for file-backed flows (LMDB, HDF5, a dataset's directory) the
  names, sizes and modification times of their files; a string item that names an existing file
  (a file list) counts with its size and modification time too. A source may say its identity
  itself with a method ``snapshot_identity()`` returning plain values (JSON types).
* **the function** (:func:`function_parts`): its code (byte code, constants, names, nested
  code objects), defaults, keyword defaults, closure values, and the module-level values it
  reads; recursively for the functions and classes it calls that live in the user's modules.
  A function of the standard library or of an installed package stands for itself by its
  qualified name and the package's version; a built-in stage of this library by the library's
  version.
* **the library's version** (built-in stages), in every key.

Nothing here uses ``id()``, ``hash()`` of strings (randomized per process by
``PYTHONHASHSEED``), addresses or the time: the same pipeline gives the same key in a new
process, on another rank, on another day. The parts are kept by name (``"func:decode.code"``,
``"func:decode.global:SCALE"``, ``"source.files"``) so that :func:`explain_change` can say which
one changed (:mod:`dataflow.snapshot.explain`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import os
import pickle
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from dataflow._version import __version__

__all__ = ["function_parts", "make_key", "source_parts", "value_digest"]

#: digest length in hex characters (80 bits: collisions are not a concern at any scale here)
KEY_CHARS = 20
#: how many files a source's identity stats at most (past it: names and count only)
MAX_STATS = 20_000
#: attributes of a flow that are iteration state, not identity (counters, streams, handles)
_STATE_WORDS = ("epoch", "pos", "done", "resume", "token", "seed", "shuffle", "rng", "itr",
                "replay", "probe", "guard", "restored", "stream", "pinned", "env", "cursor")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:KEY_CHARS]


# ---- where a module lives -----------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(sorted(os.path.realpath(r) for r in roots if r))


def _package_version(module_name: str) -> str | None:
    """``"<top package> <version>"`` for a module of the standard library or of an installed
    package (it stands for its code), ``None`` for the user's own modules."""
    top = module_name.partition(".")[0]
    if top == "__main__":
        return None
    if top == "dataflow":
        return f"dataflow {__version__}"
    if top in sys.stdlib_module_names or top == "builtins":
        return f"python {sys.version_info[0]}.{sys.version_info[1]}"
    module = sys.modules.get(module_name) or sys.modules.get(top)
    file = getattr(module, "__file__", None)
    if file is None:  # built into the interpreter, or a namespace package
        return f"python {sys.version_info[0]}.{sys.version_info[1]}" if module else None
    real = os.path.realpath(file)
    if "site-packages" not in real and "dist-packages" not in real and not any(
            real.startswith(root + os.sep) for root in _library_roots()):
        return None
    import importlib.metadata

    try:
        return f"{top} {importlib.metadata.version(top)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{top} {getattr(sys.modules.get(top), '__version__', '?')}"


# ---- values -------------------------------------------------------------------------------------

class _Walk:
    """One digest computation: the parts found so far, the objects being walked (a cycle
    guard, never part of a digest) and the stat budget."""

    def __init__(self) -> None:
        self.parts: dict[str, str] = {}
        self.active: set[int] = set()
        self.stats_left = MAX_STATS
        self.functions: set[int] = set()
        self.files = ""  # which strings count as files: "", "files" (items), "all" (+ folders)


def _file_identity(path: str, walk: _Walk) -> list[Any]:
    """``[name, size, mtime_ns]`` of a file, or of each file under a directory."""
    if os.path.isdir(path):
        out: list[Any] = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                if walk.stats_left <= 0:
                    out.append(os.path.relpath(full, path))
                    continue
                out.append(_file_identity(full, walk))
        return [os.path.basename(os.path.normpath(path)), out]
    walk.stats_left -= 1
    st = os.stat(path)
    return [os.path.basename(path), st.st_size, st.st_mtime_ns]


def _is_file(value: str, walk: _Walk) -> bool:
    if not walk.files or walk.stats_left <= 0 or not value or len(value) > 4096 or (
            "\0" in value):
        return False
    walk.stats_left -= 1  # (a look that finds nothing costs a system call too)
    try:
        return os.path.isfile(value) or (walk.files == "all" and os.path.isdir(value))
    except (OSError, ValueError):
        return False


def _encode(value: Any, walk: _Walk, name: str) -> Any:
    """``value`` as plain JSON values that change when it does (arrays and large items by
    their sha256), functions and classes through :func:`_callable_parts`."""
    if value is None or isinstance(value, bool | int | float):
        return [type(value).__name__, repr(value)]
    if isinstance(value, str):
        if _is_file(value, walk):
            return ["file", value, _file_identity(value, walk)]
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return ["bytes", _sha(bytes(value))]
    if isinstance(value, np.generic):
        return ["np", str(value.dtype), _sha(value.tobytes())]
    if isinstance(value, np.ndarray):
        data = value.tobytes() if value.dtype != object else pickle.dumps(value.tolist())
        return ["array", str(value.dtype), list(value.shape), _sha(data)]
    if isinstance(value, types.ModuleType):
        return ["module", value.__name__, _package_version(value.__name__) or "user"]
    if isinstance(value, type | types.FunctionType | types.MethodType | types.BuiltinFunctionType
                  ) or _is_partial(value):
        return ["callable", _callable_parts(value, walk, name)]
    if id(value) in walk.active:
        return ["cycle", type(value).__qualname__]
    walk.active.add(id(value))
    try:
        if isinstance(value, list | tuple):
            return [type(value).__name__, [_encode(v, walk, f"{name}[{k}]")
                                           for k, v in enumerate(value)]]
        if isinstance(value, set | frozenset):
            return ["set", sorted(json.dumps(_encode(v, walk, name)) for v in value)]
        if isinstance(value, dict):
            items = [[_encode(k, walk, name), _encode(v, walk, _member(name, k))]
                     for k, v in value.items()]
            return ["dict", sorted(items, key=json.dumps)]
        identity = getattr(value, "snapshot_identity", None)
        if callable(identity) and not isinstance(value, type):
            return ["identity", _class_name(type(value)), _encode(identity(), walk, name)]
        if hasattr(value, "__dict__") or hasattr(type(value), "__slots__"):
            return ["object", _callable_parts(type(value), walk, name), _object_state(value, walk,
                                                                                       name)]
        try:
            return ["pickle", _class_name(type(value)), _sha(pickle.dumps(value, protocol=4))]
        except Exception:  # an object that cannot be pickled: its type stands for it
            return ["opaque", _class_name(type(value))]
    finally:
        walk.active.discard(id(value))


def _member(name: str, key: Any) -> str:
    """The part name of a dict entry or an attribute: ``name.attr``, ``name[key]``."""
    if isinstance(key, str) and key.isidentifier():
        return f"{name}.{key}"
    return f"{name}[{key!r}]" if isinstance(key, str | int) else name


def _object_state(obj: Any, walk: _Walk, name: str) -> Any:
    """An object's attributes (``__dict__`` and slots), without iteration state."""
    state: dict[str, Any] = dict(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if isinstance(slot, str) and hasattr(obj, slot) and slot not in state:
                state[slot] = getattr(obj, slot)
    keep = {k: v for k, v in state.items()
            if not any(w in k.lower() for w in _STATE_WORDS) and k not in ("_rng_path",)}
    return _encode(keep, walk, name)


def value_digest(value: Any) -> str:
    """A stable digest of a plain value (arrays, containers, functions by their code)."""
    return _sha(json.dumps(_encode(value, _Walk(), "value")).encode())


def _feed_items(h: Any, value: Any, walk: _Walk) -> None:
    """Hash a source's items into ``h`` as :func:`_encode` would describe them, without
    building the description (a list of a million file names in about a second)."""
    if value is None or (isinstance(value, bool | int | float) and not isinstance(
            value, np.generic)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, str):
        if _is_file(value, walk):
            h.update(json.dumps(_file_identity(value, walk)).encode())
        data = value.encode("utf-8", "surrogatepass")
        h.update(b"s%d:" % len(data))
        h.update(data)
    elif isinstance(value, bytes):
        h.update(b"b%d:" % len(value))
        h.update(value)
    elif isinstance(value, list | tuple):
        h.update(b"%s%d[" % (type(value).__name__.encode(), len(value)))
        for v in value:
            _feed_items(h, v, walk)
        h.update(b"]")
    else:
        h.update(json.dumps(_encode(value, walk, "source")).encode())


_PLAIN = frozenset({str, int, float, bool, type(None), bytes})


def _all_plain(items: list[Any]) -> bool:
    """Whether every item is a plain value or a list/tuple of them (checked at C speed)."""
    kinds = set(map(type, items))
    if kinds <= _PLAIN:
        return True
    if kinds <= {list, tuple}:
        return set(map(type, itertools.chain.from_iterable(items))) <= _PLAIN
    return False


def _items_digest(items: Any, walk: _Walk) -> str:
    """The digest of a source's items; items of plain values (file names and labels) at the
    speed of ``repr``, with the files among their first strings by size and mtime."""
    h = hashlib.sha256()
    items = list(items)
    if _all_plain(items):
        h.update(b"plain:")
        h.update(repr(items).encode("utf-8", "surrogatepass"))
        for item in items:
            if walk.stats_left <= 0:
                break
            for v in (item if isinstance(item, list | tuple) else (item,)):
                if isinstance(v, str) and _is_file(v, walk):
                    h.update(json.dumps(_file_identity(v, walk)).encode())
        return h.hexdigest()[:KEY_CHARS]
    for item in items:
        _feed_items(h, item, walk)
    return h.hexdigest()[:KEY_CHARS]


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_partial(value: Any) -> bool:
    return isinstance(value, functools.partial)


# ---- functions ----------------------------------------------------------------------------------

def _code_digest(code: types.CodeType, walk: _Walk, name: str) -> tuple[str, list[str]]:
    """The digest of a code object (byte code, constants, names; nested code objects
    recursively), and every name it and its nested code objects read."""
    consts: list[Any] = []
    names = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            sub, sub_names = _code_digest(c, walk, name)
            consts.append(["code", sub])
            names += sub_names
        else:
            consts.append(_encode(c, walk, name))
    body = [code.co_code.hex(), consts, list(code.co_names), code.co_argcount,
            code.co_kwonlyargcount, code.co_flags, list(code.co_freevars)]
    return _sha(json.dumps(body).encode()), names


def _callable_parts(fn: Any, walk: _Walk, name: str) -> str:
    """Record the parts of a callable under ``name`` and return its own digest."""
    if isinstance(fn, functools.partial):
        return _sha(json.dumps(["partial", _callable_parts(fn.func, walk, f"{name}.func"),
                                _encode(list(fn.args), walk, name),
                                _encode(dict(fn.keywords), walk, name)]).encode())
    if isinstance(fn, types.MethodType):
        return _sha(json.dumps(["method", _callable_parts(fn.__func__, walk, name),
                                _encode(fn.__self__, walk, f"{name}.self")]).encode())
    if isinstance(fn, type):
        return _class_parts(fn, walk, name)
    module = getattr(fn, "__module__", None) or type(fn).__module__
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    key = f"{module}.{qualname}"
    if not isinstance(fn, types.FunctionType):  # a callable object: its class and its state
        if hasattr(fn, "__dict__") or hasattr(type(fn), "__slots__"):
            return _sha(json.dumps(["callable object", _class_parts(type(fn), walk, name),
                                    _object_state(fn, walk, name)]).encode())
        try:  # (operator.itemgetter(1), a ufunc: its pickle holds what it does)
            state = _sha(pickle.dumps(fn, protocol=4))
        except Exception:
            state = "opaque"
        return f"{key} ({_package_version(module) or 'user'}) {state}"
    version = _package_version(module)
    if version is not None:  # the library or the standard library: its version stands for
        cells = []  # its code; what a factory of it closed over counts (its values)
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            with contextlib.suppress(ValueError):  # (an empty cell)
                cells.append([var, _part(cell.cell_contents, walk, f"{name}.closure:{var}")])
        return f"{key} ({version})" + (f" {_sha(json.dumps(cells).encode())}" if cells else "")
    if id(fn) in walk.functions:  # (recursion: already being recorded)
        return key
    walk.functions.add(id(fn))
    parts = walk.parts
    code, names = _code_digest(fn.__code__, walk, name)
    parts[f"{name}.code"] = code
    if fn.__defaults__:
        parts[f"{name}.defaults"] = _sha(json.dumps(_encode(list(fn.__defaults__), walk,
                                                            name)).encode())
    if fn.__kwdefaults__:
        parts[f"{name}.kwdefaults"] = _sha(json.dumps(_encode(fn.__kwdefaults__, walk,
                                                              name)).encode())
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a name assigned later)
            continue
        parts[f"{name}.closure:{var}"] = _part(value, walk, f"{name}.closure:{var}")
    fglobals = fn.__globals__
    for gname in sorted(set(names)):
        if gname not in fglobals:
            continue
        value = fglobals[gname]
        if isinstance(value, types.ModuleType) and _package_version(value.__name__) is None:
            # a user's module: the attributes of it that the code reads count
            for attr in sorted(set(names)):
                if attr in vars(value) and not attr.startswith("__"):
                    parts[f"{name}.global:{gname}.{attr}"] = _part(
                        vars(value)[attr], walk, f"{name}.global:{gname}.{attr}")
            continue
        parts[f"{name}.global:{gname}"] = _part(value, walk, f"{name}.global:{gname}")
    return _sha(json.dumps({k: v for k, v in parts.items() if k.startswith(name)}).encode())


def _class_parts(cls: type, walk: _Walk, name: str) -> str:
    """A user class: the digest of its functions (methods, properties) and class values."""
    version = _package_version(cls.__module__)
    if version is not None:
        return f"{_class_name(cls)} ({version})"
    body: list[Any] = [_class_name(cls)]
    for klass in cls.__mro__:
        if _package_version(klass.__module__) is not None:
            body.append(f"{_class_name(klass)} ({_package_version(klass.__module__)})")
            continue
        for attr, value in sorted(vars(klass).items()):
            if attr.startswith("__") and attr not in ("__call__", "__init__", "__getitem__"):
                continue
            if isinstance(value, staticmethod | classmethod):
                value = value.__func__
            if isinstance(value, property):
                value = value.fget
            sub = f"{name}.{klass.__qualname__}.{attr}"
            body.append([attr, _part(value, walk, sub)])
    return _sha(json.dumps(body).encode())


def _part(value: Any, walk: _Walk, name: str) -> str:
    """A value's digest; a function's parts are recorded under ``name`` too."""
    if isinstance(value, types.FunctionType | types.MethodType | type) or _is_partial(value):
        return _callable_parts(value, walk, name)
    return _sha(json.dumps(_encode(value, walk, name)).encode())


def function_parts(fn: Callable[..., Any] | None, label: str = "func") -> dict[str, str]:
    """The named parts of ``fn``'s digest (see the module docstring); ``{}`` for ``None``."""
    if fn is None:
        return {}
    walk = _Walk()
    own = _callable_parts(fn, walk, label)
    walk.parts[label] = own
    return dict(sorted(walk.parts.items()))


def source_parts(ds: Any) -> dict[str, str]:
    """The named parts of a source's identity: its class and its content or files."""
    walk = _Walk()
    kind = _class_name(type(ds))
    version = _package_version(type(ds).__module__)
    parts = {"source.type": kind if version is None else f"{kind} ({version})"}
    from dataflow.sources import DataFromList

    walk.files = "files"
    if isinstance(ds, DataFromList):
        parts["source.items"] = _items_digest(ds.lst, walk)
    elif callable(getattr(ds, "snapshot_identity", None)):
        parts["source.identity"] = _sha(json.dumps(_encode(ds.snapshot_identity(), walk,
                                                           "source")).encode())
    elif isinstance(ds, list | tuple):
        parts["source.items"] = _items_digest(ds, walk)
    else:
        walk.files = "all"
        state = _object_state(ds, walk, "source")
        parts["source.state"] = _sha(json.dumps(state).encode())
    return parts


def make_key(parts: dict[str, str]) -> str:
    """The key of a snapshot: the digest of its named parts and the library's version."""
    body = {**parts, "library": f"dataflow {__version__}"}
    return _sha(json.dumps(body, sort_keys=True).encode())
