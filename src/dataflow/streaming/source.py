"""``StreamingShards``: a DataFlow over WebDataset tar shards in local or object storage.

::

    ds = StreamingShards("s3://bucket/train-{000000..000127}.tar", seed=0, decode="jpeg")

Each epoch follows the plan of :mod:`dataflow.streaming.plan` (the same global order for any
world size; every rank yields ``len(ds)`` samples; resumable from ``state_dict()``, also on
another world size). Bytes come from :class:`~dataflow.streaming.fetch.ShardFetcher`
(background downloads within ``prefetch_bytes``, optional node-wide cache); samples are parsed
by the streaming tar reader as their bytes arrive.

**Who am I.** ``rank``/``world_size`` from the arguments, else ``torch.distributed`` when it is
initialized, else the ``RANK``/``WORLD_SIZE`` environment variables, else ``0``/``1``; read at
``reset_state()``, which refuses a world size larger than the number of samples under
``partial="drop"`` (every rank would yield nothing). The workers of one rank split its share
through the :class:`~dataflow.sharding.ShardableSource` protocol: ``dataflow.torch``'s
DataLoader workers and ``shard(ds, worker, num_workers)`` call :meth:`iter_shard`, and each
worker then reads only its own samples (the others are :data:`~dataflow.sharding.SKIPPED`
placeholders, never read).

**Reads.** Samples of one shard that lie close together (gaps under 256 KiB) are read as one
byte range, others each as its own range, so a rank reads about ``1/world_size`` of the bytes.
Local shards (plain paths and ``file://``) skip the fetcher: each sample is read when its turn
comes, by one ``os.pread`` of its byte range (the index says where), so a shuffled order costs
what the file order does and nothing is held ahead of its turn.
Every shard needs an index (``.idx.json``): one missing is built by reading the shard once at
``reset_state()`` (``python -m dataflow index-shards`` writes them beforehand).

**Errors.** A truncated or corrupt shard, or a download that fails for good, goes through the
bad-sample policy (``on_error``, ``max_errors``, see :mod:`dataflow.policy`): ``"raise"``
raises an error naming the URL and the member; ``"skip"``/``"warn"`` drop the samples of the
failed range, count them, and go on (the rank then yields fewer than ``len(ds)``). A local
shard's range is one sample: a truncated local shard drops the samples past its end, each one
counted.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Generator, Iterator
from typing import Any

import numpy as np

from dataflow.base import DataFlow
from dataflow.errors import CorruptFileError, ShardReadError
from dataflow.policy import make_policy
from dataflow.sharding import SKIPPED
from dataflow.state import check_state
from dataflow.streaming.decoders import make_decoder
from dataflow.streaming.index import (
    ShardIndex,
    build_index,
    index_url,
    member_field,
    truncated_error,
)
from dataflow.streaming.plan import EpochPlan
from dataflow.streaming.tar import ByteReader, iter_members
from dataflow.streaming.urls import LOCAL, scheme_of, strip_file_scheme

__all__ = ["StreamingShards", "world_from_env"]

_GAP = 256 << 10  # samples of a shard closer than this are read as one range
_STATE_TYPE = "StreamingShards"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def world_from_env() -> tuple[int, int]:
    """``(rank, world_size)`` from ``torch.distributed`` if initialized, else ``RANK`` and
    ``WORLD_SIZE``, else ``(0, 1)``."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as e:
        raise ValueError(f"RANK/WORLD_SIZE must be integers, got RANK={os.environ.get('RANK')!r}"
                         f" WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}") from e


