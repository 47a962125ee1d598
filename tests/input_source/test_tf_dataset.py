from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.input_source import TFDatasetInput, dataflow_to_dataset
from dataflow.sources import DataFromList
from dataflow.wrappers import RepeatedData
from tests.input_source._common import (
    BATCH,
    DIM,
    Counting,
    LinearModel,
    as_plain,
    batch_signature,
    expected_counting,
    separable_batches,
    train_graph,
)


def test_exact_delivery_in_order_with_inferred_signature_and_reset_once():
    df = Counting(7)
    ds = dataflow_to_dataset(df)
    assert ds.element_spec == (
        tf.TensorSpec([2], tf.float32),
        tf.TensorSpec([], tf.int64),
        tf.TensorSpec([], tf.string),
    )
    for _ in range(3):
        got = [as_plain(*e) for e in ds]
        assert got == expected_counting(7)
    assert df.resets == 1
    assert df.iterations == 3


def test_dict_datapoints_and_explicit_signature():
    df = Counting(4, as_dict=True)
    ds = dataflow_to_dataset(df)
    assert sorted(ds.element_spec) == ["i", "s", "x"]
    got = [as_plain(e["x"], e["i"], e["s"]) for e in ds]
    assert got == expected_counting(4)
    # a list signature maps dict datapoints by spec name, in signature order
    sig = [tf.TensorSpec([None], tf.float64, "x"), tf.TensorSpec([], tf.int32, "i")]
    ds2 = dataflow_to_dataset(Counting(3, as_dict=True), sig)
    out = [(x.numpy().dtype, x.numpy().tolist(), int(i), i.dtype) for x, i in ds2]
    assert out == [(np.float64, [float(k), float(-k)], k, tf.int32) for k in range(3)]


def test_tensorpack_dtype_list_and_static_alias():
    assert TFDatasetInput.dataflow_to_dataset is dataflow_to_dataset
    ds = TFDatasetInput.dataflow_to_dataset(Counting(2), [tf.float32, tf.int64, tf.string])
    assert [as_plain(*e) for e in ds] == expected_counting(2)


def test_shape_mismatch_names_the_component():
    sig = [tf.TensorSpec([3], tf.float32, "x"), tf.TensorSpec([], tf.int64, "i"),
           tf.TensorSpec([], tf.string, "s")]
    ds = dataflow_to_dataset(Counting(2), sig)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"component 'x': shape \(2,\)"):
        list(ds)


def test_dataflow_exception_surfaces_in_the_training_loop():
    model = LinearModel()
    ds = dataflow_to_dataset(Counting(50, fail_at=5))
    seen = []
    start = time.monotonic()

    def train():
        for x, i, _ in ds:
            seen.append(int(i))
            model.loss(tf.reshape(tf.tile(x, [2]), [1, DIM]), tf.reshape(i % 2, [1]))

    with pytest.raises(tf.errors.InvalidArgumentError, match="boom at 5"):
        train()
    assert seen == [0, 1, 2, 3, 4]
    assert time.monotonic() - start < 10


def test_keras_fit_trains_on_a_dataflow():
    df = separable_batches(8)
    model = tf.keras.Sequential([tf.keras.Input((DIM,)), tf.keras.layers.Dense(2)])
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.5),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    hist = model.fit(dataflow_to_dataset(df), epochs=12, verbose=0, shuffle=False)
    assert len(hist.history["loss"]) == 12
    assert hist.history["loss"][-1] < 0.25
    assert hist.history["loss"][-1] < hist.history["loss"][0]


def test_tf_function_step_with_get_input_tensors():
    src = TFDatasetInput(RepeatedData(separable_batches(8), -1))
    src.setup(batch_signature())
    model = LinearModel()

    @tf.function
    def step():
        x, y = src.get_input_tensors()
        return model.step(x, y)

    losses = [float(step()) for _ in range(150)]
    assert np.mean(losses[-8:]) < 0.2
    src.close()


def test_tfdatasetinput_from_dataset_checks_the_spec():
    ds = tf.data.Dataset.from_tensors((tf.zeros([BATCH, DIM]), tf.zeros([BATCH], tf.int64)))
    src = TFDatasetInput(ds)
    with pytest.raises(ValueError, match="does not match the input signature"):
        src.setup(batch_signature())
    assert TFDatasetInput(ds.repeat(3)).size() == 3
    with pytest.raises(TypeError, match=r"tf\.data\.Dataset or a DataFlow"):
        TFDatasetInput([1, 2])


def test_graph_mode_training_from_dataflow_and_dataset():
    losses = train_graph(TFDatasetInput(RepeatedData(separable_batches(8), -1)), steps=150)
    assert len(losses) == 150
    assert np.mean(losses[-8:]) < 0.2

    def make():
        xs = np.concatenate([dp[0] for dp in _batches()])
        ys = np.concatenate([dp[1] for dp in _batches()])
        return tf.data.Dataset.from_tensor_slices((xs, ys)).batch(BATCH).repeat()

    losses = train_graph(lambda: TFDatasetInput(make()), steps=150)
    assert np.mean(losses[-8:]) < 0.2


def _batches():
    df = separable_batches(8)
    df.reset_state()
    return list(df)


