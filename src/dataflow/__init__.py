"""dataflow: a drop-in, modern reimplementation of ``tensorpack.dataflow``.

``import dataflow as df`` gives tensorpack.dataflow's names: the core protocol, sources,
wrappers, parallel runners and mappers, serializers and format readers, and image flows. The
subpackages ``dataflow.imgaug`` (needs OpenCV), ``dataflow.dataset`` and
``dataflow.input_source`` (TensorFlow) load on first access, like tensorpack's lazy submodules;
``import dataflow`` itself never imports OpenCV, LMDB, h5py, SciPy or TensorFlow.
"""

import importlib as _importlib

from dataflow._version import __version__
from dataflow.base import DataFlow, ProxyDataFlow, RNGDataFlow
from dataflow.errors import (
    DataFlowError,
    DataFlowReentrantError,
    DataFlowTerminated,
    ImageDecodeError,
    UnknownLengthError,
    WorkerError,
)
from dataflow.image import (
    AugmentImageComponent,
    AugmentImageComponents,
    AugmentImageCoordinates,
    ImageFromFile,
)
from dataflow.parallel import (
    MultiProcessMapAndBatchData,
    MultiProcessMapAndBatchDataZMQ,
    MultiProcessMapData,
    MultiProcessMapDataComponentSharedArray,
    MultiProcessMapDataZMQ,
    MultiProcessPrefetchData,
    MultiProcessRunner,
    MultiProcessRunnerZMQ,
    MultiThreadMapData,
    MultiThreadPrefetchData,
    MultiThreadRunner,
    PrefetchData,
    PrefetchDataZMQ,
    RemoteDataZMQ,
    ThreadedMapData,
    send_dataflow_zmq,
)
from dataflow.profiler import profile
from dataflow.rng import get_seed, set_seed
from dataflow.serialize import (
    CaffeLMDB,
    HDF5Data,
    HDF5Serializer,
    LMDBData,
    LMDBDataDecoder,
    LMDBDataPoint,
    LMDBSerializer,
    NumpySerializer,
    SVMLightData,
    TFRecordSerializer,
)
from dataflow.sharding import ShardData, shard
from dataflow.sources import (
    DataFromGenerator,
    DataFromIterable,
    DataFromList,
    DataFromQueue,
    FakeData,
)
from dataflow.state import StateMismatchError
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

# submodules loaded on first access (kept out of __all__ so that `import *` stays light)
_LAZY_SUBMODULES = ("dataset", "imgaug", "input_source", "jax", "ray", "streaming", "torch")
# names loaded from a lazy submodule on first access
_LAZY_NAMES = {"StreamingShards": "streaming", "TarShardSerializer": "streaming"}


def __getattr__(name: str):
    if name in _LAZY_NAMES:
        value = getattr(_importlib.import_module(f"dataflow.{_LAZY_NAMES[name]}"), name)
        globals()[name] = value
        return value
    if name in _LAZY_SUBMODULES:
        module = _importlib.import_module(f"dataflow.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'dataflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_SUBMODULES, *_LAZY_NAMES])


__all__ = [
    "AugmentImageComponent",
    "AugmentImageComponents",
    "AugmentImageCoordinates",
    "BatchData",
    "BatchDataByShape",
    "CacheData",
    "CaffeLMDB",
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
    "HDF5Data",
    "HDF5Serializer",
    "ImageDecodeError",
    "ImageFromFile",
    "JoinData",
    "LMDBData",
    "LMDBDataDecoder",
    "LMDBDataPoint",
    "LMDBSerializer",
    "LocallyShuffleData",
    "MapData",
    "MapDataComponent",
    "MultiProcessMapAndBatchData",
    "MultiProcessMapAndBatchDataZMQ",
    "MultiProcessMapData",
    "MultiProcessMapDataComponentSharedArray",
    "MultiProcessMapDataZMQ",
    "MultiProcessPrefetchData",
    "MultiProcessRunner",
    "MultiProcessRunnerZMQ",
    "MultiThreadMapData",
    "MultiThreadPrefetchData",
    "MultiThreadRunner",
    "NumpySerializer",
    "PrefetchData",
    "PrefetchDataZMQ",
    "PrintData",
    "ProxyDataFlow",
    "RNGDataFlow",
    "RandomChooseData",
    "RandomMixData",
    "RemoteDataZMQ",
    "RepeatedData",
    "RepeatedDataPoint",
    "SVMLightData",
    "SelectComponent",
    "ShardData",
    "StateMismatchError",
    "TFRecordSerializer",
    "TestDataSpeed",
    "ThreadedMapData",
    "UnknownLengthError",
    "WorkerError",
    "__version__",
    "get_seed",
    "profile",
    "send_dataflow_zmq",
    "set_seed",
    "shard",
]
