"""Shared pieces of the input_source tests: a separable dataset and tiny training loops."""

from __future__ import annotations

import threading

import numpy as np
import tensorflow as tf

from dataflow.base import DataFlow
from dataflow.sources import DataFromList

DIM = 4
BATCH = 32
W_TRUE = np.array([1.0, -2.0, 0.5, 1.5], dtype=np.float32)


def separable_points(n: int, seed: int = 0) -> list[list]:
    """``n`` datapoints ``[x (DIM,) float32, y int32]`` with ``y = x @ W_TRUE > 0``."""
    rs = np.random.RandomState(seed)
    xs = rs.randn(n, DIM).astype(np.float32)
    ys = (xs @ W_TRUE > 0).astype(np.int32)
    return [[x, y] for x, y in zip(xs, ys)]


def separable_batches(n_batches: int = 8, seed: int = 0) -> DataFlow:
    """A finite ordered flow of ``[x (BATCH, DIM) float32, y (BATCH,) int32]`` batches."""
    pts = separable_points(n_batches * BATCH, seed)
    batches = [
        [np.stack([p[0] for p in pts[i : i + BATCH]]), np.array([p[1] for p in pts[i : i + BATCH]])]
        for i in range(0, len(pts), BATCH)
    ]
    return DataFromList(batches, shuffle=False)


def batch_signature():
    return [tf.TensorSpec([None, DIM], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]


class Counting(DataFlow):
    """``n`` ordered datapoints ``[float32 (2,), int64 scalar, bytes]``; counts resets."""

    def __init__(self, n: int, fail_at: int | None = None, as_dict: bool = False) -> None:
        self.n = n
        self.fail_at = fail_at
        self.as_dict = as_dict
        self.resets = 0
        self.iterations = 0

    def reset_state(self) -> None:
        self.resets += 1

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        self.iterations += 1
        for i in range(self.n):
            if i == self.fail_at:
                raise ValueError(f"boom at {i}")
            x = np.array([i, -i], dtype=np.float32)
            if self.as_dict:
                yield {"x": x, "i": np.int64(i), "s": f"s{i}".encode()}
            else:
                yield [x, np.int64(i), f"s{i}".encode()]


def expected_counting(n: int) -> list[tuple]:
    return [([float(i), float(-i)], i, f"s{i}".encode()) for i in range(n)]


def as_plain(x, i, s) -> tuple:
    return (np.asarray(x).tolist(), int(i), bytes(np.asarray(s).item()))


class LinearModel:
    """A logistic-regression model trained by plain SGD (TF2)."""

    def __init__(self, lr: float = 0.5) -> None:
        self.w = tf.Variable(tf.zeros([DIM, 2]))
        self.b = tf.Variable(tf.zeros([2]))
        self.lr = lr

    def loss(self, x, y):
        logits = tf.matmul(x, self.w) + self.b
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32),
                                                           logits=logits)
        )

    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = self.loss(x, y)
        gw, gb = tape.gradient(loss, [self.w, self.b])
        self.w.assign_sub(self.lr * gw)
        self.b.assign_sub(self.lr * gb)
        return loss


def graph_linear_loss(x, y):
    """The same model in graph mode; returns (loss, train_op)."""
    w = tf.compat.v1.get_variable("w", [DIM, 2], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("b", [2], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.matmul(x, w) + b
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32), logits=logits)
    )
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(loss)
    return loss, train_op


def train_graph(src, steps: int = 150, signature=None) -> list[float]:
    """Trains the graph-mode model on ``src`` (or ``src()``, called inside the graph) with a
    MonitoredSession; returns the losses."""
    losses: list[float] = []
    with tf.Graph().as_default():
        if callable(src):
            src = src()
        callbacks = src.setup(signature or batch_signature())
        x, y = src.get_input_tensors()
        loss, train_op = graph_linear_loss(x, y)
        with tf.compat.v1.train.MonitoredSession(hooks=callbacks) as sess:
            for _ in range(steps):
                if sess.should_stop():
                    break
                _, value = sess.run([train_op, loss])
                losses.append(float(value))
    return losses


def input_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("-enqueue")]
