"""TensorFlow set-up for the input_source tests: quiet logs, no GPU needed.

Without TensorFlow (the ``tf`` extra) the tests of this directory are not collected.
"""

from __future__ import annotations

import importlib.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if importlib.util.find_spec("tensorflow") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
