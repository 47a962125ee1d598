"""Our data service beside its peers, tf.data service and Ray Data ``streaming_split``, on
loopback, in one run.

    flock /tmp/dataflow-bench.lock env PYTHONPATH=src .venv/bin/python \\
        benchmarks/bench_service_peers.py [--images 513] [--ranks 2] [--workers 2]

The same work for every system: N generated JPEGs (500x375, ``dataflow.demo.make_jpegs``), each
decoded, randomly cropped (Inception-style) and resized to 224x224, flipped at random and given
PCA lighting by 2 workers, and read by R consumer ranks (threads of one process) in batches of
64. Every image carries its id (its index) to the consumer, so the ids a run received say what
was dropped or repeated.

  ours              ``DataService(num_workers=2)`` + ``ServiceData(rank=r, world_size=R)`` ->
                    ``BatchData(64)``; the map is ``dataflow.demo.DecodeAndAugment`` (OpenCV).
                    The service listens on 127.0.0.1, its workers on abstract Unix sockets.
  tf.data service   a ``DispatchServer`` and 2 ``WorkerServer``s, each in a process of its own;
                    consumers apply ``distribute(processing_mode="distributed_epoch")`` with one
                    job name per epoch shared by the ranks (so they share one pass); the map in
                    TF ops (``decode_jpeg``, ``sample_distorted_bounding_box`` crop, ``resize``,
                    ``random_flip_left_right``, the same PCA lighting), batches made on the
                    workers, no compression (``--tf-compression``; TF's default is AUTO).
  Ray Data          a local Ray (``ray.init(num_cpus=2, include_dashboard=False,
                    _node_ip_address="127.0.0.1")``): ``from_items`` of the JPEG bytes (64
                    blocks) -> ``map`` of ``DecodeAndAugment`` in a pool of 2 actors ->
                    ``streaming_split(R, equal=True)``, each split read with
                    ``iter_batches(batch_size=64)``; the same split iterators for every epoch.

tf.data servers listen on every interface and have no loopback option, and Ray's gcs_server,
raylet and workers listened on every interface on this machine despite
``_node_ip_address="127.0.0.1"``: each of these two parts (servers, workers and consumers) runs
in a network namespace of its own (``unshare --net --map-root-user``, only ``lo`` up), where
nothing is reachable from the host's network. The children record what listens where.

Per system: the time from starting the system to the first batch at every rank ("cold") and the
first batch of a later epoch ("warm"); per-rank counts and ids missing / repeated over one epoch
of N images (N not a multiple of R); images/s over the epochs after the first, whole and once
every rank had its first batch; one worker SIGKILLed once the ranks received N/4 images (ours:
a pool process; tf.data: a ``WorkerServer``, started again at the same address 10 s later, as a
supervisor would; Ray Data: a map actor's process) with per-rank counts, ids missing / repeated,
the longest gap between two batches of a rank and the wait from the last batch to the end of
the epoch; rank 0 restarted after 2 batches with what its API offers (ours: ``state_dict`` /
``load_state_dict``; tf.data: a ``tf.train.Checkpoint`` of the iterator tried, then a new
consumer of the same job; Ray Data: ``iter_batches`` called again on the split, and, when
nothing comes, the other ranks' next epoch begun too), with what the restarted rank received
and what the interrupted epoch delivered in all. Beside them, each map alone on one core, with
no service.

Each system runs in a child process of its own, in a session of its own, under a time limit: a
failure or a timeout prints a line and the other systems still run; every process a child
started is killed at its end (found by a marker in its environment), and the temporary
directory (prefix ``dataflow-bench-``) is removed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
SYSTEMS = ("ours", "tf", "ray")
TITLES = {"ours": "ours (`DataService`)", "tf": "tf.data service", "ray": "Ray Data",
          "map": "the map alone"}
BATCH = 64
CROP = 224
# the environment variable that marks every process of one run: whatever a child started, even
# a process that left its session, is found by it and killed at the end
MARKER = "DATAFLOW_BENCH_PEERS_RUN"
TF_DISPATCHER_PORT = 5050  # (inside the tf.data part's own network namespace: always free)


# ---- shared by every system ---------------------------------------------------------------------


def load_jpegs(jpeg_dir: str) -> list[bytes]:
    """The JPEGs the parent wrote, in id order."""
    names = sorted(os.listdir(jpeg_dir))
    return [Path(jpeg_dir, name).read_bytes() for name in names]


def wide_listeners(pids: Iterable[int]) -> list[str]:
    """Sockets of ``pids`` that listen (TCP) or are bound without a peer (UDP) on anything but
    loopback: ``["name pid ip:port", ...]``."""
    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            conns = proc.net_connections(kind="inet")
            name = proc.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            listening = c.status == psutil.CONN_LISTEN or (
                c.type == socket.SOCK_DGRAM and not c.raddr)
            if listening and c.laddr and not _loopback(c.laddr.ip):
                found.append(f"{name} {pid} {c.laddr.ip}:{c.laddr.port}")
    return found


def listeners(pids: Iterable[int]) -> list[str]:
    """The addresses ``pids`` listen on (TCP), each once."""
    found = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            found.update(f"{c.laddr.ip}:{c.laddr.port}" for c in
                         psutil.Process(pid).net_connections(kind="tcp")
                         if c.status == psutil.CONN_LISTEN)
    return sorted(found)


def namespace_links() -> list[str]:
    """The network links of this process's network namespace (``lo`` alone in a private one)."""
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [line.split(":")[1].strip() for line in out.splitlines()]


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def tree_pids() -> list[int]:
    """This process and every descendant alive now."""
    me = psutil.Process()
    return [me.pid] + [p.pid for p in me.children(recursive=True)]


