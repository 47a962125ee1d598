"""Shared fixtures: a fixed global seed per test, and no process left behind."""

from __future__ import annotations

import time

import psutil
import pytest

import dataflow.rng


@pytest.fixture(autouse=True)
def _global_seed():
    """Every test starts from the same global seed state and leaves none behind."""
    dataflow.rng.set_seed(None)
    dataflow.rng.set_worker_info(None)
    yield
    dataflow.rng.set_seed(None)
    dataflow.rng.set_worker_info(None)


def _living_children() -> list[psutil.Process]:
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(autouse=True)
def _no_child_process_left(request):
    """Fail a test that leaves a child process running (after a short grace period)."""
    yield
    if request.node.get_closest_marker("allow_children"):
        return
    deadline = time.monotonic() + 5.0
    children = _living_children()
    while children and time.monotonic() < deadline:
        time.sleep(0.05)
        children = _living_children()
    if children:
        desc = [f"{c.pid}: {' '.join(c.cmdline())[:120]}" for c in children]
        for c in children:
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass
        pytest.fail(f"test left {len(children)} child process(es) running: {desc}")
