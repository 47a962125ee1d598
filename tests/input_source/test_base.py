from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from dataflow.input_source import (
    FeedInput,
    InputCallback,
    InputSource,
    QueueInput,
    TFDatasetInput,
    remap_input_source,
)
from dataflow.wrappers import MapData, RepeatedData
from tests.input_source._common import Counting, as_plain, batch_signature, expected_counting


def test_importing_dataflow_does_not_import_tensorflow():
    code = (
        "import sys, dataflow, dataflow.input_source\n"
        "from dataflow.input_source import QueueInput, ZMQInput, dataflow_to_dataset\n"
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_setup_once_and_signature_validation():
    src = TFDatasetInput(Counting(2))
    with pytest.raises(RuntimeError, match=r"needs setup\(input_signature\) first"):
        src.get_input_tensors()
    with pytest.raises(TypeError, match="`input_signature` must be a non-empty list"):
        src.setup([])
    with pytest.raises(TypeError, match="`input_signature` must be a non-empty list"):
        src.setup(["x"])
    src.setup([tf.TensorSpec([2], tf.float32, "x"), tf.TensorSpec([], tf.int64, "i"),
               tf.TensorSpec([], tf.string, "s")])
    with pytest.raises(RuntimeError, match="already called"):
        src.setup(batch_signature())
    with pytest.raises(ValueError, match="differs from the one given to setup"):
        src.to_dataset(batch_signature())
    assert src.setup_done()
    assert [as_plain(*e) for e in src] == expected_counting(2)  # __iter__ iterates to_dataset
    src.close()
    src.close()


def test_callbacks_follow_both_protocols():
    src = FeedInput(Counting(3))
    sig = [tf.TensorSpec([2], tf.float32, "x"), tf.TensorSpec([], tf.int64, "i"),
           tf.TensorSpec([], tf.string, "s")]
    with tf.Graph().as_default():
        cbs = src.setup(sig)
        assert src.get_callbacks() == cbs
        assert all(isinstance(cb, InputCallback) and cb.chief_only is False for cb in cbs)
        assert repr(cbs[0]) == "_ResetCallback(FeedInput)"
        x, i, s = src.get_input_tensors()
        with tf.compat.v1.Session() as sess, sess.as_default():
            for cb in cbs:  # tensorpack style
                cb.setup_graph(None)
                cb.before_train()
            got = []
            for _ in range(4):
                feed = {}
                for cb in cbs:
                    args = cb.before_run(None)
                    if args is not None:
                        feed.update(args.feed_dict)
                got.append(as_plain(*sess.run([x, i, s], feed_dict=feed)))
            for cb in cbs:
                cb.after_train()
    assert got == expected_counting(3) + expected_counting(1)


def test_remap_input_source_graph_mode():
    # the wrapped source provides only the remapped inputs, in the order of `names`
    inner = TFDatasetInput(RepeatedData(MapData(Counting(3), lambda dp: [dp[1], dp[0]]), -1))
    src = remap_input_source(inner, ["i", "x"])
    assert isinstance(src, TFDatasetInput) and isinstance(src, InputSource)
    with tf.Graph().as_default():
        cbs = src.setup([tf.TensorSpec([2], tf.float32, "x"), tf.TensorSpec([], tf.string, "s"),
                         tf.TensorSpec([], tf.int64, "i")])
        x, s, i = src.get_input_tensors()
        assert s.op.type == "Placeholder" and s.name == "s:0"
        assert x.op.type != "Placeholder" and i.op.type != "Placeholder"
        with tf.compat.v1.train.MonitoredSession(hooks=cbs) as sess:
            got = [sess.run([x, i, s], feed_dict={s: b"fed"}) for _ in range(4)]
    assert [(a.tolist(), int(b), c) for a, b, c in got] == [
        ([0.0, 0.0], 0, b"fed"), ([1.0, -1.0], 1, b"fed"), ([2.0, -2.0], 2, b"fed"),
        ([0.0, 0.0], 0, b"fed"),
    ]
    with pytest.raises(ValueError, match=r"`names` \['z'\] are not in the signature"):
        remap_input_source(TFDatasetInput(Counting(1)), ["z"]).setup(batch_signature())
    with pytest.raises(TypeError, match="`names` must be a list"):
        remap_input_source(inner, "x")


def test_dict_signature_and_numpy_dtypes():
    src = QueueInput(Counting(3, as_dict=True))
    sig = {"i": tf.TensorSpec([], tf.int32), "x": tf.TensorSpec([2], tf.float64)}
    with src:
        ds = src.to_dataset(sig)
        got = [(e["i"].numpy(), e["x"].numpy()) for e in ds.take(4)]
    assert [(int(i), x.dtype, x.tolist()) for i, x in got] == [
        (k % 3, np.float64, [float(k % 3), float(-(k % 3))]) for k in range(4)
    ]
