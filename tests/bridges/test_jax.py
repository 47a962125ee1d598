"""Tests of ``dataflow.jax``. The cases run in one subprocess (see ``_jax_cases.py``: JAX in the
pytest process would make every later fork warn), with two host CPU devices."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("jax") is None:  # not importorskip: jax stays out of this process
    pytest.skip("JAX is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bridges._jax_cases"], cwd=ROOT, capture_output=True,
        text=True, timeout=180, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _get(results, name):
    res = results[name]
    assert not (isinstance(res, dict) and "tb" in res), res.get("tb")
    return res


def test_exact_delivery_and_structure(results):
    out = _get(results, "delivery")
    assert out == [{
        "types": ["ArrayImpl"] * 4, "is_array": True, "a": [[float(i)] * 2] * 2,
        "a_dtype": "float32", "s": i, "name": f"s{i}", "t": [i, i + 1],
        "t_dtype": "int32",  # int64 -> int32: JAX's default (jax_enable_x64 off)
        "b": "x", "k": [i], "k_dtype": "uint8",
    } for i in range(3)]


def test_prefetch_puts_batches_ahead(results):
    # [first value, produced when the first was received, third value, produced in all, rest]
    assert _get(results, "prefetch_depth") == {"0": [0, 1, 2, 6, [3, 4, 5]],
                                               "2": [0, 3, 2, 6, [3, 4, 5]]}


def test_epochs_match_the_dataflow(results):
    out = _get(results, "two_epochs")
    assert out["bridge"] == out["direct"] == [[2, 0, 3, 1], [1, 2, 3, 0]]


def test_sharding_over_two_devices(results):
    assert _get(results, "sharding_two_devices") == {
        "devices": 2, "batches": 2, "x_devices": [0, 1], "x_shard_shapes": [[2, 3], [2, 3]],
        "y_shard_values": [[0, 1], [2, 3]], "x_sum": 18.0, "hook_x_devices": [0, 1],
        "scalar_devices": [1], "scalar": 5.0,
    }


def test_sharding_hook_may_build_arrays_and_is_checked(results):
    assert _get(results, "hook_returning_arrays_and_bad_hook") == {
        "a": [10, 10],
        "error": "str for an array of shape (2,) and dtype int32; it must return a "
                 "jax.sharding.Sharding, a jax.Device or a jax.Array.",
    }


def test_errors_surface_in_the_loop(results):
    assert _get(results, "errors_surface") == {"got": [0, 1, 2], "error": "boom at 3"}


def test_close_stops_the_dataflow_workers(results):
    assert _get(results, "worker_error_and_close") == {
        "head": [0, 2, 4], "running": 2, "after_close": 0, "after_del": 0, "whole": True,
        "err": ["WorkerError", True], "after_error": 0,
    }


def test_resume_from_the_consumed_position(results):
    # the state after 4 batches returned (with prefetch 2, the flow had produced 6)
    assert _get(results, "resume") == {
        "full_sorted": list(range(0, 20, 2)),
        "prefetch2": {"ok": True, "pos": 4},
        "prefetch0": {"ok": True, "pos": 4},
        "untracked": "to_jax(prefetch=2) holds 2 batch(es) fetched ahead, so the dataflow's "
                     "state is past the batches returned; pass track_state=True to to_jax (or "
                     "prefetch=0) to checkpoint.",
    }


def test_tiny_logistic_regression_trains(results):
    out = _get(results, "logistic_regression")
    assert out["steps"] == 320 and out["loss_below"] is True and out["acc"] >= 0.99


def test_validation_messages(results):
    assert _get(results, "validation") == [
        "ValueError: `prefetch` must be an int >= 0, got -1; pass e.g. prefetch=2 (batches "
        "transferred ahead), or 0 for none.",
        "ValueError: `prefetch` must be an int >= 0, got True; pass e.g. prefetch=2 (batches "
        "transferred ahead), or 0 for none.",
        "TypeError: `sharding` must be None, a jax.sharding.Sharding, a jax.Device or a "
        "callable array -> Sharding, got 'data' (type str).",
        "TypeError: `df` must be a DataFlow, got list; wrap a list with DataFromList(lst, "
        "shuffle=False) or any iterable with DataFromIterable(it).",
        "RuntimeError: JaxIterator.load_state_dict must be called before the first next(); "
        "make a new iterator with to_jax(df) and load the state into it.",
    ]


def test_jax_backend_never_starts_in_this_process():
    # TensorFlow 2.21 imports jax when it is installed, so the module may be here; what must
    # not happen is a started JAX backend (later forks of the parallel tests would warn)
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        assert xla_bridge._backends == {}
