"""``ServiceData``: one trainer rank's view of a :class:`DataService`, as a DataFlow.

Each ``__iter__`` is one epoch of its job: the rank computes its positions from the plan
(:mod:`dataflow.service.plan`), asks the service's workers for them (a window of requests in
flight, spread over the workers), and yields the outputs in order. It heartbeats the dispatcher:
a worker that was replaced, or a service that restarted (another instance), makes it ask again,
elsewhere, for what was not answered. Nothing is lost or repeated: the rank's own count of what
it yielded is the truth, and its state is that count.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

import numpy as np

from dataflow.base import DataFlow
from dataflow.errors import DataFlowError, WorkerError
from dataflow.policy import make_policy
from dataflow.service import plan, protocol
from dataflow.service.identity import identity_diff
from dataflow.service.link import ServiceError, ServiceLink
from dataflow.state import EpochCounter, check_state, mismatch
from dataflow.validation import check_choice, check_seconds

__all__ = ["ServiceData", "ServiceError"]

#: the job name under which a consumer reads the service's own pipeline
DEFAULT_JOB = "default"

#: seconds between two heartbeats to the dispatcher
HEARTBEAT = 0.25
#: inputs asked of a worker in one request
CHUNK = 4
#: the default bound of the bytes of outputs a consumer asks for or holds ahead
PREFETCH_BYTES = 256 * 1024 * 1024


def _refuse_dataloader_workers() -> None:
    """In one of several DataLoader workers, a consumer would read its rank's whole epoch
    in each of them: refused, with the fix, before anything starts."""
    torch = sys.modules.get("torch")
    info = torch.utils.data.get_worker_info() if torch is not None else None
    if info is not None and info.num_workers > 1:
        raise DataFlowError(
            f"ServiceData in a DataLoader with num_workers={info.num_workers}: the "
            "DataService's workers already map in parallel, and each DataLoader worker would "
            "ask for this rank's whole epoch. Pass DataLoader(..., num_workers=0) (or 1), and "
            "give the DataService more num_workers instead.")


class _Failed:
    """An input whose map call failed (raised, ended its worker, or gave an output that
    cannot travel), held in its turn's place."""

    __slots__ = ("index", "message", "traceback", "type", "worker")

    def __init__(self, type_: str, message: str, traceback: str, worker: int | None,
                 index: int) -> None:
        self.type, self.message, self.traceback = type_, message, traceback
        self.worker, self.index = worker, index


#: "no output yet": a skipped first input of an epoch is stood in for by the next output
_PENDING: Any = object()
#: an input whose map call ended its worker's process this many times is not asked again
CRASHES = 2


