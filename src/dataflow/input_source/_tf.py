"""Lazy TensorFlow access and the datapoint <-> signature plumbing shared by the input sources.

Nothing here imports TensorFlow at module import time; :func:`import_tf` does it on first use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from dataflow._optional import import_optional
from dataflow.base import DataFlow

__all__ = [
    "flatten_datapoint",
    "import_tf",
    "infer_signature",
    "is_graph_mode",
    "normalize_signature",
    "repeat_forever",
]

def import_tf() -> Any:
    """``tensorflow``, or an ImportError naming the extra that installs it."""
    return import_optional("tensorflow", "dataflow.input_source")


def is_graph_mode() -> bool:
    """True inside a ``tf.Graph().as_default()`` block (TF1 style), False in eager code and
    while a ``tf.function`` is being traced."""
    tf = import_tf()
    return not tf.executing_eagerly() and not tf.inside_function()


def normalize_signature(signature: Any, what: str = "input_signature") -> Any:
    """Checks a signature: a ``tf.TensorSpec``, a list/tuple of them (returned as a tuple) or a
    dict ``name -> tf.TensorSpec``."""
    tf = import_tf()
    if isinstance(signature, tf.TensorSpec):
        return signature
    if isinstance(signature, Mapping) and signature:
        bad: Any = {k: v for k, v in signature.items() if not isinstance(v, tf.TensorSpec)}
        if not bad:
            return dict(signature)
    elif isinstance(signature, Sequence) and not isinstance(signature, str | bytes) and signature:
        bad = [s for s in signature if not isinstance(s, tf.TensorSpec)]
        if not bad:
            return tuple(signature)
    raise TypeError(
        f"`{what}` must be a non-empty list of tf.TensorSpec (or a dict name -> tf.TensorSpec), "
        f"got {signature!r} (type {type(signature).__name__}); build one like "
        "[tf.TensorSpec([None, 28, 28], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, "
        "'label')]."
    )


def spec_list(signature: Any) -> list:
    """The specs of a normalized signature as a flat list (dicts in their key order)."""
    if isinstance(signature, dict):
        return list(signature.values())
    if isinstance(signature, tuple):
        return list(signature)
    return [signature]


def spec_names(signature: Any) -> list[str]:
    """A name per spec: the dict key, else ``spec.name``, else ``input<i>``."""
    if isinstance(signature, dict):
        return [str(k) for k in signature]
    return [s.name or f"input{i}" for i, s in enumerate(spec_list(signature))]


def _component_spec(value: Any, name: str):
    tf = import_tf()
    arr = np.asarray(value)
    if arr.dtype.kind in "USO":
        if arr.dtype.kind == "O" and not all(isinstance(x, bytes | str) for x in arr.flat):
            raise TypeError(
                f"cannot infer a tf.TensorSpec for component {name!r}: it is an object array "
                f"(e.g. {arr.flat[0]!r} of type {type(arr.flat[0]).__name__}); pass "
                "`output_signature=` explicitly or convert the component to a numeric array."
            )
        dtype = tf.string
    else:
        dtype = tf.as_dtype(arr.dtype)
    return tf.TensorSpec(arr.shape, dtype, name=name)


def infer_signature(dp: Any) -> Any:
    """The signature of one datapoint: a tuple of specs for a list/tuple datapoint, a dict for a
    dict datapoint, else one spec. Shapes are the exact shapes of ``dp``."""
    if isinstance(dp, Mapping):
        return {k: _component_spec(v, str(k)) for k, v in dp.items()}
    if isinstance(dp, list | tuple):
        return tuple(_component_spec(v, f"input{i}") for i, v in enumerate(dp))
    return _component_spec(dp, "input0")


def _shape_ok(shape: tuple, spec) -> bool:
    dims = spec.shape.as_list() if spec.shape.rank is not None else None
    if dims is None:
        return True
    return len(shape) == len(dims) and all(d is None or d == s for d, s in zip(dims, shape))


def flatten_datapoint(dp: Any, signature: Any, index: int | None = None) -> list[np.ndarray]:
    """The components of ``dp`` as numpy arrays in signature order, checked and cast.

    A list datapoint maps by position; a dict datapoint maps by key (dict signature) or by
    spec name (list signature). Raises ValueError/TypeError naming the component on mismatch.
    """
    specs = spec_list(signature)
    names = spec_names(signature)
    where = f"datapoint {index}" if index is not None else "datapoint"
    if isinstance(dp, Mapping):
        missing = [n for n in names if n not in dp]
        if missing:
            raise ValueError(
                f"{where} is a dict with keys {sorted(map(str, dp))} but the signature needs "
                f"{names}; missing {missing}. Rename the keys or the tf.TensorSpec names."
            )
        comps = [dp[n] for n in names]
    elif isinstance(signature, tf_spec_type()):
        comps = [dp[0] if isinstance(dp, list | tuple) and len(dp) == 1 else dp]
    elif isinstance(dp, list | tuple):
        comps = list(dp)
        if len(comps) != len(specs):
            raise ValueError(
                f"{where} has {len(comps)} components but the signature has {len(specs)} "
                f"({names}); make the dataflow yield {len(specs)} components or fix the signature."
            )
    else:
        raise TypeError(
            f"{where} must be a list or dict of components, got {type(dp).__name__}: {dp!r}"
        )
    out = []
    for name, spec, comp in zip(names, specs, comps):
        np_dtype = object if spec.dtype.name == "string" else spec.dtype.as_numpy_dtype
        arr = np.asarray(comp, dtype=np_dtype)
        if not _shape_ok(arr.shape, spec):
            raise ValueError(
                f"{where}, component {name!r}: shape {arr.shape} does not match the signature "
                f"shape {spec.shape}; use None for dimensions that vary (e.g. a smaller last "
                "batch) in the tf.TensorSpec."
            )
        out.append(arr)
    return out


def tf_spec_type():
    return import_tf().TensorSpec


def dummy_components(signature: Any) -> list[np.ndarray]:
    """Zero arrays matching the signature (unknown dimensions become 0)."""
    out = []
    for spec in spec_list(signature):
        shape = spec.shape.as_list() if spec.shape.rank is not None else []
        dims = [0 if d is None else d for d in shape]
        if spec.dtype.name == "string":
            out.append(np.full(dims, b"", dtype=object))
        else:
            out.append(np.zeros(dims, dtype=spec.dtype.as_numpy_dtype))
    return out


def pack(signature: Any, flat: Sequence[Any]) -> Any:
    """The inverse of :func:`spec_list`: a tuple, a dict or a single value."""
    if isinstance(signature, dict):
        return dict(zip(signature, flat))
    if isinstance(signature, tuple):
        return tuple(flat)
    return flat[0]


def repeat_forever(df: DataFlow) -> Iterator[Any]:
    """Iterates ``df`` epoch after epoch (like ``RepeatedData(df, -1)``)."""
    while True:
        n = 0
        for dp in df:
            n += 1
            yield dp
        if n == 0:
            raise ValueError(
                f"{type(df).__name__} produced an empty epoch, so it cannot be repeated forever; "
                "check that the dataflow yields datapoints."
            )
