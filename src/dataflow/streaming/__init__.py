"""Streaming sharded datasets from local disks, HTTP(S), S3 and fsspec's object stores."""

from __future__ import annotations

from dataflow.streaming.fetch import ShardFetcher, ShardReadError
from dataflow.streaming.urls import expand_urls

__all__ = ["ShardFetcher", "ShardReadError", "expand_urls"]