class ServiceData(EpochCounter, DataFlow):
    """The outputs a :class:`~dataflow.service.DataService` computes for rank ``rank`` of
    ``world_size`` (default: ``torch.distributed``'s, else ``RANK`` / ``WORLD_SIZE``, else 0 of
    1) of job ``job``. Each ``__iter__`` is one epoch; ``len()`` is the per-rank count, the same
    on every rank (``partial="drop"`` leaves out at most ``world_size - 1`` datapoints of an
    epoch, ``"pad"`` repeats the first ones). ``timeout``: seconds without an answer from the
    service's workers before a :class:`ServiceError` (the dispatcher answering does not count:
    a map call stuck forever ends in this error; give more than the slowest map call).
    ``token``: the service's shared secret (default: ``DATAFLOW_SERVICE_TOKEN``); ``curve``:
    encrypt with ZeroMQ CURVE, keys derived from the token (None: beyond loopback only, as
    the service; True for a loopback service started with ``curve=True``), or the path of the
    service's public certificate file (``.key``) when it was started with its secret one.
    ``prefetch``: outputs asked for ahead of the one yielded; ``prefetch_bytes``: at most
    about that many bytes of outputs asked for or received ahead (the size of an output is
    learnt from those received; at least one output is always asked for).
    ``on_error``/``max_errors``: the bad-sample policy (:mod:`dataflow.policy`) for an input
    whose map call raised, ended its worker's process (twice: it is not asked a third time) or
    gave an output that cannot travel: ``"raise"`` (default) raises a ``WorkerError`` at its
    turn, after the outputs before it, naming the dataset index and the epoch position;
    ``"skip"``/``"warn"`` count it and give the rank's last output again in its place, so that
    every rank still yields ``len()`` outputs (past ``max_errors``: ``ErrorBudgetError``).

    ``state_dict()`` is ``{"epoch", "pos", "done", "rank", "world_size", "start", ...}``: a
    restore continues the epoch exactly, also with another world size when every rank restores
    the states saved at the same step (the rest of the epoch, exactly once).
    """

    def __init__(self, address: str, *, rank: int | None = None, world_size: int | None = None,
                 job: str = "default", partial: str = "drop", timeout: float = 30.0,
                 token: str | None = None, prefetch: int = 64,
                 prefetch_bytes: int = PREFETCH_BYTES, on_error: str = "raise",
                 max_errors: int | float | None = None, curve: bool | str | None = None
                 ) -> None:
        host = protocol.host_of(address)  # (validated now)
        self.address = address
        self._rank_arg, self._world_arg = rank, world_size
        if not isinstance(job, str) or not job:
            raise ValueError(f"`job` must be a non-empty str, got {job!r}.")
        self.job = job
        self.partial = check_choice("partial", partial, plan.PARTIAL_POLICIES)
        self.timeout = check_seconds(timeout, "timeout")
        self.token = protocol.resolve_token(token)
        self._server_key = protocol.curve_setting(curve, host, self.token, "ServiceData",
                                                  server=False)
        self.curve = self._server_key is not None
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"`prefetch` must be a positive int, got {prefetch!r}.")
        self.prefetch = prefetch
        if isinstance(prefetch_bytes, bool) or not isinstance(prefetch_bytes, int) \
                or prefetch_bytes < 1:
            raise ValueError(f"`prefetch_bytes` must be a positive int (bytes of outputs "
                             f"ahead), got {prefetch_bytes!r}; e.g. {PREFETCH_BYTES}.")
        self.prefetch_bytes = prefetch_bytes
        self._out_bytes = 0.0  # the recent size of an output, in bytes (0: none seen yet)
        self._held: dict[int, float] = {}  # position -> bytes, of the outputs ready
        self.on_error, self.max_errors = on_error, max_errors
        self._policy = make_policy("ServiceData", on_error, max_errors)
        self._skipped = 0  # inputs skipped since this consumer was made
        self.rank, self.world_size = 0, 1
        self._config: dict[str, Any] | None = None
        self._start = 0  # global positions consumed before this world size took over
        self._link = ServiceLink(address, self._server_key)
        self._received = 0
        self._identity: dict[str, Any] | None = None  # the pipeline this consumer reads
        self._waited = 0.0
        self._bytes = 0
        self._t0 = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        """A copy for another process (a DataLoader worker started by spawn): no connection
        (its link carries no sockets); it connects there."""
        return {**self.__dict__, "_config": None}

    # ---- connection ------------------------------------------------------------------------

    def reset_state(self) -> None:
        """Find this rank's place and connect to the service (waiting up to ``timeout`` for it
        to answer)."""
        from dataflow.streaming.source import world_from_env

        if self._link.pid != os.getpid():  # (a forked copy: it connects anew)
            self._link.forget_forked()
            self._config = None
        _refuse_dataloader_workers()
        rank, world = world_from_env()
        self.rank = rank if self._rank_arg is None else self._rank_arg
        self.world_size = world if self._world_arg is None else self._world_arg
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"`rank` must be in [0, world_size={self.world_size}), got "
                             f"{self.rank}.")
        self._connect()

    def _connect(self) -> None:
        self._link.open()
        self._send_ctl({"op": "hello"})
        self._config = self._await_config(self.timeout, first=True)

    def _send_ctl(self, msg: dict[str, Any]) -> None:
        self._link.send({**msg, "token": self.token, "job": self.job, "rank": self.rank,
                         "world_size": self.world_size})

    def _await_config(self, timeout: float, first: bool = False) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServiceError(
                    f"ServiceData: no DataService answered at {self.address} within "
                    f"{timeout:g} s; is it started there (DataService(...).start(), or "
                    "`python -m dataflow serve module:function`), and is this the address it "
                    "printed?" + (" Is its token the same (the CURVE keys derive from it), "
                                  "and CURVE on at both ends (curve=)?" if self.curve else "")
                    if first else
                    f"ServiceData: the DataService at {self.address} stopped answering for "
                    f"{timeout:g} s.")
            if self._link.ctl.poll(int(min(left, 0.5) * 1000)):
                msg = self._link.receive()
                if msg is not None and msg["op"] == "config":
                    self._check_identity(msg)
                    return msg
            elif first:  # (asked again: a service that restarted lost what it had queued)
                self._send_ctl({"op": "hello"})

    def _check_identity(self, config: dict[str, Any]) -> None:
        """The pipeline of this consumer's job at the address must be the one it read so far
        (a service restarted with the same arguments is; another one is an error)."""
        jobs = config.get("jobs") or {}
        if jobs and self.job not in jobs and self.job != DEFAULT_JOB:
            raise ServiceError(
                f"ServiceData: `job` {self.job!r} is not a job of the DataService at "
                f"{self.address}; its jobs are {sorted(jobs)} (and {DEFAULT_JOB!r}, the "
                "service's own pipeline). Pass one of them as job=, or add it to the "
                "service's jobs=.")
        identity = (jobs.get(self.job) or config).get("identity")
        if not isinstance(identity, dict):
            return
        if self._identity is None:
            self._identity = identity
            return
        differ = identity_diff(self._identity, identity)
        if differ:
            raise ServiceError(
                f"ServiceData: the DataService at {self.address} now serves another pipeline "
                f"for job {self.job!r} than the one this consumer read ({differ}); its outputs "
                "would not continue this run. Restart the service with the same arguments, "
                "or start a new run (a new ServiceData, no load_state_dict).")

    def _cfg(self) -> dict[str, Any]:
        if self._config is None:
            self.reset_state()
        assert self._config is not None
        return self._config

    # ---- the epoch ---------------------------------------------------------------------------

    def _job(self) -> dict[str, Any]:
        """The pipeline this consumer's job reads: its own, if the service serves one under
        this job's name, else the service's default one."""
        cfg = self._cfg()
        return cfg.get("jobs", {}).get(self.job) or cfg

    def __len__(self) -> int:
        return plan.steps_per_rank(self._job()["n"], self.world_size, self._start,
                                   self.partial)

    def __iter__(self) -> Any:
        cfg = self._job()
        restored = self._resume is not None
        token, start = self._begin()
        if not restored:
            self._start = 0  # (a restore with another world size shifts its own epoch only)
        if self._policy is not None:
            size = plan.steps_per_rank(cfg["n"], self.world_size, self._start, self.partial)
            if restored and start:
                self._policy.continue_epoch(size)
            else:
                self._policy.begin_epoch(size)
        epoch = self._epoch - 1
        positions, indices = plan.rank_steps(cfg["n"], cfg["seed"], epoch, cfg["shuffle"],
                                             self.rank, self.world_size, self._start,
                                             self.partial)
        return self._run(token, epoch, positions[start:], indices[start:])

    def _run(self, token: object, epoch: int, positions: np.ndarray, indices: np.ndarray
             ) -> Any:
        import zmq

        todo = [(int(p), int(i)) for p, i in zip(positions, indices)]
        self._held.clear()
        job = self.job if self.job in (self._config or {}).get("jobs", {}) else ""
        nxt = 0  # next item to ask for
        ready: dict[int, Any] = {}  # position -> output, received ahead of its turn
        where: dict[int, tuple[str, tuple[int, int]]] = {}  # position -> worker, item
        load: dict[str, int] = {}
        resend: list[tuple[int, int]] = []
        link = self._link
        live = link.workers(self._config or {})
        instance = (self._config or {}).get("instance")
        last_beat = last_answer = time.monotonic()
        poller, polled = zmq.Poller(), None  # (built at the first wait, with the sockets)

        turn = [0]

        def ask(items: list[tuple[int, int]]) -> None:
            # chunks small enough that every worker gets some, to the least loaded first
            # (a tie to the next in turn, not always to the first)
            size = max(1, min(CHUNK, len(items) // max(len(live), 1)))
            for k in range(0, len(items), size):
                chunk = items[k:k + size]
                turn[0] += 1
                order = live[turn[0] % len(live):] + live[:turn[0] % len(live)]
                w = min(order, key=lambda key: load.get(key, 0))
                msg = {"op": "map", "token": self.token, "j": job,
                       "items": [[epoch, p, i] for p, i in chunk]}
                ring = link.ring_name(w)
                if ring is not None:
                    msg["ring"] = ring
                link.socks[w].send(protocol.encode(msg))
                load[w] = load.get(w, 0) + len(chunk)
                for p, i in chunk:
                    where[p] = (w, (p, i))

        k = 0
        last: Any = _PENDING  # the last output yielded (stands in for a skipped one)
        owed = 0  # skipped outputs before the first one of the epoch, to yield with it
        while k < len(todo):
            want_pos = todo[k][0]
            while want_pos not in ready:
                # keep `prefetch` outputs asked for ahead
                if resend and live:
                    ask(resend)
                    resend = []
                room = self.prefetch - len(where)
                if self._out_bytes > 0:  # (and within prefetch_bytes, at least one)
                    held = sum(self._held.values())
                    room = min(room, int((self.prefetch_bytes - held) / self._out_bytes)
                               - len(where))
                    if not where:
                        room = max(room, 1)
                else:  # (the size of an output is not known yet: one for each worker)
                    room = min(room, max(len(live), 1) - len(where))
                if room > 0 and nxt < len(todo) and live:
                    ask(todo[nxt:nxt + room])
                    nxt = min(len(todo), nxt + room)
                socks = tuple(link.socks.values())
                if polled != socks:  # (the workers changed: poll the new sockets)
                    poller, polled = zmq.Poller(), socks
                    for sock in socks:
                        poller.register(sock, zmq.POLLIN)
                    poller.register(link.ctl, zmq.POLLIN)
                t0 = time.monotonic()
                events = dict(poller.poll(int(HEARTBEAT * 1000)))
                self._waited += time.monotonic() - t0
                now = time.monotonic()
                for key, sock in list(link.socks.items()):
                    if sock not in events:
                        continue
                    while True:
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        self._take(frames, epoch, where, ready, load, key)
                        last_answer = now
                if link.ctl in events:
                    while link.ctl.poll(0):
                        msg = link.receive()
                        if msg is None or msg["op"] != "config":
                            continue
                        # (the dispatcher's answers do not reset the timeout: it can answer
                        # while the workers give nothing)
                        self._check_identity(msg)
                        self._config = msg
                        changed = msg.get("instance") != instance
                        instance = msg.get("instance")
                        live = link.workers(msg)
                        # an input whose map call ended its worker's process twice is not
                        # asked again: it failed
                        for c_job, c_epoch, c_pos, c_index, count, cause in \
                                msg.get("crashed", ()):
                            if c_job == job and c_epoch == epoch and c_pos in where \
                                    and count >= CRASHES:
                                w, _ = where.pop(c_pos)
                                load[w] = max(0, load.get(w, 0) - 1)
                                ready[c_pos] = _Failed(
                                    "WorkerCrash", f"the worker's process ended while mapping "
                                    f"it, {count} times ({cause}); not asked again", "",
                                    None, c_index)
                        # what was asked of workers that are gone (or of a service that
                        # restarted) is asked again
                        lost = [p for p, (w, _) in where.items()
                                if changed or w not in link.socks]
                        for p in lost:
                            w, item = where.pop(p)
                            load[w] = max(0, load.get(w, 0) - 1)
                            resend.append(item)
                        resend.sort()
                if now - last_beat >= HEARTBEAT:
                    self._send_ctl({"op": "workers"})
                    self._report(now, len(where), len(ready))
                    last_beat = now
                if now - last_answer > self.timeout:
                    raise ServiceError(
                        f"ServiceData: the DataService at {self.address} gave nothing for "
                        f"{self.timeout:g} s (rank {self.rank} of {self.world_size}, job "
                        f"{self.job!r}, epoch {epoch}, output {self._pos}).")
            out = ready.pop(want_pos)
            self._held.pop(want_pos, None)
            k += 1
            if isinstance(out, _Failed):
                out = self._failed(out, epoch, want_pos, last)
                if out is _PENDING:  # (no output yet in this epoch to stand in: the next)
                    owed += 1
                    continue
            else:
                last = out
            if self._policy is not None:
                self._policy.seen += 1 + owed
            for _ in range(1 + owed):
                self._pos += 1
                self._received += 1
                yield out
            owed = 0
        if owed:  # (every input of this rank's epoch failed)
            raise ServiceError(f"ServiceData: every input of epoch {epoch} of rank "
                               f"{self.rank} failed; nothing to yield in their place.")
        self._report(time.monotonic(), len(where), len(ready))  # (the epoch's last figures)
        self._end(token)

    def _take(self, frames: list[Any], epoch: int, where: dict, ready: dict, load: dict,
              key: str) -> None:
        ring = self._link.rings.get(key)
        released = ring[1].tail[0] if ring is not None else 0
        try:
            msg = protocol.decode_frames(frames, ring[1] if ring is not None else None)
            protocol.check(msg, "consumer")
        except ValueError:
            self._link.dropped += 1
            return
        # bytes in: the frames, and what the answer's arrays took in the shared ring
        size = sum(len(f) for f in frames)
        if ring is not None:
            size += ring[1].tail[0] - released
        self._bytes += size
        if msg.get("nr") and ring is not None:
            self._link.new_ring(key)  # (the worker let the ring go: it was unused for long)
        if msg["op"] == "err":
            p = msg["p"]
            if msg["e"] == epoch and p in where:  # (raised, or skipped, at its turn)
                w, (_p, index) = where.pop(p)
                load[w] = max(0, load.get(w, 0) - 1)
                ready[p] = _Failed(msg["type"], msg["message"], msg.get("traceback", ""),
                                   msg.get("worker"), index)
            return
        outs = msg.get("o")
        if msg["op"] != "out" or not isinstance(outs, list):
            return
        for item in outs:
            if not isinstance(item, list) or len(item) != 3:
                continue
            e, p, result = item
            if e != epoch or p not in where:
                continue  # (an answer to a question asked again elsewhere, or of another epoch)
            w, _ = where.pop(p)
            load[w] = max(0, load.get(w, 0) - 1)
            ready[p] = result
            each = size / len(outs)
            self._held[p] = each
            self._out_bytes = each if not self._out_bytes else \
                0.8 * self._out_bytes + 0.2 * each

    def _failed(self, failure: _Failed, epoch: int, pos: int, last: Any) -> Any:
        """An input that failed at its turn: raised (``on_error="raise"``), or counted and
        stood in for by the last output (``"skip"``/``"warn"``; past ``max_errors``: an
        ``ErrorBudgetError``)."""
        where = f"DataService, epoch {epoch} position {pos}"
        error = WorkerError(failure.type, failure.message, failure.traceback, failure.worker,
                            failure.index, where)
        if self._policy is None:
            raise error
        self._policy.failed(failure.index, f"{failure.type}: {failure.message} ({where})")
        self._skipped += 1
        return last

    def _report(self, now: float, in_flight: int, ready: int) -> None:
        """The figures of ``stats()``: outputs received, seconds waited for them, bytes in,
        and the queue: outputs asked for and not answered, answered and not yet yielded."""
        self._send_ctl({"op": "report", "received": self._received, "waited": self._waited,
                        "elapsed": now - self._t0, "bytes": self._bytes,
                        "in_flight": in_flight, "ready": ready, "skipped": self._skipped})

    # ---- state ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Epoch, outputs received in it, and this rank's place (``rank``, ``world_size``,
        ``start``: global positions consumed before this world size)."""
        cfg = self._config or {}
        cfg = cfg.get("jobs", {}).get(self.job) or cfg
        return {"type": "ServiceData", **self._counters(), "rank": self.rank,
                "world_size": self.world_size, "start": self._start, "job": self.job,
                "partial": self.partial, "size": cfg.get("n"),
                "pipeline": cfg.get("identity") or self._identity,
                **({"errors": self._policy.state()} if self._policy is not None else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the saved epoch. With the same world size, this rank goes on after its
        own last output; with another one (every rank restoring the states saved at the same
        step), the ranks share the rest of the epoch: nothing lost, nothing repeated."""
        check_state(state, self, job=self.job, partial=self.partial)
        n = self._job()["n"]
        if state.get("size") not in (None, n):
            raise mismatch(self, "a dataset of", n, state.get("size"),
                           "the service serves another dataset than the saved run's.")
        saved = state.get("pipeline")
        now = self._job().get("identity")
        if isinstance(saved, dict) and isinstance(now, dict):
            differ = identity_diff(saved, now)
            if differ:
                raise mismatch(self, "the pipeline", now, saved,
                               f"the service at {self.address} serves another pipeline than "
                               f"the saved run's ({differ}); restart it with the saved run's "
                               "arguments, or start a new run without load_state_dict.")
        if self._policy is not None and "errors" in state:
            self._policy.load(state["errors"])
        start, world, pos = int(state["start"]), int(state["world_size"]), int(state["pos"])
        if world == self.world_size and not state["done"]:
            self._start = start
            self.restore_epoch(state)
        else:
            self._start = 0 if state["done"] else plan.consumed(start, pos, world)
            self.restore_epoch({**state, "pos": 0})

    def close(self) -> None:
        self._link.forget_forked()
        if self._link.ctl is not None:  # (no longer reading: its world size no longer counts)
            with contextlib.suppress(Exception):
                self._send_ctl({"op": "bye"})
        self._link.close()
        self._config = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def profile_metrics(self) -> dict[str, float]:
        """For :func:`dataflow.profile`: outputs received, MB in, and the share of the time
        this consumer waited for the service; and the service's own figures, asked of its
        dispatcher (left out if it does not answer within a second): its workers, their
        average busy share, the inputs queued at them, and its consumers."""
        span = max(time.monotonic() - self._t0, 1e-9)
        out = {"received": float(self._received), "mb_in": self._bytes / 1e6,
               "wait_fraction": min(1.0, self._waited / span)}
        stats = self._service_stats(1.0)
        if stats is not None:
            workers = stats.get("workers") or []
            out.update({
                "pool_workers": float(len(workers)),
                "pool_busy": sum(w["busy"] for w in workers) / max(len(workers), 1),
                "pool_queued": float(sum(w.get("queued", 0) for w in workers)),
                "service_consumers": float(len(stats.get("consumers") or []))})
        return out

    def _service_stats(self, timeout: float) -> dict[str, Any] | None:
        """The dispatcher's ``stats()``, or None if it does not answer within ``timeout``."""
        if self._link.ctl is None:
            return None
        self._send_ctl({"op": "stats"})
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self._link.ctl.poll(int(left * 1000)):
                return None
            try:
                msg = self._link.receive()
            except ServiceError:
                return None
            if msg is not None and msg["op"] == "stats":
                return msg.get("stats")
            if msg is not None and msg["op"] == "config":
                self._check_identity(msg)
                self._config = msg
        return None
