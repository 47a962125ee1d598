"""The CPU budget of this process: how many cores its workers may really use.

``os.cpu_count()`` counts the machine's cores; a process may be confined to fewer, by its CPU
affinity (``taskset``, ``cpuset`` cgroups, a batch scheduler) and by a CPU *quota* (a
container's ``--cpus=2``: the cgroup lets it run 2 cores' worth of time per period on any of the
machine's cores). :func:`cpu_budget` reads both:

* the affinity from ``os.sched_getaffinity(0)``;
* the quota from the process's cgroup and every cgroup above it (the smallest wins): cgroup v2's
  ``cpu.max`` (``"<quota> <period>"`` or ``"max <period>"``), cgroup v1's ``cpu.cfs_quota_us``
  and ``cpu.cfs_period_us`` (a quota of ``-1``: none). The process's cgroup is read from
  ``/proc/self/cgroup``.

A missing or unreadable file means "no limit known" there; the budget never exceeds the
affinity count.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuBudget", "cgroup_quota", "cpu_budget"]


@dataclass(frozen=True, slots=True)
class CpuBudget:
    """``affinity``: cores the process may run on; ``quota``: cores' worth of CPU time the
    cgroup quota allows (``None``: no quota); ``cores``: the budget, in whole cores (at least
    one)."""

    affinity: int
    quota: float | None

    @property
    def cores(self) -> int:
        if self.quota is None:
            return max(1, self.affinity)
        # a quota of 1.5 cores keeps 2 workers busy for 75 % of the time: round up, as a
        # fractional core still runs a worker
        return max(1, min(self.affinity, math.ceil(self.quota - 1e-9)))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_quota(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    if not text:
        return None
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_quota(directory: Path) -> float | None:
    quota_text = _read(directory / "cpu.cfs_quota_us")
    period_text = _read(directory / "cpu.cfs_period_us")
    if quota_text is None or period_text is None:
        return None
    try:
        quota, period = int(quota_text), int(period_text)
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _ancestors(root: Path, relative: str) -> list[Path]:
    """``root / relative`` and every directory above it, up to ``root``."""
    parts = [p for p in relative.strip("/").split("/") if p and p != ".."]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def cgroup_quota(proc_cgroup: str | Path = "/proc/self/cgroup",
                 root: str | Path = "/sys/fs/cgroup") -> float | None:
    """The smallest CPU quota, in cores, of the cgroups the process is in (v2 and v1), or
    ``None`` if there is none. ``proc_cgroup`` is the process's cgroup list; ``root`` the mount
    point of the cgroup file systems (v1 controllers are mounted under ``root/cpu`` or
    ``root/cpu,cpuacct``)."""
    root = Path(root)
    text = _read(Path(proc_cgroup))
    if text is None:
        return None
    quotas: list[float] = []
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, relative = rest.partition(":")
        if not hierarchy:
            continue
        if controllers == "":  # cgroup v2: one unified hierarchy
            found = [_v2_quota(d) for d in _ancestors(root, relative)]
        elif "cpu" in controllers.split(","):
            mounts = [root / controllers, root / "cpu", root / "cpu,cpuacct"]
            found = []
            for mount in dict.fromkeys(mounts):
                if mount.is_dir():
                    found += [_v1_quota(d) for d in _ancestors(mount, relative)]
        else:
            continue
        quotas += [q for q in found if q is not None]
    return min(quotas) if quotas else None


def cpu_budget(proc_cgroup: str | Path = "/proc/self/cgroup",
               root: str | Path = "/sys/fs/cgroup") -> CpuBudget:
    """This process's :class:`CpuBudget`: its affinity and its cgroups' CPU quota (the
    arguments say where to read the cgroups, for tests)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not Linux)
        affinity = os.cpu_count() or 1
    return CpuBudget(affinity, cgroup_quota(proc_cgroup, root))
