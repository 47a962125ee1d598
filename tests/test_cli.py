from __future__ import annotations

import subprocess
import sys

import numpy as np

from dataflow.__main__ import main
from dataflow.demo import build_demo_pipeline, make_images


def test_demo_command_prints_report(capsys):
    assert main(["demo", "--images", "32", "--batch-size", "8", "--batches", "3",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "TestDataSpeed report" in out
    assert "batch            : (8, 224, 224, 3) float32, (8,) int32" in out
    assert "timed batches    : 3 in " in out
    assert "images/s" in out


def test_demo_pipeline_is_seeded():
    images = make_images(16, seed=1)

    def first_batch():
        flow = build_demo_pipeline(images, batch_size=4, seed=3)
        flow.reset_state()
        return next(iter(flow))

    a, b = first_batch(), first_batch()
    assert np.array_equal(a[0], b[0]) and a[1].tolist() == b[1].tolist()
    assert a[0].shape == (4, 224, 224, 3)


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
