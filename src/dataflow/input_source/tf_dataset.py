"""``dataflow_to_dataset`` and ``TFDatasetInput``: a DataFlow as a ``tf.data.Dataset``.

The dataset pulls datapoints through a stateful ``tf.numpy_function``, several small ones per
call (1.3-1.5x the throughput of ``tf.data.Dataset.from_generator`` in
``benchmarks/bench_input_source.py``), and prefetches a few so that the dataflow runs while the
model trains.

An ImageNet-style input that decodes only the crop of each JPEG (see docs/jpeg.md; the decoder
releases the GIL, so the threads use every core) and feeds ``model.fit``::

    augs = imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(),
                                 imgaug.Flip(horiz=True)])
    ds = LMDBSerializer.load("train.lmdb", shuffle=False)        # [jpeg bytes, label]
    ds = LocallyShuffleData(ds, 1000, seed=0)
    ds = MultiThreadMapData(ds, 8, lambda dp: [augs.augment_jpeg(dp[0], color="rgb"), dp[1]])
    model.fit(dataflow_to_dataset(BatchData(ds, 64)), epochs=90)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dataflow.base import DataFlow
from dataflow.input_source._feeder import DataFlowFeeder, feeder_dataset
from dataflow.input_source._tf import import_tf, spec_list, spec_names
from dataflow.input_source.base import FeedfreeInput

__all__ = ["TFDatasetInput", "dataflow_to_dataset"]


def dataflow_to_dataset(
    df: DataFlow,
    output_signature: Any = None,
    *,
    prefetch: int | None = 2,
    cardinality: Any = "auto",
    chunk: int = 16,
):
    """A ``tf.data.Dataset`` fed by ``df``.

    Args:
        df: the DataFlow. ``reset_state()`` is called once per process, on first use; each
            iteration of the dataset (each Keras epoch) iterates ``df`` once more, so the
            dataset is finite if ``df`` is.
        output_signature: a list of ``tf.TensorSpec`` (elements are tuples; a dict datapoint
            maps by spec name), a dict ``key -> tf.TensorSpec`` (elements are dicts), a single
            spec, or tensorpack's list of dtypes. ``None`` infers it from the first datapoint,
            with the exact shapes of that datapoint.
        prefetch: elements pulled ahead (``None``/0: none).
        cardinality: the number of elements the dataset declares (``assert_cardinality``), so
            that Keras knows the epoch length; ``"auto"`` uses ``len(df)`` where known,
            ``None`` declares nothing (use it for flows whose ``__len__`` is only a hint).
        chunk: up to this many small datapoints are taken from ``df`` per call into Python
            (stacked, then split again), which cuts the per-datapoint overhead; use 1 for
            flows that block between datapoints (network streams) to avoid reading ahead.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"`chunk` must be a positive int, got {chunk!r}")
    feeder = DataFlowFeeder(df, output_signature)
    return feeder_dataset(feeder, prefetch, cardinality, chunk)


class TFDatasetInput(FeedfreeInput):
    """Input from a ``tf.data.Dataset`` or a DataFlow (converted by :func:`dataflow_to_dataset`).

    Graph mode uses an initializable iterator, re-initialized by ``reset_state()``; training
    needs enough elements (``.repeat()`` the dataset, or ``RepeatedData`` the flow). TF2:
    ``to_dataset()`` returns the dataset; ``get_input_tensors()`` (also inside a ``tf.function``)
    takes the next element of an iterator restarted by ``reset_state()``.
    """

    dataflow_to_dataset = staticmethod(dataflow_to_dataset)

    def __init__(self, dataset: Any, *, prefetch: int | None = 2) -> None:
        tf = import_tf()
        self._df: DataFlow | None = None
        self._dataset: Any = None
        if isinstance(dataset, DataFlow):
            self._df = dataset
        elif isinstance(dataset, tf.data.Dataset):
            self._dataset = dataset
        else:
            raise TypeError(
                f"`dataset` must be a tf.data.Dataset or a DataFlow, got "
                f"{type(dataset).__name__}: {dataset!r}"
            )
        self._prefetch = prefetch
        self._feeder: DataFlowFeeder | None = None
        self._iterator: Any = None

    def _infer_signature(self) -> Any:
        if self._dataset is not None:
            return self._dataset.element_spec
        assert self._df is not None
        self._feeder = DataFlowFeeder(self._df)
        return self._feeder.signature

    def _setup(self, input_signature: Any) -> None:
        tf = import_tf()
        if self._df is not None:
            if self._feeder is None or self._feeder.signature != input_signature:
                self._feeder = DataFlowFeeder(self._df, input_signature)
            self._dataset = feeder_dataset(self._feeder, self._prefetch)
        else:
            assert self._dataset is not None
            self._check_spec(self._dataset.element_spec, input_signature)
        if self._graph_mode:
            self._iterator = tf.compat.v1.data.make_initializable_iterator(self._dataset)

    @staticmethod
    def _check_spec(element_spec: Any, signature: Any) -> None:
        tf = import_tf()
        got = tf.nest.flatten(element_spec)
        want = spec_list(signature)
        ok = len(got) == len(want) and all(
            g.dtype == w.dtype and g.shape.is_compatible_with(w.shape) for g, w in zip(got, want)
        )
        if not ok:
            raise ValueError(
                f"the dataset's element_spec {element_spec!r} does not match the input "
                f"signature {signature!r} (dtypes must be equal, shapes compatible); "
                "map/cast the dataset to the model's inputs."
            )

    def _flatten(self, element: Any) -> list[Any]:
        if isinstance(element, dict):
            return [element[n] for n in spec_names(self._signature)]
        tf = import_tf()
        return tf.nest.flatten(element)

    def _get_input_tensors(self) -> Sequence[Any]:
        tf = import_tf()
        if self._graph_mode:
            out = self._flatten(self._iterator.get_next())
        else:
            if self._iterator is None:
                with tf.init_scope():
                    self._iterator = iter(self._dataset)
            out = self._flatten(next(self._iterator))
        for tensor, spec in zip(out, spec_list(self._signature)):
            tensor.set_shape(spec.shape)
        return out

    def _reset_state(self) -> None:
        if self._graph_mode:
            tf = import_tf()
            tf.compat.v1.get_default_session().run(self._iterator.initializer)
        else:
            self._iterator = None

    def _size(self) -> int:
        if self._df is not None:
            return len(self._df)
        n = int(self._dataset.cardinality())
        if n < 0:
            raise NotImplementedError("the dataset's cardinality is infinite or unknown")
        return n

    def _to_dataset(self):
        return self._dataset

    def _close(self) -> None:
        if self._feeder is not None:
            self._feeder.close()
        if self._df is not None:
            self._df.close()
