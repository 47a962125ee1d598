"""``PlaceholderInput`` and ``FeedInput``: inputs given per step (``feed_dict`` in graph mode)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dataflow.base import DataFlow
from dataflow.input_source._feeder import (
    DataFlowFeeder,
    check_dataflow,
    feeder_dataset,
    reset_once,
)
from dataflow.input_source._tf import flatten_datapoint, import_tf, repeat_forever, spec_list
from dataflow.input_source.base import InputCallback, InputSource, build_or_reuse_placeholder

__all__ = ["FeedInput", "PlaceholderInput"]


class PlaceholderInput(InputSource):
    """One ``tf.compat.v1.placeholder`` per signature entry (graph mode only; the same
    placeholders on every call). In TF2 pass inputs as ``tf.function`` arguments instead."""

    def _setup(self, input_signature: Any) -> None:
        if not self._graph_mode:
            raise RuntimeError(
                "PlaceholderInput works only in graph mode (inside `with tf.Graph().as_default():`)"
                "; in TF2 pass the inputs as arguments of a tf.function or use tf.keras.Input."
            )
        self._placeholders = [build_or_reuse_placeholder(s) for s in spec_list(input_signature)]

    def _get_input_tensors(self) -> Sequence[Any]:
        return self._placeholders


class _FeedCallback(InputCallback):
    def _before_run(self, run_context: Any) -> Any:
        tf = import_tf()
        return tf.compat.v1.train.SessionRunArgs(fetches=[], feed_dict=self.source.next_feed())


class FeedInput(InputSource):
    """Feeds the datapoints of a DataFlow, one per step.

    Graph mode: placeholders plus a callback that feeds the next datapoint to every
    ``session.run`` (a list datapoint by position, a dict by placeholder name). With
    ``infinite=True`` the flow is repeated forever; else ``StopIteration`` ends training at the
    end of the epoch (a ``MonitoredSession`` then exits cleanly).

    TF2: :meth:`iter_feeds` yields the datapoints as numpy arrays for a ``tf.function`` step,
    ``get_input_tensors()`` (eager only) returns the next one as tensors, and ``to_dataset()``
    gives a ``tf.data.Dataset`` (one epoch per iteration unless ``infinite``).
    """

    def __init__(self, ds: DataFlow, infinite: bool = True) -> None:
        self.ds = check_dataflow(ds, "ds")
        self.infinite = bool(infinite)
        self._itr: Iterator[Any] | None = None
        self._feeder: DataFlowFeeder | None = None
        self._index = 0

    def _size(self) -> int:
        return len(self.ds)

    def _infer_signature(self) -> Any:
        self._feeder = DataFlowFeeder(self.ds, None, repeat=self.infinite)
        return self._feeder.signature

    def _setup(self, input_signature: Any) -> None:
        if self._graph_mode:
            self._placeholders = [
                build_or_reuse_placeholder(s) for s in spec_list(input_signature)
            ]

    def _get_input_tensors(self) -> Sequence[Any]:
        if self._graph_mode:
            return self._placeholders
        tf = import_tf()
        if tf.inside_function():
            raise RuntimeError(
                "FeedInput.get_input_tensors() cannot be called inside a tf.function (the data "
                "would be frozen into the graph); iterate `src.iter_feeds()` and pass the arrays "
                "as arguments of the tf.function."
            )
        return [tf.convert_to_tensor(c) for c in self.next_feed_arrays()]

    def _get_callbacks(self) -> list[InputCallback]:
        return [_FeedCallback(self)] if self._graph_mode else []

    def _reset_state(self) -> None:
        self._close_itr()
        df = reset_once(self.ds)
        self._itr = repeat_forever(df) if self.infinite else iter(df)
        self._index = 0

    def _close_itr(self) -> None:
        close = getattr(self._itr, "close", None)
        if close is not None:
            close()
        self._itr = None

    def next_feed_arrays(self) -> list[np.ndarray]:
        """The next datapoint as arrays in signature order; StopIteration at the end."""
        if self._itr is None:
            self._reset_state()
        assert self._itr is not None
        dp = next(self._itr)
        index, self._index = self._index, self._index + 1
        return flatten_datapoint(dp, self._signature, index)

    def next_feed(self) -> dict[Any, np.ndarray]:
        """The ``feed_dict`` of the next step (graph mode)."""
        return dict(zip(self._placeholders, self.next_feed_arrays()))

    def iter_feeds(self, input_signature: Sequence[Any] | None = None) -> Iterator[list]:
        """Yields datapoints as lists of numpy arrays (signature order and dtypes): one epoch,
        or forever with ``infinite``. Sets the source up if needed."""
        if not self._setup_done:
            self.setup(input_signature if input_signature is not None else self._infer_signature())
        if self._feeder is not None:  # drop the iterator started to infer the signature
            self._feeder.close()
            self._feeder = None
        self._reset_state()
        while True:
            try:
                yield self.next_feed_arrays()
            except StopIteration:
                return

    def _to_dataset(self):
        if self._feeder is None or self._feeder.signature != self._signature:
            self._feeder = DataFlowFeeder(self.ds, self._signature, repeat=self.infinite)
        return feeder_dataset(self._feeder)

    def _close(self) -> None:
        self._close_itr()
        if self._feeder is not None:
            self._feeder.close()
        self.ds.close()
