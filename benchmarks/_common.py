"""Shared helpers for the benchmark scripts: run an implementation in a subprocess (ours in
this interpreter's environment, tensorpack 0.11 in its own virtualenv) and print tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TENSORPACK_PYTHON = Path(
    os.environ.get("TENSORPACK_PYTHON", HERE / ".venv-tensorpack" / "bin" / "python")
)
TENSORPACK_SETUP = (
    "python3 -m venv benchmarks/.venv-tensorpack && benchmarks/.venv-tensorpack/bin/pip install "
    "'tensorpack==0.11' 'numpy<1.24' 'opencv-python-headless<4.12' lmdb h5py msgpack "
    "msgpack-numpy pyzmq tqdm"
)


def e2e_parser(doc: str, impls: list[str], batches: int, rounds: int):
    """The command line of the scripts that run the end-to-end pipeline side by side: ``--impl``
    and ``--json`` (one implementation, in the child process), ``--images``, ``--batches``,
    ``--only`` and ``--rounds`` (interleaved rounds; the best of each implementation is kept)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--impl", choices=impls)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--batches", type=int, default=batches)
    parser.add_argument("--only", nargs="*", choices=impls, help="run only these")
    parser.add_argument("--rounds", type=int, default=rounds,
                        help="interleaved rounds; the best of each implementation is kept")
    return parser


def tensorpack_available() -> bool:
    return TENSORPACK_PYTHON.exists()


def run_impl(script: Path, impl: str, *args: str, timeout: float = 600) -> dict | None:
    """Run ``script --impl impl --json`` and return its JSON, or None when it is unavailable."""
    python = str(TENSORPACK_PYTHON) if impl == "tensorpack" else sys.executable
    if impl == "tensorpack" and not tensorpack_available():
        return None
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    proc = subprocess.run(
        [python, str(script), "--impl", impl, "--json", *args],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} run failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
