"""``DataService``: one pool of workers that maps pipelines for many consumers.

Three pieces, each small: the **plan** (:mod:`dataflow.service.plan`, pure functions: which index
each rank receives at each step), the **pool** (:mod:`dataflow.service.pool`: workers, each with
its own socket, answering consumers directly; local processes or Ray actors), and the
**dispatcher** (a thread of the service's process with a ROUTER socket at ``address``: it tells
consumers each job's dataset length, seed and the workers' addresses, has the pool replace a
worker that dies, sizes the pool when ``num_workers="auto"``, and gathers figures). With
``backend="ray"`` that process is a Ray actor, and the driver's object forwards to it (see
:mod:`dataflow.service.ray_actors` and :mod:`dataflow.service.ray_pool`).
The dispatcher keeps no epoch state: each consumer computes its own positions from the plan
and asks the workers for them, so a consumer's position is the truth, a restarted dispatcher
needs no journal, and a worker that dies loses nothing (its consumers ask another for what it
did not answer).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dataflow import rng as _rng
from dataflow.parallel._bootstrap import check_picklable, get_context
from dataflow.parallel._lifecycle import register
from dataflow.parallel.autotuning.budget import cpu_budget
from dataflow.service import protocol
from dataflow.service.figures import recent_rate, sample
from dataflow.service.identity import pipeline_identity
from dataflow.service.pool import ProcessPool, WorkerSpec
from dataflow.service.scaler import Scaler
from dataflow.snapshot.source import positional
from dataflow.validation import check_callable, check_choice, check_seconds

__all__ = ["DataService"]

logger = logging.getLogger("dataflow.service")

#: how often the dispatcher looks at its workers (a dead one is replaced)
MONITOR_INTERVAL = 0.05
#: how long a new worker may take to listen before the service gives up on it
WORKER_START_TIMEOUT = 60.0
#: a consumer that has not reported for this long no longer counts in the figures
CONSUMER_STALE = 10.0
#: what a job of ``jobs=`` may set; the others come from the service's own arguments
JOB_KEYS = ("ds", "map_func", "seed", "shuffle")
#: the job name a consumer reads the service's own pipeline under
DEFAULT_JOB = "default"
#: seconds a consumer's last message counts as "reading now", for the world-size check
LIVE = 2.0
#: seconds between two samples of the workers' item counts, for their recent rates
SAMPLE_INTERVAL = 0.5
#: inputs that ended a worker's process, remembered (the oldest forgotten first)
MAX_CRASHES = 256
#: seconds between two log lines of the same unexpected error of the dispatcher's loop
ERROR_LOG_INTERVAL = 10.0


class _Pipeline:
    """One pipeline a service serves: its source, map and seed (``inputs``: the seed of its
    inputs' random streams, as a seeded mapper's)."""

    def __init__(self, ds: Any, map_func: Callable, seed: int, shuffle: bool) -> None:
        self.ds, self.map_func, self.seed, self.shuffle = ds, map_func, seed, shuffle
        self.source: Any = None
        self.inputs: tuple[int, tuple[int, ...]] = (0, ())

    def load(self) -> None:
        self.source = positional(self.ds)
        seq = _rng.stage_sequence(self.seed, (), _rng.INPUTS, worker=None)
        self.inputs = _rng.seed_words(seq)

    def config(self) -> dict[str, Any]:
        return {"n": len(self.source), "seed": self.seed, "shuffle": self.shuffle,
                "identity": self.identity()}

    def identity(self) -> dict[str, Any]:
        """What this pipeline's outputs depend on, as plain values: a consumer that finds
        another identity at its address (another service, or this one restarted with other
        arguments) stops instead of mixing the two pipelines' outputs."""
        return pipeline_identity(self.ds, self.map_func, self.seed, self.shuffle,
                                 len(self.source))


def _check_seed(seed: Any, name: str) -> int:
    checked = _rng.check_seed(seed, name)
    if checked is None:
        raise ValueError(f"`{name}` of a DataService must be an int: every consumer and "
                         "worker derives the same orders and random draws from it.")
    return checked