def test_graph_mode_exact_delivery_and_reset_restarts_epoch():
    df = Counting(5)
    src = TFDatasetInput(df)
    with tf.Graph().as_default():
        cbs = src.setup([tf.TensorSpec([2], tf.float32, "x"), tf.TensorSpec([], tf.int64, "i"),
                         tf.TensorSpec([], tf.string, "s")])
        tensors = src.get_input_tensors()
        assert [t.shape.as_list() for t in tensors] == [[2], [], []]
        with tf.compat.v1.Session() as sess:
            for cb in cbs:
                cb.after_create_session(sess, None)
            got = [as_plain(*sess.run(tensors)) for _ in range(5)]
            assert got == expected_counting(5)
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(tensors)
            with sess.as_default():
                src.reset_state()
            assert as_plain(*sess.run(tensors)) == expected_counting(1)[0]
    assert df.resets == 1
    src.close()


class _Shapes(Counting):
    """Datapoints whose first component changes shape every few datapoints."""

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise ValueError(f"boom at {i}")
            yield [np.full((1 + i // 3,), i, np.float32), np.int64(i)]


@pytest.mark.parametrize("chunk", [1, 2, 16])
def test_chunks_keep_order_across_shape_changes_and_errors(chunk):
    sig = [tf.TensorSpec([None], tf.float32, "x"), tf.TensorSpec([], tf.int64, "i")]
    ds = dataflow_to_dataset(_Shapes(10), sig, chunk=chunk)
    want = [([float(i)] * (1 + i // 3), i) for i in range(10)]
    for _ in range(2):
        assert [(x.numpy().tolist(), int(i)) for x, i in ds] == want
    seen = []

    def train():
        for _, i in dataflow_to_dataset(_Shapes(10, fail_at=7), sig, chunk=chunk):
            seen.append(int(i))

    with pytest.raises(tf.errors.InvalidArgumentError, match="boom at 7"):
        train()
    assert seen == list(range(7))
    with pytest.raises(ValueError, match="`chunk` must be a positive int"):
        dataflow_to_dataset(_Shapes(1), sig, chunk=0)


def test_large_datapoints_are_not_stacked_and_cardinality_is_declared():
    big = DataFromList([[np.full((600, 600), k, np.float32)] for k in range(3)], shuffle=False)
    ds = dataflow_to_dataset(big)
    assert int(ds.cardinality()) == 3
    assert [float(x[0][0, 0]) for x in ds] == [0.0, 1.0, 2.0]
    assert int(dataflow_to_dataset(Counting(4), cardinality=None).cardinality()) < 0


def test_graph_mode_dataflow_exception_raises_from_the_step():
    src = TFDatasetInput(Counting(10, fail_at=3))
    seen = []
    with tf.Graph().as_default():
        cbs = src.setup([tf.TensorSpec([2], tf.float32, "x"), tf.TensorSpec([], tf.int64, "i"),
                         tf.TensorSpec([], tf.string, "s")])
        _, i, _ = src.get_input_tensors()

        def train():
            with tf.compat.v1.train.MonitoredSession(hooks=cbs) as sess:
                while True:
                    seen.append(int(sess.run(i)))

        with pytest.raises(tf.errors.InvalidArgumentError, match="boom at 3"):
            train()
    assert seen == [0, 1, 2]
    src.close()


_DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]


@st.composite
def _flows(draw):
    """A list of datapoints of 1-3 components with fixed dtypes and rank, varying sizes."""
    n_comp = draw(st.integers(1, 3))
    dtypes = [draw(st.sampled_from(_DTYPES)) for _ in range(n_comp)]
    ranks = [draw(st.integers(0, 2)) for _ in range(n_comp)]
    n = draw(st.integers(1, 12))
    dps = []
    for k in range(n):
        dp = []
        for dtype, rank in zip(dtypes, ranks):
            shape = [draw(st.integers(0, 3)) for _ in range(rank)]
            size = int(np.prod(shape)) if shape else 1
            dp.append((np.arange(size) + k).astype(dtype).reshape(shape))
        dps.append(dp)
    return dtypes, ranks, dps


@settings(max_examples=25, deadline=None)
@given(flow=_flows(), chunk=st.sampled_from([1, 3, 16]))
def test_property_every_datapoint_arrives_once_in_order(flow, chunk):
    dtypes, ranks, dps = flow
    sig = [tf.TensorSpec([None] * r, tf.as_dtype(d), f"c{i}")
           for i, (d, r) in enumerate(zip(dtypes, ranks))]
    ds = dataflow_to_dataset(DataFromList(dps, shuffle=False), sig, chunk=chunk)
    for _ in range(2):
        got = [[t.numpy() for t in e] for e in ds]
        assert len(got) == len(dps)
        for g, want in zip(got, dps):
            assert [(a.dtype, a.shape, a.tolist()) for a in g] == [
                (w.dtype, w.shape, w.tolist()) for w in want
            ]


class _Unhashable(Counting):
    __hash__ = None  # e.g. a flow that defines __eq__

    def __eq__(self, other):
        return self is other


def test_reset_once_for_unhashable_flows_shared_by_two_datasets():
    df = _Unhashable(3)
    a = dataflow_to_dataset(df)
    b = dataflow_to_dataset(df, cardinality=None)
    assert [as_plain(*e) for e in a] == [as_plain(*e) for e in b] == expected_counting(3)
    assert df.resets == 1
