"""The epoch plan: which sample each rank and worker reads, and when. Pure functions, no I/O.

The plan starts from one **global order** per epoch, a permutation of every sample of the
dataset (samples are numbered by shard, in the order the shards are given: shard 0's samples
first). It is a pure function of ``(seed, epoch, shard sizes, window)``, built in two levels so
that consecutive global positions mostly share shards:

1. the shards are permuted (the shard blocks);
2. their samples are laid end to end in that order, and the samples inside each run of
   ``window`` consecutive positions are permuted (the last window may be shorter).

A reader therefore needs only the shards of the current window at once, and reads each shard
about once per epoch; ``window`` is the shuffle-quality/memory trade-off (measured by
:func:`adjacent_distances`, see ``docs/streaming.md``).

The global order is then dealt out, which makes it the same for every world size (**elastic
determinism**): rank ``r`` of ``R`` takes global positions ``start + r``, ``start + r + R``,
``start + r + 2R``, ...; worker ``w`` of ``W`` inside a rank takes every ``W``-th of its rank's
positions, starting at its ``w``-th, so reading its workers round-robin gives the rank's
sequence back.

**Equal steps.** Every rank yields the same number of samples per epoch,
``(n - start) // R`` under ``partial="drop"`` (the last ``(n - start) % R`` positions of the
global order are the documented remainder, left out), ``ceil((n - start) / R)`` under
``partial="pad"`` (the missing positions repeat the first samples of the global order).

**Resume.** A rank's state is ``(seed, epoch, start)`` where ``start`` counts the global positions
already consumed; after ``k`` steps of ``R`` ranks that is ``start + k * R``, and any world size
continues from there: nothing lost, nothing repeated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataflow.rng import check_seed, derive_rng

__all__ = [
    "PARTIAL_POLICIES",
    "EpochPlan",
    "adjacent_distances",
    "global_order",
    "rank_positions",
    "shard_offsets",
    "worker_positions",
]

PARTIAL_POLICIES = ("drop", "pad")
#: first spawn key of the plan's streams (kept apart from the other kinds of ``dataflow.rng``)
_PLAN_KIND = 25


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(
            f"`{name}` must be an int >= {minimum}, got {value!r} (type {type(value).__name__})"
        )
    return int(value)


def shard_offsets(sizes: Sequence[int]) -> np.ndarray:
    """The global number of each shard's first sample, plus the total at the end."""
    for i, s in enumerate(sizes):
        _check_count(f"sizes[{i}]", s, 0)
    return np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))]).astype(np.int64)


def global_order(
    sizes: Sequence[int], seed: int, epoch: int, window: int = 4096, shuffle: bool = True
) -> np.ndarray:
    """The global sample order of epoch ``epoch`` (an int64 permutation of ``range(n)``).

    ``sizes`` are the shards' sample counts; ``window`` the length of the sample-shuffle runs.
    ``shuffle=False`` gives ``range(n)``: the shards in order, their samples in order.
    """
    offsets = shard_offsets(sizes)
    n = int(offsets[-1])
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    checked = check_seed(seed)
    if checked is None:
        raise ValueError("`seed` of a shuffled plan must be an int (every rank must agree on it)")
    _check_count("epoch", epoch, 0)
    window = _check_count("window", window, 1)
    seq = np.random.SeedSequence(checked, spawn_key=(_PLAN_KIND,))
    shard_rng = derive_rng(seq, epoch, 0)
    sample_rng = derive_rng(seq, epoch, 1)
    perm = shard_rng.permutation(len(sizes))
    order = np.concatenate(
        [np.arange(offsets[s], offsets[s + 1], dtype=np.int64) for s in perm] or
        [np.zeros(0, np.int64)]
    )
    for lo in range(0, n, window):
        seg = order[lo:lo + window]
        order[lo:lo + window] = seg[sample_rng.permutation(len(seg))]
    return order


def _check_world(rank: int, world_size: int, name: str = "rank") -> None:
    _check_count("world_size" if name == "rank" else "num_workers", world_size, 1)
    _check_count(name, rank, 0)
    if rank >= world_size:
        raise ValueError(
            f"`{name}` must be < {'world_size' if name == 'rank' else 'num_workers'} "
            f"({world_size}), got {rank}"
        )


def per_rank(n: int, start: int, world_size: int, partial: str) -> int:
    """How many samples each rank yields from global position ``start`` on."""
    if partial not in PARTIAL_POLICIES:
        raise ValueError(f"`partial` must be one of {PARTIAL_POLICIES}, got {partial!r}")
    left = max(n - start, 0)
    return left // world_size if partial == "drop" else -(-left // world_size)


def rank_positions(n: int, rank: int, world_size: int, start: int = 0,
                   partial: str = "drop") -> np.ndarray:
    """The global positions that rank ``rank`` of ``world_size`` reads, from ``start`` on.

    A position ``>= n`` (only under ``partial="pad"``) stands for position ``p % n`` (the order
    again from its start, more than once when there are fewer samples than ranks).
    """
    _check_world(rank, world_size)
    _check_count("start", start, 0)
    count = per_rank(n, start, world_size, partial)
    pos = start + rank + world_size * np.arange(count, dtype=np.int64)
    return pos % n if partial == "pad" and n else pos


def worker_positions(positions: np.ndarray, worker: int, num_workers: int) -> np.ndarray:
    """The share of worker ``worker`` of ``num_workers`` in its rank's ``positions``."""
    _check_world(worker, num_workers, "worker")
    return positions[worker::num_workers]


@dataclass(frozen=True)
class EpochPlan:
    """One epoch of one rank (and optionally one worker): the samples it reads, in order.

    ``samples`` are global sample numbers; :meth:`locate` maps one to ``(shard, index)``.
    """

    sizes: tuple[int, ...]
    seed: int
    epoch: int
    window: int = 4096
    shuffle: bool = True
    rank: int = 0
    world_size: int = 1
    start: int = 0
    partial: str = "drop"

    def __post_init__(self) -> None:
        _check_world(self.rank, self.world_size)
        if self.partial not in PARTIAL_POLICIES:
            raise ValueError(f"`partial` must be one of {PARTIAL_POLICIES}, got {self.partial!r}")

    @property
    def num_samples(self) -> int:
        return int(sum(self.sizes))

    @property
    def steps(self) -> int:
        """Samples per rank this epoch (the same on every rank)."""
        return per_rank(self.num_samples, self.start, self.world_size, self.partial)

    def order(self) -> np.ndarray:
        return global_order(self.sizes, self.seed, self.epoch, self.window, self.shuffle)

    def samples(self, worker: int = 0, num_workers: int = 1) -> np.ndarray:
        """The global sample numbers this rank's worker ``worker`` reads, in order."""
        pos = rank_positions(self.num_samples, self.rank, self.world_size, self.start,
                             self.partial)
        return self.order()[worker_positions(pos, worker, num_workers)]

    def locate(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(shard, index in shard)`` of each global sample number."""
        offsets = shard_offsets(self.sizes)
        shard = np.searchsorted(offsets, samples, side="right") - 1
        return shard, samples - offsets[shard]


def adjacent_distances(order: np.ndarray) -> np.ndarray:
    """``|order[i+1] - order[i]|``: how far apart consecutive samples were in the dataset (a
    shuffle-quality measure: an unshuffled order gives all ones)."""
    return np.abs(np.diff(np.asarray(order, dtype=np.int64)))
