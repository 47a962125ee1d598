"""The public namespace matches tensorpack.dataflow's names and constructor signatures."""

from __future__ import annotations

import inspect
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
    "ThreadedMapData": "(ds, nr_thread=None, map_func=None, buffer_size=200, strict=False)",
    "LMDBDataPoint": "(lmdb_path, shuffle=True)",
}


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_legacy_name_and_signature(name):
    obj = getattr(dataflow, name)
    assert name in dataflow.__all__
    assert _positional(obj).replace(" ", "") == LEGACY[name].replace(" ", "")


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
    code = ("import sys, dataflow\n"
            "heavy = [m for m in ('tensorflow', 'cv2', 'lmdb', 'h5py', 'scipy', 'torch') "
            "if m in sys.modules]\n"
            "print(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
