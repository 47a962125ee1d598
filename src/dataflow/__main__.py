"""Command line: ``python -m dataflow <command>`` (also installed as ``dataflow``).

Commands: ``demo``, ``profile module:function``, ``index-shards``, ``preview``,
``serve module:function`` (a :class:`dataflow.service.DataService` until SIGTERM/SIGINT),
``service status ADDRESS``; ``--version``
prints the version. Exit status: 0 on success; 2 for a usage error, printed as one line on
stderr (no command: the help is printed to stderr; a bad option; a ``profile`` target that
cannot be loaded, raises while it builds the flow or does not return a DataFlow, named with the
exception as ``Type: message``; a bad ``preview`` augmentor spec). An error raised while a
well-built flow runs is not a usage error: it shows its traceback (status 1).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from dataflow import demo as _demo


class UsageError(Exception):
    """A command's input is wrong; :func:`main` prints the message as one line (status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose errors (a bad option, a missing argument) are one line on
    stderr with status 2, as the command's own usage errors are; ``--help`` shows the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _one_line(e: BaseException) -> str:
    """``Type: message``, a message of several lines joined into one."""
    text = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


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


def _load_target(target: str) -> Any:
    """The callable named by ``module:function`` (``function`` may be a dotted attribute path),
    imported with the current directory on ``sys.path``; UsageError naming what is wrong."""
    import importlib
    import inspect
    import os

    mod_name, sep, func_name = target.partition(":")
    if not sep or not all(p.isidentifier() for p in mod_name.split(".")) or not all(
        p.isidentifier() for p in func_name.split(".")
    ):
        raise UsageError(
            f"`target` must look like module:function (e.g. mypipeline:build), got {target!r}."
        )
    sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as e:  # whatever the module's code raised, SyntaxError included
        missing = e.name if isinstance(e, ModuleNotFoundError) else None
        if missing is not None and (mod_name == missing or mod_name.startswith(missing + ".")):
            raise UsageError(  # the target's own module (not one it imports) is not there
                f"cannot import {mod_name!r} for {target!r}: no module named {missing!r}; run "
                "from the directory that holds it, or add that directory to PYTHONPATH."
            ) from None
        raise UsageError(f"importing {mod_name!r} for {target!r} failed: {_one_line(e)}") from None
    for part in func_name.split("."):
        owner = f"{type(obj).__name__} {getattr(obj, '__name__', mod_name)!r}"
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(
                f"{target!r}: {owner} has no attribute {part!r}; name a function that returns "
                "the dataflow to profile."
            ) from None
        except Exception as e:  # a module __getattr__ or a property that raised
            raise UsageError(
                f"{target!r}: getting {part!r} from {owner} failed: {_one_line(e)}"
            ) from None
    if not callable(obj):
        raise UsageError(
            f"{target!r} is a {type(obj).__name__}, not a function; name a function that "
            "returns the dataflow to profile."
        )
    try:
        inspect.signature(obj).bind()
    except TypeError as e:
        raise UsageError(f"{target!r} must be callable without arguments: {e}.") from None
    except ValueError:  # no signature to inspect (some builtins): just call it
        pass
    return obj


def _profile_cmd(args: argparse.Namespace) -> int:
    from dataflow.base import DataFlow
    from dataflow.profiler import profile

    if args.num < 1:
        raise UsageError(f"--num must be >= 1, got {args.num}.")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {args.warmup}.")
    func = _load_target(args.target)
    try:
        flow = func()
    except Exception as e:  # the target could not build its flow: its input is wrong
        raise UsageError(f"calling {args.target!r} failed: {_one_line(e)}") from None
    if not isinstance(flow, DataFlow):
        raise UsageError(
            f"{args.target!r} returned a {type(flow).__name__}, not a DataFlow; return the "
            "pipeline itself (wrap a list with DataFromList(lst, shuffle=False))."
        )
    try:
        report = profile(flow, num=args.num, warmup=args.warmup, trace=args.trace is not None)
    finally:
        flow.close()
    if args.trace:
        report.write_trace(args.trace)
    print(report.to_json() if args.json else report.format())
    if args.trace and not args.json:
        print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev or "
              "chrome://tracing)")
    return 0


