"""The consumer's end of the ZeroMQ transport: the mappers' :class:`ZmqMapTransport` (ROUTER,
readiness, least-loaded dispatch) and the runners' :class:`ZmqRunnerTransport` (PULL), both
replacing dead workers within a :class:`RestartBudget`. The frames they exchange with the
workers (:mod:`._zmq_worker`) are :mod:`._wire`'s.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from dataflow.errors import DataFlowTerminated
from dataflow.parallel._lifecycle import Resources
from dataflow.parallel._pool import PooledTransport, ProcessPool, describe_exit
from dataflow.parallel._protocol import DATA, ERROR, READY, STATE, ErrorInfo
from dataflow.parallel._wire import (
    Endpoint,
    FrameCodec,
    FrameDecoder,
    import_zmq,
    recv_frames,
)
from dataflow.parallel.shared_memory import (
    RING_BYTES,
    Ring,
    SharedMemoryWriter,
    cleanup_segments,
)

__all__ = [
    "RESTART_WINDOW",
    "RestartBudget",
    "ZmqMapTransport",
    "ZmqRunnerTransport",
]

logger = logging.getLogger("dataflow.parallel")

#: inputs within which at most ``max_restarts`` workers are replaced, when the epoch's length
#: is unknown
RESTART_WINDOW = 10_000
#: seconds a chunk may wait in the backlog for workers still starting (see ``submit``)
BACKLOG_WAIT = 1.0


# ---- consumer side --------------------------------------------------------------------------


def _poll_raw(sock: Any, zmq: Any, timeout: float, copy: bool) -> list[Any] | None:
    """One message's frames, waiting up to ``timeout`` seconds; ``None`` if none came. (The
    wait is outside the ``except``: a Ctrl-C during it is a plain ``KeyboardInterrupt``.)"""
    while True:
        try:
            return recv_frames(sock, zmq.NOBLOCK, copy)
        except zmq.Again:
            pass
        if not sock.poll(int(timeout * 1000)):
            return None


class _Consumer(PooledTransport):
    """What the two consumer transports share: the decoder of the workers' messages, the
    budget of replacements, and the channel of a replacement worker."""

    decoder: FrameDecoder
    _channels: int = 0  # channel ids of the workers started so far

    def _new_channel(self) -> tuple[int, Ring | None]:
        """The channel id and ring (with shared rings) of a replacement worker: new ones, so
        that nothing it sends is confused with what the dead worker left behind."""
        ring = None
        if self.decoder.rings is not None:
            ring = Ring(RING_BYTES)
            self.decoder.rings.append(ring)
        channel = self._channels
        self._channels += 1
        return channel, ring


class ZmqMapTransport(_Consumer):
    """A mapper's consumer side: a ROUTER socket, readiness tracking, least-loaded dispatch.

    Dispatch cannot lose a request: each worker connects a DEALER with identity ``w<id>`` and
    first sends ``READY``; requests go only to workers that announced themselves, with
    ``ROUTER_MANDATORY`` (an unroutable send raises instead of dropping) and no high-water mark
    (memory is bounded by the mapper's ``buffer_size``). Every input is answered.
    """

    def __init__(
        self,
        num_workers: int,
        shm_prefix: str | None,
        rings: list[Ring] | None,
        res: Resources,
        name: str,
    ) -> None:
        self.zmq = zmq = import_zmq()
        self.res, self.name = res, name
        self.endpoint = Endpoint("map")
        res.add(self.endpoint.cleanup)
        if shm_prefix is not None:
            res.add(lambda: cleanup_segments(shm_prefix))
        self.ctx = zmq.Context()
        res.add(self.ctx.term)
        self.sock = self.ctx.socket(zmq.ROUTER)
        res.add(lambda: self.sock.close(linger=0))
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a replaced worker takes over its identity
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.endpoint.bind(self.sock)
        # the consumer's own large inputs go to segments named <prefix>-p-<n>
        self.codec = FrameCodec(SharedMemoryWriter(shm_prefix, "p") if shm_prefix else None)
        self.decoder = FrameDecoder(rings, shm_prefix)
        res.add(self.decoder.close)
        self.copy = rings is not None  # ring messages are small frames: copying them is cheaper
        self.load = [0] * num_workers
        self.ready: set[int] = set()
        self.pool: ProcessPool | None = None
        self._pending: deque[tuple] = deque()
        self._resend: list[tuple] = []  # inputs of a dead worker, to send again
        # chunks held back for workers still starting (see submit)
        self._backlog: deque[list] = deque()
        self._backlog_since = 0.0
        self._kills: dict[int, int] = {}  # index -> workers that died while it was in flight
        self._respawn: Callable[[int, int, Ring | None, Any], tuple] | None = None
        self.progress: list[Any] = []  # per worker: the index it is mapping (shared memory)
        self.max_restarts = 0
        self.budget = RestartBudget(0, 0)
        self.dispatched = 0  # inputs sent to workers
        self._channels = num_workers  # channel ids of the workers started so far
        self.retiring: set[int] = set()  # told to retire: no new work; stopped once drained
        self.stopped: set[int] = set()  # retired slots
        self._new_progress: Callable[[], Any] | None = None

    def attach(self, pool: ProcessPool, respawn: Callable[[int, int, Ring | None, Any], tuple]
               | None = None, max_restarts: int = 0, progress: list[Any] | None = None,
               window: int = 0, new_progress: Callable[[], Any] | None = None) -> None:
        """Use ``pool``'s death checks; with ``respawn(slot, channel, ring, progress)`` (the
        arguments of a new worker), replace workers that die, at most ``max_restarts`` within
        ``window`` inputs (see :meth:`_died`), and start more on :meth:`resize`;
        ``progress[slot]`` is the index worker ``slot`` is mapping (``new_progress()`` makes
        one for an added worker)."""
        self.pool, self._new_progress = pool, new_progress
        pool.assigned = {i: {} for i in range(len(self.load))}
        self._respawn, self.max_restarts = respawn, max_restarts
        self.budget = RestartBudget(max_restarts, window)
        self.progress = progress or []
        if respawn is not None:
            pool.on_death = self._died

    def _died(self, slot: int) -> bool:
        """Worker ``slot`` died without saying why: replace it and send its inputs in flight
        again (with their keys, so their results and random draws are those they would have
        had). The input it was mapping when it died is a suspect; an input that was being mapped
        when two workers died is a poison input: it is answered with a ``WorkerDied`` error
        (raised, or skipped under a bad-sample policy), never sent again. Returns False (the
        death is raised) once ``max_restarts`` workers were replaced."""
        pool = self.pool
        assert pool is not None and self._respawn is not None
        if slot in self.retiring:  # it was leaving anyway: send its inputs again, elsewhere
            self._resend.extend(pool.assigned.get(slot, {}).values())
            pool.assigned[slot] = {}
            self._stopped(slot)
            return True
        if not self.budget.allow(self.dispatched):
            return False
        proc = pool.procs[slot]
        lost = pool.assigned.get(slot, {})
        pool.assigned[slot] = {}
        self.ready.discard(slot)
        self.load[slot] = 0
        mapping = self.progress[slot].value if slot < len(self.progress) else -1
        poison = []
        for idx, item in lost.items():
            if idx == mapping:
                self._kills[idx] = self._kills.get(idx, 0) + 1
            if self._kills.get(idx, 0) >= 2:
                poison.append(idx)
            else:
                self._resend.append(item)
        for idx in poison:
            info = ErrorInfo("WorkerDied", f"input index {idx} was being mapped when two worker "
                             f"processes died (the last, pid {proc.pid}, {describe_exit(proc)}); "
                             "it is not sent again", "", None, slot, idx, self.name)
            self._pending.append((ERROR, slot, info))
            self._pending.append((DATA, slot, [(idx, None)]))
        channel, ring = self._new_channel()
        progress = self.progress[slot] if slot < len(self.progress) else None
        if progress is not None:
            progress.value = -1
        pool.replace(slot, self._respawn(slot, channel, ring, progress))
        logger.warning(
            "%s: worker %d (pid %s) %s; started a new one (%d of max_restarts=%d), %d input(s) "
            "sent again%s", self.name, slot, proc.pid, describe_exit(proc), self.budget.used,
            self.max_restarts, len(lost) - len(poison),
            f", {len(poison)} poison input(s) given up" if poison else "")
        return True

    def workers(self) -> int:
        """Workers running or starting, less those told to retire."""
        return len(self.load) - len(self.retiring) - len(self.stopped)

    def resize(self, n: int) -> None:
        """Run ``n`` workers from now on. An added worker is started like a replacement (a new
        slot, channel and ring) and gets work once it is ready; a retired one gets no new work,
        and is told to stop once every input sent to it is answered: no input is lost or
        mapped twice, and each input's key travels with it."""
        pool, respawn = self.pool, self._respawn
        assert pool is not None and respawn is not None, "attach() a pool first"
        while self.workers() < n:
            slot = len(self.load)
            self.load.append(0)
            progress = self._new_progress() if self._new_progress is not None else None
            if self.progress:
                self.progress.append(progress)
            channel, ring = self._new_channel()
            pool.add(respawn(slot, channel, ring, progress))
        while self.workers() > n:
            active = [s for s in range(len(self.load))
                      if s not in self.retiring and s not in self.stopped]
            slot = max(active, key=lambda s: (s not in self.ready, -self.load[s], s))
            self.ready.discard(slot)
            self.retiring.add(slot)
            self._stop_if_drained(slot)

    def _stop_if_drained(self, slot: int) -> None:
        """Tell retiring worker ``slot`` to stop, if nothing sent to it is unanswered (and it
        is connected: else when its ``READY`` comes)."""
        pool = self.pool
        if pool is None or pool.assigned.get(slot):
            return
        try:
            self.sock.send_multipart([b"w%d" % slot, *self.codec.encode(None)], copy=False)
        except self.zmq.ZMQError as e:
            if e.errno != self.zmq.EHOSTUNREACH:
                raise
            return  # not connected yet (or dead: the death check sees it)
        self._stopped(slot)

    def _stopped(self, slot: int) -> None:
        assert self.pool is not None
        self.pool.retire(slot)
        self.retiring.discard(slot)
        self.stopped.add(slot)
        self.load[slot] = 0

    def _flush_resend(self) -> None:
        if self._resend and self.ready:
            chunk, self._resend = self._resend, []
            self._send(chunk)

    def _raw(self, timeout: float) -> tuple | None:
        """The next message (``READY`` is handled here), bookkeeping of answered inputs."""
        self.res.check(self.name)
        while True:
            frames = _poll_raw(self.sock, self.zmq, timeout, self.copy)
            if frames is None:
                return None
            msg = self.decoder.decode(frames[1:])
            kind, wid = msg[0], msg[1]
            if kind == READY:
                if wid in self.retiring:
                    self._stop_if_drained(wid)
                elif wid not in self.stopped:  # (a worker stopped as soon as it connected)
                    self.ready.add(wid)
                timeout = 0
                continue
            if kind == DATA:
                assigned = self.pool.assigned[wid] if self.pool else {}
                for idx, _ in msg[2]:
                    assigned.pop(idx, None)
                self.load[wid] = max(0, self.load[wid] - len(msg[2]))
                if not assigned and wid in self.retiring:
                    self._stop_if_drained(wid)
            return msg

    def submit(self, chunk: list) -> None:
        """Send ``chunk`` to the least loaded worker that is ready. While workers are still
        starting and the ready ones already hold two chunks each, it waits in a backlog for
        them (sent as they announce themselves, or after :data:`BACKLOG_WAIT`): a burst of
        chunks (the start of a pass, or the inputs a move to processes hands over at once)
        would otherwise all go to the first worker ready, and the others would idle."""
        self.res.check(self.name)
        self._flush_resend()
        if self._backlog or self._hold(len(chunk)):
            if not self._backlog:
                self._backlog_since = time.monotonic()
            self._backlog.append(chunk)
            self._flush_backlog()
            return
        self._send(chunk)

    def _hold(self, size: int) -> bool:
        """Whether a chunk of ``size`` inputs should wait for the workers still starting."""
        starting = self.workers() - len(self.ready)
        return (starting > 0 and bool(self.ready)
                and min(self.load[w] for w in self.ready) >= 2 * size
                and (not self._backlog or time.monotonic() - self._backlog_since < BACKLOG_WAIT))

    def _flush_backlog(self) -> None:
        while self._backlog and self.ready and not self._hold(len(self._backlog[0])):
            self._send(self._backlog.popleft())
            self._backlog_since = time.monotonic()

    def _send(self, chunk: list) -> None:
        while True:
            while not self.ready:
                msg = PooledTransport.receive(self, 0.2)
                if msg is not None:
                    self._pending.append(msg)
            wid = min(self.ready, key=self.load.__getitem__)
            try:
                self.sock.send_multipart([b"w%d" % wid, *self.codec.encode(chunk)], copy=False)
            except self.zmq.ZMQError as e:
                if e.errno != self.zmq.EHOSTUNREACH:
                    raise
                self.ready.discard(wid)  # it died; the death check reports it
                continue
            self.load[wid] += len(chunk)
            self.dispatched += len(chunk)
            if self.pool is not None:
                self.pool.assigned[wid].update((item[0], item) for item in chunk)
            return

    def receive(self, timeout: float) -> tuple | None:
        self._flush_resend()
        self._flush_backlog()
        if self._pending:
            return self._pending.popleft()
        return super().receive(timeout)


