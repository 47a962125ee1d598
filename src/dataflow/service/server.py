"""``DataService``: one pool of worker processes that maps a pipeline for many consumers.

Three pieces, each small: the **plan** (:mod:`dataflow.service.plan`, pure functions: which index
each rank receives at each step), the **pool** (worker processes, :mod:`dataflow.service.worker`,
each with its own socket, answering consumers directly), and the **dispatcher** (a thread of
the service's process with a ROUTER socket at ``address``: it tells consumers the dataset's
length, the seed and the workers' addresses, replaces a worker that dies, and gathers figures).
The dispatcher keeps no epoch state: each consumer computes its own positions from the plan and
asks the workers for them, so a consumer's position is the truth, a restarted dispatcher needs
no journal, and a worker that dies loses nothing (its consumers ask another for what it did not
answer).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dataflow import rng as _rng
from dataflow.parallel._bootstrap import get_context, limited_thread_env, parent_info
from dataflow.parallel._lifecycle import register
from dataflow.parallel.autotuning.budget import cpu_budget
from dataflow.service import protocol
from dataflow.service.source import positional
from dataflow.service.worker import worker_main
from dataflow.validation import check_callable, check_choice

__all__ = ["DataService"]

logger = logging.getLogger("dataflow.service")

#: how often the dispatcher looks at its workers (a dead one is replaced)
MONITOR_INTERVAL = 0.05
#: how long a new worker may take to listen before the service gives up on it
WORKER_START_TIMEOUT = 60.0
#: a consumer that has not reported for this long no longer counts in the figures
CONSUMER_STALE = 10.0


class _Worker:
    """One worker process and what the service knows of it."""

    def __init__(self, wid: int, generation: int, proc: Any, pipe: Any, counters: Any) -> None:
        self.wid, self.generation, self.proc, self.pipe = wid, generation, proc, pipe
        self.counters = counters
        self.address: str | None = None
        self.started = time.monotonic()


class DataService:
    """Serve ``map_func`` over ``ds`` to any number of consumers (:class:`ServiceData`).

    ``ds`` is the cheap part of a pipeline (keys, file names, encoded bytes), ``map_func`` the
    expensive one, run by ``num_workers`` worker processes (``"auto"``: the cores of this
    process's CPU budget). A consumer rank ``r`` of ``R`` receives, per epoch, the outputs of
    global positions ``r, r + R, ...`` of the epoch's order (a permutation of ``range(len(ds))``
    drawn from ``(seed, epoch)`` when ``shuffle``), each ``map_func(ds[order[p]])`` with its random
    draws keyed by ``(seed, epoch, p)``. See ``docs/service.md``.

    ``address``: where consumers connect, ``tcp://127.0.0.1:0`` (loopback, a free port: read
    :attr:`address` after :meth:`start`). Any other host needs a shared secret, ``token=`` or
    the ``DATAFLOW_SERVICE_TOKEN`` environment variable, that every consumer presents.
    ``backend="process"`` runs the workers as local processes (``"ray"`` is not available yet).

    ``start()`` returns the service; ``stats()`` is a plain dict; ``close()`` is idempotent and
    runs at garbage collection and interpreter exit; a ``with`` block starts and closes it.
    """

    def __init__(self, ds: Any, map_func: Callable[[Any], Any], *, num_workers: Any = "auto",
                 backend: str = "process", address: str = "tcp://127.0.0.1:0", seed: int = 0,
                 shuffle: bool = True, token: str | None = None,
                 start_method: str | None = None) -> None:
        from dataflow.parallel.autotuning.stage import check_count, is_auto

        self.ds = ds
        self.map_func = check_callable(map_func, "map_func", "lambda dp: [dp[0] * 2]")
        check_count(num_workers, "num_workers")
        self.num_workers = cpu_budget().cores if is_auto(num_workers) else int(num_workers)
        self.backend = check_choice("backend", backend, ("process", "ray"))
        if backend == "ray":
            raise NotImplementedError(
                "DataService(backend='ray') is not available yet; use backend='process' (the "
                "workers on this machine), or RayMapData for a Ray cluster.")
        self.host = protocol.host_of(address)
        self._requested = address
        self.token = protocol.resolve_token(token)
        if not protocol.is_loopback(self.host) and not self.token:
            raise ValueError(
                f"DataService: `address` {address!r} is not a loopback address, so consumers "
                "from the network could connect: give a shared secret, token='...' (or the "
                f"{protocol.TOKEN_ENV} environment variable), that every ServiceData presents.")
        self.seed = _rng.check_seed(seed, "seed")
        if self.seed is None:
            raise ValueError("`seed` of a DataService must be an int: every consumer and "
                             "worker derives the same orders and random draws from it.")
        self.shuffle = bool(shuffle)
        self.start_method = start_method
        get_context(start_method)  # (validated now)
        self.address: str | None = None
        self.instance = protocol.new_instance()
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._consumers: dict[bytes, dict[str, Any]] = {}
        self._restarts = 0
        self._dropped = 0
        self._dispatch_cpu = 0.0
        self._started_at = 0.0
        self._closed = False
        self._n = 0
        register(self)

    # ---- life cycle ----------------------------------------------------------------------------

    def start(self) -> DataService:
        """Read what must be read of ``ds``, start the workers and the dispatcher; returns the
        service (its :attr:`address` is the real one from now on). Idempotent."""
        if self._thread is not None:
            return self
        self._source = positional(self.ds)
        self._n = len(self._source)
        seq = _rng.stage_sequence(self.seed, (), _rng.INPUTS, worker=None)
        self._inputs = _rng.seed_words(seq)  # what a seeded mapper's inputs are keyed by
        self._ctx: Any = get_context(self.start_method)
        self._parent = parent_info()
        with limited_thread_env():
            for wid in range(self.num_workers):
                self._workers.append(self._spawn(wid, 0))
        self._thread = threading.Thread(target=self._serve, name="dataflow-service",
                                        daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self.close()
            raise self._error
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while any(w.address is None for w in self._workers_now()):
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"DataService: its workers did not start within "
                                   f"{WORKER_START_TIMEOUT:.0f} s")
            time.sleep(0.01)
        self._started_at = time.monotonic()
        logger.info("DataService serving %d datapoints at %s with %d workers", self._n,
                    self.address, self.num_workers)
        return self

    def _spawn(self, wid: int, generation: int) -> _Worker:
        recv, send = multiprocessing.Pipe(duplex=False)
        counters = self._ctx.Array("d", 4, lock=False)
        proc = self._ctx.Process(
            target=worker_main, name=f"dataflow-service-worker-{wid}",
            args=(wid, self._parent, self._source, self.map_func, self._inputs,
                  self._worker_host(), self.token, send, counters), daemon=True)
        proc.start()
        send.close()
        return _Worker(wid, generation, proc, recv, counters)

    def _worker_host(self) -> str:
        """Where workers listen: an abstract Unix socket for a loopback service on Linux
        (consumers of a loopback service are on this machine), else the service's host."""
        if sys.platform.startswith("linux") and protocol.is_loopback(self.host):
            return f"ipc://@dataflow-service-{self.instance}"
        return self.host

    def _workers_now(self) -> list[_Worker]:
        with self._lock:
            return list(self._workers)

    def close(self) -> None:
        """Tell the consumers, stop the dispatcher and the workers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for w in self._workers_now():
            with contextlib.suppress(Exception):
                w.proc.kill()
        for w in self._workers_now():
            with contextlib.suppress(Exception):
                w.proc.join(timeout=10)
                w.pipe.close()

    def __enter__(self) -> DataService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # ---- the dispatcher --------------------------------------------------------------------

    def _serve(self) -> None:
        import zmq

        ctx: Any = zmq.Context.instance()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            if self._requested.rsplit(":", 1)[-1] == "0":
                port = sock.bind_to_random_port(f"tcp://{self.host}")
                self.address = f"tcp://{self.host}:{port}"
            else:
                sock.bind(self._requested)
                self.address = self._requested
        except zmq.ZMQError as e:
            self._error = OSError(f"DataService cannot listen at {self._requested!r}: {e}")
            sock.close()
            self._ready.set()
            return
        self._ready.set()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if poller.poll(int(MONITOR_INTERVAL * 1000)):
                    while True:
                        try:
                            ident, frame = sock.recv_multipart(zmq.NOBLOCK)[-2:]
                        except zmq.Again:
                            break
                        except ValueError:
                            self._dropped += 1
                            continue
                        reply = self._answer(ident, frame)
                        if reply is not None:
                            sock.send_multipart([ident, protocol.encode(reply)])
                self._monitor()
                self._dispatch_cpu = time.thread_time()  # (this thread's CPU seconds)
            closed = protocol.encode({"op": "closed", "service": self.address})
            for ident in list(self._consumers):
                with contextlib.suppress(zmq.ZMQError):
                    sock.send_multipart([ident, closed], zmq.NOBLOCK)
        finally:
            sock.close(linger=200)

    def _answer(self, ident: bytes, frame: bytes) -> dict[str, Any] | None:
        try:
            msg = protocol.decode(frame)
        except ValueError:
            self._dropped += 1
            return None
        if not protocol.token_ok(msg, self.token):
            self._dropped += 1
            return {"op": "refused", "error": "wrong or missing token: pass the service's "
                    f"token= (or set {protocol.TOKEN_ENV})"}
        op = msg["op"]
        if op in ("hello", "workers"):
            now = time.monotonic()
            info = self._consumers.setdefault(ident, {"since": now})
            for key in ("job", "rank", "world_size"):
                if key in msg:
                    info[key] = msg[key]
            info["seen"] = now
            return self._config()
        if op == "report":
            info = self._consumers.setdefault(ident, {"since": time.monotonic()})
            info.update({k: msg[k] for k in ("job", "rank", "world_size", "received", "waited",
                                             "elapsed", "bytes") if k in msg})
            info["seen"] = time.monotonic()
            return None
        if op == "stats":
            return {"op": "stats", "stats": self.stats()}
        self._dropped += 1
        return None

    def _config(self) -> dict[str, Any]:
        workers = [[w.wid, w.generation, w.address] for w in self._workers_now()
                   if w.address is not None]
        return {"op": "config", "instance": self.instance, "n": self._n, "seed": self.seed,
                "shuffle": self.shuffle, "workers": workers, "service": self.address}

    def _monitor(self) -> None:
        """Read the addresses of starting workers; replace a worker that died."""
        for w in self._workers_now():
            if w.address is None:
                with contextlib.suppress(EOFError, OSError):
                    if w.pipe.poll():
                        w.address = w.pipe.recv()
            if w.proc.exitcode is not None and not self._stop.is_set():
                logger.warning("DataService: worker %d died (exit code %s); starting another; "
                               "its consumers ask the others for what it did not answer",
                               w.wid, w.proc.exitcode)
                with contextlib.suppress(Exception):
                    w.pipe.close()
                new = self._spawn(w.wid, w.generation + 1)
                with self._lock:
                    self._workers[self._workers.index(w)] = new
                self._restarts += 1

    # ---- figures -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The live figures: per worker its busy fraction, rate and bytes sent; per consumer
        its wait fraction and rate; restarts, dropped messages, and which side is the
        bottleneck (``"pool"`` when consumers wait for more than half of their time,
        ``"consumers"`` otherwise)."""
        now = time.monotonic()
        elapsed = max(now - self._started_at, 1e-9) if self._started_at else 0.0
        workers: list[dict[str, Any]] = []
        for w in self._workers_now():
            busy, items, out_bytes, dropped = (float(x) for x in w.counters)
            alive = max(now - w.started, 1e-9)
            workers.append({"worker": w.wid, "generation": w.generation, "address": w.address,
                            "busy": round(min(1.0, busy / alive), 4), "items": int(items),
                            "items_per_second": round(items / alive, 2),
                            "bytes_out": int(out_bytes), "dropped": int(dropped)})
        consumers: list[dict[str, Any]] = []
        for info in list(self._consumers.values()):
            if now - info.get("seen", 0) > CONSUMER_STALE:
                continue
            span = float(info.get("elapsed", 0.0)) or 1e-9
            consumers.append({"job": info.get("job"), "rank": info.get("rank"),
                              "world_size": info.get("world_size"),
                              "received": int(info.get("received", 0)),
                              "wait": round(min(1.0, float(info.get("waited", 0.0)) / span), 4),
                              "items_per_second": round(int(info.get("received", 0)) / span, 2),
                              "bytes_in": int(info.get("bytes", 0))})
        waits = [c["wait"] for c in consumers if c["received"]]
        bottleneck = None if not waits else ("pool" if sum(waits) / len(waits) > 0.5
                                             else "consumers")
        return {"address": self.address, "instance": self.instance, "datapoints": self._n,
                "seed": self.seed, "shuffle": self.shuffle, "uptime": round(elapsed, 3),
                "num_workers": len(workers), "workers": workers, "consumers": consumers,
                "restarts": self._restarts,
                "dropped": self._dropped + sum(w["dropped"] for w in workers),
                "bytes_out": sum(w["bytes_out"] for w in workers), "bottleneck": bottleneck,
                "dispatcher_cpu_seconds": round(self._dispatch_cpu, 4)}
