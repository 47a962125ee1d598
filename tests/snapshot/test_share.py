"""One snapshot shared by the jobs of a data service (each sample decoded once between them)
and by trainers in other processes pointed at the same path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from dataflow.service import DataService, ServiceData
from dataflow.snapshot import SnapshotData
from tests.snapshot import pipelines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOBS = {"a": {"seed": 1}, "b": {"seed": 2}}


def _read(address, job, epochs=2):
    c = ServiceData(address, rank=0, world_size=1, job=job, timeout=30)
    c.reset_state()
    out = [[[dp[0].tolist(), int(dp[1])] for dp in c] for _ in range(epochs)]
    c.close()
    return out


def test_jobs_of_a_service_decode_each_sample_once_between_them(tmp_path, monkeypatch):
    keys = pipelines.kept(24)
    with DataService(keys, pipelines.decode_then_augment, num_workers=2, seed=0,
                     jobs=JOBS) as plain:
        want = {job: _read(plain.address, job) for job in JOBS}
    monkeypatch.setenv("SNAPSHOT_CALLS", str(tmp_path / "calls"))
    snap = SnapshotData(keys, tmp_path / "snaps", map_func=pipelines.decode, verify=0)
    assert pipelines.calls() == 6  # the randomness test, in this process
    with DataService(snap, pipelines.augment, num_workers=2, seed=0, jobs=JOBS) as svc:
        got = {job: _read(svc.address, job) for job in JOBS}
    assert got == want
    assert want["a"] != want["b"] and want["a"][0] != want["a"][1]  # seeds, epochs differ
    assert pipelines.calls() == 6 + len(keys)  # every sample decoded once, by the workers


_TRAINER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from dataflow.snapshot import SnapshotData
    from tests.snapshot import pipelines
    snap = SnapshotData(pipelines.records(40), sys.argv[2], map_func=pipelines.decode,
                        verify=0)
    snap.reset_state()
    print(sum(int(dp[0].sum()) + dp[1] for dp in snap))
    snap.close()
""")


def test_two_trainers_on_one_path_share_the_snapshot(tmp_path, monkeypatch):
    want = sum(int(dp[0].sum()) + dp[1] for dp in map(pipelines.decode, pipelines.records(40))
               if dp is not None)
    monkeypatch.setenv("SNAPSHOT_CALLS", str(tmp_path / "calls"))
    SnapshotData(pipelines.records(40), tmp_path / "snaps", map_func=pipelines.decode, verify=0)
    assert pipelines.calls() == 6
    args = [sys.executable, "-c", _TRAINER, ROOT, str(tmp_path / "snaps")]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [str(want), str(want)]
    both = pipelines.calls() - 6
    assert 40 <= both <= 80
    third = subprocess.run(args, capture_output=True, text=True, check=True)
    assert third.stdout.strip() == str(want) and pipelines.calls() - 6 == both + 0
