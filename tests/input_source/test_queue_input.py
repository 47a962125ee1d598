from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.errors import DataFlowTerminated
from dataflow.input_source import BatchQueueInput, QueueInput
from dataflow.sources import DataFromList
from tests.input_source._common import (
    BATCH,
    DIM,
    Counting,
    LinearModel,
    as_plain,
    batch_signature,
    expected_counting,
    input_threads,
    separable_batches,
    separable_points,
    train_graph,
)

COUNT_SIG = [
    tf.TensorSpec([2], tf.float32, "x"),
    tf.TensorSpec([], tf.int64, "i"),
    tf.TensorSpec([], tf.string, "s"),
]


def _wait_gone(threads, timeout=5.0):
    deadline = time.monotonic() + timeout
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [t for t in threads if t.is_alive()]


def test_tf2_tf_function_step_dequeues_and_trains():
    with QueueInput(separable_batches(8)) as src:
        src.setup(batch_signature())
        model = LinearModel()

        @tf.function
        def step():
            x, y = src.get_input_tensors()
            return model.step(x, y)

        losses = [float(step()) for _ in range(150)]
        assert np.mean(losses[-8:]) < 0.2
        assert src.size() == 8
        thread = src.thread
        assert thread is not None and thread.is_alive()
    assert _wait_gone([thread]) == []
    assert src.queue_fill_ema is not None and 0 <= src.queue_fill_ema <= 50


def test_tf2_exact_delivery_repeats_epochs_in_order():
    df = Counting(6)
    with QueueInput(df) as src:
        ds = src.to_dataset()  # signature inferred from the first datapoint
        assert [s.dtype for s in src.input_signature] == [tf.float32, tf.int64, tf.string]
        got = [as_plain(*e) for e in ds.take(18)]
    assert got == expected_counting(6) * 3
    assert df.resets == 1


