"""The wire format of the ZeroMQ transport: objects to frames and back (:class:`FrameCodec`,
:class:`FrameDecoder`), sending and receiving them, and the private endpoints the consumer binds
(:class:`Endpoint`).

A message is ``[head]`` (no out-of-band buffer), ``[0x01 + len(head) + head + meta]`` (all in
shared memory: one frame), or ``[head, meta, *frames]``:

* ``head``: the object pickled with protocol 5; buffers of at least :data:`OOB_MIN_BYTES`
  (NumPy arrays' memory) are taken out of band instead of being copied into the pickle;
* ``meta``: a pickled list, one entry per out-of-band buffer: ``None`` the buffer is the next
  frame (sent with ``copy=False``: ZeroMQ reads the array's memory directly), a ``str`` the
  name of a shared-memory segment holding it, a tuple ``(worker, offset, size, head)`` its
  place in the worker's shared ring (see :mod:`dataflow.parallel.shared_memory`).

The receiver hands the buffers to ``pickle.loads(buffers=...)``, so arrays are rebuilt on top of
the received memory without another copy (and are writable). The ring is the fast path of
medium-sized arrays (one copy in the worker, one in the consumer, no system call, no page
fault); segments are for large ones (one copy, in the worker).
"""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import sys
import tempfile
import uuid
from typing import Any

from dataflow._optional import import_optional
from dataflow.parallel.shared_memory import Ring, SharedMemoryWriter, open_segment, start_space

__all__ = [
    "OOB_MIN_BYTES",
    "PLAIN_DECODER",
    "SHM_MIN_BYTES",
    "Endpoint",
    "FrameCodec",
    "FrameDecoder",
    "import_zmq",
    "recv_frames",
    "send_frames",
]

#: buffers smaller than this stay inside the pickle (not worth a frame)
OOB_MIN_BYTES = 32 * 1024
#: buffers at least this large go through shared memory when it is enabled
SHM_MIN_BYTES = 2 * 1024 * 1024


def import_zmq() -> Any:
    """Import pyzmq, or raise an ImportError that says how to install it."""
    return import_optional("zmq", "the ZeroMQ back end")


class FrameCodec:
    """Encodes objects to frames (worker side); ``ring``/``shm`` enable the shared-memory paths.

    Each out-of-band buffer goes, in order of preference, into the worker's :class:`Ring`
    (the consumer copies it out), into its own shared-memory segment when it is at least
    ``shm_min_bytes`` (the consumer maps it, no copy), or into a frame of its own.
    """

    def __init__(
        self,
        shm: SharedMemoryWriter | None = None,
        shm_min_bytes: int = SHM_MIN_BYTES,
        ring: Ring | None = None,
        worker_id: int = 0,
    ) -> None:
        self.shm = shm
        self.shm_min_bytes = shm_min_bytes
        self.ring = ring
        self.worker_id = worker_id

    def encode(self, obj: Any) -> list[Any]:
        bufs: list[memoryview] = []

        def take(pb: pickle.PickleBuffer) -> bool:
            try:
                raw = pb.raw()
            except BufferError:
                return True  # not contiguous: keep in band
            if raw.nbytes < OOB_MIN_BYTES:
                return True
            bufs.append(raw)
            return False

        head = pickle.dumps(obj, protocol=5, buffer_callback=take)
        if not bufs:
            return [head]  # a pickle: starts with the PROTO opcode, 0x80
        meta: list[Any] = []
        inline: list[memoryview] = []
        for raw in bufs:
            if self.ring is not None:
                slot = self.ring.write(raw)
                if slot is not None:
                    meta.append((self.worker_id, *slot))
                    continue
            name = None
            if self.shm is not None and raw.nbytes >= self.shm_min_bytes:
                name = self.shm.write(raw)
            meta.append(name)
            if name is None:
                inline.append(raw)
        meta_bytes = pickle.dumps(meta, protocol=5)
        if not inline:  # one frame: 0x01, len(head) as uint32, head, meta
            return [b"".join((_PACKED, _LEN.pack(len(head)), head, meta_bytes))]
        return [head, meta_bytes, *inline]


