"""One download and the loop that runs it: bytes of ``[start, end)`` of one object, received
in chunks into memory or into a cache file, with retries that resume at the first byte not
received (so nothing is lost or repeated).

All fields are guarded by the fetcher's one condition variable (``_Shared.cond``); a reader
waits on it for bytes, a download waits on it for room in the byte budget.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dataflow.errors import ShardReadError
from dataflow.streaming.storage.base import StorageClient, TransientError, is_transient

if TYPE_CHECKING:
    from dataflow.streaming.cache import Claim

__all__ = ["CHUNK", "Download", "Shared", "follow_download", "run_download"]

#: bytes asked of a body per read
CHUNK = 1 << 20
#: an opened download runs this far ahead of its reader even when the budget is spent
OPEN_WINDOW = 4 * CHUNK


@dataclass(eq=False)
class Shared:
    """What the fetcher's threads share: the lock, the budget and the counters."""

    budget: int
    retries: int
    backoff: float
    cond: threading.Condition = field(default_factory=threading.Condition)
    closed: bool = False
    in_flight: int = 0  # bytes received and not yet consumed by a reader
    peak_in_flight: int = 0
    bytes_read: int = 0
    retries_done: int = 0
    errors: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    started: float | None = None  # monotonic time of the first request
    rng: random.Random = field(default_factory=random.Random)
    bodies: set[Any] = field(default_factory=set)  # open bodies, aborted by close()

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the fetcher closes first (under ``cond``); False if closed."""
        deadline = time.monotonic() + seconds
        while not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            self.cond.wait(left)
        return False


@dataclass(eq=False)
class Download:
    """Bytes ``[start, end)`` of ``url`` (``end=None``: to the end, fixed once known)."""

    url: str
    start: int
    end: int | None
    claim: Claim | None = None  # the cache file the bytes go to (None: memory)
    received: int = 0  # absolute offset of the next byte to receive
    consumed: int = 0  # absolute offset up to which a reader has taken the bytes
    chunks: deque[bytes] = field(default_factory=deque)  # memory: received, not consumed
    head_off: int = 0  # bytes of chunks[0] already consumed
    done: bool = False
    error: BaseException | None = None
    opened: bool = False
    cancelled: bool = False
    started: bool = False
    readers: int = 0
    waiting: int = 0  # readers blocked until more bytes arrive
    memory_only: bool = False  # cache mode, but too large for the cache
    detached: bool = False  # no reader left: received bytes count for nobody

    def __post_init__(self) -> None:
        self.received = self.consumed = self.start

    @property
    def pending(self) -> int:
        """Bytes received and not yet consumed (they count against the budget)."""
        return 0 if self.detached else max(0, self.received - self.consumed)

    def _account(self, shared: Shared, before: int) -> None:
        shared.in_flight += self.pending - before
        shared.peak_in_flight = max(shared.peak_in_flight, shared.in_flight)

    def add_received(self, n: int, shared: Shared) -> None:
        """``n`` more bytes arrived (under ``cond``)."""
        before = self.pending
        self.received += n
        self._account(shared, before)

    def consume_to(self, pos: int, shared: Shared) -> None:
        """A reader is past ``pos`` (under ``cond``)."""
        if pos > self.consumed:
            before = self.pending
            self.consumed = pos
            self._account(shared, before)

    def detach(self, shared: Shared) -> None:
        """No reader will take the rest: its bytes stop counting (under ``cond``)."""
        before = self.pending
        self.detached = True
        self.chunks.clear()
        self.head_off = 0
        self._account(shared, before)

    def take(self, n: int, shared: Shared) -> bytes:
        """Up to ``n`` received bytes, consumed (memory mode; under ``cond``)."""
        out = []
        while n > 0 and self.chunks:
            head = self.chunks[0]
            if self.head_off == 0 and n >= len(head):
                piece = head
            else:
                piece = head[self.head_off:self.head_off + n]
            out.append(piece)
            n -= len(piece)
            self.head_off += len(piece)
            if self.head_off >= len(head):
                self.chunks.popleft()
                self.head_off = 0
        data = out[0] if len(out) == 1 else b"".join(out)
        self.consume_to(self.consumed + len(data), shared)
        return data


def _may_continue(d: Download, shared: Shared) -> bool:
    """Wait for room in the budget (under ``cond``); False if the download should stop."""
    while not (shared.closed or d.cancelled):
        if d.detached or d.waiting or shared.in_flight < shared.budget or (
            d.opened and d.pending < OPEN_WINDOW
        ):
            return True
        shared.cond.wait()
    return False


def _receive(d: Download, data: bytes, shared: Shared) -> None:
    if d.claim is not None:
        d.claim.write(data)
    with shared.cond:
        if d.claim is None and not d.detached:
            d.chunks.append(data)
        d.add_received(len(data), shared)
        shared.bytes_read += len(data)
        shared.cond.notify_all()


def _attempt(d: Download, client: StorageClient, shared: Shared) -> bool:
    """Receive bytes until the range ends; False if stopped (closed or cancelled)."""
    body = client.open_range(d.url, d.received, d.end)
    with shared.cond:
        shared.bodies.add(body)
    try:
        if body.total is not None and (d.end is None or d.end > body.total):
            d.end = max(body.total, d.start)  # a range past the end is empty
        while d.end is None or d.received < d.end:
            with shared.cond:
                if not _may_continue(d, shared):
                    return False
            want = CHUNK if d.end is None else min(CHUNK, d.end - d.received)
            data = body.read(want)
            if not data:
                if d.end is None:
                    break
                raise TransientError(
                    f"the body ended at byte {d.received}, before byte {d.end}"
                )
            _receive(d, data, shared)
        return True
    finally:
        with shared.cond:
            shared.bodies.discard(body)
        body.close()


def run_download(d: Download, client: StorageClient, shared: Shared) -> None:
    """Run ``d`` to its end, retrying transient failures with exponential backoff and full
    jitter; on final failure ``d.error`` is a :class:`ShardReadError`."""
    failures = 0
    with shared.cond:
        if shared.started is None:
            shared.started = time.monotonic()
    while True:
        before = d.received
        try:
            finished = _attempt(d, client, shared)
        except Exception as e:
            with shared.cond:
                if shared.closed or d.cancelled:
                    break
                failures = 1 if d.received > before else failures + 1
                if not is_transient(e) or failures > shared.retries:
                    shared.errors += 1
                    d.error = ShardReadError(d.url, d.received, e)
                    break
                shared.retries_done += 1
                delay = shared.rng.uniform(0, shared.backoff * 2 ** (failures - 1))
                if not shared.wait(min(delay, 5.0)):
                    break
            continue
        if finished and d.claim is not None:
            try:
                d.claim.commit()
            except OSError as e:
                with shared.cond:
                    shared.errors += 1
                    d.error = ShardReadError(d.url, d.received, e)
        break
    with shared.cond:
        d.done = True
        if d.claim is not None and (d.error is not None or d.cancelled or shared.closed):
            d.claim.abandon()  # unlock the partial file: another process may resume it
        shared.cond.notify_all()


def follow_download(d: Download, client: StorageClient, shared: Shared) -> None:
    """Follow a cache file that another process downloads: its bytes become readable as the
    file grows; if that process dies, take the download over where it stopped."""
    assert d.claim is not None
    pause = 0.002
    while True:
        with shared.cond:
            if shared.closed or d.cancelled:
                d.done = True
                shared.cond.notify_all()
                return
        size, complete = d.claim.progress()
        with shared.cond:
            if size > d.received:
                d.add_received(size - d.received, shared)
                shared.cond.notify_all()
                pause = 0.002
        if complete:
            with shared.cond:
                d.done = True
                shared.cond.notify_all()
            return
        if d.claim.take_over():  # the other process is gone: resume its download here
            run_download(d, client, shared)
            return
        with shared.cond:
            shared.wait(pause)  # polling: another process's file has no event to wait on
        pause = min(pause * 2, 0.05)