class RestartBudget:
    """At most ``limit`` worker replacements within any ``window`` inputs (or, for runners,
    datapoints): occasional deaths (the OOM killer) are survived for ever, a worker that dies
    over and over is not."""

    def __init__(self, limit: int, window: int) -> None:
        self.limit, self.window = limit, max(1, window)
        self.at: deque[int] = deque()  # the counts at which workers were replaced
        self.used = 0

    def allow(self, count: int) -> bool:
        while self.at and self.at[0] <= count - self.window:
            self.at.popleft()
        if len(self.at) >= self.limit:
            return False
        self.at.append(count)
        self.used += 1
        return True


class ZmqRunnerTransport(_Consumer):
    """A runner's consumer side: a PULL socket bound to a private endpoint.

    With ``attach(pool, respawn, max_restarts, starts)``, a worker that dies is replaced by one
    that continues its copy's stream right after the last datapoint received from it: from the
    copy's last state (``STATE`` messages), skipping what was received since."""

    def __init__(self, endpoint: Endpoint, hwm: int, res: Resources, rings: list[Ring] | None,
                 name: str, shm_prefix: str | None = None) -> None:
        self.zmq = import_zmq()
        self.res, self.name, self.endpoint, self.hwm = res, name, endpoint, hwm
        self.decoder = FrameDecoder(rings, shm_prefix)
        res.add(self.decoder.close)
        self.copy = rings is not None  # ring messages are small frames: copying them is cheaper
        self.sock: Any = None
        self.pool: ProcessPool | None = None
        self._respawn: Callable[[int, int, Ring | None, Any], tuple] | None = None
        self.max_restarts = 0
        self.budget = RestartBudget(0, 0)
        self.received: list[int] = []  # DATA messages received from each worker (all lives)
        self.offset: list[int] = []  # received[w] when worker w's current process started
        self.ckpt: list[tuple[int, Any, int]] = []  # (received count, state, to skip)
        self._channels = 0

    def attach(self, pool: ProcessPool, respawn: Callable[[int, int, Ring | None, Any], tuple]
               | None, max_restarts: int, starts: list[tuple[Any, int] | None],
               window: int = 0) -> None:
        """Use ``pool``'s death checks and replace dead workers, at most ``max_restarts``
        within ``window`` datapoints (see the class docstring); ``starts[w]`` is the
        ``(state, skip)`` worker ``w`` started from, if any."""
        self.pool = pool
        n = len(starts)
        self.received, self.offset = [0] * n, [0] * n
        self.ckpt = [(0, s[0], s[1]) if s is not None else (0, None, 0) for s in starts]
        self._channels = n
        self._respawn, self.max_restarts = respawn, max_restarts
        self.budget = RestartBudget(max_restarts, window)
        if respawn is not None:
            pool.on_death = self._died

    def _died(self, w: int) -> bool:
        pool = self.pool
        assert pool is not None and self._respawn is not None
        if not self.budget.allow(sum(self.received)):
            return False
        proc = pool.procs[w]
        count, state, skip = self.ckpt[w]
        start = (state, skip + self.received[w] - count)
        channel, ring = self._new_channel()
        self.offset[w] = self.received[w]
        pool.replace(w, self._respawn(w, channel, ring, start))
        logger.warning(
            "%s: worker %d (pid %s) %s; started a new one (%d of max_restarts=%d), which "
            "continues its copy after the %d datapoints received from it", self.name, w,
            proc.pid, describe_exit(proc), self.budget.used, self.max_restarts,
            self.received[w])
        return True

    def bind(self) -> None:
        """Create the context and bind (after the workers are forked: never fork a process with
        ZeroMQ's I/O threads running, unless the endpoint needs binding first)."""
        if self.sock is not None:
            return
        zmq, res = self.zmq, self.res
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        res.add(ctx.term)
        res.add(lambda: sock.close(linger=0))
        sock.setsockopt(zmq.RCVHWM, self.hwm)
        sock.setsockopt(zmq.LINGER, 0)
        self.endpoint.bind(sock)
        self.sock = sock

    def _raw(self, timeout: float) -> tuple | None:
        self.res.check(self.name)
        zmq = self.zmq
        try:
            frames = _poll_raw(self.sock, zmq, timeout, self.copy)
        except zmq.ZMQError as e:
            if isinstance(e, zmq.ContextTerminated) or self.sock.closed:
                raise DataFlowTerminated(f"{self.name} was closed while iterating") from e
            raise
        if frames is None:
            return None
        msg = self.decoder.decode(frames)
        kind, w = msg[0], msg[1]
        if kind == DATA and w < len(self.received):
            self.received[w] += 1
        elif kind == STATE and w < len(self.received):
            count, state = msg[2]
            count += self.offset[w]  # counted from the start of the worker's first process
            self.ckpt[w] = (count, state, 0)
            msg = (STATE, w, (count, state))
        return msg
