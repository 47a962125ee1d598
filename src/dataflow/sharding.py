"""Rank sharding for data-parallel training: ``shard(df, rank, world_size)`` and ``ShardData``.

Every rank runs the same pipeline and keeps every ``world_size``-th datapoint, starting at
``rank``: position ``i`` of an epoch of ``df`` goes to rank ``i % world_size``. The ranks
therefore see disjoint data whose union is the epoch, *provided every rank's ``df`` yields the
same sequence*: give each random stage before the shard the same ``seed=`` on every rank (or call
``dataflow.set_seed(n)`` with the same ``n`` everywhere). A per-rank random order before the
shard would overlap.

Remainder policy, explicit:

* ``drop_remainder=True`` (the default, for training): datapoints are read ``world_size`` at a
  time and each rank takes its own one of the group; an incomplete last group is dropped, so every
  rank yields exactly ``n // world_size`` datapoints per epoch (equal step counts, so no rank waits
  for the others in a collective). It works without knowing ``n``.
* ``drop_remainder=False``: nothing is dropped; the last incomplete group goes to its first ranks,
  so the first ``n % world_size`` ranks get one datapoint more (``ceil((n - rank) / world_size)``
  each; counts differ by at most one). The union over ranks is exactly the epoch (used by
  ``dataflow.torch`` to split a flow between DataLoader workers).

Cost: each rank iterates the whole epoch and skips the others' datapoints, so put ``shard`` as
close to the source as you can, before expensive maps. Right over an LMDB reader
(``LMDBSerializer.load`` or ``LMDBData``) the skipped records are not even read: the reader
yields the placeholder :data:`SKIPPED` for them (so a rank reads 1/world_size of the file).
Over other stages the skipped datapoints cost what producing them costs (list indexing for
``DataFromList``; a record read and decode for the other serialized formats, so for large records
prefer storing keys or file names and decoding after the shard).

The protocol, for sources that can skip cheaply (:class:`ShardableSource`): a source with a
method ``iter_shard(rank, world_size)`` is iterated through it instead of ``iter(ds)``; that
epoch yields ``SKIPPED`` at the positions ``p`` (0-based, in the epoch) with
``p % world_size != rank``, counting them in its state like any datapoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.errors import UnknownLengthError
from dataflow.state import EpochCounter, check_state, finished
from dataflow.validation import check_int

__all__ = ["SKIPPED", "ShardData", "ShardableSource", "shard"]

#: what a source yields for a position that the :class:`ShardData` right over it discards
SKIPPED = type("Skipped", (), {"__repr__": lambda self: "SKIPPED", "__slots__": ()})()


@runtime_checkable
class ShardableSource(Protocol):
    """A source that can skip the datapoints of other ranks without producing them."""

    def iter_shard(self, rank: int, world_size: int) -> Iterator[Any]:
        """One epoch, like ``iter(self)``, with :data:`SKIPPED` at the positions ``p`` with
        ``p % world_size != rank``."""
        ...


class ShardData(EpochCounter, ProxyDataFlow):
    """The datapoints of ``ds`` at positions ``rank, rank + world_size, rank + 2*world_size, ...``
    of each epoch (see the module docstring for the remainder policy and the cost).

    ``len`` is ``len(ds) // world_size`` with ``drop_remainder=True``, else
    ``ceil((len(ds) - rank) / world_size)``; exact when ``len(ds)`` is. Non-reentrant like its
    child. Resume is exact when the child's is.
    """

    def __init__(
        self, ds: DataFlow, rank: int, world_size: int, drop_remainder: bool = True
    ) -> None:
        super().__init__(ds)
        world_size = check_int(world_size, "world_size")
        rank = check_int(rank, "rank")
        if world_size < 1:
            raise ValueError(
                f"`world_size` must be >= 1, got {world_size}; pass the number of ranks "
                "(e.g. torch.distributed.get_world_size() or jax.process_count())."
            )
        if not 0 <= rank < world_size:
            raise ValueError(
                f"`rank` must be in [0, world_size) = [0, {world_size}), got {rank}; pass this "
                "process's index (e.g. torch.distributed.get_rank() or jax.process_index())."
            )
        if not isinstance(drop_remainder, bool):
            raise TypeError(
                f"`drop_remainder` must be a bool, got {drop_remainder!r} "
                f"(type {type(drop_remainder).__name__})."
            )
        self.rank = rank
        self.world_size = world_size
        self.drop_remainder = drop_remainder
        self._phase = 0  # datapoints of ds read in the current group of world_size
        self._resume_phase = 0  # the phase a restored epoch continues with

    def __len__(self) -> int:
        try:
            n = len(self.ds)
        except NotImplementedError:
            raise UnknownLengthError(
                f"ShardData has no length: the wrapped {type(self.ds).__name__} has none."
            ) from None
        if self.drop_remainder:
            return n // self.world_size
        return max(0, -(-(n - self.rank) // self.world_size))

    def __iter__(self) -> Iterator[Any]:
        restored = self._resume is not None
        token, _ = self._begin()
        self._phase = self._resume_phase if restored else 0
        self._resume_phase = 0
        # the child's epoch begins now, with this iterator
        if self.world_size > 1 and isinstance(self.ds, ShardableSource):
            itr = self.ds.iter_shard(self.rank, self.world_size)
        else:
            itr = iter(self.ds)
        return self._run(token, itr)

    def _run(self, token: object, itr: Iterator[Any]) -> Iterator[Any]:
        rank, size = self.rank, self.world_size
        if size == 1:
            for dp in itr:
                self._pos += 1
                yield dp
        elif self.drop_remainder:
            # a whole group is read before its datapoint is yielded, so that an incomplete
            # last group yields nothing and a state taken at a yield is at a group boundary
            while True:
                mine = None
                for j in range(size):
                    dp = next(itr, _END)
                    if dp is _END:
                        self._end(token)
                        return
                    if j == rank:
                        mine = dp
                self._pos += 1
                yield mine
        else:
            phase = self._phase
            for dp in itr:
                take = phase == rank
                phase = phase + 1 if phase + 1 < size else 0
                if take:
                    self._phase = phase
                    self._pos += 1
                    yield dp
            self._phase = phase
        self._end(token)

    def state_dict(self) -> dict[str, Any]:
        """Own epoch and count, the position in the current group of ``world_size``
        (``drop_remainder=False``), and the child's state."""
        return {"type": "ShardData", "rank": self.rank, "world_size": self.world_size,
                "drop_remainder": self.drop_remainder, "phase": self._phase,
                **self._counters(), "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, rank=self.rank, world_size=self.world_size,
                    drop_remainder=self.drop_remainder)
        self.restore_epoch(state)
        if state["done"]:
            self.ds.load_state_dict(finished(state["child"]))
            self._resume_phase = 0
        else:
            self.ds.load_state_dict(state["child"])
            self._resume_phase = int(state["phase"])


_END = object()


def shard(df: DataFlow, rank: int, world_size: int, drop_remainder: bool = True) -> ShardData:
    """Split ``df`` between ``world_size`` data-parallel ranks: this rank's part.

    Ranks see disjoint datapoints (given the same sequence on every rank, see
    :mod:`dataflow.sharding`); with ``drop_remainder=True`` every rank gets exactly
    ``n // world_size`` datapoints per epoch, with ``False`` the first ``n % world_size`` ranks get
    one more. Example::

        ds = DataFromList(files, shuffle=True, seed=0)   # same seed on every rank
        ds = dataflow.shard(ds, rank, world_size)        # before the expensive maps
        ds = MapData(ds, decode)
    """
    return ShardData(df, rank, world_size, drop_remainder)
