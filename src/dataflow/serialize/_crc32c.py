"""CRC32C (Castagnoli) in NumPy, vectorized over many buffers, for TFRecord framing.

No C extension is needed. A batch of buffers is front-padded with zeros to whole blocks of
``B`` bytes (zeros before the data do not change a CRC whose register is 0), the initial
register ``0xFFFFFFFF`` is folded into the data by inverting each buffer's first four bytes,
and all blocks are run in parallel, four bytes per step, through two 65536-entry tables. Each
block's CRC is then moved to the end of its buffer by "append n zero bytes" operators (linear
maps over GF(2), applied with four 256-entry tables) and XOR-reduced per buffer.

Throughput is a few hundred MB/s on large batches, which keeps TFRecord writing I/O-bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

__all__ = ["crc32c", "crc32c_many", "masked_crc32c_lengths", "masked_crc32c_many"]

_POLY = 0x82F63B78
_MASK_DELTA = 0xA282EAD8
_U32 = np.uint32


def _bit_steps(x: np.ndarray, n: int) -> np.ndarray:
    poly = _U32(_POLY)
    zero = _U32(0)
    for _ in range(n):
        x = (x >> _U32(1)) ^ np.where(x & _U32(1), poly, zero)
    return x


@cache
def _byte_table() -> np.ndarray:
    return _bit_steps(np.arange(256, dtype=_U32), 8)


@cache
def _word_tables() -> tuple[np.ndarray, np.ndarray]:
    idx = np.arange(65536, dtype=_U32)
    return _bit_steps(idx, 32), _bit_steps(idx << _U32(16), 32)


class _Op:
    """A linear map on the 32-bit register: "append ``n`` zero bytes"."""

    __slots__ = ("cols", "tables")

    def __init__(self, cols: list[int]) -> None:
        self.cols = cols
        v = np.arange(256, dtype=_U32)
        tables = []
        for j in range(4):
            t = np.zeros(256, dtype=_U32)
            for bit in range(8):
                t ^= np.where((v >> _U32(bit)) & _U32(1), _U32(cols[8 * j + bit]), _U32(0))
            tables.append(t)
        self.tables = tables

    def apply_int(self, x: int) -> int:
        out = 0
        for b in range(32):
            if (x >> b) & 1:
                out ^= self.cols[b]
        return out

    def apply(self, x: np.ndarray) -> np.ndarray:
        t0, t1, t2, t3 = self.tables
        m = _U32(255)
        return t0[x & m] ^ t1[(x >> _U32(8)) & m] ^ t2[(x >> _U32(16)) & m] ^ t3[x >> _U32(24)]

    def then(self, other: _Op) -> _Op:
        """The map ``other(self(x))``."""
        return _Op([other.apply_int(c) for c in self.cols])


@cache
def _zeros_pow2(k: int) -> _Op:
    """Append ``2**k`` zero bytes."""
    if k == 0:
        table = _byte_table()
        return _Op([int(table[(1 << b) & 0xFF]) ^ ((1 << b) >> 8) for b in range(32)])
    half = _zeros_pow2(k - 1)
    return half.then(half)


@cache
def _zeros_op(n: int) -> _Op:
    """Append ``n`` zero bytes (``n >= 1``)."""
    op = None
    k = 0
    while n:
        if n & 1:
            op = _zeros_pow2(k) if op is None else op.then(_zeros_pow2(k))
        n >>= 1
        k += 1
    assert op is not None
    return op


def _crc_small(buf: bytes) -> int:
    table = _byte_table()
    crc = 0xFFFFFFFF
    for byte in bytes(buf):
        crc = int(table[(crc ^ byte) & 0xFF]) ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c_many(bufs: Sequence[bytes | memoryview]) -> np.ndarray:
    """The CRC32C of every buffer in ``bufs``, as a ``uint32`` array."""
    n = len(bufs)
    out = np.zeros(n, dtype=_U32)
    lens = [len(b) for b in bufs]
    big = [i for i, size in enumerate(lens) if size >= 4]
    for i, size in enumerate(lens):
        if size < 4:
            out[i] = _crc_small(bytes(bufs[i]))
    if not big:
        return out
    # Block size: large blocks mean fewer blocks to shift and combine; but a buffer is padded
    # to whole blocks, so the block follows the mean length (mixed sizes waste little).
    mean = sum(lens[i] for i in big) // len(big)
    block = min(256, (mean + 3) // 4 * 4)
    nblk = np.array([(lens[i] + block - 1) // block for i in big], dtype=np.int64)
    total_blocks = int(nblk.sum())
    zeros = bytes(block)
    parts: list[bytes | memoryview] = []
    for i, nb in zip(big, nblk.tolist()):
        parts.append(zeros[: nb * block - lens[i]])
        parts.append(bufs[i])
    raw = np.frombuffer(bytearray().join(parts), dtype=np.uint8)  # one (writable) copy
    ends = np.cumsum(nblk) * block
    starts = ends - np.array([lens[i] for i in big], dtype=np.int64)
    raw[(starts[:, None] + np.arange(4)).ravel()] ^= np.uint8(0xFF)  # fold in init 0xFFFFFFFF
    words = raw.view("<u4").reshape(total_blocks, block // 4).T  # row j: word j of each block
    ta, tb = _word_tables()
    crc = np.zeros(total_blocks, dtype=_U32)
    x = np.empty_like(crc)
    lo = np.empty_like(crc)
    tmp = np.empty_like(crc)
    for row in words:
        np.bitwise_xor(crc, row, out=x)
        np.bitwise_and(x, _U32(0xFFFF), out=lo)
        np.right_shift(x, _U32(16), out=x)
        np.take(ta, lo, out=crc)
        np.take(tb, x, out=tmp)
        crc ^= tmp
    # distance (in blocks) from each block to the last block of its buffer
    first_block = np.cumsum(nblk) - nblk
    owner = np.repeat(np.arange(len(big)), nblk)
    dist = (first_block + nblk - 1)[owner] - np.arange(total_blocks)
    k = 0
    max_dist = int(dist.max()) if total_blocks else 0
    while (1 << k) <= max_dist:
        sel = np.flatnonzero(dist & (1 << k))
        if sel.size:
            crc[sel] = _zeros_op(block << k).apply(crc[sel])
        k += 1
    res = np.bitwise_xor.reduceat(crc, first_block) ^ _U32(0xFFFFFFFF)
    out[np.array(big)] = res
    return out


def crc32c(buf: bytes | memoryview) -> int:
    """The CRC32C of one buffer."""
    return int(crc32c_many([buf])[0])


def mask(crc: np.ndarray) -> np.ndarray:
    """TFRecord's checksum masking: rotate right by 15 and add a constant (mod 2**32)."""
    crc = crc.astype(_U32)
    return ((crc >> _U32(15)) | (crc << _U32(17))) + _U32(_MASK_DELTA)


def masked_crc32c_many(bufs: Sequence[bytes | memoryview]) -> np.ndarray:
    """The masked CRC32C (TFRecord's record checksums) of every buffer."""
    return mask(crc32c_many(bufs))


def masked_crc32c_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """The masked CRC32C of each length as 8 little-endian bytes (TFRecord length headers),
    computed on all of them at once without building byte strings."""
    words = np.asarray(lengths, dtype="<u8").view("<u4").reshape(-1, 2)
    ta, tb = _word_tables()
    crc = np.zeros(len(words), dtype=_U32)
    init = _U32(0xFFFFFFFF)
    for j in range(2):
        x = crc ^ words[:, j]
        if j == 0:
            x ^= init
        crc = ta[x & _U32(0xFFFF)] ^ tb[x >> _U32(16)]
    return mask(crc ^ init)