def test_keras_fit_on_queue_dataset():
    with QueueInput(separable_batches(8)) as src:
        model = tf.keras.Sequential([tf.keras.Input((DIM,)), tf.keras.layers.Dense(2)])
        model.compile(
            optimizer=tf.keras.optimizers.SGD(0.5),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        hist = model.fit(src.to_dataset(batch_signature()), epochs=12, steps_per_epoch=8,
                         verbose=0, shuffle=False)
    assert hist.history["loss"][-1] < 0.25


def test_tf2_dataflow_exception_raises_in_training_step_quickly():
    src = QueueInput(Counting(100, fail_at=3))
    src.setup(COUNT_SIG)

    @tf.function
    def step():
        return src.get_input_tensors()[1]

    got = [int(step()) for _ in range(3)]
    assert got == [0, 1, 2]
    start = time.monotonic()
    with pytest.raises(tf.errors.InvalidArgumentError, match="ValueError: boom at 3"):
        step()
    assert time.monotonic() - start < 5
    assert isinstance(src._error, ValueError)
    thread = src.thread
    src.close()
    assert _wait_gone([thread]) == []


def test_graph_mode_trains_and_stops_its_thread():
    before = input_threads()
    losses = train_graph(lambda: QueueInput(separable_batches(8)), steps=150)
    assert np.mean(losses[-8:]) < 0.2
    assert _wait_gone([t for t in input_threads() if t not in before]) == []


def test_graph_mode_exact_delivery_and_fill_level_summary():
    df = Counting(5)
    src = QueueInput(df)
    with tf.Graph().as_default():
        cbs = src.setup(COUNT_SIG)
        tensors = src.get_input_tensors()
        assert [t.shape.as_list() for t in tensors] == [[2], [], []]
        names = [op.name for op in tf.compat.v1.get_default_graph().get_operations()]
        assert any(n.endswith("queue_size") for n in names)
        with tf.compat.v1.train.MonitoredSession(hooks=cbs) as sess:
            got = [as_plain(*sess.run(tensors)) for _ in range(10)]
            thread = src.thread
    assert got == expected_counting(5) * 2
    assert src.thread is None
    assert _wait_gone([thread]) == []
    src.close()


def test_graph_mode_exception_raises_original_through_coordinator():
    src = QueueInput(Counting(100, fail_at=4))
    with tf.Graph().as_default():
        cbs = src.setup(COUNT_SIG)
        _, i, _ = src.get_input_tensors()
        steps = []

        def train():
            with tf.compat.v1.train.MonitoredSession(hooks=cbs) as sess:
                while True:
                    steps.append(int(sess.run(i)))

        start = time.monotonic()
        with pytest.raises(ValueError, match="boom at 4"):
            train()
        assert time.monotonic() - start < 10
        assert steps == [0, 1, 2, 3]
    src.close()
    assert src.thread is None


def test_interrupting_training_stops_the_thread():
    src = QueueInput(separable_batches(4))
    src.setup(batch_signature())

    def train():
        with src:
            for n, _ in enumerate(src.to_dataset()):
                if n == 3:
                    raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train()
    assert input_threads() == [] or _wait_gone(input_threads()) == []


def test_user_queue_must_match_dtypes():
    with tf.Graph().as_default():
        q = tf.queue.FIFOQueue(10, [tf.float32])
        with pytest.raises(ValueError, match="`queue` has dtypes"):
            QueueInput(separable_batches(2), queue=q).setup(batch_signature())


def test_user_queue_works_in_graph_mode():
    def make():
        q = tf.queue.FIFOQueue(8, [tf.float32, tf.int32])
        return QueueInput(separable_batches(8), queue=q)

    losses = train_graph(make, steps=120)
    assert np.mean(losses[-8:]) < 0.25


def _point_flow():
    return DataFromList(separable_points(8 * BATCH), shuffle=False)


POINT_SIG = [tf.TensorSpec([None, DIM], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]


def test_batch_queue_input_tf2_and_graph():
    with BatchQueueInput(_point_flow(), BATCH) as src:
        assert src.size() == 8
        src.setup(POINT_SIG)
        model = LinearModel()

        @tf.function
        def step():
            x, y = src.get_input_tensors()
            tf.debugging.assert_equal(tf.shape(x), [BATCH, DIM])
            return model.step(x, y)

        losses = [float(step()) for _ in range(120)]
    assert np.mean(losses[-8:]) < 0.25
    losses = train_graph(lambda: BatchQueueInput(_point_flow(), BATCH), 120, POINT_SIG)
    assert np.mean(losses[-8:]) < 0.25


def test_batch_queue_input_exact_batches_and_errors():
    pts = [[np.float32(i), np.int64(i)] for i in range(6)]
    with BatchQueueInput(DataFromList(pts, shuffle=False), 4) as src:
        ds = src.to_dataset()
        assert [s.shape.as_list() for s in src.input_signature] == [[4], [4]]
        got = [(a.numpy().tolist(), b.numpy().tolist()) for a, b in ds.take(3)]
    assert got == [([0, 1, 2, 3], [0, 1, 2, 3]), ([4, 5, 0, 1], [4, 5, 0, 1]),
                   ([2, 3, 4, 5], [2, 3, 4, 5])]
    with pytest.raises(ValueError, match="fully defined non-batch shapes"):
        BatchQueueInput(_point_flow(), 4).setup([tf.TensorSpec([None, None], tf.float32, "x")])
    with pytest.raises(ValueError, match="`batch_size` must be a positive int"):
        BatchQueueInput(_point_flow(), 0)

    src = BatchQueueInput(Counting(100, fail_at=9), 4)
    src.setup([tf.TensorSpec([None, 2], tf.float32, "x"), tf.TensorSpec([None], tf.int64, "i"),
               tf.TensorSpec([None], tf.string, "s")])
    it = iter(src.to_dataset())
    assert next(it)[1].numpy().tolist() == [0, 1, 2, 3]
    assert next(it)[1].numpy().tolist() == [4, 5, 6, 7]
    with pytest.raises(tf.errors.InvalidArgumentError, match="boom at 9"):
        next(it)
    src.close()


def test_worker_processes_of_the_dataflow_end_with_the_source():
    from dataflow.parallel import MultiProcessRunner

    flow = MultiProcessRunner(separable_batches(4), num_prefetch=4, num_proc=2)
    src = QueueInput(flow)
    src.setup(batch_signature())
    model = LinearModel()

    @tf.function
    def step():
        return model.step(*src.get_input_tensors())

    def train():
        with src:
            for n in range(1000):
                step()
                if n == 20:
                    raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train()
    assert src.thread is None
    # the autouse fixture of tests/conftest.py fails the test if a worker process is left


def test_graph_mode_session_end_then_close_ends_worker_processes():
    from dataflow.parallel import MultiProcessRunner

    src = QueueInput(MultiProcessRunner(separable_batches(4), num_prefetch=4, num_proc=2))
    losses = train_graph(src, steps=30)
    assert len(losses) == 30
    assert src.thread is None
    src.close()


def test_refill_queue_restarts_the_epoch_in_tf2_and_graph():
    df = Counting(7)
    with QueueInput(df) as src:
        src.setup(COUNT_SIG)
        got = [int(src.get_input_tensors()[1]) for _ in range(3)]
        deadline = time.monotonic() + 5
        while src.thread.enqueued < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        src.refill_queue()
        got += [int(src.get_input_tensors()[1]) for _ in range(9)]
    assert got == [0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 0, 1]
    assert df.resets == 1

    src = QueueInput(Counting(5))
    with tf.Graph().as_default():
        cbs = src.setup(COUNT_SIG)
        _, i, _ = src.get_input_tensors()
        with tf.compat.v1.train.MonitoredSession(hooks=cbs) as sess:
            got = [int(sess.run(i)) for _ in range(2)]
            src.refill_queue()
            got += [int(sess.run(i)) for _ in range(6)]
    assert got == [0, 1, 0, 1, 2, 3, 4, 0]
    src.close()


class _Terminating(Counting):
    def __iter__(self):
        yield from super().__iter__()
        raise DataFlowTerminated("the remote end went away")


def test_terminated_dataflow_ends_the_queue_instead_of_hanging():
    src = QueueInput(_Terminating(3))
    src.setup(COUNT_SIG)

    @tf.function
    def step():
        return src.get_input_tensors()[1]

    assert [int(step()) for _ in range(3)] == [0, 1, 2]
    start = time.monotonic()
    with pytest.raises(tf.errors.OutOfRangeError, match="closed"):
        step()
    assert time.monotonic() - start < 5
    src.close()


@settings(max_examples=15, deadline=None)
@given(
    values=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=8),
    width=st.integers(0, 3),
)
def test_property_queue_repeats_epochs_in_order(values, width):
    dps = [[np.full((width,), v, np.int64), np.float32(v % 7)] for v in values]
    with QueueInput(DataFromList(dps, shuffle=False)) as src:
        got = [(a.numpy().tolist(), float(b)) for a, b in src.to_dataset().take(2 * len(dps))]
    assert got == [([v] * width, float(v % 7)) for v in values] * 2
