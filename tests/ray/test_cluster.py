"""Which Ray the flows use: a local Ray they start and stop, a cluster address, and no Ray."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from dataflow.ray import RayMapData, RayRunner
from tests.parallel import flows
from tests.ray import flows as rflows
from tests.ray.conftest import LOOPBACK, listening, wait_no_children

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
    # its actors run at this process's priority (Ray's default for its workers is 15)
    with RayMapData(flows.Range(3), 1, rflows.niceness, strict=True, ordered=True) as nice:
        assert [list(dp) for dp in nice] == [[i, os.nice(0)] for i in range(3)]
    assert ray.is_initialized()
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
        # Both drivers must agree on Ray's token authentication (Ray 2.60): a new local Ray
        # enables it (RAY_AUTH_MODE=token, the token in ~/.ray/auth_token) in its driver, and a
        # driver reads the mode once, when it imports Ray. So the head uses this process's mode:
        # token if an earlier test started a local Ray here, else (unset) disabled.
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "DATAFLOW_RAY_TEST": marker,
             "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert head.stdout.readline() == "[0, 2, 4, 6, 8]\n"
        address = head.stdout.readline().strip()
        assert address.startswith("127.0.0.1:")  # a local Ray listens on loopback only
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
                     lambda: dataflow.ray.RayRunner(DataFromList([[1]]), 1),
                     lambda: dataflow.ray.to_ray_dataset(DataFromList([[1]])),
                     lambda: dataflow.ray.DataFromRayDataset(None)):
            try:
                make()
            except ImportError as e:
                print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.splitlines()
    hint = ("pip install 'ray[data]>=2.9' (the extra [ray] of dataflow-reloaded; in a clone: "
            "pip install -e '.[ray]')")
    assert out == [f"the Ray back end of dataflow needs Ray, which is not installed: {hint}"
                   ] * 2 + [
        "the Ray Data interop of dataflow needs Ray Data (with pandas and pyarrow), which is "
        f"not installed: {hint}"] * 2


def _info(proc: psutil.Process, what: str) -> Any:
    """``proc.name()`` or ``proc.cmdline()``; None for a process that has ended meanwhile (a
    Ray worker that finished, a zombie not yet collected)."""
    try:
        return getattr(proc, what)()
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # (ZombieProcess is a NoSuchProcess)
        return None


def test_a_local_ray_started_by_a_flow_listens_on_loopback_only_and_has_no_dashboard():
    with RayMapData(flows.Range(6), 1, flows.double, strict=True, ordered=True) as m:
        assert [dp[0] for dp in m] == [0, 2, 4, 6, 8, 10]
        assert ray.util.get_node_ip_address() == "127.0.0.1"
        family = [psutil.Process(), *psutil.Process().children(recursive=True)]
        names = {_info(p, "name") for p in family}
        assert {"gcs_server", "raylet"} <= names  # (the processes looked at are Ray's)
        sockets = listening(family)
        assert {name for name, _, _ in sockets} >= {"gcs_server", "raylet"}
        assert [s for s in sockets if s[1] not in LOOPBACK] == []
        # no dashboard (Ray runs its head process for usage statistics only, without the web UI)
        cmdlines = [_info(p, "cmdline") or [] for p in family]
        heads = [c for c in cmdlines if any(a.endswith("ray/dashboard/dashboard.py") for a in c)]
        assert all("--disable-frontend" in c and "--minimal" in c for c in heads)
    # the driver's environment is as it was
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ
    assert ray._private.ray_constants.ENABLE_RAY_CLUSTER is True


@pytest.mark.slow
def test_a_crashed_cluster_does_not_break_the_next_flow(tmp_path):
    # A cluster started with `ray start` writes its address into Ray's temporary directory
    # (ray_current_cluster); killed with SIGKILL, it leaves it there. A flow without an address
    # then used to try to join it ("When connecting to an existing cluster, num_cpus and
    # num_gpus must not be provided"): it starts a new local Ray instead.
    marker = uuid.uuid4().hex
    # short (Ray's unix socket paths, at most 107 bytes, live below it); removed at the end
    tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = {**os.environ, "TMPDIR": tmp, "DATAFLOW_RAY_TEST": marker, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    ray_cli = Path(sys.executable).with_name("ray")
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        started = subprocess.run(
            [str(ray_cli), "start", "--head", f"--port={port}", "--num-cpus=1",
             "--node-ip-address=127.0.0.1", "--include-dashboard=false",
             "--disable-usage-stats"],
            # (with --node-ip-address: its services on 127.0.0.1 only, as dataflow's own)
            env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}, capture_output=True,
            text=True, timeout=120,
        )
        assert started.returncode == 0, started.stderr[-3000:]
        address_file = Path(tmp, "ray", "ray_current_cluster")
        assert address_file.exists()
        cluster = _with_marker(marker)
        assert cluster  # gcs_server, raylet, ...
        for pid in cluster:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
        deadline = time.monotonic() + 10
        while _with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _with_marker(marker) == []
        assert address_file.exists()  # stale
        code = textwrap.dedent("""
            from dataflow.ray import RayMapData
            from tests.parallel import flows
            with RayMapData(flows.Range(5), 1, flows.double, strict=True, ordered=True) as m:
                print([dp[0] for dp in m])
        """)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=180, cwd=Path(__file__).resolve().parents[2])
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout == "[0, 2, 4, 6, 8]\n"
        deadline = time.monotonic() + 10  # the flow's Ray went with it
        while _with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _with_marker(marker) == []
    finally:
        for pid in _with_marker(marker):
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
        shutil.rmtree(tmp, ignore_errors=True)
