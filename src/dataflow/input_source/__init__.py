"""TensorFlow input sources (tensorpack's ``input_source``), for TF2 and TF1-style graph mode.

TensorFlow is imported lazily: importing this package does not import it.

TF2 / Keras::

    ds = dataflow_to_dataset(BatchData(df, 32))      # signature inferred from a datapoint
    model.fit(ds, epochs=10)                         # each epoch iterates `df` once

    with QueueInput(BatchData(df, 32)) as src:       # a thread fills a tf.queue.FIFOQueue
        src.setup([tf.TensorSpec([None, 28, 28], tf.float32, "image"),
                   tf.TensorSpec([None], tf.int32, "label")])

        @tf.function
        def train_step():
            image, label = src.get_input_tensors()  # dequeued inside the graph
            ...

Graph mode (``tf.compat.v1``, no global ``disable_eager_execution`` needed)::

    with tf.Graph().as_default():
        src = QueueInput(BatchData(df, 32))
        hooks = src.setup(signature)                 # start/stop feeding, reset the flow
        image, label = src.get_input_tensors()
        train_op = build_model(image, label)
        with tf.compat.v1.train.MonitoredSession(hooks=hooks) as sess:
            while not sess.should_stop():
                sess.run(train_op)

An exception in the dataflow fails the training step (with its message; under a
``MonitoredSession`` the original exception is raised) instead of hanging it; ``close()`` (or
leaving the ``with`` block) stops every thread a source started and closes its dataflow.
"""

from dataflow.input_source.base import (
    FeedfreeInput,
    InputCallback,
    InputSource,
    ProxyInputSource,
    build_or_reuse_placeholder,
    remap_input_source,
)
from dataflow.input_source.feed import FeedInput, PlaceholderInput
from dataflow.input_source.queue_input import BatchQueueInput, QueueInput
from dataflow.input_source.staging import StagingInput
from dataflow.input_source.tensor_input import DummyConstantInput, TensorInput
from dataflow.input_source.tf_dataset import TFDatasetInput, dataflow_to_dataset
from dataflow.input_source.zmq_input import ZMQInput

__all__ = [
    "BatchQueueInput",
    "DummyConstantInput",
    "FeedInput",
    "FeedfreeInput",
    "InputCallback",
    "InputSource",
    "PlaceholderInput",
    "ProxyInputSource",
    "QueueInput",
    "StagingInput",
    "TFDatasetInput",
    "TensorInput",
    "ZMQInput",
    "build_or_reuse_placeholder",
    "dataflow_to_dataset",
    "remap_input_source",
]
