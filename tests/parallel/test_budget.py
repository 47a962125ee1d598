"""The CPU budget: affinity (under ``taskset``, in a subprocess) and cgroup v1/v2 quotas read
from cgroup file trees built in a temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dataflow.parallel.autotuning.budget import CpuBudget, cgroup_quota, cpu_budget


def _tree(tmp_path: Path, files: dict[str, str], cgroup: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc = tmp_path / "proc-cgroup"
    proc.write_text(cgroup)
    return proc, root


def test_v2_quota_of_the_process_cgroup(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, {"a/b/cpu.max": "150000 100000\n", "a/cpu.max": "max 100000"},
                       "0::/a/b\n")
    assert cgroup_quota(proc, root) == 1.5
    assert cpu_budget(proc, root).quota == 1.5


def test_v2_the_smallest_ancestor_quota_wins(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, {"a/b/cpu.max": "400000 100000", "a/cpu.max": "50000 50000",
                                  "cpu.max": "max 100000"}, "0::/a/b\n")
    assert cgroup_quota(proc, root) == 1.0


def test_v2_no_limit(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, {"a/cpu.max": "max 100000"}, "0::/a\n")
    assert cgroup_quota(proc, root) is None


def test_v1_quota(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, {
        "cpu,cpuacct/job/cpu.cfs_quota_us": "250000", "cpu,cpuacct/job/cpu.cfs_period_us": "100000",
        "cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000",
    }, "4:memory:/job\n3:cpu,cpuacct:/job\n1:name=systemd:/job\n")
    assert cgroup_quota(proc, root) == 2.5


def test_v1_unlimited_and_garbage(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, {
        "cpu/job/cpu.cfs_quota_us": "-1", "cpu/job/cpu.cfs_period_us": "100000",
        "cpu/cpu.cfs_quota_us": "lots", "cpu/cpu.cfs_period_us": "100000",
    }, "2:cpu:/job\n")
    assert cgroup_quota(proc, root) is None


def test_hybrid_v1_and_v2_take_the_smaller(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, {
        "cpu/job/cpu.cfs_quota_us": "300000", "cpu/job/cpu.cfs_period_us": "100000",
        "unified/cpu.max": "200000 100000",
    }, "2:cpu:/job\n0::/unified\n")
    assert cgroup_quota(proc, root) == 2.0


def test_missing_files_mean_no_quota(tmp_path: Path) -> None:
    assert cgroup_quota(tmp_path / "absent", tmp_path) is None
    proc, root = _tree(tmp_path, {"x": ""}, "0::/not/there\n")
    assert cgroup_quota(proc, root) is None


@pytest.mark.parametrize(("affinity", "quota", "cores"), [
    (8, None, 8), (8, 2.0, 2), (8, 1.5, 2), (8, 0.5, 1), (2, 6.0, 2), (0, None, 1),
])
def test_cores(affinity: int, quota: float | None, cores: int) -> None:
    assert CpuBudget(affinity, quota).cores == cores


def test_affinity_is_read() -> None:
    assert cpu_budget().affinity == len(os.sched_getaffinity(0))


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
@pytest.mark.parametrize("cpus", ["0", "0,1"])
def test_under_taskset(cpus: str) -> None:
    if not set(map(int, cpus.split(","))) <= os.sched_getaffinity(0):
        pytest.skip(f"cores {cpus} are not available to this process")
    code = ("from dataflow.parallel.autotuning.budget import cpu_budget; b = cpu_budget(); "
            "print(b.affinity, b.cores)")
    out = subprocess.run(["taskset", "-c", cpus, sys.executable, "-c", code], check=True,
                         capture_output=True, text=True, env={**os.environ}).stdout.split()
    n = len(cpus.split(","))
    quota = cpu_budget().quota
    expected = n if quota is None else min(n, CpuBudget(n, quota).cores)
    assert out == [str(n), str(expected)]
