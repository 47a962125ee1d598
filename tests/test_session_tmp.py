"""The test session's own temporary directory: a killed session's is removed by the next one."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import SESSION_TMP, remove_dead_sessions


def test_the_session_directory_is_named_by_its_process():
    assert os.path.basename(SESSION_TMP).startswith(f"dataflow-tests-{os.getpid()}-")
    assert os.environ["TMPDIR"] == SESSION_TMP


def test_the_directories_of_dead_sessions_are_removed_and_no_other(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    names = [f"dataflow-tests-{dead}-abc", f"dataflow-tests-{os.getpid()}-def",
             "dataflow-tests-xyz", "other-123"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("x")
    assert remove_dead_sessions(str(tmp_path)) == [f"dataflow-tests-{dead}-abc"]
    assert sorted(os.listdir(tmp_path)) == sorted(names[1:])
