"""tensorpack's ``dataflow.parallel_map`` path (old imports): the mappers of
:mod:`dataflow.parallel`."""
# ruff: noqa: F403, F405
from dataflow.parallel import *

__all__ = ["MultiProcessMapAndBatchData", "MultiProcessMapAndBatchDataZMQ", "MultiProcessMapData",
           "MultiProcessMapDataComponentSharedArray", "MultiProcessMapDataZMQ",
           "MultiThreadMapData", "ThreadedMapData"]
