"""dataflow: a drop-in, modern reimplementation of ``tensorpack.dataflow``.

The layers, bottom up. A module imports its own layer and the layers below it, never above, and
no import cycle exists, not even through imports inside functions (``tests/test_layout.py``):

  core (root files)   base, state, rng, errors, validation, policy, sources, sharding, profiler
                      (and its profile_stats)
  jpeg/ -> imgaug/    the JPEG decoder and its C code; augmentors (sample) and transforms (apply)
  wrappers/           map, batch (+ its C stacker), shuffle, repeat, combine, cache, debug, image
  parallel/           the engine, shared_memory/, autotuning/; back ends that import only the engine
  serialize/ -> streaming/   file formats; shards from object storage (storage/: a scheme table)
  serialize/ -> snapshot/    persistent snapshots of the deterministic part, read by position
  dataset/ ray/ input_source/   dataset loaders, the Ray back end, TensorFlow input sources
  service/            one pool of workers for many trainers (DataService, ServiceData)
  torch, jax, demo, __main__, __init__, _legacy (old paths); utils/: tensorpack's face on top

``import dataflow as df`` gives tensorpack.dataflow's names: the core protocol, sources,
wrappers, parallel runners and mappers, serializers and format readers, and image flows. The
subpackages ``dataflow.imgaug`` (needs OpenCV), ``dataflow.dataset`` and
``dataflow.input_source`` (TensorFlow) load on first access, like tensorpack's lazy submodules;
``import dataflow`` itself never imports OpenCV, LMDB, h5py, SciPy or TensorFlow.

``from dataflow import *`` gives tensorpack's star import: ``__all__`` holds tensorpack's
names, ``dataset`` and ``imgaug`` included (the star import loads those two; without OpenCV,
``imgaug`` is then a placeholder whose first attribute raises the ``ImportError`` naming the
extra, so the star import still works for code that uses no augmentor). tensorpack's module
paths (``dataflow.common``, ``dataflow.image``, ...) and the standalone ``dataflow`` package's
``dataflow.dataflow.<module>`` are the modules of today's tree, served by one table
(:mod:`dataflow._legacy`); ``dataflow.utils.<module>`` holds tensorpack's ``utils`` modules.
"""

import importlib as _importlib
import types as _types

from dataflow import _legacy
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
from dataflow.parallel import (
    AUTOTUNE,
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
    ParallelMapData,
    PlasmaGetData,
    PlasmaPutData,
    PrefetchData,
    PrefetchDataZMQ,
    RemoteDataZMQ,
    ThreadedMapData,
    autotune,
    autotune_report,
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
from dataflow.wrappers.image import (
    AugmentImageComponent,
    AugmentImageComponents,
    AugmentImageCoordinates,
    ImageFromFile,
)

_legacy.install()  # tensorpack's old module paths (see dataflow._legacy)

# submodules loaded on first access; "dataset" and "imgaug" are also in __all__ (tensorpack's
# star import has them), so `from dataflow import *` loads those two
# ("snapshot" is callable: dataflow.snapshot(ds, path) cuts a pipeline, see dataflow.snapshot)
_LAZY_SUBMODULES = ("dataset", "imgaug", "input_source", "jax", "ray", "snapshot", "streaming",
                    "torch")
# names loaded from a lazy submodule on first access
_LAZY_NAMES = {"SnapshotData": "snapshot", "StreamingShards": "streaming",
               "TarShardData": "streaming", "TarShardSerializer": "streaming"}
_STAR_SUBMODULES = ("dataset", "imgaug")


class _MissingBackend(_types.ModuleType):
    """Stands for a submodule whose optional backend is not installed: its first attribute
    raises the ``ImportError`` (which names the extra to install)."""

    def __init__(self, name: str, error: ImportError) -> None:
        super().__init__(name)
        self._error = error

    def __getattr__(self, attr: str):
        if attr.startswith("__"):  # (what repr(), pickle and inspect probe for)
            raise AttributeError(attr)
        raise ImportError(str(self._error)) from self._error


def __getattr__(name: str):
    if name in _LAZY_NAMES:
        value = getattr(_importlib.import_module(f"dataflow.{_LAZY_NAMES[name]}"), name)
        globals()[name] = value
        return value
    if name in _LAZY_SUBMODULES:
        try:
            module = _importlib.import_module(f"dataflow.{name}")
        except ImportError as e:
            if name not in _STAR_SUBMODULES or e.name == f"dataflow.{name}":
                raise
            return _MissingBackend(f"dataflow.{name}", e)  # not cached: a later install works
        globals()[name] = module
        return module
    if _legacy.real_name(f"dataflow.{name}") is not None:  # an old path: dataflow.image, ...
        return _importlib.import_module(f"dataflow.{name}")
    raise AttributeError(f"module 'dataflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_SUBMODULES, *_LAZY_NAMES])


__all__ = [
    "AUTOTUNE",
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
    "ParallelMapData",
    "PlasmaGetData",
    "PlasmaPutData",
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
    "SnapshotData",
    "StateMismatchError",
    "TFRecordSerializer",
    "TestDataSpeed",
    "ThreadedMapData",
    "UnknownLengthError",
    "WorkerError",
    "__version__",
    "autotune",
    "autotune_report",
    "dataset",
    "get_seed",
    "imgaug",
    "profile",
    "send_dataflow_zmq",
    "set_seed",
    "shard",
    "snapshot",
]
