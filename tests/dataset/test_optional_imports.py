"""dataflow.dataset imports without SciPy and OpenCV; loaders that need them say what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dataflow.dataset import BSDS500, ILSVRC12, Caltech101Silhouettes, TinyImageNet


def test_import_without_scipy_and_cv2():
    code = (
        "import sys; sys.modules['cv2'] = None; sys.modules['scipy'] = None\n"
        "import dataflow.dataset as d\n"
        "assert 'cv2' not in sys.modules or sys.modules['cv2'] is None\n"
        "print(len(d.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "17"


@pytest.mark.parametrize(
    "make", [lambda p: TinyImageNet(p, "train"), lambda p: ILSVRC12(p, "train")]
)
def test_image_loaders_without_cv2(monkeypatch, tmp_path, make):
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(ImportError, match=r"pip install 'opencv-python-headless>=4\.8' "
                                          r"'simplejpeg>=1\.7\.6' \(the extra \[imgaug\]"):
        make(tmp_path)


def test_bsds_without_cv2(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(ImportError, match=r"\[imgaug\]"):
        BSDS500("train", data_dir=tmp_path)


def test_mat_loaders_without_scipy(monkeypatch, tmp_path):
    (tmp_path / "caltech101_silhouettes_28_split1.mat").write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.io", None)
    with pytest.raises(ImportError, match=r"pip install 'scipy>=1\.10' \(the extra \[datasets\]"):
        Caltech101Silhouettes("train", dir=tmp_path)
