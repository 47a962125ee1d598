"""Command line: ``python -m dataflow <command>`` (also installed as ``dataflow``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dataflow import demo as _demo


def _demo_cmd(args: argparse.Namespace) -> int:
    report, table = _demo.run_demo(
        num_images=args.images, batch_size=args.batch_size, batches=args.batches,
        seed=args.seed, progress=not args.no_progress, num_proc=args.num_proc,
        profile_batches=_demo.PROFILE_BATCHES if args.profile else 0,
    )
    print(report.format())
    if table:
        print(table)
    return 0


def _profile_cmd(args: argparse.Namespace) -> int:
    import importlib
    import os

    from dataflow.profiler import profile

    target = args.target
    if ":" not in target:
        raise SystemExit(f"`target` must look like module:function, got {target!r}.")
    mod_name, func_name = target.split(":", 1)
    sys.path.insert(0, os.getcwd())
    try:
        func = getattr(importlib.import_module(mod_name), func_name)
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"cannot load {target!r}: {e}") from e
    flow = func()
    report = profile(flow, num=args.num, warmup=args.warmup, trace=args.trace is not None)
    flow.close()
    if args.trace:
        report.write_trace(args.trace)
    print(report.to_json() if args.json else report.format())
    if args.trace and not args.json:
        print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev or "
              "chrome://tracing)")
    return 0


def _preview_cmd(args: argparse.Namespace) -> int:
    from dataflow.imgaug.preview import preview_main

    return int(preview_main(args.args))


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
    demo.add_argument("--num-proc", type=int, default=None,
                      help="worker processes (default: one per core)")
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    demo.add_argument("--no-profile", dest="profile", action="store_false",
                      help="skip the per-stage profile after the report")
    demo.set_defaults(func=_demo_cmd)
    prof = sub.add_parser(
        "profile", help="time every stage of a pipeline and name the bottleneck"
    )
    prof.add_argument("target", help="module:function returning the dataflow to profile")
    prof.add_argument("--num", type=int, default=1000, help="datapoints to time (default 1000)")
    prof.add_argument("--warmup", type=int, default=10, help="datapoints before timing")
    prof.add_argument("--json", action="store_true", help="print JSON instead of a table")
    prof.add_argument("--trace", metavar="FILE", help="also write a Chrome trace-event file")
    prof.set_defaults(func=_profile_cmd)
    prev = sub.add_parser(
        "preview", add_help=False,
        help="write a PNG grid of an image under random draws of an augmentor list "
             "(see `python -m dataflow preview --help`)",
    )
    prev.add_argument("args", nargs=argparse.REMAINDER)
    prev.set_defaults(func=_preview_cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["preview"]:  # its options belong to the preview command itself
        return _preview_cmd(argparse.Namespace(args=argv[1:]))
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
