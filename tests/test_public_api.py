"""The public namespace matches tensorpack.dataflow's names and constructor signatures."""

from __future__ import annotations

import importlib
import inspect
import pickle
import subprocess
import sys

import pytest

import dataflow

# tensorpack's public names (base, common, raw) with tensorpack's positional parameters and defaults
SIGNATURES = {
    "DataFlow": None,
    "ProxyDataFlow": "(ds)",
    "RNGDataFlow": None,
    "DataFlowTerminated": None,
    "TestDataSpeed": "(ds, size=5000, warmup=0)",
    "PrintData": "(ds, num=1, name=None, max_depth=3, max_list=3)",
    "BatchData": "(ds, batch_size, remainder=False, use_list=False)",
    "BatchDataByShape": "(ds, batch_size, idx)",
    "FixedSizeData": "(ds, size, keep_state=True)",
    "MapData": "(ds, func)",
    "MapDataComponent": "(ds, func, index=0)",
    "RepeatedData": "(ds, num)",
    "RepeatedDataPoint": "(ds, num)",
    "RandomChooseData": "(df_lists)",
    "RandomMixData": "(df_lists)",
    "JoinData": "(df_lists)",
    "ConcatData": "(df_lists)",
    "SelectComponent": "(ds, idxs)",
    "LocallyShuffleData": "(ds, buffer_size, num_reuse=1, shuffle_interval=None)",
    "CacheData": "(ds, shuffle=False)",
    "FakeData": "(shapes, size=1000, random=True, dtype='float32', domain=(0, 1))",
    "DataFromQueue": "(queue)",
    "DataFromList": "(lst, shuffle=True)",
    "DataFromGenerator": "(gen)",
    "DataFromIterable": "(iterable)",
    # format.py
    "HDF5Data": "(filename, data_paths, shuffle=True)",
    "LMDBData": "(lmdb_path, shuffle=True, keys=None)",
    "LMDBDataDecoder": "(lmdb_data, decoder)",
    "CaffeLMDB": "(lmdb_path, shuffle=True, keys=None)",
    "SVMLightData": "(filename, shuffle=True)",
    # image.py
    "ImageFromFile": "(files, channel=3, resize=None, shuffle=False)",
    "AugmentImageComponent": "(ds, augmentors, index=0, copy=True, catch_exceptions=False)",
    "AugmentImageCoordinates": (
        "(ds, augmentors, img_index=0, coords_index=1, copy=True, catch_exceptions=False)"),
    "AugmentImageComponents": (
        "(ds, augmentors, index=(0, 1), coords_index=(), copy=True, catch_exceptions=False)"),
    # parallel.py
    "MultiProcessRunner": "(ds, num_prefetch, num_proc)",
    "MultiProcessRunnerZMQ": "(ds, num_proc=1, hwm=50)",
    "MultiThreadRunner": "(get_df, num_prefetch, num_thread)",
    "PrefetchData": "(ds, num_prefetch, num_proc)",
    "MultiProcessPrefetchData": "(ds, num_prefetch, num_proc)",
    "PrefetchDataZMQ": "(ds, num_proc=1, hwm=50)",
    "MultiThreadPrefetchData": "(get_df, num_prefetch, num_thread)",
    # parallel_map.py
    "MultiThreadMapData": "(ds, num_thread=None, map_func=None)",
    "MultiProcessMapDataZMQ": "(ds, num_proc=None, map_func=None)",
    "MultiProcessMapData": "(ds, num_proc=None, map_func=None)",
    "MultiProcessMapAndBatchDataZMQ": "(ds, num_proc, map_func, batch_size, buffer_size=None)",
    "MultiProcessMapAndBatchData": "(ds, num_proc, map_func, batch_size, buffer_size=None)",
    # remote.py
    "RemoteDataZMQ": "(addr1, addr2=None, hwm=50, bind=True)",
    "send_dataflow_zmq": "(df, addr, hwm=50, format=None, bind=False)",
    # serialize.py (static methods are checked in tests/serialize)
    "LMDBSerializer": None,
    "NumpySerializer": None,
    "TFRecordSerializer": None,
    "HDF5Serializer": None,
}