class StuckError(RuntimeError):
    """A rank gave nothing more within the time limit."""


class Run:
    """What R ranks received in one epoch, read at once (one thread per rank)."""

    def __init__(self, ids: list[list[int]], first: list[float | None], gaps: list[float],
                 wall: float, killed: str | None, t0: float,
                 times: list[list[tuple[float, int]]]) -> None:
        self.ids, self.first, self.gaps, self.wall, self.killed = ids, first, gaps, wall, killed
        self.t0 = t0  # (perf_counter at the start)
        self.times = times  # per rank: (perf_counter, images) of each batch
        self.end = t0 + wall  # (perf_counter when the last rank's epoch ended)

    def end_wait(self) -> float:
        """Seconds from the epoch's last batch to the end of the last rank's epoch."""
        last = max((ts[-1][0] for ts in self.times if ts), default=self.t0)
        return self.end - last

    def steady(self) -> tuple[int, float]:
        """(images, seconds) from the moment every rank had its first batch to the last batch:
        the epoch without the job's start-up."""
        start = max(ts[0][0] for ts in self.times if ts)
        end = max(ts[-1][0] for ts in self.times if ts)
        return sum(c for ts in self.times for t, c in ts if t > start), end - start

    @property
    def images(self) -> int:
        return sum(len(r) for r in self.ids)

    @property
    def first_all(self) -> float:
        """Seconds until every rank had its first batch."""
        return max(t for t in self.first if t is not None) if any(
            t is not None for t in self.first) else float("nan")


def run_ranks(iters: list[Callable[[], Iterable[Any]]], timeout: float,
              origin: float | None = None, kill_at: int = 0,
              kill: Callable[[], str] | None = None) -> Run:
    """Read one epoch with one thread per rank. ``iters[r]()`` makes rank r's iterator (in its
    thread, so that creating it is timed too) over batches of ids. First-batch times count from
    ``origin`` (default: now). ``kill`` runs once, in the rank that brings the images received
    by all ranks to ``kill_at``; it returns what it did."""
    n = len(iters)
    lock = threading.Lock()
    ids: list[list[int]] = [[] for _ in range(n)]
    first: list[float | None] = [None] * n
    gaps = [0.0] * n
    times: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    errors: list[BaseException | None] = [None] * n
    state: dict[str, Any] = {"total": 0, "killed": None}
    t0 = time.perf_counter()
    origin = t0 if origin is None else origin

    def rank(r: int) -> None:
        try:
            last = None
            for batch_ids in iters[r]():
                now = time.perf_counter()
                if last is None:
                    first[r] = now - origin
                else:
                    gaps[r] = max(gaps[r], now - last)
                last = now
                times[r].append((now, len(batch_ids)))
                ids[r].extend(int(x) for x in np.asarray(batch_ids).ravel())
                with lock:
                    state["total"] += len(batch_ids)
                    fire = (kill is not None and state["killed"] is None
                            and state["total"] >= kill_at)
                    if fire:
                        state["killed"] = "..."
                if fire:
                    assert kill is not None
                    state["killed"] = kill()
        except BaseException as e:
            errors[r] = e

    threads = [threading.Thread(target=rank, args=(r,), daemon=True, name=f"rank-{r}")
               for r in range(n)]
    for t in threads:
        t.start()
    deadline = t0 + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.perf_counter()))
    wall = time.perf_counter() - t0
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    if stuck:
        raise StuckError(f"rank(s) {stuck} still waiting after {timeout:.0f} s; received per "
                         f"rank {[len(r) for r in ids]}")
    for e in errors:
        if e is not None:
            raise e
    return Run(ids, first, gaps, wall, state["killed"], t0, times)


def tally(ids: list[list[int]], n: int) -> dict[str, Any]:
    """Per-rank counts, and ids missing / repeated against ``range(n)``."""
    every = [i for r in ids for i in r]
    distinct = len(set(every))
    return {"per_rank": [len(r) for r in ids], "received": len(every), "distinct": distinct,
            "missing": n - distinct, "repeated": len(every) - distinct,
            "foreign": len(set(every) - set(range(n)))}


class Recorder:
    """The child's results, written to its JSON file after every step (a child killed at its
    time limit still leaves what it measured)."""

    def __init__(self, path: str, system: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {"system": system, "notes": []}

    def set(self, **kw: Any) -> None:
        self.data.update(kw)
        tmp = self.path + ".part"
        Path(tmp).write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)

    def note(self, line: str) -> None:
        self.data["notes"].append(line)
        self.set()

    def step(self, key: str, fn: Callable[[], dict[str, Any]]) -> None:
        """Run one measurement; a failure is recorded as its result and printed, and the next
        step still runs."""
        try:
            self.set(**{key: fn()})
        except BaseException as e:
            msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            print(f"  [{self.data['system']}] {key} FAILED: {msg}", flush=True)
            traceback.print_exc(file=sys.stderr)
            self.set(**{key: {"error": msg}})


