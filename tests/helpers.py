"""Contract helpers shared by the test modules."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from dataflow.base import DataFlow


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