def _positional(obj) -> str:
    sig = inspect.signature(obj)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_name_and_signature(name):
    obj = getattr(dataflow, name)
    assert name in dataflow.__all__
    if SIGNATURES[name] is not None:
        assert _positional(obj).replace(" ", "") == SIGNATURES[name].replace(" ", "")


# older tensorpack names that scripts still use (tensorpack 0.9/0.10 docs and user code)
LEGACY = {
    "PlasmaPutData": "(ds, socket=None)",
    "PlasmaGetData": "(ds, socket=None)",
    "ThreadedMapData": "(ds, nr_thread=None, map_func=None, buffer_size=200, strict=False)",
    "LMDBDataPoint": "(lmdb_path, shuffle=True)",
    "MultiProcessMapDataComponentSharedArray": (
        "(ds, num_proc, map_func, output_shape, output_dtype, index=0)"),
}


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_legacy_name_and_signature(name):
    obj = getattr(dataflow, name)
    assert name in dataflow.__all__
    assert _positional(obj).replace(" ", "") == LEGACY[name].replace(" ", "")


# tensorpack's module paths (``tensorpack.dataflow.<module>``, ``tensorpack.input_source.<module>``)
# and the public names each one has, which old code imports from there
MODULES = {
    "base": "DataFlow ProxyDataFlow RNGDataFlow DataFlowTerminated",
    "common": "TestDataSpeed PrintData BatchData BatchDataByShape FixedSizeData MapData "
              "MapDataComponent RepeatedData RepeatedDataPoint RandomChooseData RandomMixData "
              "JoinData ConcatData SelectComponent LocallyShuffleData CacheData",
    "raw": "FakeData DataFromQueue DataFromList DataFromGenerator DataFromIterable",
    "format": "HDF5Data LMDBData LMDBDataDecoder CaffeLMDB SVMLightData LMDBDataPoint",
    "image": "ImageFromFile AugmentImageComponent AugmentImageCoordinates "
             "AugmentImageComponents",
    "parallel": "MultiProcessRunner MultiProcessRunnerZMQ MultiThreadRunner PrefetchData "
                "MultiProcessPrefetchData PrefetchDataZMQ MultiThreadPrefetchData PlasmaPutData "
                "PlasmaGetData",
    "parallel_map": "MultiThreadMapData MultiProcessMapDataZMQ MultiProcessMapAndBatchDataZMQ "
                    "MultiProcessMapData MultiProcessMapAndBatchData ThreadedMapData "
                    "MultiProcessMapDataComponentSharedArray",
    "remote": "RemoteDataZMQ send_dataflow_zmq",
    "serialize": "LMDBSerializer NumpySerializer TFRecordSerializer HDF5Serializer",
    "imgaug.base": "ImageAugmentor Augmentor AugmentorList PhotometricAugmentor",
    "imgaug.transform": "Transform ResizeTransform CropTransform FlipTransform TransformList "
                        "TransformFactory",
    "imgaug.convert": "ColorSpace Grayscale ToUint8 ToFloat32",
    "imgaug.crop": "RandomCrop CenterCrop RandomCropRandomShape GoogleNetRandomCropAndResize "
                   "RandomCutout",
    "imgaug.geometry": "Shift Rotation RotationAndCropValid Affine",
    "imgaug.imgproc": "Hue Brightness BrightnessScale Contrast MeanVarianceNormalize "
                      "GaussianBlur Gamma Clip Saturation Lighting MinMaxNormalize",
    "imgaug.meta": "RandomChooseAug MapImage Identity RandomApplyAug RandomOrderAug",
    "imgaug.misc": "Flip Resize RandomResize ResizeShortestEdge Transpose",
    "imgaug.noise": "JpegNoise GaussianNoise SaltPepperNoise",
    "imgaug.paste": "CenterPaste BackgroundFiller ConstantBackgroundFiller RandomPaste",
    "imgaug.external": "IAAugmentor Albumentations",
    "input_source.input_source_base": "InputSource remap_input_source",
    "input_source.input_source": "PlaceholderInput FeedInput FeedfreeInput QueueInput "
                                 "BatchQueueInput DummyConstantInput TensorInput ZMQInput "
                                 "TFDatasetInput StagingInput",
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_tensorpack_module_paths_hold_their_names(module):
    mod = importlib.import_module(f"dataflow.{module}")
    package = importlib.import_module(f"dataflow.{module.rsplit('.', 1)[0]}"
                                      if "." in module else "dataflow")
    for name in MODULES[module].split():
        assert name in mod.__all__, name
        # the same object as the package's, not a copy
        assert getattr(mod, name) is getattr(package, name), name


def _heavy_modules_after(imports: str) -> list[str]:
    """The heavy optional modules that ``imports`` loads, in a fresh interpreter."""
    code = (f"import sys\n{imports}\n"
            "print(' '.join(m for m in ('tensorflow', 'cv2', 'lmdb', 'h5py', 'scipy', 'torch') "
            "if m in sys.modules))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.split()


def test_old_module_paths_stay_light():
    assert _heavy_modules_after(
        "import dataflow.common, dataflow.raw, dataflow.format, dataflow.parallel_map\n"
        "import dataflow.remote, dataflow.input_source.input_source") == []


def test_threaded_map_data_is_a_multi_thread_map_data_with_nr_thread():
    from dataflow.parallel import ThreadedMapData

    assert dataflow.ThreadedMapData is ThreadedMapData
    src = dataflow.DataFromList([[i] for i in range(6)], shuffle=False)
    with ThreadedMapData(src, nr_thread=2, map_func=lambda dp: [dp[0] * 10],
                         buffer_size=4, strict=True) as flow:
        assert type(flow) is dataflow.MultiThreadMapData
        assert (flow.num_thread, flow.buffer_size) == (2, 4)
        flow.reset_state()
        assert sorted(dp[0] for dp in flow) == [0, 10, 20, 30, 40, 50]


def test_lmdb_data_point_reads_what_lmdb_serializer_saved(tmp_path):
    pytest.importorskip("lmdb")
    dps = [[i, f"s{i}"] for i in range(5)]
    dataflow.LMDBSerializer.save(dataflow.DataFromList(dps, shuffle=False), tmp_path / "a.lmdb",
                                 progress=False)
    flow = dataflow.LMDBDataPoint(str(tmp_path / "a.lmdb"), shuffle=False)
    flow.reset_state()
    assert list(flow) == dps
    assert dataflow.serialize.LMDBDataPoint is dataflow.LMDBDataPoint


def test_tensorpack_name_count():
    # tensorpack's 52 names plus the submodules imgaug and dataset
    assert len(SIGNATURES) == 52
    assert dataflow.imgaug.Flip is not None
    assert dataflow.dataset.Mnist is not None
    assert dataflow.input_source.QueueInput is not None


def test_all_is_sorted_and_complete():
    assert dataflow.__all__ == sorted(dataflow.__all__)
    for name in dataflow.__all__:
        assert hasattr(dataflow, name)


def test_import_is_light():
    assert _heavy_modules_after("import dataflow") == []


# tensorpack 0.11's ``tensorpack.dataflow.__all__``: the 52 names above and two submodules
TENSORPACK_ALL = frozenset(SIGNATURES) | {"dataset", "imgaug"}


def test_star_import_gives_a_superset_of_tensorpacks():
    assert len(TENSORPACK_ALL) == 54
    ns: dict = {}
    exec("from dataflow import *", ns)
    assert set(ns) >= TENSORPACK_ALL
    assert ns["imgaug"] is dataflow.imgaug and ns["dataset"] is dataflow.dataset
    assert ns["imgaug"].AugmentorList is dataflow.imgaug.base.AugmentorList


def test_star_import_loads_only_what_imgaug_needs():
    # the star import loads dataset and imgaug (tensorpack's does too): OpenCV, nothing else
    assert _heavy_modules_after("from dataflow import *") == ["cv2"]


def test_star_import_without_opencv_defers_the_error_to_imgaug_use():
    code = ("import sys\nsys.modules['cv2'] = None  # as if OpenCV were not installed\n"
            "from dataflow import *\nprint(dataset.ILSVRCMeta.__name__)\n"
            "try:\n    imgaug.Flip\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["ILSVRCMeta", "dataflow.imgaug needs OpenCV (`cv2`), which is not installed; "
                   "install it with pip install 'opencv-python-headless>=4.8' "
                   "'simplejpeg>=1.7.6' (the extra [imgaug] of dataflow-reloaded; in a clone: "
                   "pip install -e '.[imgaug]')"]


# the standalone ``dataflow`` package's module paths: dataflow.dataflow.<module>
NESTED = ("base", "common", "raw", "format", "image", "parallel", "parallel_map", "remote",
          "serialize", "imgaug", "dataset")


@pytest.mark.parametrize("module", NESTED)
def test_nested_dataflow_paths_are_the_same_modules(module):
    nested = importlib.import_module(f"dataflow.dataflow.{module}")
    assert nested is importlib.import_module(f"dataflow.{module}")
    assert getattr(dataflow.dataflow, module) is nested


def test_nested_dataflow_package_has_the_top_level_names():
    import dataflow.dataflow as nested
    from dataflow.dataflow.imgaug.transform import Transform

    assert nested.__all__ == dataflow.__all__
    for name in SIGNATURES:
        assert getattr(nested, name) is getattr(dataflow, name), name
    assert Transform is dataflow.imgaug.Transform
    assert sys.modules["dataflow.dataflow.imgaug.transform"] is sys.modules[
        "dataflow.imgaug.transform"]
    with pytest.raises(ModuleNotFoundError, match=r"No module named 'dataflow\.dataflow\.nope'"):
        importlib.import_module("dataflow.dataflow.nope")
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = nested.nope


def test_nested_and_utils_paths_stay_light():
    assert _heavy_modules_after(
        "import dataflow.dataflow, dataflow.dataflow.base, dataflow.dataflow.common\n"
        "import dataflow.dataflow.parallel, dataflow.dataflow.serialize, dataflow.dataflow.format\n"
        "from dataflow.utils import serialize, fs, timer, utils, argtools, concurrency, stats"
    ) == []


# classes pickled under an old module path: tensorpack's, the standalone package's, and this
# package's own before its modules moved
OLD_CLASS_PATHS = [
    ("dataflow.image", "AugmentImageComponent", "dataflow.wrappers.image"),
    ("dataflow.common", "BatchData", "dataflow.wrappers.batch"),
    ("dataflow.raw", "DataFromList", "dataflow.sources"),
    ("dataflow.dataflow.raw", "DataFromList", "dataflow.sources"),
    ("dataflow.dataflow.common", "BatchData", "dataflow.wrappers.batch"),
    ("dataflow.parallel_map", "MultiThreadMapData", "dataflow.parallel.thread"),
    ("dataflow.parallel._autotune", "CpuShare", "dataflow.parallel.autotuning.stage"),
    ("dataflow.parallel._mapper", "Checkpoints", "dataflow.parallel._checkpoints"),
    ("dataflow.base", "DataFlowReentrantGuard", "dataflow.state"),
]


@pytest.mark.parametrize(("old", "name", "module"), OLD_CLASS_PATHS)
def test_a_class_pickled_under_an_old_path_loads(old, name, module):
    cls = pickle.loads(f"c{old}\n{name}\n.".encode())  # protocol 0: GLOBAL module\nname
    assert (cls.__module__, cls.__name__) == (module, name)


def test_a_flow_pickled_under_the_old_paths_loads_and_runs():
    flow = dataflow.BatchData(dataflow.DataFromList([[i] for i in range(6)], shuffle=False), 2)
    data = pickle.dumps(flow, protocol=0)
    assert b"cdataflow.wrappers.batch\nBatchData\n" in data
    old = data.replace(b"cdataflow.wrappers.batch\nBatchData\n", b"cdataflow.common\nBatchData\n")
    old = old.replace(b"cdataflow.sources\nDataFromList\n", b"cdataflow.raw\nDataFromList\n")
    loaded = pickle.loads(old)
    assert type(loaded) is dataflow.BatchData and type(loaded.ds) is dataflow.DataFromList
    loaded.reset_state()
    assert [b[0].tolist() for b in loaded] == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.parametrize(("name", "module"), [("SnapshotData", "dataflow.snapshot.data"),
                                              ("StreamingShards", "dataflow.streaming.source"),
                                              ("TarShardData", "dataflow.streaming.indexed")])
def test_the_names_of_lazy_layers_are_reached_from_the_top(name, module):
    import importlib

    obj = getattr(dataflow, name)
    assert obj is getattr(importlib.import_module(module), name)
    assert name in dir(dataflow)