def epochs(rec: Recorder, args: argparse.Namespace, n: int, t_start: float,
           make_iters: Callable[[int], list[Callable[[], Iterable[Any]]]]) -> None:
    """The clean epochs: the first one for the cold start and the counts, the others timed.
    ``make_iters(epoch)`` gives the R rank iterators of one epoch."""

    def one(e: int) -> Run:
        return run_ranks(make_iters(e), args.step_timeout, origin=t_start if e == 0 else None)

    def first() -> dict[str, Any]:
        run = one(0)
        out = {"cold_first_batch_s": run.first_all, "wall_s": run.wall, **tally(run.ids, n)}
        print(f"  [{rec.data['system']}] epoch 0: per rank {out['per_rank']}, missing "
              f"{out['missing']}, repeated {out['repeated']}; first batch at every rank "
              f"{run.first_all:.2f} s after the start", flush=True)
        return out

    def timed() -> dict[str, Any]:
        later = [one(e) for e in range(1, args.epochs)]
        images, wall = sum(r.images for r in later), sum(r.wall for r in later)
        steady = [r.steady() for r in later]
        counts = [tally(r.ids, n) for r in later]
        out = {"images": images, "wall_s": wall, "images_per_s": images / wall,
               "steady_images_per_s": sum(i for i, _ in steady) / sum(t for _, t in steady),
               "warm_first_batch_s": float(np.median([r.first_all for r in later])),
               "missing": [c["missing"] for c in counts],
               "repeated": [c["repeated"] for c in counts]}
        print(f"  [{rec.data['system']}] epochs 1-{args.epochs - 1}: {images} images in "
              f"{wall:.2f} s = {images / wall:,.0f} img/s ({out['steady_images_per_s']:,.0f} "
              "img/s once every rank had its first batch); first batch of an epoch "
              f"{out['warm_first_batch_s']:.2f} s", flush=True)
        return out

    rec.step("epoch0", first)
    rec.step("throughput", timed)


def kill_result(rec: Recorder, run: Run, n: int, events: dict[str, float] | None = None
                ) -> dict[str, Any]:
    """The kill epoch's figures; with ``events`` (perf_counter of "kill" and "restart" of the
    worker), also what came between the two."""
    out = {**tally(run.ids, n), "killed": run.killed, "longest_gap_s": max(run.gaps),
           "end_wait_s": run.end_wait(), "wall_s": run.wall}
    extra = ""
    if events and "kill" in events:
        batches = sorted((t, c) for ts in run.times for t, c in ts)
        k, r = events["kill"], events.get("restart", float("inf"))
        between = [(t, c) for t, c in batches if k < t < r]
        after = [t for t, _ in batches if t > r]
        out.update(images_between_kill_and_restart=sum(c for _, c in between),
                   last_batch_before_restart_s=(between[-1][0] - k) if between else None,
                   restarted_after_s=(r - k) if r != float("inf") else None,
                   first_batch_after_restart_s=(after[0] - r) if after else None)
        extra = (f"; {out['images_between_kill_and_restart']} images between the kill and the "
                 f"restart ({out['restarted_after_s'] or float('nan'):.1f} s later)")
    print(f"  [{rec.data['system']}] worker SIGKILLed mid-epoch ({run.killed}): per rank "
          f"{out['per_rank']}, missing {out['missing']}, repeated {out['repeated']}, longest "
          f"gap {out['longest_gap_s']:.2f} s, from the last batch to the end of the epoch "
          f"{out['end_wait_s']:.2f} s{extra}", flush=True)
    return out


def resume_result(rec: Recorder, n: int, api: str, before: list[int], after: list[int],
                  others: list[list[int]], restart_first: float | None,
                  same_epoch: bool = True, **extra: Any) -> dict[str, Any]:
    """What a rank restarted mid-epoch received, and the interrupted epoch of all ranks: rank 0's
    images before its restart (and after it, when ``same_epoch``) with the other ranks'."""
    whole = tally([before + after if same_epoch else before, *others], n)
    out = {"api": api, "before": len(before), "after_restart": len(after),
           "again": len(set(before) & set(after)),
           "same_epoch": same_epoch, "restart_first_batch_s": restart_first, **whole, **extra}
    print(f"  [{rec.data['system']}] rank 0 restarted after {len(before)} images: received "
          f"{len(after)} {'more' if same_epoch else 'in a new epoch'} ({out['again']} of them "
          f"again); the interrupted epoch: per rank {whole['per_rank']}, missing "
          f"{whole['missing']}, repeated {whole['repeated']}", flush=True)
    return out


def _first_line(e: BaseException) -> str:
    """An exception's message, its first line, without TF's ``{{function_node ...}}`` prefix."""
    text = re.sub(r"\{\{.*?\}\}\s*", "", str(e)).strip()
    return text.splitlines()[0][:160] if text else ""


def _batch_ids(batches: Iterable[Any], key: Callable[[Any], Any]) -> Iterable[Any]:
    for b in batches:
        yield key(b)


# ---- ours -------------------------------------------------------------------------------------


