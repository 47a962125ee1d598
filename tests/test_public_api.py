"""The public namespace matches tensorpack.dataflow's names and constructor signatures."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import dataflow

# SPEC section 1 (base, common, raw) with tensorpack's positional parameters and defaults
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
