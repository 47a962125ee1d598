"""TensorFlow input sources (tensorpack's ``input_source``), for TF2 and TF1-style graph mode.

TensorFlow is imported lazily: importing this package does not import it.
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