def child_ours(args: argparse.Namespace, rec: Recorder) -> None:
    import dataflow as df
    from dataflow.demo import DecodeAndAugment
    from dataflow.service import DataService, ServiceData

    jpegs = load_jpegs(args.jpeg_dir)
    n, nranks = len(jpegs), args.ranks
    data = [[b, i] for i, b in enumerate(jpegs)]  # [JPEG bytes, id]: the map keeps dp[1]
    t_start = time.perf_counter()
    svc = DataService(df.DataFromList(data, shuffle=False), DecodeAndAugment(),
                      num_workers=args.workers, seed=0).start()
    consumers: list[Any] = []
    try:
        rec.set(listeners=listeners(tree_pids()),
                listeners_beyond_loopback=wide_listeners(tree_pids()), address=svc.address)

        def ranks() -> list[Any]:
            new = [ServiceData(svc.address, rank=r, world_size=nranks) for r in range(nranks)]
            consumers.extend(new)
            return new

        def as_iters(sds: list[Any]) -> list[Callable[[], Iterable[Any]]]:
            flows = [df.BatchData(sd, BATCH, remainder=True) for sd in sds]
            for f in flows:
                f.reset_state()
            return [lambda f=f: _batch_ids(f, lambda b: b[1]) for f in flows]

        # one ServiceData per rank for every clean epoch: each __iter__ is the next epoch
        clean = as_iters(ranks())
        epochs(rec, args, n, t_start, lambda e: clean)

        def kill() -> dict[str, Any]:
            def sigkill() -> str:
                pid = svc.worker_pids()[0]
                os.kill(pid, signal.SIGKILL)
                return f"worker pid {pid}"

            run = run_ranks(as_iters(ranks()), args.step_timeout, kill_at=n // 4, kill=sigkill)
            out = kill_result(rec, run, n)
            out["restarts"] = svc.stats()["restarts"]
            out["how"] = f"the service started another ({out['restarts']} restart in its stats)"
            return out

        rec.step("kill", kill)

        def resume() -> dict[str, Any]:
            sd0, *rest = ranks()
            box: dict[str, Any] = {}
            others = as_iters(rest)  # (ranks 1.. read their epoch meanwhile, in a thread)
            t = threading.Thread(target=lambda: box.update(run=run_ranks(
                others, args.step_timeout)), daemon=True)
            t.start()
            flow = df.BatchData(sd0, BATCH, remainder=True)
            flow.reset_state()
            before: list[int] = []
            for b in flow:  # rank 0 reads 2 batches, saves its state, and "dies"
                before.extend(int(x) for x in b[1])
                if len(before) >= 2 * BATCH:
                    break
            state = sd0.state_dict()
            sd0.close()
            t0 = time.perf_counter()
            sd0b = ServiceData(svc.address, rank=0, world_size=nranks)
            consumers.append(sd0b)
            sd0b.reset_state()
            sd0b.load_state_dict(state)
            again = run_ranks(as_iters([sd0b]), args.step_timeout, origin=t0)
            t.join(args.step_timeout)
            if "run" not in box:
                raise StuckError("the other ranks did not finish their epoch")
            return resume_result(rec, n, "state_dict() / load_state_dict()", before,
                                 again.ids[0], box["run"].ids, again.first[0])

        rec.step("resume", resume)
    finally:
        for c in consumers:
            with contextlib.suppress(Exception):
                c.close()
        svc.close()


# ---- tf.data service ----------------------------------------------------------------------------


def tf_server(role: str, port: int, args: argparse.Namespace) -> None:
    """A tf.data server process: ``dispatcher`` on ``port``, or a ``worker`` on
    ``--worker-port`` registering with the dispatcher on ``port``. ``--tf-worker-timeout-ms``
    (dispatcher) and ``--tf-heartbeat-ms`` (workers): how soon the dispatcher declares a silent
    worker gone (0: TF's defaults)."""
    import tensorflow as tf

    service = tf.data.experimental.service
    if role == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(
            port=port, worker_timeout_ms=args.tf_worker_timeout_ms or None))
    else:
        server = service.WorkerServer(service.WorkerConfig(
            dispatcher_address=f"localhost:{port}", port=args.worker_port,
            worker_address="localhost:%port%",
            heartbeat_interval_ms=args.tf_heartbeat_ms or None))
    server.join()


def tf_dataset(jpeg_dir: str, n: int) -> Any:
    """The pipeline in TF ops: read JPEG ``i`` -> decode -> Inception-style random crop
    (8%-100% of the area, aspect 3/4-4/3) resized to 224 -> random horizontal flip -> PCA
    lighting (the constants of ``dataflow.demo``) -> uint8 -> batches of 64 (on the workers)."""
    import tensorflow as tf

    from dataflow.demo import EIGVAL, EIGVEC

    eigval = tf.constant(EIGVAL, tf.float32)
    eigvec = tf.constant(EIGVEC, tf.float32)

    def load(i: Any) -> tuple[Any, Any]:
        path = tf.strings.join([jpeg_dir, "/", tf.strings.as_string(i, width=5, fill="0"),
                                ".jpg"])
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(image), bounding_boxes=tf.zeros([1, 0, 4]), min_object_covered=0.0,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        image = tf.image.resize(tf.slice(image, begin, size), [CROP, CROP])
        image = tf.image.random_flip_left_right(image)
        alpha = tf.random.normal([3], stddev=0.1)
        image = image + tf.linalg.matvec(eigvec, alpha * eigval)
        return tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8), i

    # (a sequential map: 2 workers on 2 cores; num_parallel_calls=AUTOTUNE gave the same rate)
    return tf.data.Dataset.range(n).map(load).batch(BATCH)


def tf_flags(args: argparse.Namespace) -> list[str]:
    return ["--tf-compression", args.tf_compression, "--tf-worker-timeout-ms",
            str(args.tf_worker_timeout_ms), "--tf-heartbeat-ms", str(args.tf_heartbeat_ms),
            "--tf-restart-after", str(args.tf_restart_after)]


