"""Two versions of dataflow side by side, in one run: the benchmarks' own measurements of ours,
once with the working tree's ``src`` and once with another commit's (checked out in a temporary
git worktree, removed at the end), alternating, the best of each kept.

    .venv/bin/python benchmarks/compare_versions.py --old 26b6870 [--rounds 3] [--only core ...]

Each job runs ``benchmarks/<script> --impl <impl> --json [args]`` (the scripts' child mode) with
``PYTHONPATH`` set to the version's ``src``; the script itself is always the working tree's, so
both versions do the same work. Reported: every numeric result of both, and the speed of the new
version relative to the old (above 1: faster; new / old for rates, old / new for times).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _common import markdown_table  # noqa: E402

#: name -> (script, impl, extra arguments)
JOBS: dict[str, tuple[str, str, list[str]]] = {
    "core": ("bench_core.py", "ours", []),
    "parallel": ("bench_parallel.py", "ours", ["--phase", "throughput"]),
    "e2e-threads": ("bench_e2e.py", "ours-threads", ["--images", "3000", "--batches", "40"]),
    "e2e-default": ("bench_e2e.py", "ours-default", ["--images", "3000", "--batches", "40"]),
}
#: results that are times (smaller is better); every other number is a rate
TIMES = ("seconds", "_ns", "_us", "_ms")  # (rates end in "_s": items_s, mb_s)


def _run(script: str, impl: str, args: list[str], src: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, str(HERE / script), "--impl", impl, "--json", *args],
        capture_output=True, text=True, timeout=1800, env=env, check=False, cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} --impl {impl} ({src}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _is_time(key: str) -> bool:
    return key.endswith(TIMES)


def _numbers(result: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in result.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out[prefix + key] = float(value)
        elif isinstance(value, dict):
            out.update(_numbers(value, f"{prefix}{key}."))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=sorted(JOBS))
    args = parser.parse_args()
    names = args.only or list(JOBS)
    images = {extra[extra.index("--images") + 1]
              for _, _, extra in (JOBS[n] for n in names) if "--images" in extra}
    for n in sorted(images):  # the e2e jobs read an LMDB of JPEGs that bench_e2e writes once
        subprocess.run([sys.executable, "-c", f"import bench_e2e; bench_e2e.make_data({n})"],
                       cwd=HERE, check=True, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    with tempfile.TemporaryDirectory(prefix="dataflow-old-") as tmp:
        old_tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(old_tree), args.old],
                       cwd=ROOT, check=True, capture_output=True)
        try:
            rows = []
            for name in names:
                script, impl, extra = JOBS[name]
                best: dict[str, dict[str, float]] = {"old": {}, "new": {}}
                for _ in range(args.rounds):
                    for version, src in (("old", old_tree / "src"), ("new", ROOT / "src")):
                        for key, value in _numbers(_run(script, impl, extra, src)).items():
                            smaller = _is_time(key)
                            have = best[version].get(key)
                            if have is None or (value < have if smaller else value > have):
                                best[version][key] = value
                for key in sorted(best["new"]):
                    old, new = best["old"].get(key), best["new"][key]
                    if old and new:
                        speed = old / new if _is_time(key) else new / old
                        rows.append([name, key, f"{old:,.4g}", f"{new:,.4g}", f"{speed:.2f}"])
            print(markdown_table(["benchmark", "result", f"old ({args.old})", "new",
                                  "speed new vs old"], rows))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT,
                           check=False, capture_output=True)


if __name__ == "__main__":
    main()