_PACKED = b"\x01"
_RCVMORE = 13  # ZMQ_RCVMORE in zmq.h (a stable number of libzmq's API)
_LEN = struct.Struct("<I")


def send_frames(sock: Any, frames: list[Any], flags: int = 0) -> None:
    """Send ``frames`` (a one-frame message without the multipart overhead)."""
    if len(frames) == 1:
        sock.send(frames[0], flags, copy=False)
    else:
        sock.send_multipart(frames, flags, copy=False)


def recv_frames(sock: Any, flags: int = 0, copy: bool = False) -> list[Any]:
    """Receive one message's frames (a one-frame message without the multipart overhead)."""
    first = sock.recv(flags, copy=copy)
    # (not the `rcvmore` attribute: pyzmq resolves it by name, several times the cost)
    if not (first.more if not copy else sock.getsockopt(_RCVMORE)):
        return [first]
    return [first, *sock.recv_multipart(copy=copy)]


class FrameDecoder:
    """Decodes frames received with ``recv_multipart`` (``copy=False`` keeps inline buffers
    without a copy; plain bytes are copied so that arrays stay writable).

    ``rings[i]`` is worker ``i``'s :class:`Ring` (consumer side), if rings are used.
    ``shm_prefix``: the consumer's shared-memory space, whose clean-up process the first large
    inline buffer starts (writers send inline until there is one).
    """

    def __init__(self, rings: list[Ring] | None = None, shm_prefix: str | None = None) -> None:
        self.rings = rings
        self.shm_prefix = shm_prefix

    def decode(self, frames: list[Any]) -> Any:
        head = frames[0].buffer if hasattr(frames[0], "buffer") else frames[0]
        if len(frames) == 1:
            if head[0] != _PACKED[0]:
                return pickle.loads(head)
            view = memoryview(head)
            (n,) = _LEN.unpack_from(view, 1)
            head, meta = view[5 : 5 + n], pickle.loads(view[5 + n :])
        else:
            meta = pickle.loads(frames[1].buffer if hasattr(frames[1], "buffer") else frames[1])
        inline = iter(frames[2:])
        buffers: list[Any] = []
        for entry in meta:
            if entry is None:
                frame = next(inline)
                buf = frame.buffer if hasattr(frame, "buffer") else bytearray(frame)
                if self.shm_prefix is not None and len(buf) >= SHM_MIN_BYTES:
                    start_space(self.shm_prefix)
                    self.shm_prefix = None
                buffers.append(buf)
            elif isinstance(entry, str):
                buffers.append(open_segment(entry))
            else:
                wid, off, n, new_head = entry
                if self.rings is None:
                    raise ValueError("received a ring slot but this decoder has no rings")
                buffers.append(self.rings[wid].read(off, n, new_head))
        return pickle.loads(head, buffers=buffers)

    def close(self) -> None:
        for ring in self.rings or ():
            ring.close()
        self.rings = None


#: decoder of messages that use no ring (any process may use it)
PLAIN_DECODER = FrameDecoder()


class Endpoint:
    """A fresh, private IPC address: ``ipc://@dataflow-<kind>-<uuid>`` (a Linux abstract
    socket, nothing on disk), else a socket in a private temporary directory (never the working
    directory), else tcp on the loopback interface (bound to a random port first).
    """

    def __init__(self, kind: str) -> None:
        self._tmpdir: str | None = None
        self.needs_early_bind = False
        name = f"dataflow-{kind}-{uuid.uuid4().hex}"
        if sys.platform.startswith("linux"):
            self.address = f"ipc://@{name}"
            return
        if os.name != "nt":
            self._tmpdir = tempfile.mkdtemp(prefix="dataflow-")
            path = os.path.join(self._tmpdir, "s")
            if len(path) < 100:  # sun_path limit
                self.address = f"ipc://{path}"
                return
        self.address = "tcp://127.0.0.1"
        self.needs_early_bind = True

    def bind(self, sock: Any) -> None:
        """Bind ``sock``; for tcp, pick a random port and remember the full address."""
        if self.address == "tcp://127.0.0.1":
            port = sock.bind_to_random_port(self.address)
            self.address = f"tcp://127.0.0.1:{port}"
        else:
            sock.bind(self.address)

    def cleanup(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
