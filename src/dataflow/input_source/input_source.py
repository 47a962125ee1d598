"""tensorpack's ``input_source.input_source`` module path, for old code that imports from it
(``from tensorpack.input_source.input_source import QueueInput``)."""

from dataflow.input_source.base import FeedfreeInput
from dataflow.input_source.feed import FeedInput, PlaceholderInput
from dataflow.input_source.queue_input import BatchQueueInput, QueueInput
from dataflow.input_source.staging import StagingInput
from dataflow.input_source.tensor_input import DummyConstantInput, TensorInput
from dataflow.input_source.tf_dataset import TFDatasetInput
from dataflow.input_source.zmq_input import ZMQInput

__all__ = [
    "BatchQueueInput", "DummyConstantInput", "FeedInput", "FeedfreeInput", "PlaceholderInput",
    "QueueInput", "StagingInput", "TFDatasetInput", "TensorInput", "ZMQInput",
]
