"""tensorpack's ``dataflow.common`` module path, for old code that imports from it
(``from tensorpack.dataflow.common import BatchData``); the wrappers live in
:mod:`dataflow.wrappers`."""

from dataflow.wrappers import (
    BatchData,
    BatchDataByShape,
    CacheData,
    ConcatData,
    FixedSizeData,
    JoinData,
    LocallyShuffleData,
    MapData,
    MapDataComponent,
    PrintData,
    RandomChooseData,
    RandomMixData,
    RepeatedData,
    RepeatedDataPoint,
    SelectComponent,
    TestDataSpeed,
)

__all__ = [
    "BatchData", "BatchDataByShape", "CacheData", "ConcatData", "FixedSizeData", "JoinData",
    "LocallyShuffleData", "MapData", "MapDataComponent", "PrintData", "RandomChooseData",
    "RandomMixData", "RepeatedData", "RepeatedDataPoint", "SelectComponent", "TestDataSpeed",
]
