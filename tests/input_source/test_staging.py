from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

from dataflow.input_source import FeedInput, QueueInput, StagingInput, TFDatasetInput
from dataflow.wrappers import RepeatedData
from tests.input_source._common import (
    Counting,
    LinearModel,
    as_plain,
    batch_signature,
    expected_counting,
    separable_batches,
    train_graph,
)


def test_cpu_only_passes_through_and_logs(caplog):
    assert tf.config.list_logical_devices("GPU") == []
    src = StagingInput(TFDatasetInput(Counting(4)))
    with caplog.at_level(logging.INFO, logger="dataflow.input_source.staging"):
        ds = src.to_dataset()
    assert "no GPU found" in caplog.text
    assert src.device is None
    assert [as_plain(*e) for e in ds] == expected_counting(4)
    src.close()


def test_tf2_training_through_staging():
    with StagingInput(QueueInput(separable_batches(8)), nr_stage=2) as src:
        src.setup(batch_signature())
        model = LinearModel()

        @tf.function
        def step():
            x, y = src.get_input_tensors()
            return model.step(x, y)

        losses = [float(step()) for _ in range(150)]
    assert np.mean(losses[-8:]) < 0.2


def test_explicit_cpu_device_prefetches_in_tf2():
    src = StagingInput(TFDatasetInput(Counting(5)), nr_stage=2, device="/cpu:0")
    ds = src.to_dataset()
    assert [as_plain(*e) for e in ds] == expected_counting(5)
    src.close()


@pytest.mark.parametrize("nr_stage", [1, 3])
def test_graph_mode_staging_area_trains_in_order(nr_stage):
    def make():
        return StagingInput(TFDatasetInput(RepeatedData(separable_batches(8), -1)),
                            nr_stage=nr_stage, device="/cpu:0")

    losses = train_graph(make, steps=150)
    assert np.mean(losses[-8:]) < 0.2

    src = StagingInput(QueueInput(Counting(6)), nr_stage=nr_stage, device="/cpu:0")
    with tf.Graph().as_default():
        sig = [tf.TensorSpec([2], tf.float32, "x"), tf.TensorSpec([], tf.int64, "i"),
               tf.TensorSpec([], tf.string, "s")]
        cbs = src.setup(sig)
        tensors = src.get_input_tensors()
        assert tensors[0].op.type == "Unstage"
        other = tf.constant(1.0) * 2
        (staged,) = src.staged_size_ops
        with tf.compat.v1.train.MonitoredSession(hooks=cbs) as sess:
            got = []
            for k in range(12):
                got.append(as_plain(*sess.run(tensors)))
                if k % 3 == 0:
                    sess.run(other)  # does not consume the input: nothing is staged
                assert sess.run(staged) == nr_stage
    assert got == expected_counting(6) * 2
    src.close()


def test_staging_rejects_feed_and_nested():
    with pytest.raises(TypeError, match="FeedfreeInput"):
        StagingInput(FeedInput(Counting(2)))
    with pytest.raises(TypeError, match="another StagingInput"):
        StagingInput(StagingInput(TFDatasetInput(Counting(2))))
    with pytest.raises(ValueError, match="`nr_stage`"):
        StagingInput(TFDatasetInput(Counting(2)), nr_stage=0)
