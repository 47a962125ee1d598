"""A local Ray (2 CPUs) for the test modules that use it (test_cluster.py, first, runs without
it), and the check that none of its processes outlive it."""

from __future__ import annotations

import socket
import time

import psutil
import pytest

from dataflow.ray._session import LOCAL_SYSTEM_CONFIG, RayHooks, loopback_node
from dataflow.ray._session import LOOPBACK as LOOPBACK_IP


def ray_children() -> list[str]:
    """Descriptions of this process's living descendants (Ray's raylet, GCS, workers...)."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{child.pid}: {' '.join(child.cmdline())[:100]}")
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_no_children(timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    left = ray_children()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = ray_children()
    return left


@pytest.fixture(scope="package")
def local_ray():
    """``ray.init(num_cpus=2)`` for the package; after ``ray.shutdown()`` no process is left."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    hooks = RayHooks()  # (for the tests after these: Ray's SIGTERM handler, env, excepthook)
    # (its workers at the tests' priority, as in the local Ray a flow starts: at Ray's default
    # niceness of 15 they crawl while other processes keep the cores busy)
    # on 127.0.0.1 only, as the local Ray a flow starts (a plain ray.init() on Linux listens on
    # every interface)
    with loopback_node(ray):
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address=LOOPBACK_IP, _system_config=LOCAL_SYSTEM_CONFIG)
    hooks.after_init()
    sockets = listening([psutil.Process(), *psutil.Process().children(recursive=True)])
    assert [s for s in sockets if s[1] not in LOOPBACK] == []
    yield ray
    ray.shutdown()
    hooks.restore()
    assert wait_no_children() == []


def pid_gone(pid: int | None, timeout: float = 10.0) -> bool:
    """Whether process ``pid`` ended (or is a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def listening(procs: list[psutil.Process]) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket and unconnected UDP socket
    of ``procs``."""
    out = []
    for proc in procs:
        try:
            for c in proc.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr):
                    out.append((proc.name(), c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out
