"""dataflow.utils.logger: tensorpack's logger functions and log directory (run in a fresh
interpreter: importing the module configures the ``dataflow`` logger)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, os
from dataflow.utils import logger

out = {}
logger.info("hello %d", 1)
logger.warn("careful")
logger.warning("careful too")
logger.error("bad")
assert logger.get_logger_dir() is None

logger.set_logger_dir("logs")
logger.info("to the file")
out["dir"] = logger.get_logger_dir()
out["first"] = open("logs/log.log").read().splitlines()[1:]

for action in ("k", "b", "n", "d"):
    logger.set_logger_dir("logs", action=action)
    logger.info("after %s", action)
    d = logger.get_logger_dir()
    out[action] = {"dir": d, "files": sorted(os.listdir(d))}
try:
    logger.set_logger_dir("logs", action="q")
except FileExistsError as e:
    out["q"] = str(e)
try:
    logger.set_logger_dir("logs", action="x")
except ValueError as e:
    out["x"] = str(e)
logger.auto_set_dir(action="k", name="run1")
out["auto"] = logger.get_logger_dir()
out["top"] = sorted(d if not d.startswith("logs0") and not d.startswith("logs1") else "logs<time>"
                    for d in os.listdir("."))
print(json.dumps(out))
"""


def test_logger_functions_and_log_dirs(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    res = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    stamp = r"\[\d{4} \d\d:\d\d:\d\d @train\.py:\d+\] "
    assert re.fullmatch(stamp + "hello 1", lines[0])
    assert re.fullmatch(stamp + "WRN careful", lines[1])
    assert re.fullmatch(stamp + "WRN careful too", lines[2])
    assert re.fullmatch(stamp + "ERR bad", lines[3])
    out = json.loads(lines[-1])
    assert out["dir"] == "logs"
    assert len(out["first"]) == 1 and re.fullmatch(stamp + "to the file", out["first"][0])
    # keep: the old log is renamed log.log.<time>
    assert out["k"]["dir"] == "logs"
    assert len(out["k"]["files"]) == 2 and out["k"]["files"][0] == "log.log"
    assert re.fullmatch(r"log\.log\.\d{4}-\d{6}", out["k"]["files"][1])
    # backup: the folder is renamed logs<time>, a fresh one is used
    assert out["b"] == {"dir": "logs", "files": ["log.log"]}
    # new: another folder logs<time>
    assert re.fullmatch(r"logs\d{4}-\d{6}(-\d+)?", out["n"]["dir"])
    assert out["n"]["files"] == ["log.log"]
    # delete: the old content is gone
    assert out["d"] == {"dir": "logs", "files": ["log.log"]}
    assert out["q"].startswith("Log directory 'logs' exists and is not empty; pass action='k'")
    assert out["x"] == ("`action` must be one of 'k', 'd', 'b', 'n', 'q' or None, got 'x'.")
    assert out["auto"] == os.path.join("train_log", "train:run1")
    assert (tmp_path / "train_log" / "train:run1" / "log.log").is_file()
    assert "logs<time>" in out["top"] and "train_log" in out["top"]
