"""Helpers of the service tests that run ``python -m dataflow serve`` in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def serve(address: str, env: dict[str, str], target: str = "tests.service.pipelines:make",
          *options: str) -> subprocess.Popen[str]:
    """``python -m dataflow serve target --address address [options]`` with ``env`` added,
    once it has printed that it serves (the caller ends it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dataflow", "serve", target, "--address", address, *options],
        cwd=ROOT,
        stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == f"serving {target} at {address}\n", line
    return proc
