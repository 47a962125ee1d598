"""Shared-memory transport of large buffers between the processes of one machine.

A worker copies a large buffer (a NumPy array's memory) once into a POSIX shared-memory segment
(``/dev/shm/dataflow-<consumer pid>-<random>-<writer>-<n>``, the namespace that
``multiprocessing.shared_memory`` uses) and sends only its name. The consumer maps the segment,
unlinks it at once and wraps the mapping in a writable ``memoryview``: the memory is released
when the last array using it is garbage collected.

Nothing is left in ``/dev/shm``, whoever dies. Each pipeline's segments belong to a
:class:`SegmentSpace`, which starts a small clean-up process (:mod:`._reaper`) that every
writer of the pipeline is connected to before it writes a segment. The process starts when the
pipeline first needs a segment, not with the pipeline: until then a writer sends its buffers
inline, and the consumer starts the process when it receives the first large inline buffer (most
pipelines, whose arrays are small or fit the workers' rings, never start one). Then, when the
consumer's connection closes (it closed the pipeline, or it was killed, even by SIGKILL) the
segments sent but never received are removed at once, and again when the last writer is gone
(see that module). A runner's ``close()`` removes them as well. Segments of a consumer whose
clean-up process was also killed are removed by the next pipeline that starts, once they are 10
minutes old.

Segments are created directly (``os.open`` + ``mmap``) rather than through
``multiprocessing.shared_memory.SharedMemory``, whose resource tracker would start an extra
helper process and warn about segments that the *other* process unlinks.

``/dev/shm`` never overflows into a bus error. A tmpfs accepts ``ftruncate`` beyond its free
space and raises SIGBUS at the first page that does not fit, so the writer reserves the pages
with ``posix_fallocate`` first (which fails cleanly when the space is short). A pipeline does
not use shared memory when ``/dev/shm`` has less than :data:`MIN_FREE_BYTES` free when it
starts (containers often have a 64 MB ``/dev/shm``): it warns once and sends large arrays
through ZeroMQ. A writer sends a buffer inline instead of writing a segment when the segment
would leave less than that free, when it could not be reserved, or when the writer's segments
not yet received by the consumer already hold :data:`MAX_IN_FLIGHT_BYTES` (the ZeroMQ
high-water mark bounds the number of *messages* in flight, and a segment's message is small).
"""

from __future__ import annotations

from dataflow.parallel.shared_memory._ring import RING_BYTES, Ring
from dataflow.parallel.shared_memory._segments import (
    MAX_IN_FLIGHT_BYTES,
    MIN_FREE_BYTES,
    SHM_DIR,
    cleanup_segments,
    cleanup_stale_segments,
    new_prefix,
    open_segment,
    shm_available,
)
from dataflow.parallel.shared_memory._space import SegmentSpace, SharedMemoryWriter, start_space

__all__ = [
    "MAX_IN_FLIGHT_BYTES",
    "MIN_FREE_BYTES",
    "RING_BYTES",
    "SHM_DIR",
    "Ring",
    "SegmentSpace",
    "SharedMemoryWriter",
    "cleanup_segments",
    "cleanup_stale_segments",
    "make_rings",
    "new_prefix",
    "open_segment",
    "shm_available",
    "start_space",
]

_stale_checked = False


def make_rings(use_shm: bool, start_method: str, n: int) -> list[Ring] | None:
    """One shared ring per worker when workers are forked (``start_method`` is the effective
    one: they inherit the memory); the first call also removes stale segments."""
    global _stale_checked
    if use_shm and not _stale_checked:
        _stale_checked = True
        cleanup_stale_segments()
    if not use_shm or start_method != "fork":
        return None
    return [Ring(RING_BYTES) for _ in range(n)]
