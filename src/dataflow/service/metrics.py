"""A service's live figures in the Prometheus text exposition format, and a port that serves them.

:func:`prometheus_text` is pure: it renders the dict that :meth:`DataService.stats` returns
(version 0.0.4 of the text format: ``# HELP`` and ``# TYPE`` lines, then one sample per line).
Every name starts with ``dataflow_service_``; counters end in ``_total``; a worker's figures
carry a ``worker`` label, a consumer's ``job`` and ``rank``, a job's ``job``, dropped messages
their ``cause``. A figure missing from the dict is left out (never written as 0), so the
text says only what the service measured.

:class:`MetricsServer` serves that text at ``GET /metrics`` on a loopback port, for a
Prometheus server (or ``curl``) on the same machine. The names are listed in
``docs/service.md`` ("Prometheus metrics").
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dataflow.service import protocol

__all__ = ["CONTENT_TYPE", "PREFIX", "MetricsServer", "prometheus_text"]

logger = logging.getLogger(__name__)

#: the first part of every metric's name
PREFIX = "dataflow_service_"
#: the content type of the text exposition format
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = dict[str, str]
Sample = tuple[Labels, Any]


def _number(value: Any) -> str:
    """A sample's value as the text format writes it (an int without a point)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _label_value(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float)  # (a bool is an int: written 1 or 0)


def _first(row: Mapping[str, Any], *keys: str) -> Any:
    """The value of the first of ``keys`` that ``row`` has (the figures' names have had more
    than one spelling: a rate as ``items_per_second`` or ``rate``)."""
    for key in keys:
        if row.get(key) is not None:
            return row[key]
    return None


