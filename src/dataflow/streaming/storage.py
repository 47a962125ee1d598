"""Storage clients: one small interface over local files, HTTP(S), S3 and fsspec's schemes.

A client answers two questions about an object named by a URL: its size, and the bytes of a
range, as a body that is read progressively (``read(n)`` returns what arrived, ``b""`` at the
end of the range). It does not retry: a failure that a retry may cure (a timeout, a reset
connection, a 5xx or 429 answer, S3's ``SlowDown``) is raised as :class:`TransientError`, a
missing object as ``FileNotFoundError``, a refused one as ``PermissionError``; the fetcher
(:mod:`dataflow.streaming.fetch`) decides what to retry and resumes where the bytes stopped.

Which client serves a URL (:func:`client_for`): plain paths and ``file://`` read the file;
``http://`` and ``https://`` use the standard library's ``http.client`` with keep-alive
connections (``dataflow.streaming._http``); ``s3://`` uses boto3 (``dataflow.streaming._s3``,
extra ``s3``); any other scheme goes through fsspec (extra ``streaming``; ``gs://`` needs
gcsfs, extra ``gcs``; ``az://`` adlfs, extra ``azure``). ``storage_options`` are passed to
the client (for S3: ``endpoint_url``, ``region_name``, credentials; otherwise the standard AWS
chain: environment variables, ``~/.aws/config`` and ``~/.aws/credentials``, and
``AWS_ENDPOINT_URL``). Their values are never logged nor shown in a repr.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Protocol

from dataflow.streaming.urls import LOCAL, scheme_of, strip_file_scheme

__all__ = [
    "LocalClient",
    "RangeBody",
    "StorageClient",
    "TransientError",
    "client_for",
    "is_transient",
    "shutdown_socket",
]


class TransientError(OSError):
    """A failure that a later attempt may not meet: a timeout, a reset connection, a 5xx or
    429 answer, S3's ``SlowDown``, a body that ended early."""


def is_transient(exc: BaseException) -> bool:
    """Whether a retry may cure ``exc`` (missing objects and refused permissions are final)."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    return isinstance(
        exc, (TransientError, TimeoutError, socket.timeout, ConnectionError,
              http.client.HTTPException)
    )


def shutdown_socket(sock: socket.socket | None) -> None:
    """Wake a read blocked on ``sock`` in another thread (the fetcher is closing)."""
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class RangeBody(Protocol):
    """The bytes of one range, read progressively."""

    #: the size of the whole object when the answer says it, else None
    total: int | None

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (at least one unless the range is exhausted: then ``b""``)."""
        ...

    def close(self) -> None:
        """Release the connection or file (idempotent)."""
        ...


class StorageClient(ABC):
    """Reads objects of one scheme. Thread-safe: the fetcher's threads share one client."""

    scheme: str = ""

    @abstractmethod
    def size(self, url: str) -> int:
        """The size of the object in bytes."""

    @abstractmethod
    def open_range(self, url: str, start: int, end: int | None) -> RangeBody:
        """A body with bytes ``[start, end)`` of the object (``end=None``: to its end)."""

    def close(self) -> None:  # noqa: B027  (most clients hold nothing to release)
        """Release pooled connections (idempotent)."""

    def __repr__(self) -> str:  # never the options: they may hold credentials
        return f"<{type(self).__name__} scheme={self.scheme!r}>"


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


_clients_lock = threading.Lock()


def client_for(
    url: str, storage_options: Mapping[str, Any] | None = None, timeout: float = 30.0,
    cache: dict[str, StorageClient] | None = None,
) -> StorageClient:
    """The client that reads ``url``; with ``cache``, one client per scheme is kept there and
    reused (its connections pooled)."""
    scheme = scheme_of(url)
    key = "http" if scheme in ("http", "https") else scheme
    if cache is not None:
        with _clients_lock:
            client = cache.get(key)
            if client is None:
                client = cache[key] = _new_client(scheme, storage_options or {}, timeout)
        return client
    return _new_client(scheme, storage_options or {}, timeout)


def _new_client(scheme: str, options: Mapping[str, Any], timeout: float) -> StorageClient:
    if scheme == LOCAL:
        return LocalClient()
    if scheme in ("http", "https"):
        from dataflow.streaming._http import HTTPClient

        return HTTPClient(timeout=timeout, headers=options.get("headers"))
    if scheme in ("s3", "s3a"):
        from dataflow.streaming._s3 import S3Client

        return S3Client(options, timeout=timeout)
    from dataflow.streaming._fsspec import FsspecClient

    return FsspecClient(scheme, options, timeout=timeout)
