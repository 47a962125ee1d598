"""Command line: ``python -m dataflow <command>`` (also installed as ``dataflow``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dataflow import demo as _demo


def _demo_cmd(args: argparse.Namespace) -> int:
    report = _demo.run_demo(
        num_images=args.images, batch_size=args.batch_size, batches=args.batches,
        seed=args.seed, progress=not args.no_progress,
    )
    print(report.format())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dataflow", description="dataflow: fast, reproducible input pipelines."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="run an ImageNet-like pipeline on generated data and report its speed"
    )
    demo.add_argument("--images", type=int, default=512, help="generated images (default 512)")
    demo.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    demo.add_argument("--batches", type=int, default=40, help="batches to time (default 40)")
    demo.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    demo.set_defaults(func=_demo_cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
