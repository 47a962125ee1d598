"""Reproducible random streams: every stream is a pure function of the pipeline.

Every random thing in a pipeline (sources, wrappers, augmentors, the global ``np.random`` and
``random`` generators inside parallel workers) draws from a stream derived with
:class:`numpy.random.SeedSequence` from a *base seed* and a *key*; nothing depends on the order
in which this process created or reset other flows (the derivation is documented in
``docs/reproducibility.md``):

* **base seed**: the stage's own ``seed=`` argument, else the global :func:`set_seed` value
  read when the stage is reset, else fresh OS entropy (never time or pid);
* **path**: the stage's position in its pipeline. ``reset_state()`` called by the user makes
  that stage the root, path ``()``; its ``k``-th child (in :meth:`DataFlow.children` order) has
  path ``(k,)``, that child's ``j``-th child ``(k, j)``, and so on. A stage with its own
  ``seed=`` ignores its path: its seed fixes its stream wherever it sits;
* **worker**: a runner's copy ``i`` of a flow (runners run independent copies);
* **epoch**: sources and wrappers draw a new stream for each epoch;
* **input**: inside a parallel mapper, the draws made while mapping one input are keyed by that
  input's (epoch, position), not by the worker that runs it, so the output of a strict,
  ordered mapper does not depend on the number of workers, the back end or scheduling.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "derive_rng",
    "epoch_rng",
    "get_rng",
    "get_seed",
    "get_worker_info",
    "input_rng",
    "set_seed",
    "set_worker_info",
    "stage_sequence",
    "worker_scope",
]

#: first element of every spawn key: which kind of stream it is (so kinds never collide)
STAGE, AUGMENTOR, INPUTS, GLOBALS = 1, 2, 3, 4

_lock = threading.Lock()
_global_seed: int | None = None
_process_worker: int | None = None  # set in worker processes and Ray actors
_tls = threading.local()  # per thread: worker (thread runners), reset depth, input scope


def check_seed(seed: Any, name: str = "seed") -> int | None:
    """``seed`` as an int, or ``None``; a clear ``ValueError`` for anything else."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(
            f"`{name}` must be a non-negative int or None, got {seed!r} "
            f"(type {type(seed).__name__}); pass e.g. {name}=0, or None for fresh OS entropy."
        )
    return int(seed)


def set_seed(seed: int | None) -> None:
    """Set the global base seed of every random stage created without ``seed=``.

    ``None`` returns to fresh OS entropy. Stages read it when they are reset, so call it before
    ``reset_state()``.
    """
    global _global_seed
    seed = check_seed(seed)
    with _lock:
        _global_seed = seed


def get_seed() -> int | None:
    """The global base seed set by :func:`set_seed`, or ``None``."""
    return _global_seed


def set_worker_info(worker_id: int | None) -> None:
    """Declare that this whole process is worker ``worker_id`` (process workers, Ray actors)."""
    global _process_worker
    _process_worker = None if worker_id is None else int(worker_id)


def thread_state() -> dict[str, Any]:
    """This thread's state, as a dict: ``"input"`` (the input scope being mapped, if any) and
    ``"worker"`` (a thread runner's copy, if any); absent keys mean none. For hot paths (an
    augmentor's ``rng``, once or twice per image) that read both at the cost of one call; the
    process's own worker id, if the thread has none, is :func:`get_worker_info`'s."""
    return _tls.__dict__


def process_worker() -> int | None:
    """The worker id this whole process was declared as (``None`` outside workers)."""
    return _process_worker


def get_worker_info() -> int | None:
    """The worker id of the copy being reset or run here, or ``None`` outside runners."""
    worker = getattr(_tls, "worker", None)
    return _process_worker if worker is None else worker


