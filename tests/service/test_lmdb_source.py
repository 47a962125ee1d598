"""A service over an LMDB file: its workers read the records by key, in place."""

from __future__ import annotations

import numpy as np

import dataflow as df
from dataflow.service import DataService, ServiceData


def _records(n):
    return [[i, np.full(3, i, np.int32)] for i in range(n)]


def _first(dp):
    return [int(dp[0]) * 10]


def test_a_service_over_lmdb_gives_what_a_mapper_gives(tmp_path):
    path = str(tmp_path / "x.lmdb")
    df.LMDBSerializer.save(df.DataFromList(_records(50), shuffle=False), path)
    with DataService(df.LMDBSerializer.load(path, shuffle=False), _first, num_workers=2,
                     shuffle=False) as svc:
        c = ServiceData(svc.address, rank=0, world_size=1)
        c.reset_state()
        got = [dp[0] for dp in c]
        c.close()
    assert got == [10 * i for i in range(50)]
