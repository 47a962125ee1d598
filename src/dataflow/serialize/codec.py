"""Bytes <-> datapoint codecs used by the serializers: pickle (default) and msgpack.

* ``"pickle"`` (default): pickle protocol 5, what tensorpack >= 0.9.9 writes (its
  ``protocol=-1`` is 5 on Python >= 3.8). It keeps tuples, every NumPy dtype and any picklable
  object. NumPy arrays and scalars are pickled through public names (``numpy.ndarray``,
  ``numpy.float32``, ...) instead of NumPy 2's private ``numpy._core``, so NumPy 1.x (e.g.
  tensorpack in an old environment) can read the files too; it is also faster to load.
  Pickles written by NumPy 1.x refer to ``numpy.core.*``; :func:`loads` maps those to
  ``numpy._core.*`` on NumPy 2 (without deprecation warnings).
* ``"msgpack"``: msgpack with NumPy support (``msgpack_numpy`` encode/decode hooks, passed per
  call, never the global ``msgpack_numpy.patch()``), ``use_bin_type=True``. This is what
  tensorpack 0.8.9 - 0.9.8 wrote to LMDB/TFRecord files. msgpack turns tuples into lists.

:func:`loads` detects the codec from the first byte (a pickle of protocol >= 2 starts with
``0x80`` followed by the protocol number), so files written by either codec load.

Security: unpickling runs code chosen by whoever wrote the bytes. Load only trusted files.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CODECS", "dumps", "get_dumps", "get_loads", "loads"]

CODECS = ("pickle", "msgpack")
PICKLE_PROTOCOL = 5
_MAX_LEN = 2**31 - 1

_pickle_dumps = pickle.dumps
_pickle_loads = pickle.loads


def _check_codec(codec: Any, allow_auto: bool = False) -> str:
    choices = (*CODECS, "auto") if allow_auto else CODECS
    if codec not in choices:
        raise ValueError(
            f"`codec` must be one of {', '.join(map(repr, choices))}, got {codec!r}; "
            "use 'pickle' (the default, what tensorpack >= 0.9.9 writes) or 'msgpack'."
        )
    return codec


def _reduce_array(a: Any) -> Any:
    """Rebuild through ``numpy.ndarray(shape, dtype, buffer, 0, None, order)``: public names
    that every NumPy version resolves, and about 2x faster to load than NumPy's own reduce for
    small arrays. The buffer is a ``bytearray``, so loaded arrays are writable."""
    import numpy as np

    dt = a.dtype
    if dt.hasobject or dt.names is not None or dt.subdtype is not None:
        # an empty array whose __setstate__ restores dtype, shape and data (a list for objects)
        return (np.ndarray, ((0,), np.uint8), a.__reduce__()[2])
    if a.flags.c_contiguous:
        order, flat = "C", a
    elif a.flags.f_contiguous:
        order, flat = "F", a.T
    else:
        order, flat = "C", np.ascontiguousarray(a)
    # in-band PickleBuffer: one copy, loaded as a bytearray (so the array is writable)
    data = pickle.PickleBuffer(flat) if flat.flags.writeable and flat.size else bytearray(flat.data)
    return (np.ndarray, (a.shape, dt.str, data, 0, None, order))


def _reduce_scalar(s: Any) -> Any:
    return (type(s), (s.item(),))


_table: dict[type, Any] | None = None
_local = threading.local()


def _dispatch_table() -> dict[type, Any]:
    global _table
    if _table is None:
        import numpy as np

        table = copyreg.dispatch_table.copy()
        table[np.ndarray] = _reduce_array
        for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                  np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
                  np.complex128):  # fmt: skip
            table[t] = _reduce_scalar
        _table = table
    return _table


class _Pickler(pickle.Pickler):
    dispatch_table: Any = None  # set on first use by _pickler_class()


_REUSE_LIMIT = 1 << 16


def _pickler_class() -> type[pickle.Pickler]:
    if _Pickler.dispatch_table is None:
        _Pickler.dispatch_table = _dispatch_table()
    return _Pickler


def dump_pickle(obj: Any, file: Any) -> None:
    """Pickle ``obj`` into the binary ``file`` like :func:`dumps` (streaming)."""
    _pickler_class()(file, PICKLE_PROTOCOL).dump(obj)


def _dumps_pickle(obj: Any) -> bytes:
    """``pickle.dumps(obj, 5)`` with NumPy-version-independent arrays.

    A per-thread pickler is reused for small outputs (cheaper than a new one per call); after
    a large output (whose memo table may have grown, making ``clear_memo`` slow), or inside a
    nested call, a fresh one is used.
    """
    state = getattr(_local, "pickler", None)
    if state is None or _local.busy:
        buf = io.BytesIO()
        _pickler_class()(buf, PICKLE_PROTOCOL).dump(obj)
        out = buf.getvalue()
        if state is None and len(out) <= _REUSE_LIMIT:
            fresh = io.BytesIO()
            _local.pickler, _local.busy = (fresh, _pickler_class()(fresh, PICKLE_PROTOCOL)), False
        return out
    buf, pickler = state
    buf.seek(0)
    buf.truncate()
    pickler.clear_memo()
    _local.busy = True
    try:
        pickler.dump(obj)
    except BaseException:
        _local.pickler = None  # a failed dump may leave the pickler half-way
        raise
    finally:
        _local.busy = False
    out = buf.getvalue()
    if len(out) > _REUSE_LIMIT:
        _local.pickler = None
    return out


class _NumPy1Unpickler(pickle.Unpickler):
    """Resolves NumPy 1.x's ``numpy.core.*`` globals to NumPy 2's ``numpy._core.*``."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "numpy.core" or module.startswith("numpy.core."):
            import numpy as np

            if int(np.__version__.split(".")[0]) >= 2:
                module = "numpy._core" + module[len("numpy.core") :]
        return super().find_class(module, name)


