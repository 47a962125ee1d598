"""A reader process of the cache tests: ``python -m tests.streaming._cache_reader URL_PATTERN
CACHE_DIR LIMIT DATA_DIR I,J,K...`` reads the shards in that order through a cached fetcher
and prints, as JSON, whether every read matched the file and the cache's largest usage seen."""

from __future__ import annotations

import json
import os
import sys

from dataflow.streaming.cache import ShardCache
from dataflow.streaming.fetch import ShardFetcher


def main(url: str, cache_dir: str, limit: str, data_dir: str, order: str) -> None:
    shards = [int(i) for i in order.split(",")]
    cache_limit = int(limit) if limit != "none" else None
    most, ok = 0, True
    with ShardFetcher(cache_dir=cache_dir, cache_limit=cache_limit, prefetch_bytes=1 << 20) as f:
        f.prefetch([(url.format(i), 0, None) for i in shards])
        for i in shards:
            with f.open(url.format(i)) as s, open(os.path.join(data_dir, f"s{i}.bin"), "rb") as e:
                ok &= s.read() == e.read()
            most = max(most, ShardCache(cache_dir).usage())
        stats = f.stats()
    print(json.dumps({"ok": ok, "most": most, "hits": stats["cache_hits"]}))


if __name__ == "__main__":
    main(*sys.argv[1:])
