"""Real servers on 127.0.0.1 for the streaming tests: an HTTP file server with Range support,
Python's own file server (which ignores Range), moto's S3 server, and a fault-injecting HTTP
proxy in front of either. Each is a context manager that stops its threads and closes its
sockets on exit."""

from __future__ import annotations

import http.client
import http.server
import os
import re
import socket
import struct
import threading
from collections import deque
from typing import Any

from tests.helpers import free_port

__all__ = ["FaultProxy", "MotoS3", "PlainHTTPServer", "RangeHTTPServer", "free_port"]

SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that goes away mid-answer (aborted, timed out) is part of the tests
        pass


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1 run in a thread."""

    handler: type[http.server.BaseHTTPRequestHandler]

    def __init__(self) -> None:
        self.httpd = _QuietServer(("127.0.0.1", 0), self.handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()


class _FileHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def log_message(self, *args: Any) -> None:
        pass

    def _target(self) -> str | None:
        root = self.server.owner.root  # type: ignore[attr-defined]
        path = os.path.normpath(os.path.join(root, self.path.lstrip("/").split("?")[0]))
        return path if path.startswith(root) and os.path.isfile(path) else None

    def do_HEAD(self) -> None:
        path = self._target()
        if path is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(os.path.getsize(path)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self) -> None:
        path = self._target()
        if path is None:
            self.send_error(404)
            return
        size = os.path.getsize(path)
        m = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
        start, stop = 0, size
        if m:
            start = int(m.group(1))
            stop = min(size, int(m.group(2)) + 1) if m.group(2) else size
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            left = stop - start
            while left:
                chunk = f.read(min(left, 1 << 20))
                self.wfile.write(chunk)
                left -= len(chunk)


class RangeHTTPServer(_Server):
    """Serves the files under ``root`` with HEAD and ``Range: bytes=a-b`` / ``a-``."""

    handler = _FileHandler

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        super().__init__()


class _PlainFileHandler(http.server.SimpleHTTPRequestHandler):
    """Python's own file server, as ``python -m http.server`` runs it (it ignores Range)."""

    def __init__(self, request: Any, client_address: Any, server: Any) -> None:
        super().__init__(request, client_address, server, directory=server.owner.root)

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.owner.count_get(self.headers.get("Range"))  # type: ignore[attr-defined]
        super().do_GET()


class PlainHTTPServer(_Server):
    """``python -m http.server`` over ``root``: it answers every GET with the whole file (200),
    whatever its ``Range`` header asks. ``ranges`` lists the Range header of each GET."""

    handler = _PlainFileHandler

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.ranges: list[str | None] = []
        self._lock = threading.Lock()
        super().__init__()

    def count_get(self, rng: str | None) -> None:
        with self._lock:
            self.ranges.append(rng)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._forward(fault=None)

    def do_GET(self) -> None:
        self._forward(fault=self.server.owner.next_fault())  # type: ignore[attr-defined]

    def do_PUT(self) -> None:
        self._forward(fault=None)

    def _forward(self, fault: tuple[str, int] | None) -> None:
        owner: FaultProxy = self.server.owner  # type: ignore[attr-defined]
        if fault is not None and fault[0] == "slowdown":
            self.send_response(503, "Slow Down")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(SLOWDOWN_BODY)))
            self.end_headers()
            self.wfile.write(SLOWDOWN_BODY)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection("127.0.0.1", owner.upstream_port, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(k, v)
        length = resp.getheader("Content-Length") if self.command == "HEAD" else len(data)
        self.send_header("Content-Length", str(length or 0))
        self.end_headers()
        if self.command == "HEAD":
            return
        if fault is None:
            self.wfile.write(data)
            owner.count_sent(len(data))
            return
        kind, after = fault
        self.wfile.write(data[:after])
        owner.count_sent(len(data[:after]))
        self.wfile.flush()
        if kind == "stall":  # hold the connection open, sending nothing, until stopped
            owner.stopping.wait()
        elif kind == "reset":  # RST instead of FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()


class FaultProxy(_Server):
    """An HTTP proxy to ``127.0.0.1:upstream_port`` that injects faults into GET answers.

    Each GET takes the next fault of ``faults`` (then ``always``, then none): ``("reset", k)``
    sends ``k`` body bytes then resets the connection; ``("truncate", k)`` sends ``k`` bytes
    then closes it; ``("stall", k)`` sends ``k`` bytes then sends nothing until the proxy
    stops; ``("slowdown", 0)`` answers 503 with S3's SlowDown error. ``injected`` counts them.
    """

    handler = _ProxyHandler

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.faults: deque[tuple[str, int]] = deque()
        self.always: tuple[str, int] | None = None
        self.injected = 0
        self.gets = 0
        self.body_bytes = 0  # GET body bytes sent
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        super().__init__()

    def next_fault(self) -> tuple[str, int] | None:
        with self._lock:
            self.gets += 1
            fault = self.faults.popleft() if self.faults else self.always
            self.injected += fault is not None
            return fault

    def count_sent(self, n: int) -> None:
        with self._lock:
            self.body_bytes += n

    def stop(self) -> None:
        self.stopping.set()
        super().stop()


class MotoS3:
    """moto's S3 server on 127.0.0.1 (a free port), with fake credentials in ``env``."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def __enter__(self) -> MotoS3:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def client(self, endpoint: str | None = None) -> Any:
        import boto3

        return boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing-secret",
            region_name="us-east-1",
        ).client("s3", endpoint_url=endpoint or self.url)
