"""LMDB and TFRecord saves stream: memory stays bounded however large the dataset."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dataflow.base import DataFlow
from dataflow.serialize import LMDBSerializer, TFRecordSerializer


class _Stream(DataFlow):
    """``n`` fresh datapoints of ``size`` bytes each, never held together."""

    def __init__(self, n: int, size: int) -> None:
        self.n = n
        self.size = size

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [np.full(self.size, i % 251, dtype=np.uint8), i]


@pytest.mark.parametrize("fmt", ["lmdb", "tfrecord"])
def test_saving_96_mb_keeps_python_memory_small(tmp_path, fmt):
    flow = _Stream(384, 256 << 10)  # 96 MB in total
    tracemalloc.start()
    try:
        if fmt == "lmdb":
            LMDBSerializer.save(flow, str(tmp_path / "out"), write_frequency=16, progress=False)
        else:
            TFRecordSerializer.save(flow, str(tmp_path / "out"), progress=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    limit = (8 << 20) if fmt == "lmdb" else (32 << 20)  # one transaction / one 8 MB batch
    assert peak < limit, f"peak {peak / 2**20:.1f} MiB"
    assert (tmp_path / "out").stat().st_size > 96 << 20
    if fmt == "lmdb":
        df = LMDBSerializer.load(tmp_path / "out", shuffle=False)
    else:
        df = TFRecordSerializer.load(tmp_path / "out", reader="builtin", verify=False)
    df.reset_state()
    seen = [(int(dp[1]), int(dp[0][7]), dp[0].size) for dp in df]
    assert seen == [(i, i % 251, 256 << 10) for i in range(384)]
    df.close()
