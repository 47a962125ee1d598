"""The scheme table: which client serves a URL (:func:`client_for`). A client's module is
imported when a URL of its scheme is first read.

:func:`check_url` and :func:`check_storage` check URLs and ``storage_options`` before anything
is read, so that a typo in a scheme (``htp://``) or an option (``endpoint``) is reported at
once, naming the parameter, instead of failing later inside a storage library.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from dataflow._optional import extra_hint
from dataflow.streaming.storage.base import StorageClient
from dataflow.streaming.urls import LOCAL, scheme_of

__all__ = ["FALLBACK", "SCHEMES", "check_storage", "check_url", "client_for"]


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
                check_url(url)
                client = cache[key] = _new_client(scheme, storage_options or {}, timeout)
        return client
    check_url(url)
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


def _client_class(scheme: str) -> type[StorageClient]:
    module, name = SCHEMES.get(scheme, FALLBACK)
    cls: type[StorageClient] = getattr(importlib.import_module(module), name)
    return cls


def _new_client(scheme: str, options: Mapping[str, Any], timeout: float) -> StorageClient:
    return _client_class(scheme).from_options(scheme, options, timeout)


def _fsspec_schemes() -> list[str] | None:
    """The schemes fsspec knows (its registered and its known implementations, whether or not
    their packages are installed), or None without fsspec."""
    try:
        import fsspec
    except ImportError:
        return None
    return sorted(str(p) for p in fsspec.available_protocols())


def check_url(url: str, param: str = "url") -> None:
    """Raise a ValueError naming ``param`` if no client reads ``url``'s scheme: not one of
    :data:`SCHEMES` nor one that fsspec knows. Without fsspec, a scheme close to one of ours
    (a typo) is refused; any other is left to the fsspec client, whose ImportError names the
    extra to install."""
    scheme = scheme_of(url)
    if scheme in SCHEMES:
        return
    fsspec_schemes = _fsspec_schemes()
    if fsspec_schemes is not None and scheme in fsspec_schemes:
        return
    ours = sorted(SCHEMES)
    close = difflib.get_close_matches(scheme, ours + (fsspec_schemes or []), n=1)
    if fsspec_schemes is None and not difflib.get_close_matches(scheme, ours, n=1):
        return
    fix = f"did you mean {close[0]!r}?" if close else "check the scheme of the URL."
    if fsspec_schemes is None:
        others = ("other schemes (gs, az, hf, ...) need fsspec, which is not installed: "
                  f"{extra_hint('streaming')}")
    else:
        others = "through fsspec: " + ", ".join(s for s in fsspec_schemes if s not in SCHEMES)
    raise ValueError(
        f"`{param}`: {url!r} has the scheme {scheme!r}, which no storage client reads; {fix} "
        f"Supported schemes: plain paths and {', '.join(s + '://' for s in ours)}; {others}."
    )


def check_storage(urls: Iterable[str], storage_options: Mapping[str, Any] | None,
                  param: str = "urls") -> None:
    """Check every URL's scheme (:func:`check_url`, naming ``param``) and, once per scheme,
    that its client takes ``storage_options`` (each client's ``check_options``)."""
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise TypeError(
            f"`storage_options` must be a dict, got {type(storage_options).__name__}"
        )
    seen: set[str] = set()
    for url in urls:
        scheme = scheme_of(url)
        if scheme in seen:
            continue
        check_url(url, param)
        seen.add(scheme)
        if storage_options:
            _client_class(scheme).check_options(scheme, storage_options)
