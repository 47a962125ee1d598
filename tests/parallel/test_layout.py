"""The engine's layout: back ends are peers that import only the shared engine modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "dataflow"
SHARED = {"_protocol", "_worker", "_scheduler", "_mapper", "_runner", "_lifecycle",
          "_processes", "_wire", "_zmq", "shared_memory", "_segments", "_shm_space", "_ring",
          "_shm_reaper", "_autotune", "_budget", "_controller"}
BACK_ENDS = {"parallel/thread.py", "parallel/process.py", "parallel/zmq_map.py",
             "parallel/zmq_runner.py", "parallel/remote.py", "ray/map.py", "ray/runner.py"}


def _engine_imports(path: Path) -> set[str]:
    """The modules of dataflow.parallel and dataflow.ray that ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module
            if mod in ("dataflow.parallel", "dataflow.ray"):
                found |= {f"{mod}.{a.name}" for a in node.names}
            elif mod.startswith(("dataflow.parallel.", "dataflow.ray.")):
                found.add(mod)
    return found


@pytest.mark.parametrize("module", sorted(BACK_ENDS))
def test_a_back_end_imports_only_shared_engine_modules(module):
    imported = {m.rsplit(".", 1)[1] for m in _engine_imports(SRC / module)}
    ray_own = {"_cluster"} if module.startswith("ray/") else set()
    assert imported <= SHARED | ray_own, imported - SHARED - ray_own
    assert imported  # (the walk found the engine at all)