@contextlib.contextmanager
def worker_scope(worker_id: int) -> Iterator[None]:
    """Reset a runner's copy ``worker_id`` of a flow inside this block (in this thread).

    The copy keeps the stage paths it was given in the pipeline it belongs to, and its random
    stages key their streams by ``worker_id``.
    """
    saved = getattr(_tls, "worker", None), getattr(_tls, "keep_paths", False)
    _tls.worker, _tls.keep_paths = int(worker_id), True
    try:
        yield
    finally:
        _tls.worker, _tls.keep_paths = saved


# ---- stage paths ------------------------------------------------------------------------------


@contextlib.contextmanager
def keep_paths() -> Iterator[None]:
    """Resets inside this block keep the stage paths they have (a restart of a stage's workers
    by the stage itself is not a new root)."""
    saved = getattr(_tls, "keep_paths", False)
    _tls.keep_paths = True
    try:
        yield
    finally:
        _tls.keep_paths = saved


def path_of(obj: Any) -> tuple[int, ...]:
    """The path given to ``obj`` by the last root reset (``()`` if none)."""
    return obj.__dict__.get("_rng_path", ())


def assign_paths(root: Any, base: tuple[int, ...] = ()) -> None:
    """Give every stage of the pipeline below ``root`` its path (see the module docstring),
    ``root`` itself getting ``base``.

    A stage reachable along several paths (a flow shared by two parents) keeps the first one
    in depth-first order.
    """
    seen: set[int] = set()
    stack: list[tuple[Any, tuple[int, ...]]] = [(root, base)]
    while stack:
        obj, path = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        obj.__dict__["_rng_path"] = path
        kids = obj.children()
        stack.extend((kids[k], (*path, k)) for k in reversed(range(len(kids))))


@contextlib.contextmanager
def reset_scope(flow: Any) -> Iterator[None]:
    """Around a ``reset_state()``: the outermost one (the user's call) assigns the paths."""
    depth = getattr(_tls, "depth", 0)
    if depth == 0 and not getattr(_tls, "keep_paths", False):
        assign_paths(flow)
    _tls.depth = depth + 1
    try:
        yield
    finally:
        _tls.depth = depth


# ---- streams ----------------------------------------------------------------------------------


def stage_sequence(
    seed: int | None,
    path: tuple[int, ...],
    kind: int = STAGE,
    worker: Any = "current",
    use_path: bool | None = None,
) -> np.random.SeedSequence:
    """The ``SeedSequence`` of a stage: base seed, path, worker.

    ``use_path`` (default: only when ``seed`` is ``None``) mixes the path in: a stage's own
    ``seed=`` fixes its stream wherever the stage sits.
    """
    base = check_seed(seed)
    if use_path is None:
        use_path = base is None
    keys: tuple[int, ...] = (kind, len(path) + 1, *path) if use_path else (kind, 0)
    if base is None:
        base = _global_seed
    w = get_worker_info() if worker == "current" else worker
    spawn_key = (*keys, 0 if w is None else int(w) + 1)
    return np.random.SeedSequence(base, spawn_key=spawn_key)


def seed_words(seq: np.random.SeedSequence) -> tuple[int, tuple[int, ...]]:
    """``(entropy, spawn_key)`` of ``seq`` as plain ints (JSON-safe, picklable)."""
    entropy = seq.entropy
    assert isinstance(entropy, int | np.integer), entropy  # SeedSequence(int or None) only
    return int(entropy), tuple(int(k) for k in seq.spawn_key)


def derive_rng(seq: np.random.SeedSequence, *keys: int) -> np.random.RandomState:
    """A ``RandomState`` (tensorpack's rng API) for the child ``keys`` of ``seq``."""
    child = np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, *keys))
    return np.random.RandomState(np.random.MT19937(child))


def epoch_rng(seq: np.random.SeedSequence, epoch: int) -> np.random.RandomState:
    """The stream of epoch ``epoch`` (0-based) of the stage whose sequence is ``seq``."""
    return derive_rng(seq, epoch + 1)


