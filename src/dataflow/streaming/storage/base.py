"""The interface every storage client implements (:class:`StorageClient`, whose ranges are read
as a :class:`RangeBody`), and the errors it raises: :class:`TransientError` for a failure that a
retry may cure. A client imports this module only, never the scheme table.
"""

from __future__ import annotations

import http.client
import socket
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["RangeBody", "StorageClient", "TransientError", "is_transient", "shutdown_socket"]


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

    @classmethod
    def from_options(cls, scheme: str, options: Mapping[str, Any], timeout: float
                     ) -> StorageClient:
        """The client for URLs of ``scheme``, from the user's ``storage_options`` and the read
        ``timeout`` in seconds (what the scheme table calls)."""
        return cls()

    @classmethod  # noqa: B027  (the default takes any options)
    def check_options(cls, scheme: str, options: Mapping[str, Any]) -> None:
        """Raise a ValueError naming ``storage_options`` and the offending key if the client
        of ``scheme`` cannot take ``options`` (never showing a value: they may hold
        credentials). The default takes any options."""

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
