"""The background prefetching fetcher: shard bytes downloaded ahead, within a byte budget.

::

    f = ShardFetcher(prefetch_bytes=256 << 20)
    f.prefetch([(url, 0, None), (url2, 0, None)])  # upcoming reads, in plan order
    with f.open(url) as s:                           # readable as soon as bytes arrive
        header = s.read(512)
    f.close()

Each download runs in a background thread (at most ``concurrency`` hinted downloads at once,
started in plan order while the bytes received and not yet read stay under
``prefetch_bytes``). ``open()`` takes over the hinted download of the same ``(url, start,
end)``, or starts one at once; an opened download keeps going even when the budget is spent
(up to a few MB ahead of its reader), so a reader never waits on the hints. Memory held is thus
at most ``prefetch_bytes`` plus a few MB per open stream. A hint that is never opened holds its
bytes until ``close()``: hint what you read.

Failures that a retry may cure (timeouts, resets, 5xx, 429, S3's ``SlowDown``, a body that
ends early) are retried ``retries`` times in a row with exponential backoff and full jitter,
resuming at the first byte not received; then, or for a final failure (a missing object), the
reader gets :class:`~dataflow.errors.ShardReadError` naming the URL and the offset.

With ``cache_dir``, whole objects are downloaded into a cache directory shared by the processes
of a node (see :mod:`dataflow.streaming.cache`) and read from there while they grow.

``close()`` ends every thread (also run when the fetcher is garbage-collected and at interpreter
exit); it is idempotent, and the fetcher is a context manager.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from dataflow.errors import ShardReadError
from dataflow.streaming._download import Download, Shared, follow_download, run_download
from dataflow.streaming._stream import ShardStream
from dataflow.streaming.storage import StorageClient, check_storage, client_for, is_transient
from dataflow.streaming.urls import scheme_of
from dataflow.validation import check_seconds

__all__ = ["ShardFetcher", "ShardReadError"]

Range = tuple[str, int, "int | None"]


def _check_int(name: str, value: Any, minimum: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"`{name}` must be an integer >= {minimum}{' or None' if allow_none else ''}, got "
            f"{type(value).__name__}: {value!r}"
        )


class _State:
    """Everything the threads touch (the fetcher itself stays collectable)."""

    def __init__(self, shared: Shared, options: Mapping[str, Any], timeout: float,
                 concurrency: int, cache: Any) -> None:
        self.shared = shared
        self.options = dict(options)
        self.timeout = timeout
        self.concurrency = concurrency
        self.cache = cache
        self.clients: dict[str, StorageClient] = {}
        self.plan: deque[Download] = deque()  # hinted, not started
        self.pending: dict[Range, Download] = {}  # hinted, not opened (memory)
        self.active: dict[str, Download] = {}  # cache mode: file-backed downloads by url
        self.threads: set[threading.Thread] = set()
        self.sizes: dict[str, int] = {}

    def client(self, url: str) -> StorageClient:
        return client_for(url, self.options, self.timeout, cache=self.clients)

    def size(self, url: str) -> int:
        if url in self.sizes:
            return self.sizes[url]
        sh = self.shared
        failures = 0
        while True:
            try:
                size = self.client(url).size(url)
                break
            except Exception as e:
                with sh.cond:
                    failures += 1
                    if not is_transient(e) or failures > sh.retries or sh.closed:
                        sh.errors += 1
                        raise ShardReadError(url, 0, e) from e
                    sh.retries_done += 1
                    sh.wait(sh.rng.uniform(0, sh.backoff * 2 ** (failures - 1)))
        self.sizes[url] = size
        return size

    # -- threads (under cond) ---------------------------------------------------------------
    def spawn(self, d: Download, job: Any) -> None:
        d.started = True
        t = threading.Thread(target=self._run, args=(d, job), name="dataflow-fetch",
                             daemon=True)
        # A thread stays in the set until it has really ended (a thread that took itself out
        # in its last lines would still be running when close() joins the others)
        self.threads = {x for x in self.threads if x.is_alive()}
        self.threads.add(t)
        t.start()

    def _run(self, d: Download, job: Any) -> None:
        try:
            job(d)
        except BaseException as e:  # a bug, never a storage failure: surface it to the reader
            with self.shared.cond:
                d.error = e
                d.done = True
        finally:
            with self.shared.cond:
                if d.done and d.claim is not None and d.detached:
                    self._forget(d)
                self.schedule()
                self.shared.cond.notify_all()

    def _forget(self, d: Download) -> None:
        if self.active.get(d.url) is d:
            del self.active[d.url]
        if d.claim is not None and d.readers == 0:
            d.claim.close()

    def schedule(self) -> None:
        """Start hinted downloads in plan order while the budget and concurrency allow."""
        sh = self.shared
        while self.plan and not sh.closed and sh.in_flight < sh.budget:
            running = sum(1 for d in self.pending.values() if d.started and not d.done)
            running += sum(1 for d in self.active.values() if not d.opened and not d.done)
            if running >= self.concurrency:
                return
            d = self.plan.popleft()
            self.spawn(d, self.fetch_job if self.cache is None else self.cache_job)

    # -- jobs (in a fetch thread) -------------------------------------------------------------
    def fetch_job(self, d: Download) -> None:
        run_download(d, self.client(d.url), self.shared)

    def cache_job(self, d: Download) -> None:
        """Resolve ``d`` against the cache, then download, follow, or read nothing (a hit)."""
        try:
            size = self.size(d.url)
        except ShardReadError as e:
            with self.shared.cond:
                d.error, d.done = e, True
            return
        claim = self.cache.claim(d.url, size)
        sh = self.shared
        with sh.cond:
            if claim.kind == "bypass":  # larger than the cache can hold: memory only
                sh.cache_misses += 1
                d.memory_only = True
            else:
                before = d.pending
                d.claim, d.start, d.end = claim, 0, size
                if claim.kind == "hit":  # nothing to fetch, nothing held in memory
                    sh.cache_hits += 1
                    d.received = d.consumed = size
                    d.done = True
                else:
                    sh.cache_hits += claim.kind == "follow"
                    sh.cache_misses += claim.kind == "download"
                    d.received = claim.resume_at
                d._account(sh, before)
            sh.cond.notify_all()
        if claim.kind == "hit":
            return
        if claim.kind == "follow":
            follow_download(d, self.client(d.url), sh)
        else:
            run_download(d, self.client(d.url), sh)

    def close(self) -> None:
        sh = self.shared
        with sh.cond:
            if sh.closed:
                return
            sh.closed = True
            for body in list(sh.bodies):
                abort = getattr(body, "abort", None)
                if abort is not None:
                    abort()
            sh.cond.notify_all()
            threads = list(self.threads)
        for t in threads:
            if t is not threading.current_thread():
                t.join(self.timeout + 5.0)
        with sh.cond:
            for d in list(self.active.values()):
                if d.claim is not None:
                    d.claim.close()
            self.active.clear()
            self.pending.clear()
            self.plan.clear()
        for c in list(self.clients.values()):
            c.close()


class ShardFetcher:
    """Downloads shard bytes ahead of their readers (see the module docstring).

    Args:
        prefetch_bytes: the byte budget of hinted downloads (bytes received, not yet read).
        cache_dir: a directory shared by this node's processes to keep whole shards in.
        cache_limit: the most bytes the cache directory holds (least recently used files are
            removed first); requires ``cache_dir``; None: no limit.
        timeout: seconds a connection or a read may stall before it is retried.
        retries: consecutive failed attempts retried before :class:`ShardReadError`.
        storage_options: passed to the storage client (e.g. ``{"endpoint_url": ...}`` for S3).
        concurrency: hinted downloads running at once.
        backoff: the first retry's maximal delay in seconds (doubling at each retry).
    """

    def __init__(
        self, prefetch_bytes: int = 256 << 20, cache_dir: str | None = None,
        cache_limit: int | None = None, timeout: float = 30.0, retries: int = 5,
        storage_options: Mapping[str, Any] | None = None, *, concurrency: int = 4,
        backoff: float = 0.05,
    ) -> None:
        _check_int("prefetch_bytes", prefetch_bytes, 0)
        _check_int("cache_limit", cache_limit, 1, allow_none=True)
        _check_int("retries", retries, 0)
        _check_int("concurrency", concurrency, 1)
        check_seconds(timeout, "timeout")
        if not isinstance(backoff, (int, float)) or backoff < 0:
            raise ValueError(f"`backoff` must be a number of seconds >= 0, got {backoff!r}")
        if cache_limit is not None and cache_dir is None:
            raise ValueError(
                f"`cache_limit={cache_limit}` needs `cache_dir`: give the directory to cache in"
            )
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise TypeError(
                f"`storage_options` must be a dict, got {type(storage_options).__name__}"
            )
        cache = None
        if cache_dir is not None:
            from dataflow.streaming.cache import ShardCache

            cache = ShardCache(cache_dir, cache_limit)
        shared = Shared(budget=prefetch_bytes, retries=retries, backoff=float(backoff))
        self._state = _State(shared, storage_options or {}, float(timeout), concurrency, cache)
        self._checked: set[str] = set()  # schemes whose URLs and options were checked
        self._finalizer = weakref.finalize(self, self._state.close)

    def __repr__(self) -> str:  # never the storage options: they may hold credentials
        sh = self._state.shared
        return (f"<ShardFetcher prefetch_bytes={sh.budget} "
                f"cache_dir={getattr(self._state.cache, 'directory', None)!r}"
                f"{' closed' if sh.closed else ''}>")

    def _key(self, url: str, start: int, end: int | None) -> Range:
        if not isinstance(url, str):
            raise TypeError(f"`url` must be a string, got {type(url).__name__}: {url!r}")
        _check_int("start", start, 0)
        _check_int("end", end, start, allow_none=True)
        scheme = scheme_of(url)
        if scheme not in self._checked:  # an unknown scheme or option fails here, not in a thread
            check_storage([url], self._state.options, "url")
            self._checked.add(scheme)
        return (url, start, end)

    def _check_open(self) -> None:
        if self._state.shared.closed:
            raise ValueError("this ShardFetcher is closed; create a new one")

    def prefetch(self, ranges: Iterable[tuple[str, int, int | None]]) -> None:
        """Hint upcoming reads ``(url, start, end)`` in plan order (``end=None``: to EOF)."""
        self._check_open()
        st = self._state
        keys = [self._key(*r) for r in ranges]
        with st.shared.cond:
            for key in keys:
                if st.cache is not None:
                    if key[0] in st.active:
                        continue
                    d = Download(*key)
                    st.active[key[0]] = d
                elif key in st.pending:
                    continue
                else:
                    d = st.pending[key] = Download(*key)
                st.plan.append(d)
            st.schedule()

    def open(self, url: str, start: int = 0, end: int | None = None) -> ShardStream:
        """A binary file-like of bytes ``[start, end)`` of ``url``, readable as they arrive."""
        self._check_open()
        key = self._key(url, start, end)
        st = self._state
        with st.shared.cond:
            if st.cache is not None:
                d = st.active.get(url)
                if d is None or (d.done and d.error is not None):
                    d = st.active[url] = Download(*key)
                else:
                    while d.started and d.claim is None and not (d.memory_only or d.done):
                        st.shared.cond.wait()  # the hinted download is being resolved
                    if d.claim is None and d.started:
                        # a memory download (too large for the cache when it was hinted)
                        # serves one reader only: its own range's, once
                        del st.active[url]
                        if d.opened or (d.start, d.end) != (start, end):
                            if not d.opened:
                                d.cancelled = True
                                d.detach(st.shared)
                            d = st.active[url] = Download(*key)
                    elif d.opened:  # read again from this process's copy
                        st.shared.cache_hits += 1
                        if d.claim is not None:
                            d.claim.touch()
            else:
                d = st.pending.pop(key, None) or Download(*key)
            if d in st.plan:
                st.plan.remove(d)
            d.opened = True
            d.detached = False
            d.readers += 1
            if not d.started:
                st.spawn(d, st.fetch_job if st.cache is None else st.cache_job)
            st.schedule()
        return ShardStream(st, d, start, end)

    def size(self, url: str) -> int:
        """The size of the object at ``url`` in bytes (asked once, then remembered)."""
        self._check_open()
        return self._state.size(url)

    def stats(self) -> dict[str, float]:
        """Counters: ``bytes_read`` (received from storage), ``mb_per_s`` (their rate since
        the first request), ``bytes_in_flight`` (received, not yet read), its largest value
        ``peak_bytes_in_flight``, ``cache_hits``, ``cache_misses``, ``retries``, ``errors``."""
        sh = self._state.shared
        with sh.cond:
            elapsed = time.monotonic() - sh.started if sh.started is not None else 0.0
            return {
                "bytes_read": sh.bytes_read,
                "mb_per_s": sh.bytes_read / 1e6 / elapsed if elapsed > 0 else 0.0,
                "bytes_in_flight": sh.in_flight,
                "peak_bytes_in_flight": sh.peak_in_flight,
                "cache_hits": sh.cache_hits,
                "cache_misses": sh.cache_misses,
                "retries": sh.retries_done,
                "errors": sh.errors,
            }

    def close(self) -> None:
        """End every download thread and release connections and cache files (idempotent)."""
        self._finalizer()

    def __enter__(self) -> ShardFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
