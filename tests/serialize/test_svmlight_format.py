"""SVMLightData on SVMLight files written by hand (the values are what scikit-learn's
``load_svmlight_file``, which tensorpack's reader calls, gives for the same files)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dataflow.serialize import SVMLightData


def _rows(path, **kwargs):
    df = SVMLightData(path, **kwargs)
    df.reset_state()
    return [(x.dtype.name, x.tolist(), type(y).__name__, y) for x, y in df]


def test_one_based_rows_and_labels(tmp_path):
    (tmp_path / "a.svm").write_text("1 1:0.5 3:1\n0 2:1\n")
    assert _rows(tmp_path / "a.svm", shuffle=False) == [
        ("float64", [0.5, 0.0, 1.0], "float64", 1.0),
        ("float64", [0.0, 1.0, 0.0], "float64", 0.0),
    ]


def test_comments_blank_lines_qid_and_signed_labels(tmp_path):
    (tmp_path / "a.svm").write_text(
        "# a comment line\n+2.5 qid:1 1:0.5 4:-1 # trailing comment\n\n  \n-1 qid:2 2:3e-1\n3\n"
    )
    assert _rows(tmp_path / "a.svm", shuffle=False) == [
        ("float64", [0.5, 0.0, 0.0, -1.0], "float64", 2.5),
        ("float64", [0.0, 0.3, 0.0, 0.0], "float64", -1.0),
        ("float64", [0.0, 0.0, 0.0, 0.0], "float64", 3.0),
    ]


def test_an_index_0_makes_the_file_zero_based(tmp_path):
    (tmp_path / "a.svm").write_text("1 0:7 2:1\n0 1:2\n")
    assert _rows(tmp_path / "a.svm", shuffle=False) == [
        ("float64", [7.0, 0.0, 1.0], "float64", 1.0),
        ("float64", [0.0, 2.0, 0.0], "float64", 0.0),
    ]


def test_labels_only_give_one_zero_column(tmp_path):
    (tmp_path / "a.svm").write_text("3\n4\n")
    assert _rows(tmp_path / "a.svm", shuffle=False) == [
        ("float64", [0.0], "float64", 3.0), ("float64", [0.0], "float64", 4.0)]


def test_shuffled_epochs_are_seeded_permutations(tmp_path):
    (tmp_path / "a.svm").write_text("".join(f"{i} 1:{i}\n" for i in range(6)))
    df = SVMLightData(tmp_path / "a.svm", seed=3)
    df.reset_state()
    epochs = [[int(y) for _, y in df] for _ in range(2)]
    again = SVMLightData(tmp_path / "a.svm", seed=3)
    again.reset_state()
    assert [[int(y) for _, y in again] for _ in range(2)] == epochs
    assert [sorted(e) for e in epochs] == [list(range(6))] * 2
    assert len(df) == 6


@pytest.mark.parametrize(("text", "problem"), [
    ("a 1:2\n", "line 1: the label 'a' is not a number"),
    ("1 1:1\n1 2:1 1:3\n", "line 2: index 1 follows index 2"),
    ("1 1:2 1:3\n", "line 1: index 1 follows index 1"),
    ("1 x\n", "line 1: 'x' is not index:value"),
    ("1 -1:2\n", "line 1: '-1:2' is not index:value"),
    ("1 2:y\n", "line 1: '2:y' is not index:value"),
])
def test_malformed_lines_name_the_line(tmp_path, text, problem):
    (tmp_path / "a.svm").write_text(text)
    with pytest.raises(ValueError, match=f"a.svm', {problem}; each line must read") as ei:
        SVMLightData(tmp_path / "a.svm")
    assert "`label [qid:n] index:value ...`" in str(ei.value)


def test_needs_no_scikit_learn(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    (tmp_path / "a.svm").write_text("1 2:1\n")
    df = SVMLightData(tmp_path / "a.svm", shuffle=False)
    df.reset_state()
    np.testing.assert_array_equal(next(iter(df))[0], [0.0, 1.0])


def test_missing_file_names_the_parameter(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"SVMLightData: `filename` '.*nope.svm' does not"):
        SVMLightData(tmp_path / "nope.svm")
