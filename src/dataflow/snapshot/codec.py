"""The snapshot's record encoding: datapoints to bytes and back, without pickle.

A payload is a *skeleton* followed by the arrays' data::

    u32 skeleton length | skeleton | zero padding to 64 | array 0 | padding to 64 | array 1 | ...

The skeleton is a depth-first walk of the value, one tag byte per node:

====  ================================================================================
tag   node
====  ================================================================================
N T F None, True, False
i     int64 (``<q``); ``I``: an int beyond int64 (u32 length, signed little-endian bytes)
f     float (``<d``)
s b   str (u32 length, UTF-8), bytes (u32 length, raw)
l t   list, tuple (u32 count, then the items)
d     dict (u32 count, then key, value, key, value ...)
a     NumPy array: dtype, u8 ndim, ndim x ``<q`` shape; its data is the next array block
g     NumPy scalar: dtype, then ``itemsize`` raw bytes
====  ================================================================================

A dtype is written as u16 length + text: ``dtype.str`` (``'<f4'``, ``'|b1'``, ``'<U5'``,
``'<M8[s]'``), or ``'J'`` + the JSON of NumPy's ``.npy`` descr for structured dtypes.

Array blocks start at multiples of 64 bytes from the payload's start, which the store places at
a multiple of 64 in its file: decoded arrays are zero-copy, aligned, read-only views of the
buffer they are decoded from (a memory map). Every type is kept exactly: list vs tuple, a
``np.float32`` scalar vs a Python float, dtypes and shapes. Object arrays, and values of other
types (sets, class instances, subclasses of the containers), are refused with a ``TypeError``
that names the index and the place in the datapoint.
"""

from __future__ import annotations

import json
import struct
import threading
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np

__all__ = ["ALIGN", "CODECS", "align", "compress", "decode", "decompress", "encode", "load_codec"]

ALIGN = 64
_MASK = ALIGN - 1
_ZEROS = bytes(ALIGN)
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_SHAPES = [struct.Struct(f"<{n}q") for n in range(65)]  # NumPy allows 64 dimensions


