"""Runners resume every worker's stream right after its last delivered datapoint."""

from __future__ import annotations

import json
import time

import pytest

from dataflow.parallel import MultiProcessRunner, MultiProcessRunnerZMQ, MultiThreadRunner
from dataflow.parallel._protocol import DATA, END, STATE, WorkerStopped
from dataflow.parallel._worker import runner_loop
from dataflow.rng import assign_paths, get_worker_info, worker_scope
from dataflow.sources import DataFromList
from dataflow.state import StateMismatchError
from dataflow.wrappers import MapData
from tests.helpers import to_plain


def _src(n=6, seed=5):
    return DataFromList([[i, float(i)] for i in range(n)], shuffle=True, seed=seed)


def _json(state):
    return json.loads(json.dumps(state))


class Tag:
    """map_func: ``[tag, value]``; the thread runner tags each copy, processes by worker id."""

    def __init__(self, tag=None):
        self.tag = tag

    def __call__(self, dp):
        if self.tag is None:
            time.sleep(0.002)  # let every process take part
            return [get_worker_info(), dp[0]]
        return [self.tag, dp[0]]


def _tagged_thread_runner(n=6):
    tags = iter(range(100))
    return MultiThreadRunner(lambda: MapData(_src(n, seed=next(tags)), Tag(next(tags))), 3, 2)


RUNNERS = {
    "thread": _tagged_thread_runner,
    "process": lambda n=6: MultiProcessRunner(MapData(_src(n), Tag()), 3, 2),
    "zmq": lambda n=6: MultiProcessRunnerZMQ(MapData(_src(n), Tag()), 2),
}


@pytest.mark.parametrize("kind", RUNNERS)
def test_runner_resume_continues_every_worker_stream(kind):
    make = RUNNERS[kind]
    ref = make()
    ref.reset_state()
    seq, states = [], [_json(ref.state_dict())]
    for _ in range(3):
        for dp in ref:
            seq.append(to_plain(dp))
            states.append(_json(ref.state_dict()))
    ref.close()
    streams = {tag: [v for t, v in seq if t == tag] for tag, _ in seq}
    assert len(seq) == 18 and 1 <= len(streams) <= 2
    for k in range(0, 19, 2 if kind == "thread" else 4):
        state = states[k]
        assert state["num_workers"] == 2 and len(state["workers"]) == 2
        fresh = make()
        fresh.reset_state()
        fresh.load_state_dict(state)
        rest = [to_plain(dp) for dp in fresh]
        rest += [to_plain(dp) for dp in fresh]
        fresh.close()
        assert len(rest) == (6 - state["pos"] if not state["done"] else 6) + 6
        for tag, stream in streams.items():
            done = sum(1 for t, _ in seq[:k] if t == tag)
            got = [v for t, v in rest if t == tag]
            m = min(len(got), len(stream) - done)
            assert got[:m] == stream[done:done + m], f"worker {tag} after {k}"


def test_runner_state_layout_and_mismatches():
    r = RUNNERS["thread"]()
    r.reset_state()
    it = iter(r)
    next(it)
    state = _json(r.state_dict())
    it.close()
    r.close()
    assert {k: state[k] for k in ("type", "size", "num_workers", "epoch", "pos", "done")} == {
        "type": "MultiThreadRunner", "size": 6, "num_workers": 2, "epoch": 0, "pos": 1,
        "done": False}
    assert sum(w["skip"] for w in state["workers"]) <= 1
    assert all(w["child"]["type"] == "MapData" for w in state["workers"])
    with pytest.raises(StateMismatchError, match=r"expected size=5, found size=6"):
        RUNNERS["thread"](5).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"expected num_workers=3, found num_workers=2"):
        MultiThreadRunner(lambda: _src(6), 3, 3).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"expected workers="):
        RUNNERS["thread"]().load_state_dict(dict(state, workers=[{"skip": -1}] * 2))


def _thread_streams(epochs: int) -> dict[int, list[int]]:
    """What each thread of ``_tagged_thread_runner()`` yields, computed serially: thread ``i``
    iterates its own copy, reset as runner worker ``i`` at the place of the first copy. (Read
    through the runner instead, the split between the threads depends on scheduling: on a busy
    machine one thread may produce almost everything for hundreds of datapoints.)"""
    runner = _tagged_thread_runner()
    streams: dict[int, list[int]] = {}
    for i, copy in enumerate(runner.dfs):
        assign_paths(copy, (0,))
        with worker_scope(i):
            copy.reset_state()
        for _ in range(epochs):
            for tag, v in (to_plain(dp) for dp in copy):
                streams.setdefault(tag, []).append(v)
    return streams