def child_tf(args: argparse.Namespace, rec: Recorder) -> None:
    """Runs inside the network namespace: the servers are processes started from here."""
    rec.set(namespace_links=namespace_links())
    n = len(os.listdir(args.jpeg_dir))
    nranks = args.ranks
    procs: list[subprocess.Popen] = []
    log = open(os.path.join(args.dir, "tf-servers.log"), "ab")  # noqa: SIM115

    def spawn(role: str, port: int = 0) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, __file__, "--tf-server", role, "--port",
                              str(TF_DISPATCHER_PORT), "--worker-port", str(port),
                              *tf_flags(args)], stdout=log, stderr=log)
        procs.append(p)
        return p

    def listening(pid: int) -> bool:
        with contextlib.suppress(psutil.NoSuchProcess):
            return any(c.status == psutil.CONN_LISTEN
                       for c in psutil.Process(pid).net_connections(kind="inet"))
        return False

    t_start = time.perf_counter()
    try:
        spawn("dispatcher")
        # workers on fixed ports, so that a worker can be started again at the same address
        ports = [TF_DISPATCHER_PORT + 1 + k for k in range(args.workers)]
        workers = [spawn("worker", port) for port in ports]
        import tensorflow as tf

        service = tf.data.experimental.service
        target = f"grpc://localhost:{TF_DISPATCHER_PORT}"
        deadline = time.monotonic() + args.step_timeout
        while not all(listening(p.pid) for p in procs):  # every server up
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("tf.data servers did not start (see tf-servers.log)")
            time.sleep(0.05)
        rec.set(listeners=listeners(p.pid for p in procs),
                listeners_beyond_loopback=wide_listeners(p.pid for p in procs))

        def dist(job: str) -> Any:
            return tf_dataset(args.jpeg_dir, n).apply(service.distribute(
                processing_mode="distributed_epoch", service=target, job_name=job,
                compression=None if args.tf_compression == "none" else args.tf_compression))

        def as_iters(job: str, ranks: int) -> list[Callable[[], Iterable[Any]]]:
            # every rank consumes the same job: the ranks share one pass over the data
            return [lambda: _batch_ids(dist(job), lambda b: b[1].numpy())
                    for _ in range(ranks)]

        epochs(rec, args, n, t_start, lambda e: as_iters(f"epoch-{e}", nranks))

        def kill() -> dict[str, Any]:
            # the killed worker is started again at the same address after
            # --tf-restart-after seconds, as a supervisor would: the consumers of a job that
            # lost a worker do not see the job's end until the worker is back (in a trial
            # without the restart they still waited after 200 s); the other worker keeps running
            events: dict[str, float] = {}

            def restart() -> None:
                events["restart"] = time.perf_counter()
                workers[0] = spawn("worker", ports[0])

            def sigkill() -> str:
                pid = workers[0].pid
                os.kill(pid, signal.SIGKILL)
                events["kill"] = time.perf_counter()
                workers[0].wait()
                timer = threading.Timer(args.tf_restart_after, restart)
                timer.daemon = True
                timer.start()
                return f"WorkerServer pid {pid}"

            run = run_ranks(as_iters("kill", nranks), args.step_timeout, kill_at=n // 4,
                            kill=sigkill)
            out = kill_result(rec, run, n, events)
            after = out["restarted_after_s"]
            out["how"] = (
                f"started again at its address by this script {after:.0f} s after the kill; "
                f"{out['images_between_kill_and_restart']} images came in between (the last "
                f"{out['last_batch_before_restart_s']:.2f} s after the kill); the epoch ended "
                f"{run.end - events['restart']:.1f} s after the restart"
                if after is not None else "not started again")
            return out

        rec.step("kill", kill)
        deadline = time.monotonic() + args.step_timeout
        while workers[0].poll() is None and not listening(workers[0].pid):
            if time.monotonic() > deadline:  # (2 workers again for the next step)
                break
            time.sleep(0.05)

        def resume() -> dict[str, Any]:
            job = "resume"
            box: dict[str, Any] = {}
            t = threading.Thread(target=lambda: box.update(run=run_ranks(
                as_iters(job, nranks - 1), args.step_timeout)), daemon=True)
            t.start()
            it = iter(dist(job))
            before: list[int] = []
            while len(before) < 2 * BATCH:
                before.extend(int(x) for x in next(it)[1].numpy())
            # the iterator's checkpoint is what TF offers for resuming a tf.data iterator
            prefix = os.path.join(args.dir, "tf-ckpt", "it")
            try:
                saved = tf.train.Checkpoint(iterator=it).write(prefix)
                ckpt = "tf.train.Checkpoint(iterator).write: saved"
            except Exception as e:
                saved, ckpt = None, (f"tf.train.Checkpoint(iterator).write: "
                                     f"{type(e).__name__}: {_first_line(e)}")
            del it  # rank 0 "dies"
            gc.collect()
            t0 = time.perf_counter()
            it2 = iter(dist(job))  # a new consumer of the same job
            if saved is not None:
                try:
                    tf.train.Checkpoint(iterator=it2).read(saved).assert_consumed()
                    ckpt += "; read into a new iterator: ok"
                except Exception as e:
                    ckpt += f"; read into a new iterator: {type(e).__name__}: {_first_line(e)}"
            print(f"  [tf] {ckpt}", flush=True)
            again = run_ranks([lambda: _batch_ids(it2, lambda b: b[1].numpy())],
                              args.step_timeout, origin=t0)
            t.join(args.step_timeout)
            if "run" not in box:
                raise StuckError("the other ranks did not finish their epoch")
            return resume_result(rec, n, "none per consumer (a new consumer joins the job)",
                                 before, again.ids[0], box["run"].ids, again.first[0],
                                 checkpoint=ckpt)

        rec.step("resume", resume)
    finally:
        for p in procs:
            with contextlib.suppress(Exception):
                p.kill()
        for p in procs:
            with contextlib.suppress(Exception):
                p.wait(10)
        log.close()


