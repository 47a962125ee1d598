"""tensorpack's ``dataflow.common`` path (old imports): the wrappers of :mod:`dataflow.wrappers`."""
# ruff: noqa: F403, F405
from dataflow.wrappers import *

__all__ = ["BatchData", "BatchDataByShape", "CacheData", "ConcatData", "FixedSizeData",
           "JoinData", "LocallyShuffleData", "MapData", "MapDataComponent", "PrintData",
           "RandomChooseData", "RandomMixData", "RepeatedData", "RepeatedDataPoint",
           "SelectComponent", "TestDataSpeed"]
