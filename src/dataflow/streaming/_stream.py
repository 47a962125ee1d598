"""The reader side of a download: a binary file-like whose ``read(n)`` waits only for the
bytes it returns."""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any

from dataflow.errors import ShardReadError

if TYPE_CHECKING:
    from dataflow.streaming._download import Download

__all__ = ["ShardStream"]


class ShardStream(io.BufferedIOBase):
    """Bytes ``[start, end)`` of one object, read sequentially as they arrive.

    ``read(n)`` returns ``n`` bytes unless the range ends first (then fewer; ``b""`` at its
    end); ``read1(n)`` returns what has arrived (at least one byte). ``tell()`` is the offset
    in the object. A failed download raises :class:`~dataflow.errors.ShardReadError`.
    """

    def __init__(self, state: Any, download: Download, start: int, end: int | None) -> None:
        super().__init__()
        self._st = state
        self._d = download
        self._pos = start
        self._end = end
        self.name = download.url
        with state.shared.cond:
            if download.claim is not None:
                download.consume_to(start, state.shared)

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def _stop(self) -> int | None:
        d = self._d
        if self._end is None:
            return d.end
        return self._end if d.end is None else min(self._end, d.end)

    def read1(self, size: int = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on a closed ShardStream")
        sh = self._st.shared
        d = self._d
        with sh.cond:
            while True:
                stop = self._stop()
                if stop is not None and self._pos >= stop:
                    return b""
                if d.received > self._pos:
                    break
                if d.claim is not None and d.consumed < self._pos:
                    # a file-backed download resolved after this stream opened: the bytes
                    # before this reader's offset stop holding the budget
                    d.consume_to(self._pos, sh)
                    sh.cond.notify_all()
                if d.error is not None:
                    raise d.error
                if sh.closed:
                    raise ValueError("the ShardFetcher of this stream is closed")
                if d.done:
                    if d.end is None or d.cancelled:
                        return b""
                    raise ShardReadError(d.url, d.received, EOFError("the download stopped"))
                d.waiting += 1  # a reader waits on these bytes: the budget lets them come
                sh.cond.notify_all()
                sh.cond.wait()
                d.waiting -= 1
            n = d.received - self._pos
            if stop is not None:
                n = min(n, stop - self._pos)
            if size is not None and size >= 0:
                n = min(n, size)
            if d.claim is None:  # memory: the bytes are consumed in order
                if d.consumed < self._pos:
                    d.take(self._pos - d.consumed, sh)
                data = d.take(n, sh)
                self._pos += len(data)
                sh.cond.notify_all()
                return data
            fd = d.claim.fd
        data = os.pread(fd, n, self._pos)
        with sh.cond:
            self._pos += len(data)
            d.consume_to(self._pos, sh)
            sh.cond.notify_all()
        return data

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            parts: list[bytes] = []
            while True:
                data = self.read1(1 << 24)
                if not data:
                    return b"".join(parts)
                parts.append(data)
        first = self.read1(size)
        if len(first) == size or not first:
            return first
        parts = [first]
        got = len(first)
        while got < size:
            data = self.read1(size - got)
            if not data:
                break
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)

    def readinto1(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self.read1(len(view))
        view[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if self.closed:
            return
        st, d = self._st, self._d
        with st.shared.cond:
            d.readers -= 1
            if d.claim is None:  # memory: nobody else will read these bytes
                d.cancelled = True
                d.detach(st.shared)
            elif d.readers == 0:
                d.detach(st.shared)
                if d.done:
                    st._forget(d)
            st.schedule()
            st.shared.cond.notify_all()
        super().close()
