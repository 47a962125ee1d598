"""The bridge from a DataFlow to tf.data: ``DataFlowFeeder`` and ``feeder_dataset``.

The dataset pulls datapoints through a stateful ``tf.numpy_function``, several small ones per
call (stacked, then sliced), which is faster than ``tf.data.Dataset.from_generator``.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from typing import Any

import numpy as np

from dataflow.base import DataFlow
from dataflow.input_source._tf import (
    dummy_components,
    flatten_datapoint,
    import_tf,
    infer_signature,
    normalize_signature,
    pack,
    repeat_forever,
    spec_list,
)
from dataflow.validation import known_length

__all__ = ["DataFlowFeeder", "check_dataflow", "feeder_dataset", "known_length", "reset_once"]

_CHUNK_BYTES = 1 << 20
_reset_pids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_reset_by_id: dict[int, tuple[int, Any]] = {}  # flows that cannot be weak keys: id -> (pid, ref)
_reset_lock = threading.Lock()


def reset_once(df: DataFlow) -> DataFlow:
    """Calls ``df.reset_state()`` unless this process already did it through an input source."""
    pid = os.getpid()
    with _reset_lock:
        try:
            done = _reset_pids.get(df) == pid
        except TypeError:  # unhashable or not weak-referenceable: remember it by identity
            entry = _reset_by_id.get(id(df))
            done = entry is not None and entry[0] == pid and entry[1] is df
            if not done:
                df.reset_state()
                _reset_by_id[id(df)] = (pid, df)
            return df
        if not done:
            df.reset_state()
            _reset_pids[df] = pid
    return df


def check_dataflow(df: Any, what: str = "df") -> DataFlow:
    if not isinstance(df, DataFlow):
        raise TypeError(
            f"`{what}` must be a DataFlow, got {type(df).__name__}; wrap a list with "
            "DataFromList(lst, shuffle=False) or an iterable with DataFromIterable(it)."
        )
    return df


def _coerce_signature(signature: Any) -> Any:
    """Accepts tensorpack's list of dtypes too (shapes then unknown)."""
    tf = import_tf()
    if isinstance(signature, list | tuple) and signature and all(
        isinstance(t, tf.DType) for t in signature
    ):
        signature = [tf.TensorSpec(None, t, name=f"input{i}") for i, t in enumerate(signature)]
    return normalize_signature(signature, "output_signature")


