"""tensorpack's ``dataflow.parallel_map`` module path, for old code that imports from it
(``from tensorpack.dataflow.parallel_map import MultiThreadMapData``); the mappers live in
:mod:`dataflow.parallel`."""

from dataflow.parallel import (
    MultiProcessMapAndBatchData,
    MultiProcessMapAndBatchDataZMQ,
    MultiProcessMapData,
    MultiProcessMapDataComponentSharedArray,
    MultiProcessMapDataZMQ,
    MultiThreadMapData,
    ThreadedMapData,
)

__all__ = [
    "MultiProcessMapAndBatchData", "MultiProcessMapAndBatchDataZMQ", "MultiProcessMapData",
    "MultiProcessMapDataComponentSharedArray", "MultiProcessMapDataZMQ", "MultiThreadMapData",
    "ThreadedMapData",
]
