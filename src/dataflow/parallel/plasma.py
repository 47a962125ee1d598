"""tensorpack's ``PlasmaPutData`` / ``PlasmaGetData`` on dataflow's own shared memory.

tensorpack put each datapoint into a pyarrow Plasma store and passed its object id instead;
pyarrow removed Plasma in version 12. Here the store is a :class:`SegmentSpace` of
:mod:`dataflow.parallel.shared_memory` (files in ``/dev/shm``, with the clean-up process that
removes them whoever dies), so no store server has to be started:

* :class:`PlasmaPutData` pickles each datapoint (protocol 5) with its large buffers (NumPy
  arrays of at least :data:`MIN_SEGMENT_BYTES`) out of band, writes each of them (and a large
  pickle) into a shared-memory segment and yields ``[PlasmaId]``: a small, picklable id to pass
  to another process (through a runner, a queue, a socket) in place of the datapoint;
* :class:`PlasmaGetData` turns each ``[PlasmaId]`` back into the datapoint. Its arrays are
  views on the shared memory (no copy), writable, and they keep their memory alive as long as
  they (or views of them) are referenced.

Lifetime of an object: it is freed once a :class:`PlasmaGetData` has taken it (an id can be got
once: taking it removes its file from ``/dev/shm``; the memory goes when the last array using
it is garbage collected), or when its store closes: :meth:`PlasmaPutData.close`, or the end of
the process that ran the ``PlasmaPutData``, however it ends (SIGKILL included: the clean-up
process removes what was never taken). Getting an id after that raises
:class:`~dataflow.errors.ObjectGoneError`, which names the id and says which of the two
happened. Nothing is left in ``/dev/shm``.

When a segment cannot or should not be written (``/dev/shm`` nearly full, or more than
:data:`~dataflow.parallel.shared_memory.MAX_IN_FLIGHT_BYTES` of this store's objects not taken
yet), the id carries that buffer itself: slower, never lost. The ``socket`` argument of both
classes (the path of tensorpack's Plasma store socket) is accepted for old code and unused.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from typing import Any, NamedTuple

from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.errors import ObjectGoneError
from dataflow.parallel.shared_memory._segments import SHM_DIR, open_segment
from dataflow.parallel.shared_memory._space import SegmentSpace, SharedMemoryWriter

__all__ = ["MIN_SEGMENT_BYTES", "PlasmaGetData", "PlasmaId", "PlasmaPutData"]

#: buffers (and pickles) smaller than this travel inside the id; larger ones get a segment
MIN_SEGMENT_BYTES = 64 * 1024
_MARKER = "store"  # `<prefix>-store` exists in /dev/shm while the store is open


class PlasmaId(NamedTuple):
    """The id of one stored datapoint: its store's prefix, its pickle (bytes, or the name of
    the segment holding it) and its out-of-band buffers (segment names, or bytes kept here)."""

    store: str
    pickle: bytes | str
    buffers: tuple[bytes | str, ...]

    def segments(self) -> list[str]:
        """The names of the shared-memory segments this id refers to."""
        return [x for x in (self.pickle, *self.buffers) if isinstance(x, str)]

    def __repr__(self) -> str:
        return f"PlasmaId(store={self.store!r}, segments={self.segments()!r})"


class _Store:
    """One process's store: a segment space (its clean-up process started at once) and a
    writer; ``<prefix>-store`` marks it open."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        space = SegmentSpace.open()  # None (after a warning) when /dev/shm is short of space
        self.space = space if space is not None and space.start() else None
        if self.space is None:
            self.prefix = f"dataflow-{self._pid}-inline"
            self.writer: SharedMemoryWriter | None = None
            return
        self.prefix = self.space.prefix
        # created after the clean-up process started: it is removed whatever happens next
        with open(os.path.join(SHM_DIR, f"{self.prefix}-{_MARKER}"), "xb"):
            pass
        self.writer = SharedMemoryWriter(self.prefix, "plasma")

    def _keep(self, data: memoryview) -> bytes | str:
        if self.writer is not None and data.nbytes >= MIN_SEGMENT_BYTES:
            name = self.writer.write(data)
            if name is not None:
                return name
        return bytes(data)

    def put(self, dp: Any) -> PlasmaId:
        out_of_band: list[pickle.PickleBuffer] = []

        def keep_in_band(buf: pickle.PickleBuffer) -> bool:
            try:
                small = buf.raw().nbytes < MIN_SEGMENT_BYTES
            except BufferError:  # not contiguous: pickled in band
                return True
            if not small:
                out_of_band.append(buf)
            return small

        try:
            data = pickle.dumps(dp, protocol=5, buffer_callback=keep_in_band)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise TypeError(
                f"PlasmaPutData: cannot store a datapoint of type {type(dp).__name__}: {e}. "
                "Datapoints must be picklable (arrays, numbers, str, bytes, lists, dicts)."
            ) from e
        buffers = tuple(self._keep(b.raw()) for b in out_of_band)
        return PlasmaId(self.prefix, self._keep(memoryview(data)), buffers)

    def close(self) -> None:
        if self.space is not None and os.getpid() == self._pid:
            self.space.close()  # removes every segment of the store, the marker included
            self.space = self.writer = None


