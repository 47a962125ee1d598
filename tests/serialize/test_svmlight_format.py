from __future__ import annotations

import importlib.util

import pytest

from dataflow.serialize import SVMLightData


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is not None, reason="sklearn installed")
def test_missing_sklearn_is_a_clear_import_error(tmp_path):
    (tmp_path / "a.svm").write_text("1 1:0.5 3:1\n0 2:1\n")
    with pytest.raises(ImportError, match=r"SVMLightData needs scikit-learn.*pip install"):
        SVMLightData(tmp_path / "a.svm")


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="needs sklearn")
def test_rows_and_labels(tmp_path):
    (tmp_path / "a.svm").write_text("1 1:0.5 3:1\n0 2:1\n")
    df = SVMLightData(tmp_path / "a.svm", shuffle=False)
    df.reset_state()
    got = [(x.tolist(), float(y)) for x, y in df]
    assert got == [([0.5, 0.0, 1.0], 1.0), ([0.0, 1.0, 0.0], 0.0)]
