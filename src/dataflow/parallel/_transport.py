"""Wire format and endpoints of the ZeroMQ back end.

A message is a ZeroMQ multipart message ``[head, flags, *buffers]``:

* ``head``: the object pickled with protocol 5; buffers of at least :data:`OOB_MIN_BYTES`
  (NumPy arrays' memory) are taken out of band instead of being copied into the pickle;
* ``flags``: one byte per out-of-band buffer: ``0`` the next frame is the buffer itself (sent
  with ``copy=False``: ZeroMQ reads the array's memory directly), ``1`` the next frame is the
  name of a shared-memory segment holding it (see :mod:`dataflow.parallel.shared_memory`).

The receiver hands the frames' memory to ``pickle.loads(buffers=...)``, so arrays are rebuilt
on top of the received memory without another copy (and stay writable).
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import tempfile
import uuid
from typing import Any

from dataflow.parallel.shared_memory import SharedMemoryWriter, open_segment

__all__ = ["Endpoint", "FrameCodec", "import_zmq"]

#: buffers smaller than this stay inside the pickle (not worth a frame)
OOB_MIN_BYTES = 32 * 1024
#: buffers at least this large go through shared memory when it is enabled
SHM_MIN_BYTES = 4 * 1024 * 1024


def import_zmq():
    """Import pyzmq, or raise an ImportError that says how to install it."""
    try:
        import zmq
    except ImportError as e:  # pragma: no cover - pyzmq is a core dependency
        raise ImportError(
            "the ZeroMQ back end needs pyzmq: pip install 'dataflow-reloaded' (or pip install "
            "pyzmq)"
        ) from e
    return zmq


class FrameCodec:
    """Encodes objects to frames and back; ``shm`` enables the shared-memory path."""

    def __init__(self, shm: SharedMemoryWriter | None = None, shm_min_bytes: int = SHM_MIN_BYTES):
        self.shm = shm
        self.shm_min_bytes = shm_min_bytes

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
            return [head, b""]
        flags = bytearray(len(bufs))
        frames: list[Any] = [head, flags]
        for i, raw in enumerate(bufs):
            name = None
            if self.shm is not None and raw.nbytes >= self.shm_min_bytes:
                name = self.shm.write(raw)
            if name is None:
                frames.append(raw)
            else:
                flags[i] = 1
                frames.append(name.encode())
        return frames

    @staticmethod
    def decode(frames: list[Any]) -> Any:
        """Decode frames received with ``recv_multipart(copy=False)`` (or plain bytes)."""
        head = frames[0].buffer if hasattr(frames[0], "buffer") else frames[0]
        flags = frames[1].bytes if hasattr(frames[1], "bytes") else bytes(frames[1])
        if not flags:
            return pickle.loads(head)
        buffers = []
        for flag, frame in zip(flags, frames[2:]):
            if flag:
                name = frame.bytes if hasattr(frame, "bytes") else bytes(frame)
                buffers.append(open_segment(name.decode()))
            else:
                buffers.append(frame.buffer if hasattr(frame, "buffer") else frame)
        return pickle.loads(head, buffers=buffers)


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