class StreamingShards(DataFlow):
    """Samples (dicts ``{"__key__", "__url__", field: bytes|decoded}``) of tar shards."""

    profile_hint = "network"  # its time in the profiler is time spent waiting for downloads

    def __init__(self, urls: Any, *, shuffle: bool = True, seed: int = 0, window: int = 4096,
                 partial: str = "drop", rank: int | None = None, world_size: int | None = None,
                 decode: Any = None, on_error: str = "raise", max_errors: Any = None,
                 prefetch_bytes: int = 256 << 20, cache_dir: str | None = None,
                 cache_limit: int | None = None, timeout: float = 30.0, retries: int = 5,
                 storage_options: dict[str, Any] | None = None) -> None:
        from dataflow.streaming.storage.schemes import check_storage
        from dataflow.streaming.urls import expand_urls

        self.urls = expand_urls(urls)
        check_storage(self.urls, storage_options, "urls")  # a typo fails here, not at a read
        # local shards are read in place, sample by sample (see "Reads" above)
        self._local = [scheme_of(u) == LOCAL for u in self.urls]
        self._local_bytes = 0  # bytes read from local shards (for profile_metrics)
        self.shuffle, self.seed, self.window, self.partial = shuffle, seed, window, partial
        EpochPlan((), seed, 0, window, shuffle, rank or 0, world_size or (rank or 0) + 1,
                  0, partial)  # validates the arguments now
        self._rank_arg, self._world_arg = rank, world_size
        self._decode = make_decoder(decode)
        self._policy = make_policy("StreamingShards", on_error, max_errors)
        self._fetch_args: dict[str, Any] = {
            "prefetch_bytes": prefetch_bytes, "cache_dir": cache_dir, "cache_limit": cache_limit,
            "timeout": timeout, "retries": retries, "storage_options": storage_options}
        self._fetcher: Any = None
        self._indexes: list[ShardIndex] | None = None
        self.rank, self.world_size = rank or 0, world_size or 1
        self._epoch = 0  # epochs started
        self._start = 0  # global position the epoch in progress started at
        self._pos = 0  # samples this rank consumed in the epoch in progress
        self._done = True
        self._resume: int | None = None

    # ---- set-up -------------------------------------------------------------------------

    def reset_state(self) -> None:
        from dataflow.streaming.fetch import ShardFetcher

        rank, world = world_from_env()
        self.rank = rank if self._rank_arg is None else self._rank_arg
        self.world_size = world if self._world_arg is None else self._world_arg
        EpochPlan((), self.seed, 0, self.window, self.shuffle, self.rank, self.world_size)
        if self._fetcher is None:
            self._fetcher = ShardFetcher(**self._fetch_args)
        if self._indexes is None:
            self._indexes = [self._load_index(u) for u in self.urls]
        self._check_not_empty()

    def _world_source(self) -> str:
        """Where ``world_size`` came from, as the user would write it."""
        if self._world_arg is not None:
            return f"world_size={self.world_size}"
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return f"torch.distributed's world size {self.world_size}"
        return f"WORLD_SIZE={self.world_size}"

    def _check_not_empty(self) -> None:
        """Raise a ValueError when every rank would yield nothing per epoch: the shards hold
        no sample, or, under ``partial="drop"``, there are fewer samples than ranks (a rank
        yields one sample per full round of ``world_size`` positions). No rank is ever empty
        while another is not: all yield ``len(self)`` samples."""
        n, world = sum(self.sizes), self.world_size
        if n == 0:
            raise ValueError(
                f"StreamingShards: {_count(len(self.urls), 'shard')} of `urls` (the first: "
                f"{self.urls[0]!r}) hold no sample, so every epoch would be empty; check the "
                "shards and their .idx.json indexes."
            )
        if self.partial == "drop" and n < world:
            raise ValueError(
                f"StreamingShards: {world} ranks ({self._world_source()}) over {n} samples: "
                "under partial='drop' every rank would yield 0 samples per epoch (a rank "
                f"yields one sample per full round of {world} positions of the global order, "
                f"and {n} samples make no full round). Use at most {n} ranks, add samples (more "
                "shards or larger ones: ranks split the samples, not the shards), or pass "
                f"partial='pad' (each rank then yields 1 sample per epoch, {world - n} of the "
                f"{world} being repeats)."
            )

    def _load_index(self, url: str) -> ShardIndex:
        try:
            with self._fetcher.open(index_url(url)) as s:
                return ShardIndex.from_json(s.read(), index_url(url))
        except (ShardReadError, FileNotFoundError):
            with self._fetcher.open(url) as s:  # a plain WebDataset tar: index it now
                return build_index(s, url)

    def __getstate__(self) -> dict[str, Any]:
        """A copy for another process: without the fetcher (its threads), which the copy's
        ``reset_state()`` starts anew; the indexes travel (no shard is read again)."""
        state = self.__dict__.copy()
        state["_fetcher"] = None
        return state

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher = None

    @property
    def sizes(self) -> tuple[int, ...]:
        if self._indexes is None:
            raise RuntimeError("StreamingShards: call reset_state() first")
        return tuple(len(i) for i in self._indexes)

    def plan(self, epoch: int | None = None, start: int | None = None) -> EpochPlan:
        """The plan of this rank for ``epoch`` (0-based; default: the next or current one)."""
        e = (self._epoch if self._done and self._resume is None else self._epoch - 1
             ) if epoch is None else epoch
        return EpochPlan(self.sizes, self.seed, e, self.window, self.shuffle, self.rank,
                         self.world_size, self._start if start is None else start, self.partial)

    def __len__(self) -> int:
        """Samples per rank and epoch (the same on every rank)."""
        return self.plan(start=0).steps

    def profile_metrics(self) -> dict[str, float]:
        """The fetcher's network counters (for the profiler report); ``bytes_read`` includes
        the bytes read from local shards in place."""
        out = dict(self._fetcher.stats()) if self._fetcher is not None else {}
        if out or self._local_bytes:
            out["bytes_read"] = out.get("bytes_read", 0) + self._local_bytes
        return out

    # ---- epochs -------------------------------------------------------------------------

    def _begin(self) -> tuple[EpochPlan, int]:
        if self._indexes is None:
            raise RuntimeError("StreamingShards: call reset_state() before iterating")
        if self._resume is None:
            self._epoch += 1
            self._start = 0
            skip = 0
        else:
            skip, self._resume = self._resume, None
        self._pos, self._done = skip, False
        plan = self.plan(self._epoch - 1)
        if self._policy is not None:
            self._policy.begin_epoch(plan.steps)
        return plan, skip

    def __iter__(self) -> Iterator[dict[str, Any]]:
        plan, skip = self._begin()
        return self._run(plan, plan.samples()[skip:], None)

    def iter_shard(self, rank: int, world_size: int) -> Iterator[Any]:
        """One epoch with :data:`SKIPPED` at the positions ``p`` with ``p % world_size !=
        rank`` (positions of this rank's sequence): the split between a rank's workers."""
        plan, skip = self._begin()
        samples = plan.samples()
        mine = np.arange(len(samples)) % world_size == rank
        return self._run(plan, samples[skip:], mine[skip:])

    def _run(self, plan: EpochPlan, samples: np.ndarray, mine: np.ndarray | None
             ) -> Iterator[Any]:
        wanted = samples if mine is None else samples[mine]
        got = self._read(plan, wanted)
        try:
            for i in range(len(samples)):
                if mine is not None and not mine[i]:
                    self._pos += 1
                    yield SKIPPED
                    continue
                dp = next(got, None)
                if dp is None:
                    break
                self._pos += 1
                if self._policy is not None:
                    self._policy.seen += 1
                yield dp
        finally:
            got.close()
            self._done = True

    def _read(self, plan: EpochPlan, samples: np.ndarray) -> Generator[dict[str, Any]]:
        """The samples ``samples`` (global numbers), in order, read a window at a time."""
        chunk = max(1, self.window // self.world_size)
        shard_of, local_of = plan.locate(samples) if len(samples) else (samples, samples)
        chunks = [(shard_of[i:i + chunk], local_of[i:i + chunk])
                  for i in range(0, len(samples), chunk)]
        ranges = [self._ranges(s, j) for s, j in chunks]
        if ranges:
            self._fetcher.prefetch([r[:3] for r in ranges[0] if not self._local[r[3]]])
        files: dict[int, int] = {}  # local shard -> open descriptor, for this epoch
        try:
            for c, (shards, locals_) in enumerate(chunks):
                if c + 1 < len(ranges):
                    self._fetcher.prefetch([r[:3] for r in ranges[c + 1]
                                            if not self._local[r[3]]])
                yield from self._read_chunk(shards, locals_, ranges[c], files)
        finally:
            for fd in files.values():
                os.close(fd)

    def _ranges(self, shards: np.ndarray, locals_: np.ndarray) -> list[tuple[Any, ...]]:
        """Byte ranges ``(url, start, end, shard, first, last)`` covering a chunk's samples
        (none for local shards: they are read sample by sample)."""
        assert self._indexes is not None
        out = []
        for s in np.unique(shards):
            if self._local[s]:
                continue
            idx = self._indexes[s].samples
            need = np.unique(locals_[shards == s])
            first = prev = int(need[0])
            for j in [*need[1:].tolist(), None]:
                if j is not None and idx[j][1] - idx[prev][2] < _GAP:
                    prev = j
                    continue
                out.append((self.urls[s], idx[first][1], idx[prev][2], int(s), first, prev))
                if j is not None:
                    first = prev = j
        return out

    def _read_chunk(self, shards: np.ndarray, locals_: np.ndarray,
                    ranges: list[tuple[Any, ...]], files: dict[int, int]
                    ) -> Generator[dict[str, Any]]:
        queues: dict[int, deque[tuple[Any, ...]]] = {}
        for r in ranges:
            queues.setdefault(r[3], deque()).append(r)
        needed = set(zip(shards.tolist(), locals_.tolist(), strict=True))
        buffer: dict[tuple[int, int], dict[str, Any] | None] = {}
        open_: dict[int, Generator[tuple[int, dict[str, Any] | None]]] = {}
        try:
            for s, j in zip(shards.tolist(), locals_.tolist(), strict=True):
                if self._local[s]:
                    dp = self._local_sample(s, j, files)
                    if dp is not None:
                        yield self._decode(dp) if self._decode is not None else dp
                    continue
                while (s, j) not in buffer:
                    if s not in open_:
                        open_[s] = self._range_samples(queues[s].popleft(), needed)
                    item = next(open_[s], None)
                    if item is None:
                        del open_[s]
                        continue
                    k, dp = item
                    if (s, k) in needed:
                        buffer[(s, k)] = dp
                got = buffer.pop((s, j))
                if got is not None:
                    yield self._decode(got) if self._decode is not None else got
        finally:
            for it in open_.values():
                it.close()

    def _range_samples(self, r: tuple[Any, ...], needed: set[tuple[int, int]]
                       ) -> Generator[tuple[int, dict[str, Any] | None]]:
        """``(index in shard, sample)`` of one byte range, each yielded as soon as its last
        member arrived (the index says where it ends); ``None`` samples for the ones lost to an
        error under ``on_error="skip"``/``"warn"``."""
        url, start, end, s, first, last = r
        assert self._indexes is not None
        idx = self._indexes[s].samples
        k = first
        pos = start  # where the next member starts
        try:
            with self._fetcher.open(url, start, end) as stream:
                reader = ByteReader(stream)
                while k <= last:
                    key0, lo, hi = idx[k]
                    if (s, k) not in needed:  # another rank's or worker's: not parsed
                        if reader.skip(hi - lo) < hi - lo:
                            break
                        pos = hi
                        k += 1
                        continue
                    sample: dict[str, Any] = {"__key__": key0, "__url__": url}
                    for m in iter_members(reader, url, lo, hi):
                        sample[member_field(m.name, key0, url, m.header_offset)] = m.data
                        pos = m.end
                    if pos < hi:
                        break
                    yield k, sample
                    k += 1
            if k <= last:
                raise truncated_error(url, idx[k][0], idx[k][2])
        except (CorruptFileError, OSError) as e:
            if self._policy is None:
                raise self._read_error(e, s, k, pos) from e
            for lost in range(k, last + 1):
                self._policy.failed(None, f"{url} sample {idx[lost][0]!r}: {e}")
                yield lost, None

    def _local_sample(self, s: int, k: int, files: dict[int, int]) -> dict[str, Any] | None:
        """Sample ``k`` of local shard ``s``, read in place: one ``os.pread`` of its byte
        range, its members parsed out of that buffer (each body copied once, as bytes).
        ``None`` if it failed under ``on_error="skip"``/``"warn"`` (counted)."""
        assert self._indexes is not None
        url = self.urls[s]
        key0, lo, hi = self._indexes[s].samples[k]
        pos = lo  # where the next member starts
        try:
            fd = files.get(s)
            if fd is None:
                fd = files[s] = os.open(strip_file_scheme(url), os.O_RDONLY)
            data = os.pread(fd, hi - lo, lo)
            self._local_bytes += len(data)
            sample: dict[str, Any] = {"__key__": key0, "__url__": url}
            for m in iter_members(ByteReader.of_bytes(data), url, lo, hi):
                sample[member_field(m.name, key0, url, m.header_offset)] = m.data
                pos = m.end
            if pos < hi:
                raise truncated_error(url, key0, hi)
            return sample
        except (CorruptFileError, OSError) as e:
            if self._policy is None:
                raise self._read_error(e, s, k, pos) from e
            self._policy.failed(None, f"{url} sample {key0!r}: {e}")
            return None

    def _read_error(self, e: BaseException, s: int, k: int, pos: int) -> CorruptFileError:
        """The error raised (without a bad-sample policy) for ``e``, met in sample ``k`` of
        shard ``s`` at or after byte ``pos``: it names the URL, the member and the sample."""
        assert self._indexes is not None
        url, key = self.urls[s], self._indexes[s].samples[k][0]
        where = self._member_at(s, getattr(e, "offset", pos))
        if isinstance(e, CorruptFileError):
            return CorruptFileError(f"{e} (in member {where!r} of sample {key!r})")
        return CorruptFileError(f"reading tar shard {url} failed in member {where!r}: {e}")

    def _member_at(self, shard: int, offset: int) -> str:
        """The name of the member of ``shard`` whose bytes hold ``offset``."""
        assert self._indexes is not None
        for name, data_offset, size in self._indexes[shard].members:
            if offset < data_offset + size + (-size % 512):
                return name
        return "<end of archive>"

    # ---- state --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``{"type", "seed", "epoch", "consumed", "done", "num_samples"}``: ``consumed`` global
        positions of the epoch are done (every rank at the same step), so any world size can
        resume the epoch (see :mod:`dataflow.streaming.plan`)."""
        state = {"type": _STATE_TYPE, "seed": self.seed, "shuffle": self.shuffle,
                 "window": self.window, "epoch": self._epoch - 1,
                 "consumed": self._start + self._pos * self.world_size,
                 "done": self._done, "num_samples": sum(self.sizes)}
        if self._policy is not None:
            state["errors"] = self._policy.state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = check_state(state, _STATE_TYPE, seed=self.seed, shuffle=self.shuffle,
                            window=self.window, num_samples=sum(self.sizes))
        self._epoch = int(state["epoch"]) + 1
        self._done = bool(state["done"])
        self._start = int(state["consumed"])
        self._pos = 0
        self._resume = None if self._done else 0
        if self._policy is not None and "errors" in state:
            self._policy.load(state["errors"])

