from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dataflow.input_source import FeedInput, PlaceholderInput
from tests.input_source._common import (
    DIM,
    Counting,
    LinearModel,
    as_plain,
    batch_signature,
    expected_counting,
    separable_batches,
    train_graph,
)

COUNT_SIG = [
    tf.TensorSpec([2], tf.float32, "x"),
    tf.TensorSpec([], tf.int64, "i"),
    tf.TensorSpec([], tf.string, "s"),
]


def test_graph_mode_training():
    losses = train_graph(lambda: FeedInput(separable_batches(8)), steps=150)
    assert len(losses) == 150
    assert np.mean(losses[-8:]) < 0.2


def test_graph_mode_finite_exact_delivery_ends_training_cleanly():
    df = Counting(5, as_dict=True)  # dict datapoints feed by placeholder name
    src = FeedInput(df, infinite=False)
    assert src.size() == 5
    got = []
    with tf.Graph().as_default():
        cbs = src.setup(COUNT_SIG)
        x, i, s = src.get_input_tensors()
        assert [t.op.type for t in (x, i, s)] == ["Placeholder"] * 3
        assert src.get_input_tensors() == [x, i, s]  # placeholders: the same on every call
        with tf.compat.v1.train.MonitoredSession(hooks=cbs) as sess:
            while not sess.should_stop():
                got.append(as_plain(*sess.run([x, i, s])))
    assert got == expected_counting(5)
    assert df.resets == 1


def test_tf2_iter_feeds_into_tf_function_and_eager_tensors():
    src = FeedInput(separable_batches(8), infinite=False)
    model = LinearModel()
    step = tf.function(model.step, input_signature=batch_signature())
    losses = []
    for _ in range(15):
        losses += [float(step(x, y)) for x, y in src.iter_feeds(batch_signature())]
    assert len(losses) == 120
    assert np.mean(losses[-8:]) < 0.2

    src2 = FeedInput(Counting(3))  # infinite: wraps around
    src2.setup(COUNT_SIG)
    got = [as_plain(*src2.get_input_tensors()) for _ in range(4)]
    assert got == expected_counting(3) + expected_counting(1)

    @tf.function
    def bad():
        return src2.get_input_tensors()

    with pytest.raises(RuntimeError, match="iter_feeds"):
        bad()


def test_tf2_to_dataset_finite_and_keras():
    df = Counting(4)
    src = FeedInput(df, infinite=False)
    ds = src.to_dataset()
    assert [as_plain(*e) for e in ds] == expected_counting(4)
    assert [as_plain(*e) for e in ds] == expected_counting(4)
    assert df.resets == 1

    model = tf.keras.Sequential([tf.keras.Input((DIM,)), tf.keras.layers.Dense(2)])
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.5),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    ds = FeedInput(separable_batches(8), infinite=False).to_dataset(batch_signature())
    hist = model.fit(ds, epochs=12, verbose=0, shuffle=False)
    assert hist.history["loss"][-1] < 0.25


def test_feed_errors_name_the_problem():
    with pytest.raises(TypeError, match="`ds` must be a DataFlow"):
        FeedInput([1, 2, 3])
    src = FeedInput(Counting(2))
    with tf.Graph().as_default():
        src.setup(COUNT_SIG[:2])
        with pytest.raises(ValueError, match="has 3 components but the signature has 2"):
            src.next_feed()
    with pytest.raises(ValueError, match="boom at 1"):
        list(FeedInput(Counting(3, fail_at=1), infinite=False).iter_feeds(COUNT_SIG))


def test_placeholder_input_graph_only_and_reused():
    with tf.Graph().as_default():
        a = PlaceholderInput()
        a.setup(batch_signature())
        x, y = a.get_input_tensors()
        assert (x.name, y.name) == ("x:0", "y:0")
        b = PlaceholderInput()
        b.setup(batch_signature())
        assert b.get_input_tensors() == [x, y]
        with pytest.raises(ValueError, match="already exists"):
            PlaceholderInput().setup([tf.TensorSpec([3], tf.int64, "x")])
        with pytest.raises(RuntimeError, match="already called"):
            a.setup(batch_signature())
    with pytest.raises(RuntimeError, match="only in graph mode"):
        PlaceholderInput().setup(batch_signature())


def test_graph_mode_dataflow_exception_raises_from_the_step():
    src = FeedInput(Counting(10, fail_at=2))
    seen = []
    with tf.Graph().as_default():
        cbs = src.setup(COUNT_SIG)
        _, i, _ = src.get_input_tensors()

        def train():
            with tf.compat.v1.train.MonitoredSession(hooks=cbs) as sess:
                while True:
                    seen.append(int(sess.run(i)))

        with pytest.raises(ValueError, match="boom at 2"):
            train()
    assert seen == [0, 1]