def name_key(obj: Any) -> tuple[int]:
    """A path for an object that no pipeline placed: derived from its class's name. A class may
    pin that name with a ``seed_name`` attribute of its own (this package's augmentors do, so
    that moving a file changes no seeded output); else it is the module and qualified name."""
    cls = type(obj)
    name = cls.__dict__.get("seed_name") or f"{cls.__module__}.{cls.__qualname__}"
    return (zlib.crc32(name.encode()),)


def get_rng(obj: Any = None, seed: int | None = None) -> np.random.RandomState:
    """tensorpack-compatible helper: a new ``RandomState`` for ``obj``.

    Unlike tensorpack it never uses time, pid or ``id(obj)``: the stream comes from ``seed``,
    else the global seed, else OS entropy, keyed by ``obj``'s place in its pipeline when it is a
    stage being reset, else by its class name.
    """
    if obj is None:
        return derive_rng(stage_sequence(seed, ()))
    path = obj.__dict__.get("_rng_path") if hasattr(obj, "__dict__") else None
    return derive_rng(stage_sequence(seed, name_key(obj) if path is None else path))


# ---- per-input streams inside parallel mappers ------------------------------------------------


class InputScope:
    """The per-input streams of one parallel mapper in one thread (a worker).

    ``begin(epoch, pos)`` before mapping an input; :func:`input_rng` then gives each owner (an
    augmentor, the global generators) a stream keyed by (mapper, owner, epoch, pos), created
    on the owner's first draw for that input: a Philox generator whose counter is set to the
    input's key (about 2 us), so inputs that draw nothing cost nothing.
    """

    __slots__ = ("_input", "_keys", "_owners", "entropy", "spawn_key", "token")

    def __init__(self, entropy: int, spawn_key: tuple[int, ...]) -> None:
        self.entropy, self.spawn_key = entropy, tuple(spawn_key)
        self._keys: dict[tuple, np.ndarray] = {}
        self._owners: dict[tuple, tuple[np.random.RandomState, object]] = {}
        self._input = (0, 0)
        self.token: object = None

    def begin(self, epoch: int, pos: int) -> None:
        # (the hot path of every map worker: the counter is built at the first draw only)
        self._input = (epoch, pos)
        self.token = object()

    def rng(self, owner: tuple) -> np.random.RandomState:
        cached = self._owners.get(owner)
        if cached is not None and cached[1] is self.token:
            return cached[0]
        key = self._keys.get(owner)
        if key is None:
            key = self._keys[owner] = np.random.SeedSequence(
                self.entropy, spawn_key=(*self.spawn_key, len(owner), *owner)
            ).generate_state(2, np.uint64)
        r = cached[0] if cached is not None else np.random.RandomState(np.random.Philox(key=key))
        epoch, pos = self._input
        r.set_state({
            "bit_generator": "Philox",
            "state": {"counter": np.array([pos, epoch + 1, 0, 0], dtype=np.uint64), "key": key},
            "buffer": np.zeros(4, dtype=np.uint64), "buffer_pos": 4,
            "has_uint32": 0, "uinteger": 0, "has_gauss": 0, "gauss": 0.0,
        })
        self._owners[owner] = (r, self.token)
        return r


def current_input_scope() -> InputScope | None:
    """The scope of the input being mapped in this thread, if any."""
    return getattr(_tls, "input", None)


def set_input_scope(scope: InputScope | None) -> None:
    """Enter (or with ``None`` leave) ``scope`` in this thread; used by map workers."""
    _tls.input = scope


def input_rng(owner: tuple[int, ...] = ()) -> np.random.RandomState | None:
    """The stream of ``owner`` for the input being mapped in this thread, or ``None`` outside
    a parallel mapper. A map function may draw from ``input_rng()`` directly: its draws then
    depend only on the input's place in the epoch, whatever worker runs it."""
    scope = getattr(_tls, "input", None)
    return None if scope is None else scope.rng((AUGMENTOR, *owner))
