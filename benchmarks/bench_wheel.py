"""The fused pipeline from the installed binary wheel against the in-place build, in one run.

    make wheel && bash .ci/wheel          # builds dist/ and .venv-wheel-test (the wheel installed)
    .venv/bin/python benchmarks/bench_wheel.py [--rounds 3] [--size 500x375] [--images 1500]

Runs bench_e2e.py's ``fused-threads`` pipeline (MultiThreadMapData(2, augment_jpeg) ->
BatchData over an LMDB of generated JPEGs) and its one-core ``cost-split`` (the fused path's
milliseconds per image) under two interpreters: this one, whose ``dataflow`` is the in-place
build of ``src/`` (``make test``'s editable install), and ``--wheel-python``, whose ``dataflow``
is the wheel (with libjpeg-turbo inside). The rounds alternate between the two and the best of
each is kept; the ratios are wheel / in-place (images/s) and in-place / wheel (ms per image),
so 1.00 means the same speed and above 1 the wheel is faster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
E2E = HERE / "bench_e2e.py"


def _run(python: str, impl: str, args: argparse.Namespace) -> dict:
    out = subprocess.run(
        [python, str(E2E), "--impl", impl, "--json", "--images", str(args.images),
         "--batches", str(args.batches), "--size", args.size],
        capture_output=True, text=True, check=True, timeout=900,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _origin(python: str) -> str:
    code = ("import dataflow, dataflow.jpeg as j; "
            "print(dataflow.__file__, j.fast_path_status(), j._jpeg.__file__)")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                          cwd="/").stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel-python", default=str(HERE.parent / ".venv-wheel-test" / "bin"
                                                      / "python"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--size", default="500x375")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from bench_e2e import make_data

    make_data(args.images, tuple(int(v) for v in args.size.split("x")))  # type: ignore[arg-type]
    pythons = {"in-place": sys.executable, "wheel": args.wheel_python}
    for name, py in pythons.items():
        print(f"{name}: {_origin(py)}")
    rate = dict.fromkeys(pythons, 0.0)
    ms = dict.fromkeys(pythons, float("inf"))
    for r in range(args.rounds):
        order = list(pythons) if r % 2 == 0 else list(pythons)[::-1]
        for name in order:
            rate[name] = max(rate[name], _run(pythons[name], "fused-threads",
                                              args)["images_per_second"])
            ms[name] = min(ms[name], _run(pythons[name], "cost-split", args)["fused_ms"])
        print(f"round {r + 1}: " + ", ".join(f"{n} {rate[n]:,.0f} img/s {ms[n]:.3f} ms"
                                            for n in pythons))
    print(f"\n{args.size}, best of {args.rounds} alternating rounds\n")
    print("| build | fused-threads images/s | fused path ms per image (one core) |")
    print("|---|---|---|")
    for n in pythons:
        print(f"| {n} | {rate[n]:,.0f} | {ms[n]:.3f} |")
    print(f"| wheel / in-place | {rate['wheel'] / rate['in-place']:.3f} | "
          f"{ms['in-place'] / ms['wheel']:.3f} |")


if __name__ == "__main__":
    main()
