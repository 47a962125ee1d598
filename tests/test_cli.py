from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dataflow.__main__ import main
from dataflow.demo import DecodeAndAugment, make_jpegs


def test_demo_command_prints_report_and_profile(capsys):
    assert main(["demo", "--images", "32", "--batch-size", "8", "--batches", "3",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "TestDataSpeed report" in out
    assert "batch           : (8, 224, 224, 3) uint8, (8,) int32" in out
    assert "timed batches   : 3 in " in out
    assert "Pipeline profile" in out
    assert "bottleneck: stage" in out


def _profile_rows(out: str) -> dict[str, int]:
    lines = out.split("Pipeline profile", 1)[1].splitlines()
    rows = lines[lines.index(next(x for x in lines if x.startswith("---"))) + 1:]
    items = {}
    for row in rows:
        if not row.strip():
            break
        cells = row.split()
        items[cells[1]] = int(cells[2])
    return items


def test_demo_profile_counts_every_stage_and_one_proc_is_singular(capsys):
    from dataflow.demo import PROFILE_BATCHES

    assert main(["demo", "--images", "64", "--batch-size", "8", "--batches", "2",
                 "--num-proc", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "MultiProcessMapDataZMQ(decode, crop, flip, lighting; 1 proc) -> BatchData(8)" in out
    items = _profile_rows(out)
    assert list(items) == ["BatchData", "MultiProcessMapDataZMQ", "LocallyShuffleData",
                           "_LoadedLMDBData"]
    assert items["BatchData"] == PROFILE_BATCHES == 20
    assert items["MultiProcessMapDataZMQ"] == 20 * 8
    # the mapper reads ahead by its in-flight buffer, so the stage below it delivered more
    assert items["LocallyShuffleData"] >= 160
    # everything the LMDB reader gave is delivered or still in the 256-item shuffle buffer
    assert items["_LoadedLMDBData"] == items["LocallyShuffleData"] + 256


def test_demo_data_is_real_jpeg_and_seeded():
    cv2 = pytest.importorskip("cv2")
    a, b = make_jpegs(3, seed=1), make_jpegs(3, seed=1)
    assert [x[0] for x in a] == [x[0] for x in b]
    assert [x[1] for x in a] == [0, 1, 2]
    img = cv2.imdecode(np.frombuffer(a[0][0], np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (375, 500, 3)
    out = DecodeAndAugment()([a[0][0], 7])
    assert out[0].shape == (224, 224, 3) and out[0].dtype == np.uint8 and out[1] == 7


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow", "demo", "--images", "16", "--batch-size", "8",
         "--batches", "2", "--no-progress"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "images/s" in proc.stdout


def test_preview_command_writes_png(tmp_path):
    out = tmp_path / "grid.png"
    assert main(["preview", "-n", "3", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
