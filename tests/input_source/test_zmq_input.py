from __future__ import annotations

import pickle
import threading
import time

import msgpack
import msgpack_numpy
import numpy as np
import pytest
import tensorflow as tf
import zmq

from dataflow.errors import DataFlowTerminated
from dataflow.input_source import ZMQInput
from dataflow.parallel.remote import send_dataflow_zmq
from tests.input_source._common import (
    Counting,
    LinearModel,
    as_plain,
    batch_signature,
    expected_counting,
    separable_batches,
    train_graph,
)

pytestmark = pytest.mark.filterwarnings(
    # tqdm (used by the sender) warns when it is not attached to a terminal in some versions
    "ignore::tqdm.TqdmExperimentalWarning"
)


# send_dataflow_zmq(num_epochs=...) returns once its messages left the socket; ZeroMQ drops
# what is still in flight beyond the receiver's high-water mark when the sender disconnects,
# so the receivers here get a high-water mark above the number of messages sent.
HWM = 256


@pytest.fixture
def addr(tmp_path):
    return f"ipc://{tmp_path}/feed"


def _sender(df, addr, epochs):
    t = threading.Thread(
        target=send_dataflow_zmq, args=(df, addr), kwargs={"num_epochs": epochs}, daemon=True
    )
    t.start()
    return t


def test_tf2_training_from_send_dataflow_zmq(addr):
    with ZMQInput(addr, hwm=HWM) as src:
        src.setup(batch_signature())
        sender = _sender(separable_batches(8), addr, 16)
        model = LinearModel()

        @tf.function
        def step():
            x, y = src.get_input_tensors()
            return model.step(x, y)

        losses = [float(step()) for _ in range(128)]
        assert src.received == 128
    sender.join(10)
    assert not sender.is_alive()
    assert np.mean(losses[-8:]) < 0.2


def test_tf2_dataset_exact_delivery_with_inferred_signature(addr):
    src = ZMQInput(addr, hwm=HWM)
    sender = _sender(Counting(5), addr, 2)
    ds = src.to_dataset()
    assert [s.dtype for s in src.input_signature] == [tf.float32, tf.int64, tf.string]
    got = [as_plain(*e) for e in ds.take(10)]
    assert got == expected_counting(5) * 2
    sender.join(10)
    src.close()
    src.close()  # idempotent


def test_graph_mode_training(addr):
    src = ZMQInput(addr, hwm=HWM)
    sender = _sender(separable_batches(8), addr, 16)
    losses = train_graph(src, steps=128)
    assert np.mean(losses[-8:]) < 0.2
    sender.join(10)
    src.close()


def test_single_frame_msgpack_numpy_messages_and_connect_mode(addr):
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.bind(addr)
    try:
        src = ZMQInput(addr, bind=False).open()
        for k in range(3):
            dp = [np.arange(3, dtype=np.int16) + k, {"a": 1}.get("a") * k]
            push.send(msgpack.packb(dp, default=msgpack_numpy.encode, use_bin_type=True))
        ds = src.to_dataset()
        got = [(a.numpy().tolist(), a.dtype, int(b)) for a, b in ds.take(3)]
        assert got == [([k, k + 1, k + 2], tf.int16, k) for k in range(3)]
        src.close()
    finally:
        push.close(linger=0)
        ctx.term()


def test_bad_messages_raise_in_the_training_loop(addr):
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(addr)
    try:
        src = ZMQInput(addr)
        src.setup([tf.TensorSpec([], tf.int64, "i")])
        push.send_multipart([b"P", pickle.dumps([1])])
        start = time.monotonic()
        with pytest.raises(ValueError, match="format='pickle'"):  # eager: the Python error
            src.get_input_tensors()
        push.send_multipart([b"X", b"?", b"?"])

        @tf.function
        def step():
            return src.get_input_tensors()

        with pytest.raises(tf.errors.OpError, match="3-frame message"):
            step()
        assert time.monotonic() - start < 5
        push.send(msgpack.packb([7], use_bin_type=True))  # the stream goes on after an error
        assert int(step()[0]) == 7
        src.close()
    finally:
        push.close(linger=0)
        ctx.term()


def test_close_unblocks_a_waiting_step_and_frees_the_address(addr):
    src = ZMQInput(addr)
    src.setup([tf.TensorSpec([], tf.int64, "i")])
    errors = []

    def wait():
        try:
            src.get_input_tensors()
        except DataFlowTerminated as e:
            errors.append(e)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    src.close()
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1
    again = ZMQInput(addr)  # the address can be bound again
    sender = _sender(Counting(1), addr, 1)
    assert [as_plain(*e) for e in again.to_dataset().take(1)] == expected_counting(1)
    sender.join(10)
    again.close()


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="`end_point` must be a ZeroMQ address"):
        ZMQInput("localhost:5555")
    with pytest.raises(ValueError, match="`hwm`"):
        ZMQInput("tcp://127.0.0.1:5555", hwm=0)
