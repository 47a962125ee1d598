"""Spawned workers derive the same seeded streams as forked ones (the global seed travels)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from dataflow import rng
from dataflow.parallel import MultiProcessRunnerZMQ
from tests.parallel import flows

if __name__ == "__main__":
    for method in ("fork", "spawn"):
        rng.set_seed(0)
        with MultiProcessRunnerZMQ(flows.RandomTagged(5), 1, start_method=method) as r:
            r.reset_state()
            print([dp[1] for dp in r])
"""


def test_spawned_worker_gets_the_global_seed(tmp_path):
    script = tmp_path / "spawn_seed.py"
    script.write_text(SCRIPT.format(root=str(ROOT)))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert len(out) == 2
    assert out[0] == out[1]
    assert len(ast.literal_eval(out[0])) == 5