def align(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGN`."""
    return (n + ALIGN - 1) & ~(ALIGN - 1)


class _RefusedError(Exception):
    """A value that cannot be stored; ``path`` is filled in on the way out of the walk."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.what, self.fix = what, fix
        self.path: list[str] = []


def _refuse_dtype(dt: np.dtype) -> _RefusedError:
    return _RefusedError(f"an array of dtype {dt}", "convert it to an array of numbers, bools or "
                    "strings (e.g. np.asarray(a, dtype=np.float32))")


class _Encoder:
    """One value's skeleton (a list of byte strings) and its array blocks, in walk order."""

    __slots__ = ("arrays", "out")

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.arrays: list[np.ndarray] = []

    def dtype(self, dt: np.dtype) -> None:
        if dt.hasobject:
            raise _refuse_dtype(dt)
        if dt.names is None and dt.subdtype is None:
            text = dt.str
        else:
            text = "J" + json.dumps(np.lib.format.dtype_to_descr(dt))
        raw = text.encode()
        self.out.append(_U16.pack(len(raw)) + raw)

    def walk(self, x: Any) -> None:
        out = self.out
        t = type(x)
        if t is list or t is tuple:
            out.append((b"l" if t is list else b"t") + _U32.pack(len(x)))
            for k, v in enumerate(x):
                try:
                    self.walk(v)
                except _RefusedError as e:
                    e.path.append(f"[{k}]")
                    raise
        elif t is int:
            if _INT64_MIN <= x <= _INT64_MAX:
                out.append(b"i" + _I64.pack(x))
            else:
                raw = x.to_bytes((x.bit_length() + 8) // 8, "little", signed=True)
                out.append(b"I" + _U32.pack(len(raw)) + raw)
        elif t is dict:
            out.append(b"d" + _U32.pack(len(x)))
            for k, v in x.items():
                try:
                    self.walk(k)
                except _RefusedError as e:
                    e.path.append(f"<the key {k!r}>")
                    raise
                try:
                    self.walk(v)
                except _RefusedError as e:
                    e.path.append(f"[{k!r}]")
                    raise
        elif isinstance(x, np.ndarray):  # subclasses (np.memmap, np.matrix) come back as arrays
            if isinstance(x, np.ma.MaskedArray):
                raise _RefusedError("a masked array", "store its data and mask as two arrays")
            out.append(b"a")
            self.dtype(x.dtype)
            out.append(bytes((x.ndim,)) + _SHAPES[x.ndim].pack(*x.shape))
            self.arrays.append(np.ascontiguousarray(x))
        elif x is None:
            out.append(b"N")
        elif t is bool:
            out.append(b"T" if x else b"F")
        elif t is float:
            out.append(b"f" + _F64.pack(x))
        elif t is str or t is bytes:
            raw = x.encode("utf-8", "surrogatepass") if t is str else x
            out.append((b"s" if t is str else b"b") + _U32.pack(len(raw)) + raw)
        elif isinstance(x, np.generic):
            out.append(b"g")
            self.dtype(x.dtype)
            out.append(np.asarray(x).tobytes())
        else:
            raise _RefusedError(f"a value of type {t.__module__}.{t.__qualname__}",
                           "convert it to one of those types (a namedtuple to a tuple, a set "
                           "to a sorted list, an object to a dict of its fields)")


def encode(value: Any, index: int) -> tuple[list[Any], int]:
    """``value`` as a list of buffers to write one after another (the skeleton, padding and
    the arrays' memory, not copied), and their total length in bytes (a multiple of 64)."""
    enc = _Encoder()
    try:
        enc.walk(value)
    except _RefusedError as e:
        where = "".join(reversed(e.path)) or "the top"
        raise TypeError(
            f"SnapshotStore: the value at index {index} holds {e.what} at {where}; a snapshot "
            "stores lists, tuples, dicts, NumPy arrays and scalars, int, float, bool, None, str "
            f"and bytes (no pickle): {e.fix}, or put this part of the pipeline after the "
            "snapshot."
        ) from None
    skeleton = b"".join(enc.out)
    head = _U32.pack(len(skeleton)) + skeleton
    n = align(len(head))
    parts: list[Any] = [head, _ZEROS[: n - len(head)]]
    for a in enc.arrays:
        nbytes = a.nbytes
        if nbytes:
            parts.append(a.reshape(-1).view(np.uint8))
        pad = align(nbytes) - nbytes
        if pad:
            parts.append(_ZEROS[:pad])
        n += nbytes + pad
    return parts, n


@lru_cache(maxsize=1024)
def _dtype(raw: bytes) -> np.dtype:
    text = raw.decode()
    if text.startswith("J"):
        return np.lib.format.descr_to_dtype(_tuples(json.loads(text[1:])))
    return np.dtype(text)


def _tuples(descr: Any) -> Any:
    """JSON's lists back into the tuples of a structured descr (``[(name, format), ...]``)."""
    if isinstance(descr, list):
        return [tuple(_tuples(f) for f in field) if isinstance(field, list) else field
                for field in descr]
    return descr


class _Decoder:
    """Reads one skeleton (``skel``) and takes array data from ``buf`` at ``cursor``."""

    __slots__ = ("buf", "cursor", "skel")

    def __init__(self, skel: bytes, buf: Any, cursor: int) -> None:
        self.skel, self.buf, self.cursor = skel, buf, cursor

    def read(self, pos: int) -> tuple[Any, int]:
        skel = self.skel
        tag = skel[pos]
        if tag == 97 or tag == 103:  # a, g: array, NumPy scalar
            n = skel[pos + 1] | skel[pos + 2] << 8
            pos += 3 + n
            dt = _dtype(skel[pos - n: pos])
            if tag == 103:
                return np.frombuffer(skel, dt, 1, pos)[0], pos + dt.itemsize
            ndim = skel[pos]
            shape = _SHAPES[ndim].unpack_from(skel, pos + 1)
            pos += 1 + 8 * ndim
            nbytes = prod(shape) * dt.itemsize
            if nbytes:
                arr = np.ndarray(shape, dt, self.buf, self.cursor)  # a view of the buffer
                self.cursor += (nbytes + _MASK) & ~_MASK
            else:
                arr = np.empty(shape, dt)
                arr.flags.writeable = False
            return arr, pos
        pos += 1
        if tag == 108 or tag == 116:  # l, t: list, tuple
            n = _U32.unpack_from(skel, pos)[0]
            pos += 4
            items = []
            for _ in range(n):
                v, pos = self.read(pos)
                items.append(v)
            return (items if tag == 108 else tuple(items)), pos
        if tag == 105:  # i: int64
            return _I64.unpack_from(skel, pos)[0], pos + 8
        if tag == 100:  # d: dict
            n = _U32.unpack_from(skel, pos)[0]
            pos += 4
            out = {}
            for _ in range(n):
                k, pos = self.read(pos)
                out[k], pos = self.read(pos)
            return out, pos
        if tag == 102:  # f: float
            return _F64.unpack_from(skel, pos)[0], pos + 8
        if tag == 115 or tag == 98 or tag == 73:  # s, b, I: str, bytes, big int
            n = _U32.unpack_from(skel, pos)[0]
            raw = skel[pos + 4: pos + 4 + n]
            if tag == 115:
                return raw.decode("utf-8", "surrogatepass"), pos + 4 + n
            if tag == 98:
                return raw, pos + 4 + n
            return int.from_bytes(raw, "little", signed=True), pos + 4 + n
        if tag == 78:
            return None, pos
        if tag == 84 or tag == 70:
            return tag == 84, pos
        raise ValueError(f"unknown tag {tag!r} at byte {pos - 1} of a snapshot record")


def decode(buf: Any, start: int = 0) -> Any:
    """The value encoded at ``buf[start:]`` (arrays are read-only views of ``buf``)."""
    n = _U32.unpack_from(buf, start)[0]
    skel = bytes(buf[start + 4: start + 4 + n])  # (already bytes for an mmap or bytes)
    value, end = _Decoder(skel, buf, start + ((4 + n + _MASK) & ~_MASK)).read(0)
    if end != n:
        raise ValueError(f"a snapshot record's skeleton ends at byte {end}, expected {n}")
    return value


#: payload compression: the name a user gives -> the id kept in each record's header
CODECS = {None: 0, "lz4": 1, "zstd": 2}
_MODULES = {1: ("lz4.block", "compression='lz4'"), 2: ("zstandard", "compression='zstd'")}
_codec_state = threading.local()
_loaded: dict[int, Any] = {}


def load_codec(codec: int) -> Any:
    """The module that (de)compresses with ``codec`` (imported on first use), or an
    ImportError naming the extra that installs it."""
    mod = _loaded.get(codec)
    if mod is None:
        from dataflow._optional import import_optional

        module, what = _MODULES[codec]
        mod = _loaded[codec] = import_optional(module, f"SnapshotStore({what})")
    return mod


def compress(codec: int, data: Any) -> bytes:
    if codec == 1:
        return load_codec(1).compress(data, store_size=False)
    zc = getattr(_codec_state, "zc", None)
    if zc is None:  # a compressor is not shared between threads
        zc = _codec_state.zc = load_codec(2).ZstdCompressor(level=3)
    return zc.compress(data)


def decompress(codec: int, data: Any, raw_len: int) -> bytes:
    if codec == 1:
        return load_codec(1).decompress(data, uncompressed_size=raw_len)
    zd = getattr(_codec_state, "zd", None)
    if zd is None:
        zd = _codec_state.zd = load_codec(2).ZstdDecompressor()
    return zd.decompress(data, max_output_size=raw_len)
