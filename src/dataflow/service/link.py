"""A consumer's sockets to one :class:`~dataflow.service.DataService`: the control socket to
its dispatcher, one socket to each of its workers, and the shared rings of the workers on this
machine. :class:`~dataflow.service.ServiceData` reads epochs through it; this module knows
nothing of epochs.

The sockets belong to the process that made them: a copy in a forked process (a DataLoader
worker) forgets them without touching them, and a pickled copy (a spawned process) carries
none; each connects anew where it is used.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from dataflow.errors import DataFlowError
from dataflow.service import protocol

__all__ = ["RING_BYTES", "ServiceError", "ServiceLink"]

#: bytes of the shared ring a consumer makes for each worker on its machine that it asks
#: (the arrays of the answers in flight from that worker; an answer that does not fit goes
#: through the socket)
RING_BYTES = 16 * 1024 * 1024


class ServiceError(DataFlowError, ConnectionError):
    """The service cannot be reached, refused this consumer, or closed."""


class ServiceLink:
    """The sockets of one consumer of the service at ``address`` (``server_key``: the
    service's CURVE public key, or None)."""

    def __init__(self, address: str, server_key: bytes | None) -> None:
        self.address, self.server_key = address, server_key
        self.ctx: Any = None
        self.ctl: Any = None  # a DEALER to the dispatcher
        self.socks: dict[str, Any] = {}  # a worker's address -> a DEALER connected to it
        self.asked: set[str] = set()  # the workers asked something (each has its ring)
        self.rings: dict[str, tuple[str, Any]] = {}  # a worker's address -> its ring
        self.dropped = 0  # messages that did not match the protocol
        self.pid: int | None = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "ctx": None, "ctl": None, "socks": {}, "asked": set(),
                "rings": {}, "pid": None}

    def forget_forked(self) -> None:
        """In a forked copy, forget the parent's sockets and rings (never use or close them:
        they are the parent's)."""
        if self.pid != os.getpid():
            self.ctx, self.ctl, self.socks, self.asked, self.rings = None, None, {}, set(), {}
            self.pid = os.getpid()

    def _socket(self, address: str) -> Any:
        import zmq

        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.server_key is not None:
            protocol.curve_client(sock, self.server_key)
        sock.connect(address)
        return sock

    def open(self) -> None:
        """The control socket (made once)."""
        import zmq

        self.forget_forked()
        if self.ctx is None:
            self.ctx = zmq.Context()
        if self.ctl is None:
            self.ctl = self._socket(self.address)

    def send(self, msg: dict[str, Any]) -> None:
        """Send ``msg`` to the dispatcher (dropped if its queue is full)."""
        import zmq

        with contextlib.suppress(zmq.Again):
            self.ctl.send(protocol.encode(msg), zmq.NOBLOCK)

    def receive(self) -> dict[str, Any] | None:
        """The dispatcher's next message, None for one that does not match the protocol
        (counted); ``ServiceError`` when it refused this consumer or closed."""
        try:
            msg = protocol.decode(self.ctl.recv())
            protocol.check(msg, "consumer")
        except ValueError:
            self.dropped += 1
            return None
        if msg["op"] == "refused":
            raise ServiceError(f"ServiceData: the DataService at {self.address} refused this "
                               f"consumer: {msg.get('error')}")
        if msg["op"] == "closed":
            raise ServiceError(f"ServiceData: the DataService at {self.address} closed while "
                               "this consumer was reading.")
        return msg

    def workers(self, config: dict[str, Any]) -> list[str]:
        """Connect to the workers of ``config``; close sockets of workers no longer there
        (a replaced worker, or every worker of a service that restarted, listens at another
        address). Returns the live workers' addresses."""
        live = [str(addr) for _w, _g, addr in config["workers"]]
        for addr in list(self.socks):
            if addr not in live:
                self.socks.pop(addr).close(linger=0)
                self.drop_ring(addr)
                self.asked.discard(addr)
        for addr in live:
            if addr not in self.socks:
                self.socks[addr] = self._socket(addr)
        return live

    def ring_name(self, addr: str) -> str | None:
        """The name of the ring for the answers of worker ``addr``, made when it is first
        asked (a ring only for a worker that is asked); None: answers by the socket."""
        if addr not in self.asked:
            self.asked.add(addr)
            self.new_ring(addr)
        entry = self.rings.get(addr)
        return entry[0] if entry is not None else None

    def new_ring(self, addr: str) -> None:
        """A shared ring for the answers of a worker on this machine (one listening on an
        abstract Unix socket): the worker maps it by name and unlinks it. Without shared
        memory, the answers come through the socket."""
        from dataflow.parallel.shared_memory import SHM_DIR, Ring, new_prefix, shm_available

        self.drop_ring(addr)
        if not addr.startswith("ipc://@") or not shm_available():
            return
        name = f"{new_prefix()}-ring"
        try:
            ring = Ring.create(os.path.join(SHM_DIR, name), RING_BYTES)
        except OSError:
            return
        self.rings[addr] = (name, ring)

    def drop_ring(self, addr: str) -> None:
        from dataflow.parallel.shared_memory import SHM_DIR

        entry = self.rings.pop(addr, None)
        if entry is not None:
            with contextlib.suppress(OSError):  # (the worker unlinked it if it mapped it)
                os.unlink(os.path.join(SHM_DIR, entry[0]))
            entry[1].close()

    def close(self) -> None:
        """Close every socket and ring (a forked copy's: forgotten). Idempotent."""
        self.forget_forked()
        for sock in self.socks.values():
            sock.close(linger=0)
        self.socks.clear()
        for addr in list(self.rings):
            self.drop_ring(addr)
        self.asked.clear()
        if self.ctl is not None:
            self.ctl.close(linger=0)
            self.ctl = None
        if self.ctx is not None:
            self.ctx.term()
            self.ctx = None
