from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dataflow.input_source import DummyConstantInput, TensorInput
from tests.input_source._common import (
    BATCH,
    DIM,
    W_TRUE,
    LinearModel,
    batch_signature,
    train_graph,
)


def _random_batch():
    x = tf.random.normal([BATCH, DIM], seed=None)
    y = tf.cast(tf.linalg.matvec(x, tf.constant(W_TRUE)) > 0, tf.int32)
    return [x, y]


def test_tensor_input_trains_in_tf2_and_graph():
    src = TensorInput(_random_batch, size=10)
    assert src.size() == 10
    src.setup(batch_signature())
    model = LinearModel()

    @tf.function
    def step():
        x, y = src.get_input_tensors()
        return model.step(x, y)

    losses = [float(step()) for _ in range(150)]
    assert np.mean(losses[-8:]) < 0.25

    ds = TensorInput(_random_batch).to_dataset(batch_signature())
    x, y = next(iter(ds))
    assert x.shape == (BATCH, DIM)
    assert y.numpy().tolist() == (x.numpy() @ W_TRUE > 0).astype(int).tolist()

    losses = train_graph(lambda: TensorInput(_random_batch), steps=150)
    assert np.mean(losses[-8:]) < 0.25


def test_tensor_input_checks_count_and_size():
    src = TensorInput(lambda: [tf.zeros([1, DIM])])
    src.setup(batch_signature())
    with pytest.raises(ValueError, match="returned 1 tensors but the input signature has 2"):
        src.get_input_tensors()
    with pytest.raises(NotImplementedError):
        src.size()
    with pytest.raises(TypeError, match="callable"):
        TensorInput(3)


def test_dummy_constant_input():
    src = DummyConstantInput([[BATCH, DIM], [BATCH]])
    src.setup(batch_signature())
    x, y = src.get_input_tensors()
    assert x.numpy().tolist() == np.zeros([BATCH, DIM]).tolist()
    assert y.dtype == tf.int32 and y.shape == (BATCH,)
    ds = src.to_dataset()
    a, b = next(iter(ds))
    assert (a.shape, b.shape) == ((BATCH, DIM), (BATCH,))
    with tf.Graph().as_default():
        g = DummyConstantInput([[2, DIM], [2]])
        g.setup(batch_signature())
        t1 = g.get_input_tensors()
        t2 = g.get_input_tensors()
        assert [t.op.name.split("/")[-1] for t in t1 + t2] == [
            "dummy-x-0", "dummy-y-0", "dummy-x-1", "dummy-y-1"
        ]
    with pytest.raises(ValueError, match="not compatible"):
        DummyConstantInput([[BATCH, 3], [BATCH]]).setup(batch_signature())
    with pytest.raises(ValueError, match="fully defined"):
        DummyConstantInput([[None, DIM]])
