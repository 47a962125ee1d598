"""The scheme table: which client serves a URL (:func:`client_for`). A client's module is
imported when a URL of its scheme is first read.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from typing import Any

from dataflow.streaming.storage.base import StorageClient
from dataflow.streaming.urls import LOCAL, scheme_of

__all__ = ["FALLBACK", "SCHEMES", "client_for"]


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


#: scheme -> (the module of its client, the client's class). Every other scheme goes through
#: fsspec (:data:`FALLBACK`). A client module imports only :mod:`.base`, never this table.
SCHEMES: dict[str, tuple[str, str]] = {
    LOCAL: ("dataflow.streaming.storage.local", "LocalClient"),
    "http": ("dataflow.streaming.storage._http", "HTTPClient"),
    "https": ("dataflow.streaming.storage._http", "HTTPClient"),
    "s3": ("dataflow.streaming.storage._s3", "S3Client"),
    "s3a": ("dataflow.streaming.storage._s3", "S3Client"),
}
FALLBACK = ("dataflow.streaming.storage._fsspec", "FsspecClient")


def _new_client(scheme: str, options: Mapping[str, Any], timeout: float) -> StorageClient:
    module, name = SCHEMES.get(scheme, FALLBACK)
    cls: type[StorageClient] = getattr(importlib.import_module(module), name)
    return cls.from_options(scheme, options, timeout)
