"""Contract helpers shared by the test modules."""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from dataflow.base import DataFlow


def import_tensorflow_quietly() -> Any:
    """``import tensorflow``, with the process's stderr (file descriptor 2) sent to /dev/null
    while it loads: its libraries log CUDA probing as they load, before any log level applies
    (``TF_CPP_MIN_LOG_LEVEL``, set in conftest.py, silences the rest). Python errors still
    propagate."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        with contextlib.suppress(ImportError):
            import tensorflow
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    import tensorflow  # the ImportError, if any, now with a visible stderr

    return tensorflow


def to_plain(obj: Any) -> Any:
    """Arrays -> nested lists, tuples -> lists, so datapoints compare with ``==``."""
    if isinstance(obj, np.ndarray):
        return {"__array__": obj.tolist(), "dtype": str(obj.dtype)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, list | tuple):
        return [to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def epoch(df: DataFlow) -> list[Any]:
    """One epoch of ``df`` as plain values."""
    return [to_plain(dp) for dp in df]


def check_dataflow(
    df: DataFlow, expected: list[Any] | None = None, epochs: int = 2, picklable: bool = True
) -> list[Any]:
    """Checks the DataFlow contract on a finite flow and returns its first epoch.

    * with ``picklable``, it pickles (so it can go to a spawned worker) before ``reset_state``;
    * ``reset_state`` then ``epochs`` iterations: each has ``len(df)`` datapoints if known;
    * with ``expected``, the first epoch equals it exactly.
    """
    if picklable:
        pickle.loads(pickle.dumps(df))
    df.reset_state()
    first = None
    for _ in range(epochs):
        got = epoch(df)
        try:
            n = len(df)
        except NotImplementedError:
            n = None
        if n is not None:
            assert len(got) == n, f"epoch yielded {len(got)} datapoints, len() says {n}"
        if first is None:
            first = got
    if expected is not None:
        assert first == to_plain(expected)
    return first


def _take(df: DataFlow, limit: int | None) -> Any:
    """One epoch of ``df`` (or its first ``limit`` datapoints, for infinite flows)."""
    it = iter(df)
    for n, dp in enumerate(it, 1):
        yield dp
        if limit is not None and n >= limit:
            break
    if hasattr(it, "close"):
        it.close()


def _json(state: Any) -> Any:
    import json

    return json.loads(json.dumps(state))


def _continue(fresh: DataFlow, want: int, epochs: int, limit: int | None) -> list[Any]:
    """Up to ``want`` datapoints of ``fresh``, over at most ``epochs + 2`` iterations."""
    rest: list[Any] = []
    calls = 0
    while len(rest) < want and calls < epochs + 2:
        calls += 1
        for dp in _take(fresh, limit):
            rest.append(to_plain(dp))
            if len(rest) >= want:
                break
    return rest


def break_and_save(make_df: Any, k: int, epochs: int, limit: int | None = None
                   ) -> tuple[list[Any], Any, Any]:
    """Build a pipeline, take its first ``k`` datapoints with plain ``for`` loops (over
    epochs; at most ``limit`` per loop) that ``break`` after the ``k``-th, and save its state
    right after the ``break``: ``(datapoints taken, state, state before the first loop)``."""
    ds = make_df()
    ds.reset_state()
    start = _json(ds.state_dict())
    got: list[Any] = []
    calls = 0
    while len(got) < k and calls < epochs + 2:
        calls += 1
        for n, dp in enumerate(ds, 1):  # the break drops (closes) the loop's iterator
            got.append(to_plain(dp))
            if len(got) == k or (limit is not None and n >= limit):
                break
    state = _json(ds.state_dict())
    ds.close()
    return got, state, start


def _restored(make_df: Any, state: Any) -> DataFlow:
    fresh = make_df()
    fresh.reset_state()
    fresh.load_state_dict(state)
    return fresh


def check_resume(
    make_df: Any, epochs: int = 2, limit: int | None = None, every: int = 1,
    breaks: bool = True,
) -> list[Any]:
    """Checks exact resume: the state after every ``every``-th datapoint of an uninterrupted run,
    restored into a fresh pipeline, gives exactly the rest of that run. With ``breaks``, so
    does the state saved after a ``for`` loop that ``break``s right after that datapoint (what
    the consumer did not receive is not consumed).

    ``make_df()`` builds a new pipeline; ``limit`` caps datapoints per ``__iter__`` call (for
    infinite flows). Every state must survive ``json.dumps``. Returns the uninterrupted run.
    """
    import json

    ref = make_df()
    ref.reset_state()
    seq: list[Any] = []
    states: list[Any] = [json.loads(json.dumps(ref.state_dict()))]
    for _ in range(epochs):
        for dp in _take(ref, limit):
            seq.append(to_plain(dp))
            states.append(json.loads(json.dumps(ref.state_dict())))
    ref.close()
    for k in range(0, len(states), every):
        fresh = make_df()
        fresh.reset_state()
        fresh.load_state_dict(states[k])
        want = seq[k:]
        rest = _continue(fresh, len(want), epochs, limit)
        fresh.close()
        assert rest == want, f"resume after datapoint {k} of {len(seq)} differs"
    if breaks:
        for k in range(1, len(seq), every):
            got, state, start = break_and_save(make_df, k, epochs, limit)
            want = seq
            if got != seq[:k]:  # an unseeded pipeline: its own uninterrupted run, from the
                ref = _restored(make_df, start)  # state it had before its first loop
                want = _continue(ref, len(seq), epochs, limit)
                ref.close()
                assert got == want[:k]
            fresh = _restored(make_df, state)
            rest = _continue(fresh, len(seq) - k, epochs, limit)
            fresh.close()
            assert rest == want[k:], f"resume after a break at datapoint {k} of {len(seq)} differs"
    return seq


def wait_until(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``cond`` until it holds (True) or ``timeout`` seconds passed (False): for a state
    that another process reaches on its own (a file removed, a process gone)."""
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def timed(itr: Any, on_item: Callable[[int], None] | None = None) -> tuple[list, float]:
    """``(outputs of itr, longest gap in seconds between two, the first measured from the
    call)``; ``on_item(count)`` after each output (e.g. to inject a fault)."""
    import time

    out: list = []
    gap, last = 0.0, time.monotonic()
    for dp in itr:
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        out.append(dp)
        if on_item is not None:
            on_item(len(out))
    return out, gap


def read_at_once(readers: dict[str, Any], read: Callable[[str], None],
                 timeout: float) -> None:
    """Run ``read(name)`` for every reader in a thread of its own, all at once; wait for them
    (up to ``timeout`` seconds each), then close every reader."""
    import threading

    threads = [threading.Thread(target=read, args=(name,)) for name in readers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    for c in readers.values():
        c.close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server a test starts on a known address)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
