"""Shared plumbing of the serializers: source path checks, optional imports, progress bars and
errors. (Atomic saves have their own module, :mod:`dataflow.serialize._atomic_write`.)"""

from __future__ import annotations

import os
import time
from typing import Any

from dataflow.errors import CorruptFileError

__all__ = [
    "CorruptFileError",
    "ProgressMeter",
    "begin_save",
    "check_data_paths",
    "check_source_path",
    "describe",
    "import_optional",
    "reset_and_len",
    "serialize_error",
]

from dataflow._optional import import_optional


def check_source_path(path: Any, what: str, param: str = "path") -> str:
    """``os.fspath(path)`` of an existing path, else FileNotFoundError naming it."""
    try:
        p = os.fspath(path)
    except TypeError:
        raise TypeError(
            f"`{param}` of {what} must be a str or os.PathLike, got {path!r} "
            f"(type {type(path).__name__})"
        ) from None
    if not os.path.exists(p):
        raise FileNotFoundError(f"{what}: `{param}` {p!r} does not exist; check the path.")
    return p


def check_data_paths(data_paths: Any) -> list[str]:
    if isinstance(data_paths, str) or not isinstance(data_paths, list | tuple) or not data_paths:
        raise TypeError(
            f"`data_paths` must be a non-empty list of HDF5 dataset names, one per datapoint "
            f"component, got {data_paths!r}; e.g. data_paths=['image', 'label']."
        )
    for p in data_paths:
        if not isinstance(p, str):
            raise TypeError(f"`data_paths` entries must be str, got {p!r} in {data_paths!r}")
    if len(set(data_paths)) != len(data_paths):
        raise ValueError(f"`data_paths` has duplicates: {data_paths!r}; give each a unique name.")
    return list(data_paths)


def begin_save(df: Any, path: str, what: str, label: str, overwrite: bool, progress: bool,
               check: Any) -> tuple[str, ProgressMeter]:
    """The start of every save: check the target (``check(path, what, overwrite)``, before
    anything is shown), reset ``df``, and a progress bar labelled ``label``."""
    path = check(path, what, overwrite)
    size = reset_and_len(df, what)
    return path, ProgressMeter(f"{label} {os.path.basename(path)}", size, progress)


def reset_and_len(df: Any, what: str) -> int | None:
    """Check ``df`` is a DataFlow, reset it (as tensorpack's saves do) and return its length."""
    from dataflow.base import DataFlow

    if not isinstance(df, DataFlow):
        raise TypeError(
            f"{what}: `df` must be a DataFlow, got {type(df).__name__}; wrap a list with "
            "DataFromList(lst, shuffle=False)."
        )
    df.reset_state()
    try:
        return len(df)
    except (NotImplementedError, TypeError):
        return None


class ProgressMeter:
    """A tqdm bar showing datapoints/s, with MB/s written in the postfix.

    ``update(n, nbytes)`` is called in batches by the writers, so the per-item cost is nil.
    """

    def __init__(self, desc: str, total: int | None, enabled: bool) -> None:
        self.bar = None
        self.nbytes = 0
        self.t0 = time.perf_counter()
        if enabled:
            from dataflow.wrappers._progress import get_tqdm

            self.bar = get_tqdm(
                total=total,
                desc=desc,
                unit="dp",
                unit_scale=True,
                bar_format="{l_bar}{bar}|{n_fmt}/{total_fmt}[{elapsed}<{remaining},"
                "{rate_noinv_fmt}{postfix}]",
            )

    def update(self, n: int, nbytes: int) -> None:
        self.nbytes += nbytes
        if self.bar is not None:
            elapsed = max(time.perf_counter() - self.t0, 1e-9)
            self.bar.set_postfix_str(f"{self.nbytes / elapsed / 1e6:.1f} MB/s", refresh=False)
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def describe(obj: Any, depth: int = 0) -> str:
    """A short structural description of a datapoint, for error messages."""
    import numpy as np

    if isinstance(obj, np.ndarray):
        return f"ndarray({obj.dtype}, {obj.shape})"
    if depth >= 2:
        return type(obj).__name__
    if isinstance(obj, list | tuple):
        inner = ", ".join(describe(x, depth + 1) for x in obj[:8])
        more = ", ..." if len(obj) > 8 else ""
        return f"{type(obj).__name__}[{inner}{more}]"
    if isinstance(obj, dict):
        inner = ", ".join(f"{k!r}: {describe(v, depth + 1)}" for k, v in list(obj.items())[:8])
        return "{" + inner + "}"
    return type(obj).__name__


def serialize_error(what: str, index: int, dp: Any, e: Exception) -> TypeError:
    return TypeError(
        f"{what}: datapoint {index} cannot be serialized ({type(e).__name__}: {e}); it is "
        f"{describe(dp)}. Datapoints must hold picklable values (arrays, numbers, str, bytes, "
        "lists, dicts); convert other objects (lambdas, generators, open files) first."
    )
