"""HTTP(S) with range requests over the standard library's ``http.client``.

A pool shared by the threads keeps idle keep-alive connections per host; a connection is put
back only when its body was read to the end (an abandoned or failed body closes it, so no
stale bytes reach the next request). The standard library's client is used, not urllib3
(which is built on it): no dependency, and the pool here is all the pooling needed. A
side-by-side measurement of the two is not done yet.
"""

from __future__ import annotations

import http.client
import re
import threading
import urllib.parse
import warnings
from collections.abc import Mapping
from typing import Any

from dataflow.streaming.storage.base import (
    RangeBody,
    StorageClient,
    TransientError,
    shutdown_socket,
)

__all__ = ["EmptyBody", "HTTPClient"]

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_Conn = http.client.HTTPConnection
_Key = tuple[str, str, int]


def _split(url: str) -> tuple[_Key, str]:
    p = urllib.parse.urlsplit(url)
    scheme = p.scheme.lower()
    port = p.port or (443 if scheme == "https" else 80)
    path = p.path or "/"
    if p.query:
        path += "?" + p.query
    return (scheme, p.hostname or "", port), path


#: the hosts (scheme, host, port) already warned of ignoring Range requests, in this process
_IGNORED_RANGE: set[_Key] = set()
_ignored_range_lock = threading.Lock()


def _warn_ignored_range(key: _Key, url: str, rng: str) -> None:
    """Warn, once per host and process, that the server of ``url`` answered the whole object
    (200) to a request for the bytes ``rng``: the data stay right (the range is cut out of
    the answer), but every rank then downloads far more than its own samples."""
    with _ignored_range_lock:
        if key in _IGNORED_RANGE:
            return
        _IGNORED_RANGE.add(key)
    host = f"{key[1]}:{key[2]}"
    warnings.warn(
        f"dataflow: the HTTP server {host} ignores Range requests (it answered 200 with the "
        f"whole object to 'Range: {rng}' for {url}). The samples stay right, but every "
        "range request now downloads the shard from its first byte to the range's end, so "
        "each rank reads about whole shards, some several times, instead of its own samples' "
        "ranges. Serve the shards with a server that supports Range requests: nginx, Apache, "
        "Caddy, an object store (S3, MinIO), or "
        "`pip install rangehttpserver; python -m RangeHTTPServer` instead of "
        "`python -m http.server`; or pass cache_dir= so that each node downloads each shard "
        "once.",
        RuntimeWarning,
        stacklevel=2,
    )


def raise_for_status(status: int, reason: str, url: str) -> None:
    """Raise the error that an HTTP status means (nothing for 2xx)."""
    if 200 <= status < 300:
        return
    text = f"HTTP {status} {reason} for {url}"
    if status == 404:
        raise FileNotFoundError(text)
    if status in (401, 403):
        raise PermissionError(text)
    if status == 429 or status >= 500 or status == 408:
        raise TransientError(text)
    raise OSError(text)


class _HTTPBody:
    def __init__(self, client: HTTPClient, key: _Key, conn: _Conn,
                 resp: http.client.HTTPResponse, skip: int, length: int | None,
                 total: int | None) -> None:
        self._client, self._key, self._conn, self._resp = client, key, conn, resp
        self.total = total
        self._left = length  # bytes still due from the answer (None: until it closes)
        self._skip = skip  # bytes to drop first (a server that ignored the Range header)
        self._done = False

    def read(self, n: int) -> bytes:
        while self._skip:
            dropped = self._resp.read(min(self._skip, 1 << 20))
            if not dropped:
                raise TransientError("the answer ended before the requested range")
            self._skip -= len(dropped)
        if self._left is not None:
            n = min(n, self._left)
        if n <= 0:
            self._finish(reuse=True)
            return b""
        data = self._resp.read1(n) if hasattr(self._resp, "read1") else self._resp.read(n)
        if not data:
            if self._left:  # http.client returns b"" on a short body instead of raising
                self._finish(reuse=False)
                raise TransientError(f"the body ended {self._left} bytes early")
            self._finish(reuse=False)
            return b""
        if self._left is not None:
            self._left -= len(data)
            if self._left == 0:
                self._finish(reuse=True)
        return data

    def _finish(self, reuse: bool) -> None:
        if self._done:
            return
        self._done = True
        if reuse and not self._resp.will_close and self._resp.read(1) == b"":
            self._client._put(self._key, self._conn)
        else:
            self._client._drop(self._conn)

    def abort(self) -> None:
        shutdown_socket(self._conn.sock)

    def close(self) -> None:
        if not self._done:  # unread bytes remain: the connection cannot be reused
            self._done = True
            self._client._drop(self._conn)


