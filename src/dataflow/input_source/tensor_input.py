"""``TensorInput`` and ``DummyConstantInput``: input tensors built by a function."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dataflow.input_source._tf import import_tf, pack, spec_list, spec_names
from dataflow.input_source.base import FeedfreeInput

__all__ = ["DummyConstantInput", "TensorInput"]


class TensorInput(FeedfreeInput):
    """Input from ``get_tensor_fn()``, which returns a list of tensors (one per signature entry).

    It is called on every ``get_input_tensors()`` (graph mode: in the source's name scope;
    TF2: also inside a ``tf.function``), and by ``to_dataset()`` once per element, so it must
    build new tensors each time. ``size``: the steps per epoch, if known.
    """

    def __init__(self, get_tensor_fn: Callable[[], Sequence[Any]], size: int | None = None):
        if not callable(get_tensor_fn):
            raise TypeError(f"`get_tensor_fn` must be callable, got {get_tensor_fn!r}")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"`size` must be a positive int or None, got {size!r}")
        self.get_tensor_fn = get_tensor_fn
        self._fixed_size = size

    def _size(self) -> int:
        if self._fixed_size is None:
            raise NotImplementedError("TensorInput was built without `size`")
        return self._fixed_size

    def _call_fn(self) -> list[Any]:
        out = self.get_tensor_fn()
        if not isinstance(out, list | tuple):
            out = [out]
        n = len(spec_list(self._signature))
        if len(out) != n:
            raise ValueError(
                f"`get_tensor_fn` returned {len(out)} tensors but the input signature has {n} "
                f"({spec_names(self._signature)}); return one tensor per input."
            )
        return list(out)

    def _get_input_tensors(self) -> Sequence[Any]:
        if self._graph_mode:
            with self.cached_name_scope():
                return self._call_fn()
        return self._call_fn()

    def _to_dataset(self):
        tf = import_tf()
        sig = self._signature

        @tf.autograph.experimental.do_not_convert
        def make(_):
            out = self._call_fn()
            for tensor, spec in zip(out, spec_list(sig)):
                tensor.set_shape(spec.shape)
            return pack(sig, out)

        return tf.data.Dataset.from_tensors(0).repeat().map(make)


class DummyConstantInput(TensorInput):
    """Zeros of the signature's dtypes with the given full ``shapes`` (for speed tests: no
    input pipeline at all). Tensors are named ``dummy-<name>-<call index>``."""

    def __init__(self, shapes: Sequence[Sequence[int]]) -> None:
        shapes = [list(s) for s in shapes]
        for s in shapes:
            if not all(isinstance(d, int) and d >= 0 for d in s):
                raise ValueError(
                    f"`shapes` must be fully defined (lists of non-negative ints), got {s!r}"
                )
        self.shapes = shapes
        self._calls = 0
        super().__init__(self._make_zeros)

    def _setup(self, input_signature: Any) -> None:
        specs = spec_list(input_signature)
        if len(specs) != len(self.shapes):
            raise ValueError(
                f"`shapes` has {len(self.shapes)} entries but the signature has {len(specs)}; "
                "give one full shape per input."
            )
        for spec, shape in zip(specs, self.shapes):
            if not spec.shape.is_compatible_with(shape):
                raise ValueError(f"shape {shape} is not compatible with {spec!r}")

    def _make_zeros(self) -> list[Any]:
        tf = import_tf()
        index, self._calls = self._calls, self._calls + 1
        return [
            tf.zeros(shape, dtype=spec.dtype, name=f"dummy-{name}-{index}")
            for spec, name, shape in zip(
                spec_list(self._signature), spec_names(self._signature), self.shapes
            )
        ]

    def _to_dataset(self):
        tf = import_tf()
        return tf.data.Dataset.from_tensors(pack(self._signature, self._make_zeros())).repeat()
