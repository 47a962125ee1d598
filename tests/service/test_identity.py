"""A pipeline's identity: stable across processes, different for other code or arguments."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

from dataflow.service.identity import callable_digest, identity_diff, pipeline_identity
from tests.service import pipelines

ROOT = Path(__file__).resolve().parents[2]


class _Scale:
    def __call__(self, dp):
        return [dp[0] * 3]


def test_a_digest_is_the_same_in_another_process_and_differs_for_other_code():
    here = callable_digest(pipelines.tag)
    out = subprocess.run([sys.executable, "-c", "from dataflow.service.identity import "
                          "callable_digest; from tests.service import pipelines; "
                          "print(callable_digest(pipelines.tag))"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout == here + "\n"
    assert here.startswith("tests.service.pipelines.tag #")
    others = {callable_digest(f) for f in (
        pipelines.slow, functools.partial(pipelines.tag, sleep=0.0),
        functools.partial(pipelines.tag, sleep=0.5), functools.partial(pipelines.tag, 0.1),
        _Scale())}
    assert len(others) == 5 and here not in others
    assert callable_digest(_Scale()).startswith("tests.service.test_identity._Scale #")


def test_identity_diff_names_what_differs():
    a = pipeline_identity([1, 2], pipelines.tag, 5, True, 2)
    b = pipeline_identity([1, 2], pipelines.tag, 6, True, 2)
    assert identity_diff(a, a) == ""
    assert identity_diff(a, b) == "seed: 5 -> 6"
    assert a["source"] == "builtins.list of 2"