def load_pickle(file: Any) -> Any:
    """Unpickle from a binary ``file``, resolving NumPy 1.x globals (see :func:`loads`)."""
    return _NumPy1Unpickler(file).load()


def _loads_pickle(buf: Any) -> Any:
    """``pickle.loads``, reading NumPy 1.x pickles on NumPy 2 without deprecation warnings."""
    if b"numpy.core" in buf:
        return _NumPy1Unpickler(io.BytesIO(buf)).load()
    return _pickle_loads(buf)


def _dumps_msgpack(obj: Any) -> bytes:
    import msgpack
    import msgpack_numpy

    return msgpack.packb(obj, default=msgpack_numpy.encode, use_bin_type=True)


def _loads_msgpack(buf: Any) -> Any:
    import msgpack
    import msgpack_numpy

    limits = dict.fromkeys(("max_bin_len", "max_str_len", "max_array_len", "max_map_len",
                            "max_ext_len"), _MAX_LEN)
    return msgpack.unpackb(buf, object_hook=msgpack_numpy.decode, raw=False,
                           strict_map_key=False, **limits)


def is_pickle(buf: Any) -> bool:
    """Whether ``buf`` looks like a pickle of protocol >= 2 (``0x80``, then the protocol)."""
    return len(buf) > 1 and buf[0] == 0x80 and 2 <= buf[1] <= 5


def _loads_auto(buf: Any) -> Any:
    if is_pickle(buf):
        return _loads_pickle(buf)
    return _loads_msgpack(buf)


_DUMPS = {"pickle": _dumps_pickle, "msgpack": None}


def get_dumps(codec: str = "pickle") -> Callable[[Any], bytes]:
    """The encoder function of ``codec`` (``"pickle"`` or ``"msgpack"``)."""
    return _DUMPS[_check_codec(codec)] or _dumps_msgpack


def get_loads(codec: str = "auto") -> Callable[[Any], Any]:
    """The decoder function of ``codec``; ``"auto"`` sniffs every buffer.

    ``"pickle-fast"`` is plain ``pickle.loads`` (for pickles known to come from NumPy >= 2);
    ``"pickle"`` also reads NumPy 1.x pickles on NumPy 2.
    """
    if codec == "pickle-fast":
        return _pickle_loads
    codec = _check_codec(codec, allow_auto=True)
    if codec == "pickle":
        return _loads_pickle
    if codec == "msgpack":
        return _loads_msgpack
    return _loads_auto


def sniff_codec(buf: Any) -> str:
    """The fastest decoder name for data like ``buf``: ``"pickle-fast"`` (a pickle without
    NumPy 1.x globals), ``"pickle"`` or ``"msgpack"``."""
    if not is_pickle(buf):
        return "msgpack"
    return "pickle" if b"numpy.core" in buf else "pickle-fast"


def dumps(obj: Any, codec: str = "pickle") -> bytes:
    """Serialize ``obj`` to ``bytes`` with ``codec`` (``"pickle"`` protocol 5, or ``"msgpack"``).

    Raises:
        TypeError: ``obj`` cannot be serialized; the message names its type.
    """
    try:
        return get_dumps(codec)(obj)
    except (pickle.PicklingError, TypeError, AttributeError, ValueError) as e:
        if isinstance(e, ValueError) and "codec" in str(e):
            raise
        raise TypeError(
            f"cannot serialize an object of type {type(obj).__name__} with codec {codec!r}: {e}. "
            "Datapoints must hold picklable values (arrays, numbers, str, bytes, lists, dicts); "
            "convert other objects (lambdas, open files, locks) before saving."
        ) from e


def loads(buf: Any, codec: str = "auto") -> Any:
    """Deserialize bytes written by :func:`dumps` (or by tensorpack's ``dumps``).

    ``codec="auto"`` (default) detects pickle vs msgpack from the first bytes.
    """
    return get_loads(codec)(buf)
