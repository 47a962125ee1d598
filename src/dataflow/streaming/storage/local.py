"""Local files (plain paths and ``file://``) as a storage client.
"""

from __future__ import annotations

import os

from dataflow.streaming.storage.base import RangeBody, StorageClient
from dataflow.streaming.urls import LOCAL, strip_file_scheme

__all__ = [
    "LocalClient",
]


class _FileBody:
    def __init__(self, path: str, start: int, end: int | None) -> None:
        self._f = open(path, "rb")  # noqa: SIM115  (closed by close())
        self.total: int | None = os.fstat(self._f.fileno()).st_size
        self._f.seek(start)
        stop = self.total if end is None else min(end, self.total)
        self._left = max(0, stop - start)

    def read(self, n: int) -> bytes:
        if self._left <= 0:
            return b""
        data = self._f.read(min(n, self._left))
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._f.close()


class LocalClient(StorageClient):
    """Plain paths and ``file://`` URLs."""

    scheme = LOCAL

    def size(self, url: str) -> int:
        return os.stat(strip_file_scheme(url)).st_size

    def open_range(self, url: str, start: int, end: int | None) -> RangeBody:
        return _FileBody(strip_file_scheme(url), start, end)
