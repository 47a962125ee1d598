"""Filling a snapshot in threads: an epoch's misses are computed ahead of the reader by
``num_workers`` threads, in order, each once; a break leaves no thread running and resumes
exactly; an error is raised at its turn, after the outputs before it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dataflow.snapshot import SnapshotData
from tests.helpers import epoch, to_plain
from tests.snapshot import pipelines


class _Meeting:
    """A map whose inputs 0 and 1 each wait for the other once armed: computed one after the
    other, the first would wait forever (the barrier's timeout only keeps a broken build from
    hanging). Not armed during the constructor's randomness test."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=60)
        self.lock = threading.Lock()
        self.armed = False
        self.calls: list[int] = []

    def __call__(self, dp):
        i = int(dp[0])
        if self.armed and i in (0, 1):
            self.barrier.wait()
        with self.lock:
            self.calls.append(i)
        return value(dp)


def value(dp):
    return [np.full(3, int(dp[0]), np.int64)]


def _snap(path, func, n=12, **kw):
    snap = SnapshotData([[i] for i in range(n)], path, map_func=func, verify=0, **kw)
    snap.reset_state()
    return snap


def _fillers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("dataflow-snapshot")]


def test_misses_are_computed_by_threads_at_once_in_order_and_each_once(tmp_path):
    func = _Meeting()
    snap = _snap(tmp_path / "threads", func, num_workers=2, shuffle=True, seed=3)
    func.armed = True
    got = [epoch(snap)]
    assert sorted(func.calls[6:]) == list(range(12))  # (6: the randomness test's calls)
    got.append(epoch(snap))
    assert len(func.calls) == 6 + 12  # the second epoch: all hits
    assert _fillers() == []
    snap.close()
    # the orders are the snapshot's permutations, as one thread reads them
    serial = _snap(tmp_path / "serial", value, num_workers=1, shuffle=True, seed=3)
    assert [epoch(serial), epoch(serial)] == got
    assert sorted(dp[0]["__array__"][0] for dp in got[0]) == list(range(12))
    assert got[0] != got[1]
    serial.close()


def test_one_worker_computes_in_the_reading_thread(tmp_path):
    seen: list[str] = []

    def where(dp):
        seen.append(threading.current_thread().name)
        return [int(dp[0])]

    snap = _snap(tmp_path, where, n=5, num_workers=1)
    seen.clear()
    assert [dp[0] for dp in snap] == [0, 1, 2, 3, 4]
    assert seen == [threading.current_thread().name] * 5
    snap.close()


def test_a_break_leaves_no_thread_and_the_rest_follows_exactly(tmp_path):
    snap = _snap(tmp_path, pipelines.decode, n=30, num_workers=2, shuffle=True, seed=1)
    full = epoch(snap)
    snap.close()
    other = tmp_path / "other"
    snap = _snap(other, pipelines.decode, n=30, num_workers=2, shuffle=True, seed=1)
    got = []
    for dp in snap:
        got.append(to_plain(dp))
        if len(got) == 7:
            break
    assert _fillers() == []
    state = snap.state_dict()
    snap.close()
    again = SnapshotData([[i, f"item{i}"] for i in range(30)], other,
                         map_func=pipelines.decode, verify=0, num_workers=2, shuffle=True,
                         seed=1)
    again.reset_state()
    again.load_state_dict(state)
    assert got + epoch(again) == full
    again.close()


def test_an_error_is_raised_at_its_turn_after_the_outputs_before_it(tmp_path):
    def fails_at_5(dp):
        if int(dp[0]) == 5 and threading.current_thread().name.startswith("dataflow-snapshot"):
            raise ValueError("bad input 5")
        return [int(dp[0])]

    snap = _snap(tmp_path, fails_at_5, n=10, num_workers=2)
    got: list[int] = []

    def read() -> None:
        got.extend(dp[0] for dp in snap)

    with pytest.raises(ValueError, match="bad input 5"):
        read()
    assert got == [0, 1, 2, 3, 4]
    assert _fillers() == []
    snap.close()


@pytest.mark.parametrize("bad", [0, -1, 2.0, "many", True, None])
def test_num_workers_is_checked(tmp_path, bad):
    with pytest.raises(ValueError, match=r"`num_workers` must be 'auto' or an int >= 1.*got "):
        SnapshotData([[0]], tmp_path, num_workers=bad)
