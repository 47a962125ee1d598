"""The public names of dataflow.parallel, with tensorpack's positional signatures."""

from __future__ import annotations

import inspect

import pytest

import dataflow.parallel as par

SIGNATURES = {
    "MultiProcessRunner": "(ds, num_prefetch, num_proc)",
    "MultiProcessRunnerZMQ": "(ds, num_proc=1, hwm=50)",
    "MultiThreadRunner": "(get_df, num_prefetch, num_thread)",
    "MultiThreadMapData": "(ds, num_thread=None, map_func=None)",
    "MultiProcessMapDataZMQ": "(ds, num_proc=None, map_func=None)",
    "MultiProcessMapAndBatchDataZMQ": "(ds, num_proc, map_func, batch_size, buffer_size=None)",
    "send_dataflow_zmq": "(df, addr, hwm=50, format=None, bind=False)",
    "RemoteDataZMQ": "(addr1, addr2=None, hwm=50, bind=True)",
    "ParallelMapData": "(ds, num_workers='auto', map_func=None)",
}
#: the autotuner's setting and whole-pipeline entry point
AUTOTUNING = {"AUTOTUNE", "autotune", "autotune_report"}
ALIASES = {
    "PrefetchData": "MultiProcessRunner",
    "MultiProcessPrefetchData": "MultiProcessRunner",
    "PrefetchDataZMQ": "MultiProcessRunnerZMQ",
    "MultiThreadPrefetchData": "MultiThreadRunner",
    "MultiProcessMapData": "MultiProcessMapDataZMQ",
    "MultiProcessMapAndBatchData": "MultiProcessMapAndBatchDataZMQ",
}


def _positional(obj) -> str:
    sig = inspect.signature(obj)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature(name):
    assert _positional(getattr(par, name)).replace(" ", "") == SIGNATURES[name].replace(" ", "")


@pytest.mark.parametrize(("alias", "target"), sorted(ALIASES.items()))
def test_alias(alias, target):
    assert getattr(par, alias) is getattr(par, target)


# older names that construct the current class with the older parameter names, and tensorpack's
# Plasma stages (in its parallel module, outside its __all__)
LEGACY = {
    "PlasmaPutData": "(ds, socket=None)",
    "PlasmaGetData": "(ds, socket=None)",
    "ThreadedMapData": "(ds, nr_thread=None, map_func=None, buffer_size=200, strict=False)",
    "MultiProcessMapDataComponentSharedArray": (
        "(ds, num_proc, map_func, output_shape, output_dtype, index=0)"),
}


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_legacy_signature(name):
    assert _positional(getattr(par, name)).replace(" ", "") == LEGACY[name].replace(" ", "")


def test_all_is_sorted_and_complete():
    assert par.__all__ == sorted(par.__all__)
    assert set(par.__all__) == set(SIGNATURES) | set(ALIASES) | set(LEGACY) | AUTOTUNING
    assert par.AUTOTUNE == "auto"


@pytest.mark.parametrize(
    ("name", "keyword"),
    [
        ("MultiThreadMapData", "ordered"),
        ("MultiProcessMapDataZMQ", "ordered"),
        ("MultiProcessMapDataZMQ", "start_method"),
        ("MultiProcessRunnerZMQ", "start_method"),
        ("MultiProcessRunner", "start_method"),
        ("MultiProcessMapAndBatchDataZMQ", "start_method"),
        ("send_dataflow_zmq", "num_epochs"),
        ("RemoteDataZMQ", "format"),
    ],
)
def test_new_options_are_keyword_only(name, keyword):
    param = inspect.signature(getattr(par, name)).parameters[keyword]
    assert param.kind is inspect.Parameter.KEYWORD_ONLY
