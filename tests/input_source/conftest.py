"""TensorFlow set-up for the input_source tests: quiet logs, no GPU needed."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

tf = pytest.importorskip("tensorflow")
tf.get_logger().setLevel("ERROR")