class DataService:
    """Serve ``map_func`` over ``ds`` to any number of consumers (:class:`ServiceData`).

    ``ds`` is the cheap part of a pipeline (keys, file names, encoded bytes), ``map_func`` the
    expensive one, run by a pool of ``num_workers`` workers (``"auto"``: sized while it runs,
    from one worker up to the cores of this process's CPU budget, by how long consumers wait).
    A consumer rank ``r`` of ``R`` receives, per epoch, the outputs of global positions
    ``r, r + R, ...`` of the epoch's order (a permutation of ``range(len(ds))`` drawn from
    ``(seed, epoch)`` when ``shuffle``), each ``map_func(ds[order[p]])`` with its random draws
    keyed by ``(seed, epoch, p)``. See ``docs/service.md``.

    ``jobs``: other pipelines on the same pool, ``{job name: {"ds", "map_func", "seed",
    "shuffle"}}`` (each key optional: the service's own value otherwise); a consumer whose
    ``job=`` is one of them reads that pipeline, ``"default"`` the service's own; without
    ``jobs=``, every job name reads the service's own (with ``jobs=``, another name is an
    error listing them).

    ``address``: where consumers connect, ``tcp://127.0.0.1:0`` (loopback, a free port: read
    :attr:`address` after :meth:`start`). Any other host needs a shared secret, ``token=`` or
    the ``DATAFLOW_SERVICE_TOKEN`` environment variable, that every consumer presents, and
    the dispatcher's and the workers' sockets encrypt with ZeroMQ CURVE, their key derived
    from the token (``curve``: None, on beyond loopback only; True also on loopback; or the
    path of a ZeroMQ certificate's ``.key_secret`` file, from
    ``zmq.auth.create_certificates``, whose public ``.key`` file the consumers take).
    ``metrics_port``: ``stats()`` in the Prometheus text format at
    ``http://127.0.0.1:<port>/metrics`` (0: a free port, :attr:`metrics` ``.url``).
    ``backend="process"`` runs the workers as local processes, ``"ray"`` as Ray actors on a
    cluster (``ray_address``: the cluster to join, default: Ray's own choice).

    ``worker_timeout``: seconds without a sign of life (a worker process's heartbeat or CPU
    time, a worker actor's answer) after which a worker is killed and replaced, its work asked
    of the others: a frozen process, a machine cut off without its connections closing. For
    Ray actors on other machines (a service beyond loopback) it must exceed the longest time
    one ``map_func`` call holds the GIL (an actor answers only when it can take it); None:
    never.

    ``start()`` returns the service; ``stats()`` is a plain dict; ``close()`` is idempotent and
    runs at garbage collection and interpreter exit; a ``with`` block starts and closes it.
    """

    def __init__(self, ds: Any, map_func: Callable[[Any], Any], *, num_workers: Any = "auto",
                 backend: str = "process", address: str = "tcp://127.0.0.1:0", seed: int = 0,
                 shuffle: bool = True, token: str | None = None,
                 start_method: str | None = None, jobs: dict[str, dict[str, Any]] | None = None,
                 ray_address: str | None = None, worker_timeout: float | None = 10.0,
                 metrics_port: int | None = None, curve: bool | str | None = None) -> None:
        from dataflow.parallel.autotuning.stage import check_count, is_auto

        self.ds = ds
        self.map_func = check_callable(map_func, "map_func", "lambda dp: [dp[0] * 2]")
        check_count(num_workers, "num_workers")
        self.auto = is_auto(num_workers)
        self.num_workers = 1 if self.auto else int(num_workers)
        self.backend = check_choice("backend", backend, ("process", "ray"))
        self.ray_address = ray_address
        self.worker_timeout = check_seconds(worker_timeout, "worker_timeout", allow_none=True)
        self.token = protocol.resolve_token(token)
        self._curve_arg = curve
        self.set_address(address)
        if metrics_port is not None and (isinstance(metrics_port, bool) or not isinstance(
                metrics_port, int) or not 0 <= metrics_port <= 65535):
            raise ValueError(f"`metrics_port` must be None (no metrics port) or an int in "
                             f"0..65535 (0: a free port), got {metrics_port!r}.")
        self.metrics_port = metrics_port
        self.metrics: Any = None  # (the MetricsServer once started: .port, .url)
        self.seed = _check_seed(seed, "seed")
        self.shuffle = bool(shuffle)
        self._pipelines = {"": _Pipeline(ds, self.map_func, self.seed, self.shuffle)}
        if jobs is not None and not isinstance(jobs, dict):
            raise ValueError(f"`jobs` must be a dict of job name -> dict of {JOB_KEYS}, got "
                             f"{jobs!r}.")
        for name, spec in (jobs or {}).items():
            if not isinstance(name, str) or not name or not isinstance(spec, dict):
                raise ValueError(f"`jobs`: each entry must be a non-empty job name -> a dict of "
                                 f"some of {JOB_KEYS}, got {name!r}: {spec!r}.")
            unknown = sorted(set(spec) - set(JOB_KEYS))
            if unknown:
                raise ValueError(f"`jobs[{name!r}]` has unknown keys {unknown}; a job may set "
                                 f"{', '.join(JOB_KEYS)}.")
            self._pipelines[name] = _Pipeline(
                spec.get("ds", ds),
                check_callable(spec.get("map_func", self.map_func), f"jobs[{name!r}]['map_func']",
                               "lambda dp: [dp[0] * 2]"),
                _check_seed(spec.get("seed", self.seed), f"jobs[{name!r}]['seed']"),
                bool(spec.get("shuffle", self.shuffle)))
        self.start_method = start_method
        get_context(start_method)  # (validated now)
        self.address: str | None = None
        self.instance = protocol.new_instance()
        self._lock = threading.Lock()
        self._pool: Any = None
        self._scaler: Scaler | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._consumers: dict[bytes, dict[str, Any]] = {}
        self._dropped: collections.Counter[str] = collections.Counter()
        self._errors: dict[str, float] = {}  # an unexpected error's text -> last logged
        self._crashes: dict[tuple[str, int, int], list[Any]] = {}  # input -> index, count, cause
        self._samples: dict[tuple[int, int], collections.deque] = {}  # worker -> (t, items)
        self._sampled = 0.0
        self._dispatch_cpu = 0.0
        self._started_at = 0.0
        self._closed = False
        self._owner_pid = os.getpid()
        self._tell = True  # (close() tells the consumers)
        self._remote: Any = None  # backend="ray": the dispatcher actor (ray_actors.RemoteService)
        self._hosted = False  # True in that actor: the dispatcher runs in this process
        register(self)

    def set_address(self, address: str) -> None:
        """Listen at ``address`` instead (before :meth:`start`), with the constructor's
        checks: a ``tcp://host:port`` address, and a shared secret beyond loopback."""
        if self.started:
            raise RuntimeError(f"DataService: already started at {self.address}; set the "
                               "address before start().")
        host = protocol.host_of(address)
        if not protocol.is_loopback(host) and not self.token:
            raise ValueError(
                f"DataService: `address` {address!r} is not a loopback address, so consumers "
                "from the network could connect: give a shared secret, token='...' (or the "
                f"{protocol.TOKEN_ENV} environment variable), that every ServiceData presents.")
        self._curve_keys = protocol.curve_setting(self._curve_arg, host, self.token,
                                                  "DataService", server=True)
        self.curve = self._curve_keys is not None
        self.host, self._requested = host, address

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran (a closed service counts as started)."""
        return getattr(self, "_thread", None) is not None \
            or getattr(self, "_remote", None) is not None or getattr(self, "_closed", False)

    # ---- life cycle ----------------------------------------------------------------------------

    def start(self) -> DataService:
        """Read what must be read of the pipelines' sources, start the workers and the
        dispatcher; returns the service (its :attr:`address` is the real one from now on).
        Idempotent."""
        if self._thread is not None or self._remote is not None:
            return self
        if self.backend == "ray" and not self._hosted:
            from dataflow.service.ray_actors import RemoteService

            self._remote = RemoteService(self)  # (starts this service in a Ray actor)
            self.address = self._remote.address
            self._serve_metrics()
            return self
        for p in self._pipelines.values():
            p.load()
        if self.backend == "process":  # (what a worker started without fork receives)
            method = get_context(self.start_method).get_start_method()
            if method != "fork":
                for name, p in self._pipelines.items():
                    where = f"jobs[{name!r}]" if name else ""
                    check_picklable(p.map_func, f"{where}['map_func']" if name else "map_func",
                                    method)
                    check_picklable(p.source, f"{where}['ds']" if name else "ds", method)
        spec = WorkerSpec({name: (p.source, p.map_func, p.inputs)
                           for name, p in self._pipelines.items()},
                          self._worker_host(), self.token, self._curve_keys)
        if self.backend == "ray":
            from dataflow.service.ray_pool import RayPool

            self._pool = RayPool(spec, self.ray_address, self.worker_timeout)
            maximum = self._pool.cpus()
        else:
            self._pool = ProcessPool(spec, self.start_method, self.worker_timeout)
            maximum = cpu_budget().cores
        self._pool.resize(self.num_workers)
        if self.auto:
            self._scaler = Scaler(self._pool, maximum)
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
        if not self._hosted:
            self._serve_metrics()
        logger.info("DataService serving %d datapoints at %s with %d workers",
                    len(self._pipelines[""].source), self.address, self.num_workers)
        return self

    def _serve_metrics(self) -> None:
        """``metrics_port``: ``stats()`` in the Prometheus text format over HTTP, on
        loopback (:class:`dataflow.service.metrics.MetricsServer`)."""
        if self.metrics_port is None:
            return
        from dataflow.service.metrics import MetricsServer

        try:
            self.metrics = MetricsServer(self.stats, self.metrics_port)
        except OSError as e:
            self.close()
            raise OSError(f"DataService: the metrics port {self.metrics_port} cannot listen "
                          f"on 127.0.0.1 ({e}); pass another metrics_port=, or 0 for a free "
                          "one.") from e
        logger.info("DataService metrics at %s", self.metrics.url)

    def _worker_host(self) -> str:
        """Where workers listen: an abstract Unix socket for a loopback service of local
        processes on Linux (consumers of a loopback service are on this machine), else the
        service's host."""
        if self.backend == "process" and sys.platform.startswith("linux") \
                and protocol.is_loopback(self.host):
            return f"ipc://@dataflow-service-{self.instance}"
        return self.host

    def _workers_now(self) -> list[Any]:
        with self._lock:
            return self._pool.workers() if self._pool is not None else []

    def worker_pids(self) -> list[int]:
        """The process ids of the workers (of a process pool; tests and benchmarks kill them)."""
        if self._remote is not None:
            return self._remote.pids()
        with self._lock:
            return self._pool.pids() if self._pool is not None else []

    def close(self, *, tell_consumers: bool = True) -> None:
        """Tell the consumers (they raise ``ServiceError``), stop the dispatcher and the
        workers. Idempotent. ``tell_consumers=False`` (a redeploy: ``serve`` on SIGTERM or
        SIGINT): the consumers are not told, and wait up to their ``timeout`` for a service at
        the address, which they continue with if it serves the same pipeline."""
        if self._closed or os.getpid() != self._owner_pid:
            return  # (closed, or a copy in a forked process: the service is not its own)
        self._closed = True
        self._tell = tell_consumers
        if self.metrics is not None:
            self.metrics.close()
        if self._remote is not None:
            self._remote.close(tell_consumers)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._scaler is not None:
            self._scaler.close()
        if self._pool is not None:
            with self._lock:
                self._pool.close()

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
        if self._curve_keys is not None:
            protocol.curve_server(sock, self._curve_keys)
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
                # each duty on its own: one that fails is logged and the others go on
                self._supervised("answering messages", self._take_messages, sock, poller)
                self._supervised("replacing workers", self._monitor)
                if self._scaler is not None:
                    self._supervised("sizing the pool", self._autotune)
                self._dispatch_cpu = time.thread_time()  # (this thread's CPU seconds)
            closed = protocol.encode({"op": "closed", "service": self.address})
            for ident in list(self._consumers) if self._tell else ():
                with contextlib.suppress(zmq.ZMQError):
                    sock.send_multipart([ident, closed], zmq.NOBLOCK)
        finally:
            sock.close(linger=200)

    def _supervised(self, duty: str, func: Callable[..., None], *args: Any) -> None:
        """Run one duty of the dispatcher's loop; an unexpected exception is logged with its
        cause (once per :data:`ERROR_LOG_INTERVAL` for the same one), counted, and the loop
        goes on."""
        try:
            func(*args)
        except Exception as e:
            self._dropped[f"dispatcher error while {duty}"] += 1
            text = f"{duty}: {type(e).__name__}: {e}"
            now = time.monotonic()
            if now - self._errors.get(text, -ERROR_LOG_INTERVAL) >= ERROR_LOG_INTERVAL:
                self._errors[text] = now
                logger.error("DataService: unexpected error while %s (the service goes on)",
                             text, exc_info=True)
            time.sleep(0.01)  # (an error that repeats at once does not spin a core)

    def _take_messages(self, sock: Any, poller: Any) -> None:
        import zmq

        if not poller.poll(int(MONITOR_INTERVAL * 1000)):
            return
        for _ in range(1000):  # (then the other duties get their turn)
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                self._dropped["frames"] += 1
                continue
            ident, frame = frames
            reply = self._answer(ident, frame)
            if reply is not None:
                sock.send_multipart([ident, protocol.encode(reply)])

    def _autotune(self) -> None:
        assert self._scaler is not None
        if self._scaler.due(time.monotonic()):
            with self._lock:
                self._scaler.step(time.monotonic(), self._consumers)

    def _answer(self, ident: bytes, frame: bytes) -> dict[str, Any] | None:
        try:
            msg = protocol.decode(frame)
        except ValueError:
            self._dropped["undecodable"] += 1
            return None
        if not protocol.token_ok(msg, self.token):
            self._dropped["token"] += 1
            return {"op": "refused", "error": "wrong or missing token: pass the service's "
                    f"token= (or set {protocol.TOKEN_ENV})"}
        try:
            op = protocol.check(msg, "dispatcher")
        except protocol.Invalid as e:
            self._dropped[e.cause] += 1
            return None
        now = time.monotonic()
        if op in ("hello", "workers"):
            refused = self._refuse(ident, msg, now)
            if refused is not None:
                return {"op": "refused", "error": refused}
            info = self._consumers.setdefault(ident, {"since": now})
            for key in ("job", "rank", "world_size"):
                if key in msg:
                    info[key] = msg[key]
            info["seen"] = now
            return self._config()
        if op == "report":
            info = self._consumers.setdefault(ident, {"since": now})
            info.update({k: v for k, v in msg.items() if k not in ("op", "token")})
            info["seen"] = now
            sample(info.setdefault("rates", collections.deque()), now,
                    int(msg.get("received", 0)))
            return None
        if op == "bye":
            self._consumers.pop(ident, None)
            return None
        return {"op": "stats", "stats": self.stats()}

    def _refuse(self, ident: bytes, msg: dict[str, Any], now: float) -> str | None:
        """Why a consumer cannot be served (else None): another live consumer of its job
        reads with another world size (their shares would overlap and leave gaps)."""
        job, world = msg.get("job"), msg.get("world_size")
        if job is None or world is None:
            return None
        for other, info in self._consumers.items():
            if other != ident and info.get("job") == job and now - info.get("seen", 0) < LIVE \
                    and info.get("world_size") not in (None, world):
                self._dropped["world size disagrees"] += 1
                return (f"job {job!r} is read by rank {info.get('rank')} of world_size "
                        f"{info.get('world_size')}, and this consumer (rank "
                        f"{msg.get('rank')}) has world_size {world}: the shares of the two "
                        "would overlap and leave gaps. Give every rank of a job the same "
                        "world_size, or another job= name for another run.")
        return None

    def _crashed(self, on: tuple[int, int, int, int], cause: str) -> None:
        """A worker's process ended while it mapped input ``on`` (job number, epoch,
        position, index): counted, and told to the consumers in every ``config`` (one that
        ended two processes is not asked a third time)."""
        job_num, epoch, pos, index = on
        names = sorted(self._pipelines)
        if not 0 <= job_num < len(names):
            return
        key = (names[job_num], epoch, pos)
        entry = self._crashes.pop(key, None) or [index, 0, cause]
        entry[1] += 1
        entry[2] = cause
        self._crashes[key] = entry
        while len(self._crashes) > MAX_CRASHES:
            self._crashes.pop(next(iter(self._crashes)))
        logger.warning("DataService: input %d (epoch %d, position %d%s) ended a worker's "
                       "process (%s), %d time(s)", index, epoch, pos,
                       f", job {names[job_num]!r}" if names[job_num] else "", cause, entry[1])

    def _config(self) -> dict[str, Any]:
        workers = [[w.wid, w.generation, w.address] for w in self._workers_now()
                   if w.address is not None]
        jobs = {name: p.config() for name, p in self._pipelines.items() if name}
        crashed = [[job, e, p, i, n, cause[:200]]
                   for (job, e, p), (i, n, cause) in self._crashes.items()]
        return {"op": "config", "instance": self.instance, **self._pipelines[""].config(),
                "jobs": jobs, "workers": workers, "service": self.address, "crashed": crashed}

    def _monitor(self) -> None:
        """Have the pool read the addresses of starting workers and replace dead ones."""
        if self._stop.is_set():
            return
        with self._lock:
            dead = self._pool.check()
        now = time.monotonic()
        if now - self._sampled >= SAMPLE_INTERVAL:
            self._sampled = now
            seen = set()
            for w in self._workers_now():
                key = (w.wid, w.generation)
                seen.add(key)
                sample(self._samples.setdefault(key, collections.deque()), now,
                        w.figures()[1])
            for key in set(self._samples) - seen:
                del self._samples[key]
        for w in dead:
            cause = w.why or f"exit code {self._pool.exit_code(w)}"
            logger.warning("DataService: worker %d lost (%s); started another; its consumers "
                           "ask the others for what it did not answer", w.wid, cause)
            if w.crashed_on is not None:
                self._crashed(w.crashed_on, cause)

    # ---- figures -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The live figures: per worker its busy fraction, rate and bytes sent; per consumer
        its wait fraction and rate; restarts, dropped messages, and which side is the
        bottleneck (``"pool"`` when consumers wait for more than half of their time,
        ``"consumers"`` otherwise)."""
        if self._remote is not None:
            return self._remote.stats()
        now = time.monotonic()
        elapsed = max(now - self._started_at, 1e-9) if self._started_at else 0.0
        workers: list[dict[str, Any]] = []
        for w in self._workers_now():
            busy, items, out_bytes, dropped, queued = w.figures()
            alive = max(now - w.started, 1e-9)
            workers.append({"worker": w.wid, "generation": w.generation, "address": w.address,
                            "busy": round(min(1.0, busy / alive), 4), "items": int(items),
                            "items_per_second": round(items / alive, 2),
                            "rate": round(items / alive, 2),
                            "rate_10s": recent_rate(
                                [*self._samples.get((w.wid, w.generation), ()), (now, items)],
                                now),
                            "bytes_out": int(out_bytes), "dropped": int(dropped),
                            "queued": int(queued)})
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
                              "rate": round(int(info.get("received", 0)) / span, 2),
                              "rate_10s": recent_rate(info.get("rates", ()), now),
                              "skipped": int(info.get("skipped", 0)),
                              "bytes_in": int(info.get("bytes", 0)),
                              "in_flight": int(info.get("in_flight", 0)),
                              "ready": int(info.get("ready", 0))})
        waits = [c["wait"] for c in consumers if c["received"]]
        bottleneck = None if not waits else ("pool" if sum(waits) / len(waits) > 0.5
                                             else "consumers")
        jobs = {name or "": {k: v for k, v in p.config().items() if k != "identity"}
                for name, p in self._pipelines.items() if p.source is not None}
        autotune = self._scaler.controller.state() if self._scaler is not None else None
        return {"address": self.address, "instance": self.instance,
                "backend": self.backend, "datapoints": jobs.get("", {}).get("n", 0),
                "seed": self.seed, "shuffle": self.shuffle, "uptime": round(elapsed, 3),
                "identity": self._pipelines[""].identity() if jobs else None,
                "jobs": {k: v for k, v in jobs.items() if k},
                "num_workers": len(workers), "workers": workers, "consumers": consumers,
                "restarts": self._pool.restarts if self._pool is not None else 0,
                "autotune": autotune,
                "dropped": sum(self._dropped.values()) + sum(w["dropped"] for w in workers),
                "dropped_by_cause": {**self._dropped, **({"at workers": sum(
                    w["dropped"] for w in workers)} if any(w["dropped"] for w in workers)
                    else {})},
                "bytes_out": sum(w["bytes_out"] for w in workers), "bottleneck": bottleneck,
                "dispatcher_cpu_seconds": round(self._dispatch_cpu, 4)}