class _Families:
    """Metric families in the order they were first named, each with its samples."""

    def __init__(self) -> None:
        self._order: list[str] = []
        self._meta: dict[str, tuple[str, str]] = {}
        self._samples: dict[str, list[Sample]] = {}

    def add(self, name: str, kind: str, help_text: str, value: Any,
            labels: Labels | None = None) -> None:
        if not _is_number(value):
            return
        full = PREFIX + name
        if full not in self._meta:
            self._order.append(full)
            self._meta[full] = (kind, help_text)
            self._samples[full] = []
        self._samples[full].append((labels or {}, value))

    def text(self) -> str:
        lines: list[str] = []
        for name in self._order:
            kind, help_text = self._meta[name]
            lines.append(f"# HELP {name} {help_text.replace(chr(92), chr(92) * 2)}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in self._samples[name]:
                inner = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
                lines.append(f"{name}{{{inner}}} {_number(value)}" if inner
                             else f"{name} {_number(value)}")
        return "\n".join(lines) + "\n" if lines else ""


def _service(out: _Families, s: Mapping[str, Any]) -> None:
    info = {"address": s.get("address") or "", "instance": s.get("instance") or "",
            "backend": s.get("backend") or "process"}
    if s.get("identity"):  # (the fingerprint of what the outputs depend on)
        info["identity"] = str(s["identity"])
    out.add("info", "gauge", "Always 1; the labels say which service this is.", 1, info)
    out.add("uptime_seconds", "gauge", "Seconds since the service started.", s.get("uptime"))
    out.add("datapoints", "gauge", "Datapoints in one epoch of the default pipeline.",
            s.get("datapoints"))
    out.add("workers", "gauge", "Workers in the pool now.", s.get("num_workers"))
    out.add("restarts_total", "counter", "Workers replaced after they died or froze.",
            s.get("restarts"))
    dropped, causes = s.get("dropped"), s.get("dropped_by_cause")
    if isinstance(dropped, Mapping):  # (counted by cause only)
        dropped, causes = sum(dropped.values()), dropped
    out.add("dropped_messages_total", "counter",
            "Messages dropped (malformed, wrong token, unknown operation).", dropped)
    for cause, count in sorted((causes or {}).items()):
        out.add("dropped_messages_by_cause_total", "counter",
                "Messages dropped, by cause.", count, {"cause": str(cause)})
    out.add("bytes_sent_total", "counter", "Bytes of outputs the workers sent.",
            s.get("bytes_out"))
    out.add("dispatcher_cpu_seconds_total", "counter", "CPU seconds the dispatcher's loop used.",
            s.get("dispatcher_cpu_seconds"))
    if "bottleneck" in s:
        for side in ("pool", "consumers"):
            out.add("bottleneck", "gauge",
                    "1 for the side that limits the rate: the pool (consumers wait for more "
                    "than half of their time) or the consumers; 0 for both before any "
                    "consumer received.", int(s.get("bottleneck") == side), {"side": side})
    auto = s.get("autotune")
    if isinstance(auto, Mapping):
        out.add("autotune_workers", "gauge", "Workers the autotune controller chose.",
                auto.get("workers"))
        out.add("autotune_maximum_workers", "gauge",
                "Most workers the autotune controller may choose.", auto.get("maximum"))


def _workers(out: _Families, workers: Iterable[Mapping[str, Any]]) -> None:
    for w in workers:
        labels = {"worker": str(w.get("worker"))}
        out.add("worker_generation", "gauge",
                "How many times this worker's slot was filled (1: never replaced).",
                w.get("generation"), labels)
        out.add("worker_busy_ratio", "gauge",
                "Share of its lifetime the worker spent mapping (0 to 1).", w.get("busy"), labels)
        out.add("worker_items_total", "counter", "Items the worker mapped.", w.get("items"),
                labels)
        out.add("worker_items_per_second", "gauge",
                "Items the worker mapped per second over its lifetime.",
                _first(w, "items_per_second", "rate"), labels)
        out.add("worker_items_per_second_10s", "gauge",
                "Items the worker mapped per second over the last 10 seconds.",
                _first(w, "rate_10s", "items_per_second_10s"), labels)
        out.add("worker_bytes_sent_total", "counter", "Bytes of outputs the worker sent.",
                w.get("bytes_out"), labels)
        out.add("worker_dropped_messages_total", "counter", "Messages the worker dropped.",
                w.get("dropped"), labels)
        out.add("worker_queued", "gauge", "Items waiting in the worker's queue.",
                w.get("queued"), labels)


def _consumers(out: _Families, consumers: Iterable[Mapping[str, Any]]) -> None:
    for c in consumers:
        labels = {"job": str(c.get("job") or ""), "rank": str(c.get("rank"))}
        out.add("consumer_world_size", "gauge", "Ranks the consumer's job was started with.",
                c.get("world_size"), labels)
        out.add("consumer_received_total", "counter", "Items the consumer received.",
                c.get("received"), labels)
        out.add("consumer_wait_ratio", "gauge",
                "Share of its time the consumer waited for outputs (0 to 1).", c.get("wait"),
                labels)
        out.add("consumer_items_per_second", "gauge",
                "Items the consumer received per second since it started.",
                _first(c, "items_per_second", "rate"), labels)
        out.add("consumer_items_per_second_10s", "gauge",
                "Items the consumer received per second over the last 10 seconds.",
                _first(c, "rate_10s", "items_per_second_10s"), labels)
        out.add("consumer_bytes_received_total", "counter", "Bytes of outputs received.",
                c.get("bytes_in"), labels)
        out.add("consumer_in_flight", "gauge", "Items the consumer asked for and awaits.",
                c.get("in_flight"), labels)
        out.add("consumer_ready", "gauge", "Items received and not yet read.", c.get("ready"),
                labels)


def prometheus_text(stats: Mapping[str, Any]) -> str:
    """``stats`` (a :meth:`DataService.stats` dict) in the Prometheus text exposition format.

    Pure: the same dict gives the same text, families in a fixed order, samples in the
    order of the dict's workers, consumers and jobs."""
    if not isinstance(stats, Mapping):
        raise TypeError(f"`stats` must be the dict that DataService.stats() returns, got "
                        f"{stats!r} (type {type(stats).__name__}).")
    out = _Families()
    _service(out, stats)
    _workers(out, stats.get("workers") or [])
    _consumers(out, stats.get("consumers") or [])
    for name, job in sorted((stats.get("jobs") or {}).items()):
        if isinstance(job, Mapping):
            out.add("job_datapoints", "gauge", "Datapoints in one epoch of a named job's pipeline.",
                    job.get("n"), {"job": str(name)})
    return out.text()


def _handler(get_stats: Callable[[], Mapping[str, Any]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._send(404, "not found: the metrics are at /metrics\n", "text/plain")
                return
            try:
                body = prometheus_text(get_stats())
            except Exception as e:
                logger.warning("metrics: reading the service's stats failed: %s: %s",
                               type(e).__name__, e)
                self._send(500, f"reading the service's stats failed: {type(e).__name__}: "
                                f"{' '.join(str(e).split())}\n", "text/plain")
                return
            self._send(200, body, CONTENT_TYPE)

        def _send(self, code: int, body: str, ctype: str) -> None:
            data = body.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("metrics: " + format, *args)

    return Handler


class MetricsServer:
    """Serves ``prometheus_text(get_stats())`` at ``GET /metrics`` on ``host:port`` (port 0:
    a free one; read :attr:`port` or :attr:`url`), from a daemon thread, one thread per
    request. Loopback only: the figures name the service's addresses, and the port has no
    authentication. A ``get_stats`` that raises answers HTTP 500 with one line, and the port
    keeps serving. ``close()`` is idempotent; the server is a context manager."""

    def __init__(self, get_stats: Callable[[], Mapping[str, Any]], port: int = 0,
                 host: str = "127.0.0.1") -> None:
        if not callable(get_stats):
            raise TypeError(f"`get_stats` must be callable, got {get_stats!r} (type "
                            f"{type(get_stats).__name__}); pass e.g. get_stats=service.stats.")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"`port` must be an int in 0..65535 (0: a free port), got "
                             f"{port!r}.")
        if not isinstance(host, str) or not protocol.is_loopback(host):
            raise ValueError(
                f"`host` of the metrics port must be a loopback address, got {host!r}: the "
                "port has no authentication. Pass host='127.0.0.1' and let a Prometheus "
                "server on the same machine (or an SSH tunnel) read it.")
        self._server = ThreadingHTTPServer((host, port), _handler(get_stats))
        self._server.daemon_threads = True
        self.host = host
        self.port: int = int(self._server.server_address[1])
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name=f"dataflow-metrics-{self.port}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