class HTTPClient(StorageClient):
    """``http://`` and ``https://`` objects, read with ``Range`` requests."""

    scheme = "http"

    @classmethod
    def from_options(cls, scheme: str, options: Mapping[str, Any], timeout: float
                     ) -> HTTPClient:
        return cls(timeout=timeout, headers=options.get("headers"))

    def __init__(self, timeout: float = 30.0, headers: Mapping[str, str] | None = None) -> None:
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._idle: dict[_Key, list[_Conn]] = {}  # kept-alive connections, free to reuse
        self._all: set[_Conn] = set()  # every connection not yet closed
        self._lock = threading.Lock()

    def _get(self, key: _Key) -> _Conn:
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop()
        cls = http.client.HTTPSConnection if key[0] == "https" else http.client.HTTPConnection
        conn = cls(key[1], key[2], timeout=self._timeout)
        with self._lock:
            self._all.add(conn)
        return conn

    def _put(self, key: _Key, conn: _Conn) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(conn)

    def _drop(self, conn: _Conn) -> None:
        conn.close()
        with self._lock:
            self._all.discard(conn)

    def _request(self, method: str, url: str, headers: dict[str, str]
                 ) -> tuple[_Key, _Conn, http.client.HTTPResponse]:
        key, path = _split(url)
        for attempt in (0, 1):
            conn = self._get(key)
            try:
                conn.request(method, path, headers={**self._headers, **headers})
                return key, conn, conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop(conn)
                if attempt:  # a kept-alive connection the server had closed: one fresh try
                    raise
            except BaseException:
                self._drop(conn)
                raise
        raise AssertionError("unreachable")

    def size(self, url: str) -> int:
        key, conn, resp = self._request("HEAD", url, {})
        resp.read()
        if resp.will_close:
            self._drop(conn)
        else:
            self._put(key, conn)
        raise_for_status(resp.status, resp.reason, url)
        length = resp.getheader("Content-Length")
        if length is None:
            raise OSError(f"{url}: the server sends no Content-Length, so its size is unknown")
        return int(length)

    def open_range(self, url: str, start: int, end: int | None) -> RangeBody:
        if end is not None and end <= start:
            return EmptyBody(start)
        rng = f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"
        key, conn, resp = self._request("GET", url, {"Range": rng})
        if resp.status == 416:  # the range starts at or past the end
            resp.read()
            self._drop(conn)
            return EmptyBody(start)
        try:
            raise_for_status(resp.status, resp.reason, url)
        except OSError:
            self._drop(conn)
            raise
        length_h = resp.getheader("Content-Length")
        length = int(length_h) if length_h is not None else None
        skip, total = 0, None
        if resp.status == 206:
            m = _CONTENT_RANGE.match(resp.getheader("Content-Range") or "")
            if m and m.group(3) != "*":
                total = int(m.group(3))
        else:  # 200: the whole object, whatever the Range said; the range is cut out here
            skip, total = start, length
            if start or (end is not None and (length is None or end < length)):
                _warn_ignored_range(key, url, rng)
            if length is not None and start >= length:
                resp.close()
                self._drop(conn)
                return EmptyBody(length)
            if length is not None:
                length = (length if end is None else min(end, length)) - start
            elif end is not None:  # no Content-Length: read the range's bytes, no further
                length = end - start
        return _HTTPBody(self, key, conn, resp, skip, length, total)

    def close(self) -> None:
        with self._lock:
            conns, self._all = list(self._all), set()
            self._idle.clear()
        for c in conns:
            c.close()


class EmptyBody:
    """The body of a range that starts at or past the object's end (``total``: the range's
    start, an upper bound of the size that ends the range there)."""

    def __init__(self, total: int) -> None:
        self.total: int | None = total

    def read(self, n: int) -> bytes:
        return b""

    def close(self) -> None:
        pass