# ---- Ray Data -----------------------------------------------------------------------------------


class RayDecode:
    """``DecodeAndAugment`` on a Ray Data row ``{"jpeg", "id"}`` -> ``{"image", "id"}``: one
    instance per actor of the pool."""

    def __init__(self) -> None:
        from dataflow.demo import DecodeAndAugment

        self.fn = DecodeAndAugment()

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        image, i = self.fn([row["jpeg"], int(row["id"])])
        return {"image": image, "id": i}


def ray_map_processes() -> list[psutil.Process]:
    """The processes of Ray's map actors (their titles name the map: ``ray::MapWorker(...)``)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            title = " ".join(p.cmdline())
            if title.startswith("ray::") and "Map" in title:
                found.append(p)
    return found


def child_ray(args: argparse.Namespace, rec: Recorder) -> None:
    """Runs inside a network namespace of its own: on this machine, ray.init(
    _node_ip_address="127.0.0.1") still had its gcs_server, raylet and workers listen on every
    interface (``::``) and its runtime-env agent on the host's address."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # (no report sent anywhere)
    import ray

    rec.set(namespace_links=namespace_links())
    jpegs = load_jpegs(args.jpeg_dir)
    n, nranks = len(jpegs), args.ranks
    items = [{"jpeg": b, "id": i} for i, b in enumerate(jpegs)]
    t_start = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, _node_ip_address="127.0.0.1",
             _temp_dir=os.path.join(args.dir, "ray"), object_store_memory=1 << 30,
             log_to_driver=False)
    try:
        rec.set(listeners=listeners(tree_pids()),
                listeners_beyond_loopback=wide_listeners(tree_pids()))
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False

        def splits() -> list[Any]:
            ds = ray.data.from_items(items, override_num_blocks=64)
            ds = ds.map(RayDecode, concurrency=args.workers)
            return ds.streaming_split(nranks, equal=True)

        def as_iters(its: list[Any]) -> list[Callable[[], Iterable[Any]]]:
            return [lambda it=it: _batch_ids(it.iter_batches(batch_size=BATCH,
                                                             batch_format="numpy"),
                                             lambda b: b["id"]) for it in its]

        # the same split iterators for every clean epoch: each iter_batches is the next epoch
        clean = as_iters(splits())
        epochs(rec, args, n, t_start, lambda e: clean)

        def kill() -> dict[str, Any]:
            def sigkill() -> str:
                procs = ray_map_processes()
                if not procs:
                    return "no map actor process found"
                pid, title = procs[0].pid, " ".join(procs[0].cmdline()).strip()[:60]
                os.kill(pid, signal.SIGKILL)
                return f"map actor pid {pid} ({title})"

            run = run_ranks(as_iters(splits()), args.step_timeout, kill_at=n // 4, kill=sigkill)
            out = kill_result(rec, run, n)
            out["how"] = "left to Ray Data (no action by this script)"
            return out

        rec.step("kill", kill)

        def resume() -> dict[str, Any]:
            its = splits()
            box: dict[str, Any] = {}
            t = threading.Thread(target=lambda: box.update(run=run_ranks(
                as_iters(its[1:]), args.step_timeout)), daemon=True)
            t.start()
            before: list[int] = []
            batches = iter(its[0].iter_batches(batch_size=BATCH, batch_format="numpy"))
            while len(before) < 2 * BATCH:
                before.extend(int(x) for x in next(batches)["id"])
            # rank 0 "dies": its batch iterator is closed and dropped; a restarted rank has only
            # the split's DataIterator (which a trainer process receives, pickled, at its start)
            close = getattr(batches, "close", None)
            if close is not None:
                close()
            del batches
            gc.collect()
            api = ("none: DataIterator has no state_dict"
                   if not hasattr(its[0], "state_dict") else "DataIterator.state_dict")
            # the restarted rank calls iter_batches() again on its split
            t0 = time.perf_counter()
            box0: dict[str, Any] = {}

            def again() -> None:
                try:
                    box0["run"] = run_ranks(as_iters(its[:1]), args.step_timeout, origin=t0)
                except BaseException as e:
                    box0["error"] = e

            t_again = threading.Thread(target=again, daemon=True)
            t_again.start()
            t.join(args.step_timeout)
            if "run" not in box:
                raise StuckError("the other ranks did not finish their epoch")
            t_again.join(args.resume_wait)
            same_epoch = True
            if t_again.is_alive():
                # nothing came: a split's iter_batches() starts a new epoch, which begins when
                # every split has asked for it; the other ranks ask for their next one too
                api += (f"; iter_batches() again: nothing in {args.resume_wait:.0f} s, then a "
                        "new epoch once the other ranks began their next one")
                same_epoch = False
                next_epoch = run_ranks(as_iters(its[1:]), args.step_timeout)
                t_again.join(args.step_timeout)
                rec.note(f"resume: the other ranks began their next epoch {args.resume_wait:.0f} "
                         f"s after rank 0's restart and received {[len(x) for x in next_epoch.ids]}"
                         " images in it")
            if "error" in box0:
                raise box0["error"]
            if "run" not in box0:
                raise StuckError("the restarted rank 0 received nothing")
            run0 = box0["run"]
            return resume_result(rec, n, api, before, run0.ids[0], box["run"].ids,
                                 run0.first[0], same_epoch=same_epoch)

        rec.step("resume", resume)
    finally:
        ray.shutdown()


# ---- the map alone ---------------------------------------------------------------------------


def child_map(args: argparse.Namespace, rec: Recorder) -> None:
    """Each map on one core with no service around it: OpenCV's ``DecodeAndAugment`` (ours and
    Ray Data) and the TF-ops pipeline (tf.data service) over the N images, the best of 3 passes
    after a warm-up, this process pinned to one core: what an image costs each system before
    any data moves."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from dataflow.demo import DecodeAndAugment

    jpegs = load_jpegs(args.jpeg_dir)
    fn = DecodeAndAugment()
    for b in jpegs[:16]:
        fn([b, 0])
    cv2_rate = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for i, b in enumerate(jpegs):
            fn([b, i])
        cv2_rate = max(cv2_rate, len(jpegs) / (time.perf_counter() - t0))
    ds = tf_dataset(args.jpeg_dir, len(jpegs))
    for _ in ds.take(1):
        pass
    tf_rate = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        count = sum(int(ids.shape[0]) for _, ids in ds)
        tf_rate = max(tf_rate, count / (time.perf_counter() - t0))
    print(f"  [map] one core, no service: OpenCV DecodeAndAugment {cv2_rate:,.0f} img/s, "
          f"the TF-ops pipeline {tf_rate:,.0f} img/s", flush=True)
    rec.set(cv2_images_per_s=cv2_rate, tf_images_per_s=tf_rate)


# ---- the parent -------------------------------------------------------------------------------


def marked_processes(marker: str) -> list[psutil.Process]:
    """Every process (of this user) whose environment carries this run's marker."""
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get(MARKER) == marker:
                found.append(p)
    return found


def end_all(marker: str) -> int:
    """Kill (SIGKILL) every process of this run but this one; the count killed."""
    procs = marked_processes(marker)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=10)
    return len(procs)


