"""Elastic determinism across real processes: ranks as separate processes (identity from
``RANK``/``WORLD_SIZE``), DataLoader workers inside them, resume onto another world size."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dataflow.streaming.plan import global_order
from tests.streaming._shards import write_shards

N, PER_SHARD = 61, 8
SIZES = [8] * 7 + [5]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_ranks(urls, world, workers, stop=-1, state=None):
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), URLS=json.dumps(urls),
                   WORKERS=str(workers), STOP=str(stop), STATE_IN=json.dumps(state) if state
                   else "")
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.streaming._rank"],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        outs.append(json.loads(out))
    return outs


def _interleave(streams):
    assert len({len(s) for s in streams}) == 1  # equal steps on every rank
    return [s[i] for i in range(len(streams[0])) for s in streams]


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    return write_shards(tmp_path_factory.mktemp("elastic"), N, PER_SHARD)


def test_rank_processes_resume_onto_more_ranks(urls):
    order = global_order(SIZES, 11, 0, 9).tolist()
    first = _run_ranks(urls, 2, 0, stop=5)
    assert _interleave([o["cls"] for o in first]) == order[:10]
    assert first[0]["state"]["consumed"] == first[1]["state"]["consumed"] == 10
    rest = _run_ranks(urls, 4, 0, state=first[0]["state"])
    assert _interleave([o["cls"] for o in rest]) == order[10:58]  # (61 - 10) // 4 = 12 each


@pytest.mark.slow
@pytest.mark.loads_frameworks
def test_four_ranks_with_two_torch_workers_each(urls):
    pytest.importorskip("torch")
    order = global_order(SIZES, 11, 0, 9).tolist()
    outs = _run_ranks(urls, 4, 2)
    assert _interleave([o["cls"] for o in outs]) == order[:60]
