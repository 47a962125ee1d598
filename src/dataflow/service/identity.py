"""A pipeline's identity: what the outputs of a :class:`~dataflow.service.DataService`
depend on, as plain values (its seed, ``shuffle``, length, a digest of ``map_func``'s code and
the source's type). Consumers compare it at every (re)connection and at ``load_state_dict``: a
service restarted with the same arguments has the same identity (a transparent restart), one
with other arguments is an error naming what differs, never outputs of two pipelines mixed."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

__all__ = ["callable_digest", "identity_diff", "pipeline_identity"]


def pipeline_identity(ds: Any, map_func: Any, seed: int, shuffle: bool, n: int
                      ) -> dict[str, Any]:
    """The identity of the pipeline ``map_func(ds[i])`` over ``n`` datapoints."""
    return {"seed": seed, "shuffle": shuffle, "n": n, "map_func": callable_digest(map_func),
            "source": f"{_qualname(type(ds))} of {n}"}


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What differs between two pipeline identities, ``key: old -> new`` (empty: the same)."""
    keys = sorted(set(old) | set(new))
    return "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys
                     if old.get(k) != new.get(k))


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(type(obj)))}"


def _code_digest(code: Any, h: Any) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _code_digest(const, h)
        else:
            h.update(repr(const).encode() if isinstance(
                const, int | float | str | bytes | bool | tuple | type(None)) else b"?")


def callable_digest(func: Any) -> str:
    """A stable name of what ``func`` computes: its qualified name and a digest of its code
    (the same in any process that imports the same source), through ``functools.partial``
    and callable objects."""
    h = hashlib.sha256()
    parts: list[str] = []
    while isinstance(func, functools.partial):
        parts.append(f"partial({len(func.args)} args, {sorted(func.keywords)})")
        h.update(repr([a for a in func.args if isinstance(a, int | float | str | bool)]).encode())
        h.update(repr(sorted((k, v) for k, v in func.keywords.items()
                             if isinstance(v, int | float | str | bool))).encode())
        func = func.func
    code = getattr(func, "__code__", None)
    if code is None:  # (a callable object: its class and its __call__)
        call = type(func).__dict__.get("__call__")
        code = getattr(call, "__code__", None)
        parts.append(_qualname(type(func)))
    else:
        parts.append(_qualname(func))
    if code is not None:
        _code_digest(code, h)
    return f"{' '.join(reversed(parts))} #{h.hexdigest()[:16]}"
