"""``StagingInput``: prefetches another feed-free input to the training device."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from dataflow.input_source._tf import import_tf
from dataflow.input_source.base import FeedfreeInput, InputCallback, InputSource

__all__ = ["StagingInput"]

logger = logging.getLogger(__name__)


def _flatten_fetches(fetches: Any, graph: Any) -> list:
    out: list = []
    stack = [fetches]
    while stack:
        f = stack.pop()
        if f is None:
            continue
        if isinstance(f, dict):
            stack.extend(f.values())
        elif isinstance(f, list | tuple):
            stack.extend(f)
        else:
            if isinstance(f, str):
                f = graph.as_graph_element(f)
            op = getattr(f, "op", f)
            out.append(op)
    return out


def _depends_on(fetch_ops: list, targets: set) -> bool:
    """Whether any op in ``targets`` is an ancestor of (or in) ``fetch_ops``."""
    seen: set = set()
    stack = list(fetch_ops)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if op in targets:
            return True
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return False


class _StagingCallback(InputCallback):
    def __init__(self, source: StagingInput) -> None:
        super().__init__(source)
        self._cache: dict = {}

    def _before_train(self, session: Any, coord: Any) -> None:
        src = self.source
        if not src._stage_ops:
            return
        for _ in range(src.nr_stage):
            session.run(src._stage_ops)

    def _before_run(self, run_context: Any) -> Any:
        src = self.source
        if not src._stage_ops:
            return None
        tf = import_tf()
        fetches = run_context.original_args.fetches
        graph = run_context.session.graph
        ops = _flatten_fetches(fetches, graph)
        key = tuple(op.name for op in ops)
        if key not in self._cache:
            self._cache[key] = _depends_on(ops, set(src._unstage_ops))
        if self._cache[key]:
            return tf.compat.v1.train.SessionRunArgs(fetches=src._stage_ops)
        return None


class StagingInput(FeedfreeInput):
    """Wraps a feed-free input and keeps ``nr_stage`` elements staged on ``device``.

    * TF2: ``to_dataset()`` is the wrapped dataset followed by
      ``tf.data.experimental.prefetch_to_device(device, nr_stage)``.
    * Graph mode: every ``get_input_tensors()`` call (one per tower) puts the wrapped tensors
      into a ``StagingArea`` and returns its outputs; the callback pre-fills ``nr_stage``
      elements before training and stages one more on every run that consumes the input.

    ``device=None`` picks the first GPU; on a machine without one the input passes through
    unchanged (logged at INFO). Give ``device='/cpu:0'`` to stage on the CPU anyway.
    """

    def __init__(
        self, input: InputSource, nr_stage: int = 1, device: str | None = None
    ) -> None:
        if not isinstance(input, FeedfreeInput):
            raise TypeError(
                f"StagingInput wraps a FeedfreeInput (QueueInput, TFDatasetInput, ...), got "
                f"{type(input).__name__}; FeedInput feeds per step and cannot be staged."
            )
        if isinstance(input, StagingInput):
            raise TypeError("StagingInput cannot wrap another StagingInput")
        if isinstance(nr_stage, bool) or not isinstance(nr_stage, int) or nr_stage < 1:
            raise ValueError(f"`nr_stage` must be a positive int, got {nr_stage!r}")
        self._input = input
        self.nr_stage = nr_stage
        self._device_arg = device
        self.device: str | None = None
        self._stage_ops: list = []
        self._unstage_ops: list = []
        self.staged_size_ops: list = []  # graph mode: one size op per staging area

    def _resolve_device(self) -> str | None:
        if self._device_arg is not None:
            return self._device_arg
        tf = import_tf()
        if tf.config.list_logical_devices("GPU"):
            return "/gpu:0"
        logger.info(
            "StagingInput: no GPU found, so the input of %s passes through without staging.",
            type(self._input).__name__,
        )
        return None

    def _setup(self, input_signature: Any) -> None:
        self._input.setup(input_signature)
        self.device = self._resolve_device()

    def _infer_signature(self) -> Any:
        return self._input._infer_signature()

    def _get_input_tensors(self) -> Sequence[Any]:
        inputs = self._input.get_input_tensors()
        if not self._graph_mode or self.device is None:
            return inputs
        tf = import_tf()
        from tensorflow.python.ops.data_flow_ops import StagingArea

        with self.cached_name_scope(), tf.device(self.device):
            stage = StagingArea([t.dtype for t in inputs], shapes=None)
            put = stage.put([tf.identity(t) for t in inputs])
            outputs = stage.get()
            if not isinstance(outputs, list | tuple):
                outputs = [outputs]
        for out, inp in zip(outputs, inputs):
            out.set_shape(inp.shape)
        self._stage_ops.append(put)
        self._unstage_ops.append(outputs[0].op)
        self.staged_size_ops.append(stage.size())
        return list(outputs)

    def _get_callbacks(self) -> list[InputCallback]:
        return [*self._input.get_callbacks(), _StagingCallback(self)]

    def _reset_state(self) -> None:
        pass  # the wrapped source resets itself through its own callback

    def _size(self) -> int:
        return self._input.size()

    def _to_dataset(self):
        ds = self._input._to_dataset()
        if self.device is None:
            return ds
        tf = import_tf()
        return ds.apply(
            tf.data.experimental.prefetch_to_device(self.device, buffer_size=self.nr_stage)
        )

    def _close(self) -> None:
        self._input.close()
