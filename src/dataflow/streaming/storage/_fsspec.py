"""Any scheme fsspec knows (``gs://`` with gcsfs, ``az://`` with adlfs, ``hf://``, ...), read
in ranged chunks through the filesystem's ``open`` (extra ``streaming``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dataflow._optional import extra_hint, import_optional
from dataflow.streaming.storage.base import RangeBody, StorageClient, TransientError

__all__ = ["FsspecClient"]


class _FsspecBody:
    def __init__(self, f: Any, start: int, end: int | None, total: int) -> None:
        self._f = f
        self.total: int | None = total
        f.seek(start)
        self._left = (total if end is None else min(end, total)) - start

    def read(self, n: int) -> bytes:
        if self._left <= 0:
            return b""
        try:
            data = self._f.read(min(n, self._left))
        except (FileNotFoundError, PermissionError):
            raise
        except OSError as e:
            raise TransientError(f"{type(e).__name__}: {e}") from e
        self._left -= len(data)
        return bytes(data)

    def close(self) -> None:
        self._f.close()


class FsspecClient(StorageClient):
    """Objects of ``scheme`` through ``fsspec.filesystem(scheme, **storage_options)``."""

    @classmethod
    def from_options(cls, scheme: str, options: Mapping[str, Any], timeout: float
                     ) -> FsspecClient:
        return cls(scheme, options, timeout=timeout)

    def __init__(self, scheme: str, options: Mapping[str, Any], timeout: float = 30.0) -> None:
        fsspec = import_optional("fsspec", f"reading {scheme}:// URLs")
        self.scheme = scheme
        try:
            self._fs = fsspec.filesystem(scheme, **dict(options))
        except ImportError as e:
            extra = {"gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure"}.get(scheme)
            hint = extra_hint(extra) if extra else str(e)
            raise ImportError(f"reading {scheme}:// URLs needs fsspec's backend: {hint}") from e

    def size(self, url: str) -> int:
        try:
            return int(self._fs.size(url))
        except (FileNotFoundError, PermissionError):
            raise
        except OSError as e:
            raise TransientError(f"{url}: {type(e).__name__}: {e}") from e

    def open_range(self, url: str, start: int, end: int | None) -> RangeBody:
        total = self.size(url)
        f = self._fs.open(url, "rb", block_size=1 << 22, cache_type="none")
        return _FsspecBody(f, start, end, total)