def run_child(system: str, args: argparse.Namespace, tmp: str) -> dict[str, Any] | None:
    """Run one system's measurements in a child process under the time limit; its results
    (what it measured before a failure or a timeout too), or None."""
    out = os.path.join(tmp, f"{system}.json")
    cmd = [sys.executable, __file__, "--child", system, "--dir", tmp,
           "--jpeg-dir", os.path.join(tmp, "jpeg"), "--ranks", str(args.ranks),
           "--workers", str(args.workers), "--epochs", str(args.epochs),
           "--step-timeout", str(args.step_timeout), "--resume-wait", str(args.resume_wait),
           *tf_flags(args)]
    if system in ("tf", "ray"):  # a network namespace of its own, with only lo, up
        cmd = ["unshare", "--net", "--map-root-user", "bash", "-c",
               'ip link set lo up && exec "$@"', "bash", *cmd]
    env = {**os.environ, MARKER: tmp,
           "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH"))
                                         if p)}
    log_path = os.path.join(tmp, f"{system}.log")
    print(f"{TITLES[system]}:", flush=True)
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=None, stderr=log, env=env,
                                start_new_session=True)
        try:
            rc: int | None = proc.wait(args.timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # (its own session: only its processes)
            proc.wait()
            left = end_all(tmp)
    dt = time.perf_counter() - t0
    if rc != 0:
        why = f"timed out after {args.timeout:.0f} s" if rc is None else f"exit status {rc}"
        tail = Path(log_path).read_text(errors="replace").strip().splitlines()[-6:]
        print(f"  [{system}] FAILED: {why}; the end of its log:", flush=True)
        for line in tail:
            print(f"    {line[:200]}", flush=True)
    print(f"  [{system}] {dt:.0f} s in all; {left} leftover process(es) killed", flush=True)
    if not os.path.exists(out):
        return None
    res = json.loads(Path(out).read_text())
    if rc != 0:
        res["notes"].append("timed out" if rc is None else f"failed (exit status {rc})")
    return res


def _cell(res: dict[str, Any] | None, key: str, fmt: Callable[[dict[str, Any]], str]) -> str:
    if res is None:
        return "not measured (the child failed before it)"
    part = res.get(key)
    if part is None:
        return "not measured"
    if "error" in part:
        return f"failed: {part['error'][:120]}"
    return fmt(part)


def table(results: dict[str, dict[str, Any] | None], n: int, nranks: int,
          alone: dict[str, Any] | None) -> str:
    systems = list(results)

    def counts(p: dict[str, Any]) -> str:
        return (f"{' / '.join(str(c) for c in p['per_rank'])}; missing {p['missing']}, "
                f"repeated {p['repeated']}")

    rows: list[tuple[str, str, Callable[[dict[str, Any]], str]]] = [
        (f"images/s, R={nranks}, whole epochs after the first (each epoch's start included)",
         "throughput",
         lambda p: f"**{p['images_per_s']:,.0f}** ({p['images']} in {p['wall_s']:.2f} s)"),
        ("images/s once every rank had its first batch of the epoch", "throughput",
         lambda p: f"{p['steady_images_per_s']:,.0f}"),
        ("start to the first batch at every rank (cold)", "epoch0",
         lambda p: f"{p['cold_first_batch_s']:.2f} s"),
        ("first batch of a later epoch (warm, median)", "throughput",
         lambda p: f"{p['warm_first_batch_s']:.2f} s"),
        (f"one epoch of {n}: per rank; ids missing, repeated", "epoch0", counts),
        ("later epochs: ids missing, repeated", "throughput",
         lambda p: f"{sum(p['missing'])}, {sum(p['repeated'])} in all"),
        (f"a worker SIGKILLed after ~{n // 4} images: per rank; missing, repeated", "kill",
         counts),
        ("... longest gap between two batches of a rank; from the last batch to the end of "
         "the epoch", "kill", lambda p: f"{p['longest_gap_s']:.2f} s; {p['end_wait_s']:.2f} s"),
        ("... the killed worker", "kill", lambda p: p.get("how", "")),
        ("rank 0 restarted after 128 images: resume API", "resume", lambda p: p["api"]),
        ("... what the restarted rank received", "resume",
         lambda p: f"{p['after_restart']}{'' if p['same_epoch'] else ' in a new epoch'} "
                   f"({p['again']} of them again), first batch "
                   + (f"{p['restart_first_batch_s']:.2f} s" if p["restart_first_batch_s"]
                      is not None else "never")),
        ("... the interrupted epoch: per rank; missing, repeated", "resume", counts),
    ]
    head = "| figure | " + " | ".join(TITLES[s] for s in systems) + " |"
    lines = [head, "|" + " --- |" * (len(systems) + 1)]
    if alone is not None and "cv2_images_per_s" in alone:
        rate = {"ours": alone["cv2_images_per_s"], "ray": alone["cv2_images_per_s"],
                "tf": alone["tf_images_per_s"]}
        lines.append("| the map alone, one core, no service (img/s) | " + " | ".join(
            f"{rate[s]:,.0f} ({'TF ops' if s == 'tf' else 'OpenCV'})" for s in systems) + " |")
    for title, key, fmt in rows:
        lines.append(f"| {title} | " + " | ".join(_cell(results[s], key, fmt)
                                                  for s in systems) + " |")
    listen = []
    for s in systems:
        r = results[s]
        if r is None or "listeners_beyond_loopback" not in r:
            listen.append("not checked")
        elif "namespace_links" in r:
            listen.append(f"{len(r['listeners'])} TCP ports ({len(r['listeners_beyond_loopback'])}"
                          " on every interface), in a network namespace of its own whose only "
                          f"link is {', '.join(r['namespace_links'])}")
        else:
            wide = r["listeners_beyond_loopback"]
            listen.append(("nothing" if not wide else ", ".join(wide))
                          + f" (TCP: {', '.join(r.get('listeners', []))})")
    lines.append("| listens beyond loopback | " + " | ".join(listen) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=513,
                    help="images of an epoch (not a multiple of --ranks, to see the partial end)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=6,
                    help="clean epochs: the first for the counts, the others timed")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"a subset of {','.join(SYSTEMS)}")
    ap.add_argument("--timeout", type=float, default=150, help="seconds per system")
    ap.add_argument("--step-timeout", type=float, default=45,
                    help="seconds one epoch of one system may take")
    ap.add_argument("--tf-compression", default="none", choices=("none", "AUTO", "SNAPPY"),
                    help="tf.data service's compression of elements (default: none, as on "
                         "loopback; TF's own default is AUTO)")
    ap.add_argument("--tf-worker-timeout-ms", type=int, default=0,
                    help="the dispatcher's worker_timeout_ms (0: TF's default)")
    ap.add_argument("--tf-heartbeat-ms", type=int, default=0,
                    help="the workers' heartbeat_interval_ms (0: TF's default)")
    ap.add_argument("--tf-restart-after", type=float, default=10.0,
                    help="seconds after its SIGKILL that the killed tf.data worker is started "
                         "again at the same address")
    ap.add_argument("--resume-wait", type=float, default=15,
                    help="seconds a restarted Ray Data rank waits alone before the other rank "
                         "begins its next epoch")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary directory (the children's logs) and print its path")
    # (internal: a child's role)
    ap.add_argument("--child", choices=(*SYSTEMS, "map"), help=argparse.SUPPRESS)
    ap.add_argument("--tf-server", choices=("dispatcher", "worker"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--jpeg-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.tf_server:
        tf_server(args.tf_server, args.port, args)
        return
    if args.child:
        rec = Recorder(os.path.join(args.dir, f"{args.child}.json"), args.child)
        {"ours": child_ours, "tf": child_tf, "ray": child_ray, "map": child_map}[args.child](
            args, rec)
        return

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown system(s) {sorted(unknown)}; choose among {SYSTEMS}")
    tmp = tempfile.mkdtemp(prefix="dataflow-bench-peers-")
    try:
        from dataflow.demo import make_jpegs

        os.makedirs(os.path.join(tmp, "jpeg"))
        for i, (jpeg, _label) in enumerate(make_jpegs(args.images)):
            Path(tmp, "jpeg", f"{i:05d}.jpg").write_bytes(jpeg)
        print(f"# {args.images} JPEGs 500x375 -> 224x224, {args.workers} workers, "
              f"{args.ranks} ranks, batches of {BATCH}, {args.epochs} clean epochs; "
              f"{os.cpu_count()} cores; python {sys.version.split()[0]}; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        alone = run_child("map", args, tmp)
        results = {s: run_child(s, args, tmp) for s in systems}
        print(f"\n(load average at the end {os.getloadavg()[0]:.2f})\n")
        print(table(results, args.images, args.ranks, alone))
        print(f"- missing {args.images % args.ranks} in a clean epoch of ours and Ray Data: "
              "both give every rank the same count and leave out N mod R images by design "
              "(partial=\"drop\"; equal=True); tf.data service's ranks take what they ask "
              "for first")
        for s, r in results.items():
            for note in (r or {}).get("notes", []):
                print(f"- {TITLES[s]}: {note}")
            if r and "resume" in r and "checkpoint" in r["resume"]:
                print(f"- {TITLES[s]}: {r['resume']['checkpoint']}")
    finally:
        end_all(tmp)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
