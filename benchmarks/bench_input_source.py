"""Batches/s feeding a small TF2 training step from one DataFlow, through each input path.

    .venv/bin/python benchmarks/bench_input_source.py [--batches 2000] [--repeats 3]

The dataflow: ``DataFromList`` of 32-float points -> ``BatchData(64)``, so producing a batch costs
real Python work. The step: one SGD update of a logistic-regression model (a ``tf.function``).
Paths, each timed after a warm-up, best of ``--repeats``:

* ``FeedInput``: ``for x, y in src.iter_feeds(): step(x, y)`` (numpy arguments, no tf.data);
* ``QueueInput``: a background thread fills a FIFOQueue; the step dequeues inside the graph;
* ``TFDatasetInput``: ``for x, y in src.to_dataset(): step(x, y)``;
* ``from_generator``: ``for x, y in tf.data.Dataset.from_generator(...): step(x, y)``, the
  plain TF way, over the same dataflow.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DIM = 32
BATCH = 64


def build(n_points: int):
    import numpy as np

    from dataflow.sources import DataFromList
    from dataflow.wrappers import BatchData, RepeatedData

    rs = np.random.RandomState(0)
    xs = rs.randn(n_points, DIM).astype(np.float32)
    ys = (xs[:, 0] > 0).astype(np.int32)
    points = [[x, y] for x, y in zip(xs, ys)]

    def make_flow(repeat: bool = True):
        df = BatchData(DataFromList(points, shuffle=False), BATCH)
        return RepeatedData(df, -1) if repeat else df

    return make_flow


def make_step():
    import tensorflow as tf

    w = tf.Variable(tf.zeros([DIM, 2]))
    b = tf.Variable(tf.zeros([2]))

    def core(x, y):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w) + b
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            )
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss

    return core


def signature():
    import tensorflow as tf

    return [tf.TensorSpec([BATCH, DIM], tf.float32, "x"), tf.TensorSpec([BATCH], tf.int32, "y")]


WARMUP = 50


def _time_loop(next_step, n: int) -> float:
    for _ in range(WARMUP):
        next_step()
    t0 = time.perf_counter()
    for _ in range(n):
        next_step()
    return n / (time.perf_counter() - t0)


def run_feed(make_flow, n: int) -> float:
    import tensorflow as tf

    from dataflow.input_source import FeedInput

    step = tf.function(make_step(), input_signature=signature())
    with FeedInput(make_flow()) as src:
        it = src.iter_feeds(signature())
        return _time_loop(lambda: step(*next(it)), n)


def run_queue(make_flow, n: int) -> float:
    import tensorflow as tf

    from dataflow.input_source import QueueInput

    core = make_step()
    with QueueInput(make_flow()) as src:
        src.setup(signature())

        @tf.function
        def step():
            return core(*src.get_input_tensors())

        return _time_loop(step, n)


def run_tfdataset(make_flow, n: int) -> float:
    import tensorflow as tf

    from dataflow.input_source import TFDatasetInput

    step = tf.function(make_step(), input_signature=signature())
    with TFDatasetInput(make_flow()) as src:
        it = iter(src.to_dataset(signature()))
        return _time_loop(lambda: step(*next(it)), n)


def run_from_generator(make_flow, n: int) -> float:
    import tensorflow as tf

    step = tf.function(make_step(), input_signature=signature())
    df = make_flow()
    df.reset_state()

    def gen():
        for dp in df:
            yield tuple(dp)

    ds = tf.data.Dataset.from_generator(gen, output_signature=tuple(signature()))
    it = iter(ds)
    return _time_loop(lambda: step(*next(it)), n)


RUNNERS = {
    "FeedInput": run_feed,
    "QueueInput": run_queue,
    "TFDatasetInput": run_tfdataset,
    "from_generator": run_from_generator,
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    make_flow = build(BATCH * 100)
    best = dict.fromkeys(RUNNERS, 0.0)
    for _ in range(args.repeats):  # interleaved, so that machine noise hits every path alike
        for name, run in RUNNERS.items():
            best[name] = max(best[name], run(make_flow, args.batches))
    print(f"batches/s (best of {args.repeats}, {args.batches} batches of {BATCH}x{DIM}):")
    for name, value in best.items():
        ratio = value / best["from_generator"]
        print(f"  {name:16s} {value:8.0f}   {ratio:4.2f}x from_generator")
    print(json.dumps({k: round(v, 1) for k, v in best.items()}))
    return best


if __name__ == "__main__":
    main()
