"""tensorpack's ``input_source.input_source`` path (old imports): the input sources of
:mod:`dataflow.input_source`."""
# ruff: noqa: F403, F405
from dataflow.input_source import *

__all__ = ["BatchQueueInput", "DummyConstantInput", "FeedInput", "FeedfreeInput",
           "PlaceholderInput", "QueueInput", "StagingInput", "TFDatasetInput", "TensorInput",
           "ZMQInput"]