def _serve_cmd(args: argparse.Namespace) -> int:
    """Start the DataService that ``module:function`` returns (not started), print its
    address, serve until SIGTERM or SIGINT, then close it."""
    import signal
    import threading

    from dataflow.service import DataService

    try:
        func = _load_target(args.target)
    except UsageError as e:  # (the loader's words are the profiler's)
        raise UsageError(str(e).replace("the dataflow to profile", "a DataService, not "
                                        "started")) from None
    try:
        service = func()
    except Exception as e:
        raise UsageError(f"calling {args.target!r} failed: {_one_line(e)}") from None
    if not isinstance(service, DataService):
        raise UsageError(f"{args.target!r} returned a {type(service).__name__}, not a "
                         "DataService; return DataService(ds, map_func, ...) without starting "
                         "it.")
    if service.started:
        service.close()
        raise UsageError(f"{args.target!r} returned a DataService already started (at "
                         f"{service.address}); return it without calling start(), so that "
                         "serve starts it (at --address, if given) and closes it.")
    if args.address is not None:
        try:  # (the constructor's checks: a token beyond loopback)
            service.set_address(args.address)
        except ValueError as e:
            raise UsageError(str(e).replace("`address`", "--address")) from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        service.start()
    except OSError as e:
        raise UsageError(_one_line(e)) from None
    print(f"serving {args.target} at {service.address}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        # by default a redeploy: the consumers wait for the next service at the address, not
        # told; with --tell-consumers a permanent stop: they raise ServiceError at once
        service.close(tell_consumers=args.tell_consumers)
    with contextlib.suppress(OSError):  # (whoever started it may have stopped reading)
        print("closed", flush=True)
    return 0


def _service_cmd(args: argparse.Namespace) -> int:
    """``service status ADDRESS``: the service's live figures."""
    import json

    import zmq

    from dataflow.service import protocol

    token = protocol.resolve_token(args.token)
    try:
        host = protocol.host_of(args.address)
        server_key = protocol.curve_setting(args.curve, host, token, "service status",
                                            server=False)
    except ValueError as e:
        raise UsageError(str(e).replace("`address`", "ADDRESS").replace(
            "token='...'", "--token")) from None
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        if server_key is not None:
            protocol.curve_client(sock, server_key)
        sock.connect(args.address)
        sock.send(protocol.encode({"op": "stats", "token": token}))
        if not sock.poll(int(args.timeout * 1000)):
            raise UsageError(f"no DataService answered at {args.address} within "
                             f"{args.timeout:g} s.")
        try:
            msg = protocol.decode(sock.recv())
        except ValueError:
            msg = {}
    finally:
        sock.close()
        ctx.term()
    if msg.get("op") == "refused":
        raise UsageError(f"the DataService at {args.address} refused: {msg.get('error')}")
    stats = msg.get("stats")
    if msg.get("op") != "stats" or not isinstance(stats, dict) or not isinstance(
            stats.get("workers"), list) or not isinstance(stats.get("consumers"), list):
        raise UsageError(f"the ZeroMQ socket at {args.address} is not a DataService (it "
                         "answered something else than a service's figures).")
    if args.prometheus:
        from dataflow.service.metrics import prometheus_text

        print(prometheus_text(stats), end="")
    else:
        print(json.dumps(stats, indent=2) if args.json else _format_status(stats))
    return 0


def _rates(row: dict[str, Any]) -> str:
    """``"12.0 items/s (last 10 s), 98.0 lifetime"`` of a worker or consumer of ``stats()``."""
    lifetime = row.get("rate", row.get("items_per_second", 0.0))
    recent = row.get("rate_10s")
    if recent is None:
        return f"{lifetime:.1f} items/s"
    return f"{recent:.1f} items/s in the last 10 s, {lifetime:.1f} over its lifetime"


def _format_status(s: dict[str, Any]) -> str:
    auto = s.get("autotune")
    lines = [f"DataService at {s.get('address')}: {s.get('datapoints')} datapoints, seed "
             f"{s.get('seed')}, shuffle {s.get('shuffle')}, up {s.get('uptime', 0):.1f} s, "
             f"{s.get('num_workers')} {s.get('backend', 'process')} workers"
             + (f" (auto, at most {auto['maximum']})" if auto else ""),
             f"  bottleneck: {s.get('bottleneck') or 'no consumer yet'}; restarts "
             f"{s.get('restarts')}; dropped messages {s.get('dropped')}; "
             f"{s.get('bytes_out', 0) / 1e6:.1f} MB sent"]
    for w in s.get("workers", []):
        lines.append(f"  worker {w['worker']} (generation {w['generation']}): "
                     f"{100 * w['busy']:.0f}% busy, {_rates(w)}, "
                     f"{w['items']} items, {w['bytes_out'] / 1e6:.1f} MB, "
                     f"{w.get('queued', 0)} queued")
    for c in s.get("consumers", []):
        lines.append(f"  consumer job {c['job']!r} rank {c['rank']} of {c['world_size']}: "
                     f"waits {100 * c['wait']:.0f}% of its time, {_rates(c)}, "
                     f"{c['received']} received, {c.get('in_flight', 0)} asked, "
                     f"{c.get('ready', 0)} ready"
                     + (f", {c['skipped']} skipped" if c.get("skipped") else ""))
    for name, job in (s.get("jobs") or {}).items():
        lines.append(f"  job {name!r}: its own pipeline, {job['n']} datapoints, seed "
                     f"{job['seed']}, shuffle {job['shuffle']}")
    return "\n".join(lines)


def _preview_cmd(args: argparse.Namespace) -> int:
    from dataflow.imgaug.preview import preview_main

    return int(preview_main(args.args))


def build_parser() -> argparse.ArgumentParser:
    from dataflow import __version__

    parser = _Parser(
        prog="dataflow", description="dataflow: fast, reproducible input pipelines.",
        epilog="Exit status: 0 on success, 2 for a usage error (also: no command), printed as "
               "one line on stderr.",
    )
    parser.add_argument("--version", action="version", version=f"dataflow-reloaded {__version__}")
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
        "profile", help="time every stage of a pipeline and name the bottleneck",
        description="Time every stage of the pipeline that module:function returns and name "
                    "the bottleneck.",
        epilog="Exit status: 0 on success; 2, with one line on stderr naming the target and "
               "the exception (Type: message), when the target cannot be imported, is not a "
               "function, raises while it builds the flow or does not return a DataFlow. An "
               "error raised while the flow runs shows its traceback (status 1).",
    )
    prof.add_argument("target", help="module:function returning the dataflow to profile")
    prof.add_argument("--num", type=int, default=1000, help="datapoints to time (default 1000)")
    prof.add_argument("--warmup", type=int, default=10, help="datapoints before timing")
    prof.add_argument("--json", action="store_true", help="print JSON instead of a table")
    prof.add_argument("--trace", metavar="FILE", help="also write a Chrome trace-event file")
    prof.set_defaults(func=_profile_cmd)
    idx = sub.add_parser(
        "index-shards", help="write the index (.idx.json) next to each local WebDataset tar shard"
    )
    idx.add_argument("shards", nargs="+", help="shard paths or brace patterns (a-{000..009}.tar)")
    idx.set_defaults(func=_index_cmd)
    prev = sub.add_parser(
        "preview", add_help=False,
        help="write a PNG grid of an image under random draws of an augmentor list "
             "(see `python -m dataflow preview --help`)",
    )
    prev.add_argument("args", nargs=argparse.REMAINDER)
    prev.set_defaults(func=_preview_cmd)
    serve = sub.add_parser(
        "serve", help="serve the DataService that module:function returns, until SIGTERM/SIGINT",
        description="Start the DataService that module:function returns (not started), print "
                    "its address, and serve until SIGTERM or SIGINT; then close it.",
    )
    serve.add_argument("target", help="module:function returning a DataService, not started")
    serve.add_argument("--address", help="where to listen instead of the service's own address "
                                         "(e.g. tcp://127.0.0.1:5555)")
    serve.add_argument("--tell-consumers", action="store_true",
                       help="a permanent stop: on SIGTERM or SIGINT tell the consumers that the "
                            "service closed (they raise at once); without it a stop is a "
                            "redeploy, and they wait up to their timeout for the next service "
                            "at the address")
    serve.set_defaults(func=_serve_cmd)
    service = sub.add_parser("service", help="ask a running DataService: service status ADDRESS")
    service.add_argument("action", choices=["status"], help="status: the live figures")
    service.add_argument("address", help="the address the service printed (tcp://host:port)")
    service.add_argument("--json", action="store_true", help="print JSON instead of text")
    service.add_argument("--prometheus", action="store_true",
                         help="print the Prometheus text format instead of text")
    service.add_argument("--curve", nargs="?", const=True, default=None, metavar="KEY_FILE",
                         help="encrypt with CURVE on loopback too (a service started with "
                              "curve=True; beyond loopback it is always on), or with the "
                              "service's public certificate file")
    service.add_argument("--timeout", type=float, default=5.0, help="seconds to wait (default 5)")
    service.add_argument("--token", default=None,
                         help="the service's shared secret (default: DATAFLOW_SERVICE_TOKEN)")
    service.set_defaults(func=_service_cmd)
    return parser


def _index_cmd(args: argparse.Namespace) -> int:
    from dataflow.streaming.index import index_local_shards
    from dataflow.streaming.urls import expand_urls

    try:
        for path, index in index_local_shards(expand_urls(args.shards)):
            print(f"{path}: {len(index)} samples, {index.size} bytes, sha256 {index.sha256}")
    except FileNotFoundError as e:
        raise UsageError(str(e)) from e
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["preview"]:  # its options belong to the preview command itself
        return _preview_cmd(argparse.Namespace(args=argv[1:]))
    parser = build_parser()
    if not argv:  # no command: the help, on stderr, as a usage error
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as e:
        print(f"dataflow {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
