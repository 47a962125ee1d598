"""The JAX bridge's test cases, run in a subprocess by ``test_jax.py``.

JAX cannot run in the pytest process: once its backend is up, every ``os.fork()`` warns (and
may deadlock), which would break the other tests that fork workers. This script runs each case
with two host CPU devices (``--xla_force_host_platform_device_count=2``) and prints a JSON dict
``{case: result}``; a case that raises reports ``{"error": "Type: message"}``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import jax.numpy as jnp
import numpy as np
import psutil
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

import dataflow as df
from dataflow.jax import to_jax
from dataflow.parallel import MultiProcessMapDataZMQ
from dataflow.wrappers import BatchData, MapData

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _ints(n, shuffle=False, seed=None):
    return df.DataFromList([[np.int32(i)] for i in range(n)], shuffle=shuffle, seed=seed)


def _children():
    """Living child processes, but multiprocessing's resource tracker (started with the first
    spawned worker, it lives as long as this process)."""
    return [c for c in psutil.Process().children(recursive=True)
            if c.status() != psutil.STATUS_ZOMBIE
            and "resource_tracker" not in " ".join(c.cmdline())]


def _wait_no_children(timeout=10.0):
    deadline = time.monotonic() + timeout
    while _children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(_children())


class Counter:
    """A picklable map that counts the datapoints it has seen."""

    def __init__(self):
        self.n = 0

    def __call__(self, dp):
        self.n += 1
        return dp


def _double(dp):
    return [dp[0] * 2]


def _fail_at_3(dp):
    if dp[0] == 3:
        raise ValueError("boom at 3")
    return dp


@case
def delivery():
    dps = [[np.full((2, 2), i, np.float32), np.int32(i), f"s{i}", (np.arange(2) + i, b"x"),
            {"k": np.array([i], np.uint8)}] for i in range(3)]
    out = []
    for a, s, name, (t, b), d in to_jax(df.DataFromList(dps, shuffle=False)):
        out.append({
            "types": [type(x).__name__ for x in (a, s, t, d["k"])],
            "is_array": all(isinstance(x, jax.Array) for x in (a, s, t, d["k"])),
            "a": a.tolist(), "a_dtype": str(a.dtype), "s": int(s), "name": name,
            "t": t.tolist(), "t_dtype": str(t.dtype), "b": b.decode(), "k": d["k"].tolist(),
            "k_dtype": str(d["k"].dtype),
        })
    return out


@case
def prefetch_depth():
    # how many datapoints the flow has produced when the consumer receives the first and the
    # third batch, for prefetch 0 and 2
    res = {}
    for prefetch in (0, 2):
        counter = Counter()
        it = to_jax(MapData(_ints(6), counter), prefetch=prefetch)
        first = int(next(it)[0])
        seen_first = counter.n
        next(it)
        third = int(next(it)[0])
        rest = [int(dp[0]) for dp in it]
        res[prefetch] = [first, seen_first, third, counter.n, rest]
    return res


@case
def two_epochs():
    flow = _ints(4, shuffle=True, seed=1)
    epochs = [[int(dp[0]) for dp in to_jax(flow)] for _ in range(2)]
    ref = _ints(4, shuffle=True, seed=1)
    ref.reset_state()
    return {"bridge": epochs, "direct": [[int(dp[0]) for dp in ref] for _ in range(2)]}


@case
def sharding_two_devices():
    devices = jax.devices()
    mesh = jax.make_mesh((2,), ("data",))
    sharded = NamedSharding(mesh, PartitionSpec("data"))
    flow = BatchData(df.DataFromList([[np.full((3,), i, np.float32), np.int32(i)]
                                      for i in range(8)], shuffle=False), 4)
    batches = list(to_jax(flow, sharding=sharded))
    x, y = batches[0]
    # a callable hook: shard batched arrays, put anything else on device 1
    single = SingleDeviceSharding(devices[1])

    def hook(arr):
        return sharded if arr.ndim >= 1 and arr.shape[0] % 2 == 0 else single

    (x2, _y2), = list(to_jax(BatchData(df.DataFromList([[np.zeros(2, np.float32), np.int32(1)]]
                                                      * 2, shuffle=False), 2), sharding=hook))
    (s,), = list(to_jax(df.DataFromList([[np.float32(5)]], shuffle=False), sharding=hook))
    return {
        "devices": len(devices), "batches": len(batches),
        "x_devices": sorted(d.id for d in x.sharding.device_set),
        "x_shard_shapes": [list(sh.data.shape) for sh in x.addressable_shards],
        "y_shard_values": [sh.data.tolist() for sh in y.addressable_shards],
        "x_sum": float(jnp.sum(x)), "hook_x_devices": sorted(d.id for d in x2.sharding.device_set),
        "scalar_devices": sorted(d.id for d in s.sharding.device_set), "scalar": float(s),
    }


@case
def hook_returning_arrays_and_bad_hook():
    def make(arr):
        return jax.device_put(arr * 10)

    (a,), = list(to_jax(df.DataFromList([[np.ones(2, np.int32)]], shuffle=False), sharding=make))
    try:
        list(to_jax(df.DataFromList([[np.ones(2, np.int32)]], shuffle=False),
                    sharding=lambda arr: "cpu"))
    except TypeError as e:
        msg = str(e)
    return {"a": a.tolist(), "error": msg.split(" returned ", 1)[1]}


@case
def errors_surface():
    got = []
    try:
        for dp in to_jax(MapData(_ints(6), _fail_at_3), prefetch=0):
            got.append(int(dp[0]))
    except ValueError as e:
        return {"got": got, "error": str(e)}
    return {"got": got, "error": None}


@case
def worker_error_and_close():
    # a parallel mapper inside: closing the iterator stops its workers
    flow = MultiProcessMapDataZMQ(_ints(100), 2, _double, strict=True, ordered=True,
                                  start_method="spawn")
    it = to_jax(flow, prefetch=2)
    head = [int(next(it)[0]) for _ in range(3)]
    running = len(_children())
    it.close()
    it.close()
    after_close = _wait_no_children()
    # an abandoned iterator does too; the next epoch starts the workers again
    it = to_jax(flow)
    next(it)
    del it
    gc.collect()
    after_del = _wait_no_children()
    with to_jax(flow) as it:
        whole = [int(dp[0]) for dp in it]
    flow.close()
    bad = MultiProcessMapDataZMQ(_ints(20), 2, _fail_at_3, start_method="spawn")
    try:
        list(to_jax(bad))
        err = None
    except df.WorkerError as e:
        err = [type(e).__name__, "boom at 3" in str(e)]
    return {"head": head, "running": running, "after_close": after_close,
            "after_del": after_del, "whole": whole == list(range(0, 200, 2)), "err": err,
            "after_error": _wait_no_children()}


@case
def resume():
    def make():
        return MapData(_ints(10, shuffle=True, seed=4), _double)

    full = [int(dp[0]) for dp in to_jax(make(), prefetch=2)]
    out = {"full_sorted": sorted(full)}
    for prefetch, track in ((2, True), (0, False)):
        it = to_jax(make(), prefetch=prefetch, track_state=track)
        head = [int(next(it)[0]) for _ in range(4)]
        state = json.loads(json.dumps(it.state_dict()))
        it.close()
        fresh = to_jax(make(), prefetch=2)
        fresh.load_state_dict(state)
        rest = [int(dp[0]) for dp in fresh]
        out[f"prefetch{prefetch}"] = {"ok": head + rest == full, "pos": state["child"]["pos"]}
    it = to_jax(make(), prefetch=2)
    next(it)
    try:
        it.state_dict()
    except RuntimeError as e:
        out["untracked"] = str(e)
    it.close()
    return out


@case
def logistic_regression():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 2)).astype(np.float32)
    y = (x @ np.array([2.0, -3.0], np.float32) + 0.5 > 0).astype(np.float32)
    flow = BatchData(df.DataFromList([[x[i], y[i]] for i in range(512)], shuffle=True,
                                     seed=0), 32)

    def loss_fn(params, xb, yb):
        logits = xb @ params["w"] + params["b"]
        return jnp.mean(jnp.logaddexp(0.0, logits) - yb * logits)

    @jax.jit
    def step(params, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        return jax.tree_util.tree_map(lambda p, g: p - 1.0 * g, params, grads), loss

    params = {"w": jnp.zeros(2), "b": jnp.zeros(())}
    steps = 0
    for _ in range(20):
        for xb, yb in to_jax(flow, prefetch=2):
            params, _ = step(params, xb, yb)
            steps += 1
    final = float(loss_fn(params, jnp.asarray(x), jnp.asarray(y)))
    acc = float(jnp.mean(((x @ params["w"] + params["b"]) > 0) == (y > 0.5)))
    return {"steps": steps, "loss_below": final < 0.1, "loss": final, "acc": acc}


@case
def validation():
    msgs = []
    for kwargs in ({"prefetch": -1}, {"prefetch": True}, {"sharding": "data"}):
        try:
            to_jax(_ints(1), **kwargs)
        except (TypeError, ValueError) as e:
            msgs.append(f"{type(e).__name__}: {e}")
    try:
        to_jax([1])
    except TypeError as e:
        msgs.append(f"TypeError: {e}")
    it = to_jax(_ints(3))
    next(it)
    try:
        it.load_state_dict({})
    except RuntimeError as e:
        msgs.append(f"RuntimeError: {e}")
    it.close()
    return msgs


def main():
    names = sys.argv[1:] or list(CASES)
    out = {}
    for name in names:
        try:
            out[name] = CASES[name]()
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
