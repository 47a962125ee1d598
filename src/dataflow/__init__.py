"""dataflow: a drop-in, modern reimplementation of ``tensorpack.dataflow``.

``import dataflow as df`` gives the core protocol, sources and wrappers. Optional parts live in
subpackages that import their heavy dependencies lazily.
"""

from dataflow._version import __version__
from dataflow.base import DataFlow, ProxyDataFlow, RNGDataFlow
from dataflow.errors import (
    DataFlowError,
    DataFlowReentrantError,
    DataFlowTerminated,
    UnknownLengthError,
    WorkerError,
)
from dataflow.rng import get_seed, set_seed
from dataflow.sources import (
    DataFromGenerator,
    DataFromIterable,
    DataFromList,
    DataFromQueue,
    FakeData,
)
from dataflow.wrappers import (
    BatchData,
    BatchDataByShape,
    CacheData,
    ConcatData,
    FilterData,
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
    "BatchData",
    "BatchDataByShape",
    "CacheData",
    "ConcatData",
    "DataFlow",
    "DataFlowError",
    "DataFlowReentrantError",
    "DataFlowTerminated",
    "DataFromGenerator",
    "DataFromIterable",
    "DataFromList",
    "DataFromQueue",
    "FakeData",
    "FilterData",
    "FixedSizeData",
    "JoinData",
    "LocallyShuffleData",
    "MapData",
    "MapDataComponent",
    "PrintData",
    "ProxyDataFlow",
    "RNGDataFlow",
    "RandomChooseData",
    "RandomMixData",
    "RepeatedData",
    "RepeatedDataPoint",
    "SelectComponent",
    "TestDataSpeed",
    "UnknownLengthError",
    "WorkerError",
    "__version__",
    "get_seed",
    "set_seed",
]