def test_thread_runner_state_from_before_the_start_restarts_the_streams():
    ref = RUNNERS["thread"]()
    state = _json(ref.state_dict())  # not started: nothing delivered
    assert state["workers"] == [{"child": None, "skip": 0}] * 2
    ref.reset_state()
    want = sorted(map(repr, (to_plain(dp) for dp in ref)))
    ref.close()
    fresh = RUNNERS["thread"]()
    fresh.reset_state()
    it = iter(fresh)
    [next(it) for _ in range(4)]  # the threads' flows move on
    it.close()
    fresh.load_state_dict(state)
    got = [to_plain(dp) for dp in fresh]
    fresh.close()
    assert len(got) == 6 and len(want) == 6
    # each worker's stream starts again from the beginning
    by_tag: dict[int, list[int]] = {}
    for tag, v in got:
        by_tag.setdefault(tag, []).append(v)
    streams = _thread_streams(epochs=1)
    assert set(by_tag) <= set(streams) == {1, 3}
    for tag, vs in by_tag.items():
        assert vs == streams[tag][:len(vs)]


def _run_loop(ds, n_data, **kw):
    """The messages of runner_loop until it has sent ``n_data`` datapoints."""
    sent = []

    def emit(msg):
        if msg[0] == DATA and sum(m[0] == DATA for m in sent) >= n_data:
            raise WorkerStopped
        sent.append(msg)

    runner_loop(ds, emit, 0, "S", **kw)
    return sent


def test_runner_loop_sends_its_copy_state_first_and_resumes_with_skip():
    ds = DataFromList([[i] for i in range(3)], shuffle=False)
    sent = _run_loop(ds, 4, checkpoints=True)
    assert sent[0] == (STATE, 0, (0, {"type": "DataFromList", "size": 3, "epoch": -1, "pos": 0,
                                      "done": True}))
    assert [m[2] for m in sent if m[0] == DATA] == [[0], [1], [2], [0]]
    # restored at the end of an epoch (its rest is empty) with 4 datapoints to skip: the
    # stream continues with the 5th datapoint after that state, across epochs
    state = {"type": "DataFromList", "size": 3, "epoch": 0, "pos": 3, "done": False}
    sent = _run_loop(DataFromList([[i] for i in range(3)], shuffle=False), 3,
                     start=(state, 4), checkpoints=True)
    assert [m[2] for m in sent if m[0] == DATA] == [[1], [2], [0]]
    assert not [m for m in sent if m[0] == END]


SPAWN_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from dataflow.parallel import MultiProcessRunnerZMQ
from dataflow.wrappers import MapData
from tests.helpers import to_plain
from tests.parallel.test_runner import Tag, _src

def make():
    return MultiProcessRunnerZMQ(MapData(_src(6), Tag()), 2, start_method={method!r})

if __name__ == "__main__":
    ref = make()
    ref.reset_state()
    seq, states = [], [json.loads(json.dumps(ref.state_dict()))]
    for _ in range(2):
        for dp in ref:
            seq.append(to_plain(dp))
            states.append(json.loads(json.dumps(ref.state_dict())))
    ref.close()
    out = {{"seq": seq, "rest": {{}}}}
    for k in (0, 3, 7):
        fresh = make()
        fresh.reset_state()
        fresh.load_state_dict(states[k])
        out["rest"][k] = [to_plain(dp) for dp in fresh] + [to_plain(dp) for dp in fresh]
        fresh.close()
    print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_zmq_runner_resumes_under_spawn_and_forkserver(tmp_path, method):
    """Resume with workers that do not inherit the parent's memory (run in a fresh interpreter:
    the resource tracker that spawn starts would outlive a test in this process)."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "spawn_resume.py"
    script.write_text(SPAWN_SCRIPT.format(root=str(Path(__file__).resolve().parents[2]),
                                          method=method))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.splitlines()[-1])
    seq = [tuple(dp) for dp in out["seq"]]
    assert len(seq) == 12
    streams = {tag: [v for t, v in seq if t == tag] for tag, _ in seq}
    assert 1 <= len(streams) <= 2
    for k, rest in out["rest"].items():
        k = int(k)
        rest = [tuple(dp) for dp in rest]
        # the rest of the epoch in progress (6 - delivered), then one whole epoch
        assert len(rest) == (6 - k % 6 if k % 6 else 6) + 6, (k, rest)
        for tag, stream in streams.items():
            done = sum(1 for t, _ in seq[:k] if t == tag)
            got = [v for t, v in rest if t == tag]
            m = min(len(got), len(stream) - done)
            assert got[:m] == stream[done:done + m], f"worker {tag} after {k}"
