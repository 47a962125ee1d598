"""Streaming sharded datasets from local disks, HTTP(S), S3 and fsspec's object stores.

* :class:`StreamingShards`: a DataFlow over WebDataset tar shards with exact, elastic,
  resumable epochs (see ``docs/streaming.md``);
* :class:`TarShardSerializer`: write a DataFlow as tar shards with their indexes;
* :class:`TarShardData`: the samples of local indexed shards, read by position (a source of
  ``SnapshotData`` and ``DataService``);
* :class:`EpochPlan` and the pure plan functions of :mod:`dataflow.streaming.plan`;
* :class:`ShardFetcher`, :func:`expand_urls`: the storage layer.
"""

from __future__ import annotations

from dataflow.streaming.fetch import ShardFetcher, ShardReadError
from dataflow.streaming.index import ShardIndex, build_index
from dataflow.streaming.indexed import TarShardData
from dataflow.streaming.plan import EpochPlan, global_order
from dataflow.streaming.source import StreamingShards
from dataflow.streaming.urls import expand_urls
from dataflow.streaming.writer import TarShardSerializer

__all__ = [
    "EpochPlan",
    "ShardFetcher",
    "ShardIndex",
    "ShardReadError",
    "StreamingShards",
    "TarShardData",
    "TarShardSerializer",
    "build_index",
    "expand_urls",
    "global_order",
]
