"""The service's epoch plan: which dataset index each rank receives at each step. Pure
functions, no I/O.

It is the streaming source's plan (:mod:`dataflow.streaming.plan`) for a dataset of one shard
whose shuffle window is the whole epoch: for a given ``(seed, epoch, n)`` the global order is a
permutation of ``range(n)`` (``range(n)`` itself with ``shuffle=False``), the same for any number
of workers and ranks; rank ``r`` of ``R`` receives global positions ``start + r``,
``start + r + R``, ...; every rank receives the same count (``partial="drop"`` leaves out the last
``(n - start) % R`` positions, ``"pad"`` repeats the first ones). ``start`` counts the global
positions consumed before a restore with another world size.

Each output is ``map_func(ds[order[p]])`` with its random draws keyed by ``(epoch, p)``: with
``shuffle=False`` position ``p`` is index ``p``, which is how a strict, ordered parallel mapper with
the same seed keys its inputs, so one rank receives exactly what that mapper yields.
"""

from __future__ import annotations

import numpy as np

from dataflow.streaming.plan import PARTIAL_POLICIES, EpochPlan, per_rank, rank_positions

__all__ = ["PARTIAL_POLICIES", "consumed", "rank_steps", "steps_per_rank"]


def rank_steps(n: int, seed: int, epoch: int, shuffle: bool, rank: int, world_size: int,
               start: int = 0, partial: str = "drop") -> tuple[np.ndarray, np.ndarray]:
    """``(positions, indices)`` of one rank's epoch, in the order it receives them:
    ``positions`` are global positions in the epoch's order (the keys of the random draws),
    ``indices`` the dataset indices at those positions."""
    plan = EpochPlan((n,), seed, epoch, window=max(n, 1), shuffle=shuffle, rank=rank,
                     world_size=world_size, start=start, partial=partial)
    positions = rank_positions(n, rank, world_size, start, partial)
    return positions, plan.order()[positions] if n else positions


def steps_per_rank(n: int, world_size: int, start: int = 0, partial: str = "drop") -> int:
    """How many outputs each rank receives in an epoch, from global position ``start`` on."""
    return per_rank(n, start, world_size, partial)


def consumed(start: int, delivered: int, world_size: int) -> int:
    """Global positions consumed once every rank of ``world_size`` received ``delivered``
    outputs from ``start`` on: where ranks of any other world size continue."""
    return start + delivered * world_size