def _open(oid: PlasmaId, name: str) -> memoryview:
    try:
        return open_segment(name)
    except FileNotFoundError:
        if os.path.exists(os.path.join(SHM_DIR, f"{oid.store}-{_MARKER}")):
            why = ("it was taken already: an id can be got once (its memory is freed when it is "
                   "taken); get each id once, or copy the datapoint before passing it on")
        else:
            why = ("its store was closed: the PlasmaPutData that stored it was closed, or its "
                   "process ended (its objects are freed then); get ids while the PlasmaPutData "
                   "that made them still runs, e.g. close the PlasmaGetData side first")
        raise ObjectGoneError(f"PlasmaGetData: the object of {oid!r} is gone: {why}.") from None


def get_object(oid: Any) -> Any:
    """The datapoint of ``oid`` (a :class:`PlasmaId`), its arrays viewing the shared memory.
    Taking it removes it from the store (see the module docstring)."""
    if not isinstance(oid, PlasmaId):
        raise TypeError(
            f"PlasmaGetData: expected datapoints [PlasmaId] made by PlasmaPutData, got an id "
            f"of type {type(oid).__name__} ({oid!r:.80}); put PlasmaPutData(ds) before it.")
    data = oid.pickle if isinstance(oid.pickle, bytes) else _open(oid, oid.pickle)
    buffers = [b if isinstance(b, bytes) else _open(oid, b) for b in oid.buffers]
    return pickle.loads(data, buffers=buffers)


class PlasmaPutData(ProxyDataFlow):
    """Store each datapoint of ``ds`` in shared memory and yield ``[PlasmaId]`` instead.

    Pair it with :class:`PlasmaGetData` in this or another process of the machine, e.g.
    ``PlasmaGetData(MultiProcessRunnerZMQ(PlasmaPutData(ds), 2))``. Each process that resets a
    ``PlasmaPutData`` makes its own store, open until :meth:`close` or the process's end (see
    the module docstring for the lifetime of objects). ``socket``, the path of tensorpack's
    Plasma store, is accepted and unused: no store server is needed.
    """

    def __init__(self, ds: DataFlow, socket: str | None = None) -> None:
        super().__init__(ds)
        if socket is not None and not isinstance(socket, str | os.PathLike):
            raise TypeError(f"`socket` must be a path or None (it is unused), got {socket!r}.")
        self.socket = socket
        self._store: _Store | None = None

    def reset_state(self) -> None:
        super().reset_state()
        self._new_store()

    def _new_store(self) -> _Store:
        if self._store is not None:
            self._store.close()
        self._store = _Store()
        return self._store

    def __iter__(self) -> Iterator[Any]:
        store = self._store
        if store is None or store._pid != os.getpid():  # not reset here: a store of our own
            store = self._new_store()
        for dp in self.ds:
            yield [store.put(dp)]

    def close(self) -> None:
        """Close the store (idempotent): objects not taken yet are freed, their ids go stale."""
        store, self._store = self._store, None
        if store is not None:
            store.close()
        super().close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # (best effort at garbage collection)
            pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None  # a copy in another process makes its own store
        return state


class PlasmaGetData(ProxyDataFlow):
    """Turn the ``[PlasmaId]`` datapoints of ``ds`` (made by :class:`PlasmaPutData`) back into
    datapoints; arrays are views on the shared memory, not copies. ``socket`` (tensorpack's
    Plasma store path) is accepted and unused."""

    def __init__(self, ds: DataFlow, socket: str | None = None) -> None:
        super().__init__(ds)
        if socket is not None and not isinstance(socket, str | os.PathLike):
            raise TypeError(f"`socket` must be a path or None (it is unused), got {socket!r}.")
        self.socket = socket

    def __iter__(self) -> Iterator[Any]:
        for dp in self.ds:
            yield get_object(dp[0])
