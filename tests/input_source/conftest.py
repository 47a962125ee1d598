"""TensorFlow set-up for the input_source tests: quiet logs, no GPU needed.

Without TensorFlow (the ``tf`` extra) the tests of this directory are not collected.
"""

from __future__ import annotations

import importlib.util

from tests.helpers import import_tensorflow_quietly

if importlib.util.find_spec("tensorflow") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    import_tensorflow_quietly().get_logger().setLevel("ERROR")
