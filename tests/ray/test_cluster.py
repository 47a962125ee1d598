"""Which Ray the flows use: a local Ray they start and stop, a cluster address, and no Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from dataflow.ray import RayMapData, RayRunner
from tests.parallel import flows
from tests.ray.conftest import wait_no_children

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.allow_children


@pytest.fixture(autouse=True)
def _no_ray_before_and_after():
    assert not ray.is_initialized()
    yield
    if ray.is_initialized():
        ray.shutdown()
    assert wait_no_children() == []


def test_flows_start_a_local_ray_and_the_last_close_stops_it():
    sigterm, excepthook = signal.getsignal(signal.SIGTERM), sys.excepthook
    breakpoint_hook = os.environ.get("PYTHONBREAKPOINT")
    m = RayMapData(flows.Range(20), 1, flows.double, strict=True, ordered=True)
    r = RayRunner(flows.Range(5), 1)  # (each actor holds one of the 2 CPUs)
    assert not ray.is_initialized()  # nothing starts before reset_state()
    assert [dp[0] for dp in m] == list(range(0, 40, 2))
    assert ray.is_initialized()
    assert ray.cluster_resources()["CPU"] == 2  # the machine's CPUs
    assert [dp[0] for dp in r] == list(range(5))
    m.close()
    assert ray.is_initialized()  # r still uses it
    assert [dp[0] for dp in r] == list(range(5))
    r.close()
    assert not ray.is_initialized()
    # the hooks Ray installed for the driver are gone with it
    assert signal.getsignal(signal.SIGTERM) is sigterm
    assert sys.excepthook is excepthook
    assert os.environ.get("PYTHONBREAKPOINT") == breakpoint_hook
    r.close()
    assert wait_no_children() == []


def _with_marker(marker: str) -> list[int]:
    """Pids of the processes whose environment holds ``marker`` (and so descend from the
    process it was given to)."""
    pids = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DATAFLOW_RAY_TEST") == marker:
                pids.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return pids


@pytest.mark.slow
def test_connects_to_a_cluster_by_address_and_an_unclosed_flow_leaves_nothing_at_exit():
    # the "cluster": another process whose flow started a local Ray; it never closes that flow
    marker = uuid.uuid4().hex
    head = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import itertools, sys, ray
            from dataflow.ray import RayMapData
            from tests.parallel import flows
            ds = RayMapData(flows.Range(100), 1, flows.double)  # never closed
            print([dp[0] for dp in itertools.islice(ds, 5)], flush=True)
            print(ray.get_runtime_context().gcs_address, flush=True)
            sys.stdin.read()
        """)],
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "DATAFLOW_RAY_TEST": marker},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert head.stdout.readline() == "[0, 2, 4, 6, 8]\n"
        address = head.stdout.readline().strip()
        assert ":" in address
        with pytest.raises(ValueError, match="`num_workers` must be given when connecting"):
            RayMapData(flows.Range(3), map_func=flows.double, address=address)
        m = RayMapData(flows.Range(30), 1, flows.double, strict=True, address=address)
        assert sorted(dp[0] for dp in m) == list(range(0, 60, 2))
        assert ray.is_initialized()
        assert ray.get_runtime_context().gcs_address == address
        m.close()
        assert not ray.is_initialized()  # disconnected; the cluster is not ours to stop
        assert head.poll() is None
    finally:
        head.stdin.close()
        assert head.wait(30) == 0
        head.stdout.close()
    deadline = time.monotonic() + 10  # the head's exit took its Ray along
    while _with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _with_marker(marker) == []


def test_without_ray_the_module_imports_and_the_classes_name_the_extra():
    code = textwrap.dedent("""
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        import dataflow.ray
        from dataflow.sources import DataFromList
        for make in (lambda: dataflow.ray.RayMapData(DataFromList([[1]]), 1, abs),
                     lambda: dataflow.ray.RayRunner(DataFromList([[1]]), 1)):
            try:
                make()
            except ImportError as e:
                print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.splitlines()
    assert out == ["the Ray back end of dataflow needs Ray, which is not installed: "
                   "pip install 'dataflow-reloaded[ray]'"] * 2