class DataFlowFeeder:
    """Hands the datapoints of a dataflow to a tf.data pipeline, one Python iterator per epoch.

    ``new_epoch()`` closes the previous iterator and starts a new one (the dataflow is reset
    once per process); ``pull(epoch)`` returns ``[done, *components]``.
    """

    def __init__(self, df: DataFlow, signature: Any = None, repeat: bool = False) -> None:
        self.df = check_dataflow(df)
        self.repeat = repeat
        self._lock = threading.Lock()
        self._epoch = 0
        self._it: Any = None
        self._pending: Any = None  # an iterator already started to infer the signature
        self._index = 0
        self._closed = False
        if signature is None:
            it = self._iterate()
            try:
                first = next(it)
            except StopIteration:
                raise ValueError(
                    f"cannot infer the signature: {type(df).__name__} yielded no datapoint; "
                    "pass `output_signature=`."
                ) from None
            signature = infer_signature(first)
            self._pending = itertools.chain([first], it)
        self.signature = _coerce_signature(signature)
        self._dummy = dummy_components(self.signature)
        self._empty = [np.zeros((0, *d.shape), d.dtype) for d in self._dummy]
        self._carry: list | None = None  # a pulled datapoint that did not fit the last chunk
        self._deferred: BaseException | None = None  # raised after the rows before it

    def _iterate(self):
        df = reset_once(self.df)
        return repeat_forever(df) if self.repeat else iter(df)

    def new_epoch(self) -> np.int64:
        with self._lock:
            if self._closed:
                raise RuntimeError("the input source was closed; build a new one to train again")
            pending, self._pending = self._pending, None
            self._close_iter()
            self._carry = self._deferred = None
            self._epoch += 1
            self._index = 0
            self._it = pending if pending is not None else self._iterate()
            return np.int64(self._epoch)

    def next_components(self) -> list[np.ndarray] | None:
        """The next datapoint of the current epoch as arrays, or None at its end."""
        with self._lock:
            if self._it is None:
                return None
            try:
                dp = next(self._it)
            except StopIteration:
                self._it = None
                return None
            except BaseException:
                self._it = None
                raise
            index, self._index = self._index, self._index + 1
            return flatten_datapoint(dp, self.signature, index)

    def pull(self, epoch: Any) -> list[Any]:
        if int(epoch) != self._epoch:
            return [np.bool_(True), *self._dummy]
        comps = self.next_components()
        if comps is None:
            return [np.bool_(True), *self._dummy]
        return [np.bool_(False), *comps]

    def pull_chunk(self, epoch: Any, size: Any) -> list[Any]:
        """Up to ``size`` datapoints of the same shapes, stacked: ``[n, *components]``.

        ``n == 0`` ends the epoch. An error is raised after the datapoints before it.
        """
        rows: list[list[np.ndarray]] = []
        size = int(size)
        if int(epoch) == self._epoch:
            with self._lock:
                if self._deferred is not None:
                    err, self._deferred = self._deferred, None
                    raise err
                if self._carry is not None:
                    rows.append(self._carry)
                    self._carry = None
                while len(rows) < size and self._it is not None:
                    try:
                        dp = next(self._it)
                        comps = flatten_datapoint(dp, self.signature, self._index)
                    except StopIteration:
                        self._it = None
                        break
                    except BaseException as e:
                        self._it = None
                        if not rows:
                            raise
                        self._deferred = e
                        break
                    self._index += 1
                    if not rows:  # stack small datapoints only: at most ~1 MiB per chunk
                        nbytes = sum(c.nbytes for c in comps)
                        size = max(1, min(size, _CHUNK_BYTES // max(nbytes, 1)))
                    elif any(a.shape != b.shape for a, b in zip(comps, rows[0])):
                        self._carry = comps
                        break
                    rows.append(comps)
        if not rows:
            return [np.int64(0), *self._empty]
        return [np.int64(len(rows)), *(np.stack(col) for col in zip(*rows))]

    def _close_iter(self) -> None:
        for it in (self._it, self._pending):
            close = getattr(it, "close", None)
            if close is not None:
                try:
                    close()
                except ValueError:  # "generator already executing" in another thread
                    pass
        self._it = self._pending = None

    def close(self, timeout: float = 5.0) -> None:
        if self._lock.acquire(timeout=timeout):
            try:
                self._closed = True
                self._close_iter()
            finally:
                self._lock.release()
        else:
            self._closed = True


def feeder_dataset(
    feeder: DataFlowFeeder, prefetch: int | None = 2, cardinality: Any = "auto", chunk: int = 16
):
    """The ``tf.data.Dataset`` reading ``feeder``; each iteration starts a new epoch.

    ``chunk > 1`` pulls up to that many datapoints per Python call (consecutive ones of equal
    shapes, stacked, at most ~1 MiB, then sliced), which divides the per-call overhead.
    """
    tf = import_tf()
    signature = feeder.signature
    specs = spec_list(signature)
    if chunk > 1 and any(s.shape.rank is None for s in specs):
        chunk = 1
    tout = [tf.bool] + [s.dtype for s in specs]
    tout_chunk = [tf.int64] + [s.dtype for s in specs]

    @tf.autograph.experimental.do_not_convert
    def start(_):
        epoch = tf.numpy_function(feeder.new_epoch, [], tf.int64, stateful=True)
        epoch.set_shape([])
        return epoch

    @tf.autograph.experimental.do_not_convert
    def pull(epoch):
        out = tf.numpy_function(feeder.pull, [epoch], tout, stateful=True)
        out[0].set_shape([])
        for tensor, spec in zip(out[1:], specs):
            tensor.set_shape(spec.shape)
        return tuple(out)

    @tf.autograph.experimental.do_not_convert
    def not_done(done, *_):
        return tf.logical_not(done)

    @tf.autograph.experimental.do_not_convert
    def strip(_done, *comps):
        return pack(signature, comps)

    @tf.autograph.experimental.do_not_convert
    def pull_chunk(epoch):
        out = tf.numpy_function(feeder.pull_chunk, [epoch, chunk], tout_chunk, stateful=True)
        out[0].set_shape([])
        for tensor, spec in zip(out[1:], specs):
            tensor.set_shape([None, *spec.shape])
        return tuple(out)

    @tf.autograph.experimental.do_not_convert
    def not_empty(n, *_):
        return n > 0

    @tf.autograph.experimental.do_not_convert
    def slices(_n, *comps):
        return tf.data.Dataset.from_tensor_slices(pack(signature, comps))

    @tf.autograph.experimental.do_not_convert
    def one_epoch(epoch):
        ds = tf.data.Dataset.from_tensors(epoch).repeat()
        if chunk > 1:
            # from_tensor_slices, not unbatch(): unbatch crashes TF 2.21 on zero-size tensors
            return ds.map(pull_chunk).take_while(not_empty).flat_map(slices)
        return ds.map(pull).take_while(not_done).map(strip)

    ds = tf.data.Dataset.from_tensors(np.int64(0)).map(start).flat_map(one_epoch)
    if cardinality == "auto":
        cardinality = None if feeder.repeat else known_length(feeder.df)
    if cardinality is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
    if prefetch:
        ds = ds.prefetch(prefetch)
    return ds

