from __future__ import annotations

import h5py
import numpy as np
import pytest

from dataflow.serialize import CorruptFileError, HDF5Data, HDF5Serializer
from tests.helpers import check_dataflow, epoch, to_plain
from tests.serialize._samples import flow, listing, tabular_datapoints

PATHS = ["img", "grp/id", "score", "raw", "name", "blob", "flag"]


def _save(path, dps, paths=PATHS, **kw):
    kw.setdefault("progress", False)
    HDF5Serializer.save(flow(dps), str(path), paths, **kw)


def test_round_trip_two_epochs_with_types(tmp_path):
    dps = tabular_datapoints()
    _save(tmp_path / "a.h5", dps)
    df = HDF5Serializer.load(tmp_path / "a.h5", PATHS, shuffle=False)
    assert len(df) == 20
    got = check_dataflow(df, expected=dps, epochs=2)
    assert len(got) == 20 and df._pos == 20
    first = next(iter(df))
    assert first[0].dtype == np.float32 and first[0].shape == (3, 2)
    assert type(first[1]) is np.int64 and type(first[2]) is np.float64
    assert type(first[4]) is str and type(first[5]) is bytes and type(first[6]) is np.bool_
    assert listing(tmp_path) == ["a.h5"]


def test_layout_one_dataset_per_component(tmp_path):
    _save(tmp_path / "a.h5", [[np.full(3, i), i] for i in range(5)], ["x", "y"])
    with h5py.File(tmp_path / "a.h5", "r") as f:
        assert sorted(f.keys()) == ["x", "y"]
        assert f["x"].shape == (5, 3) and f["y"][...].tolist() == [0, 1, 2, 3, 4]


def test_many_batches_and_shuffle(tmp_path):
    dps = [[np.full((64, 64), i, dtype=np.float64), i] for i in range(1200)]  # 32 KB each
    _save(tmp_path / "a.h5", dps, ["x", "y"])
    df = HDF5Data(tmp_path / "a.h5", ["x", "y"], shuffle=True, seed=1)
    df.reset_state()
    e1, e2 = [int(dp[1]) for dp in df], [int(dp[1]) for dp in df]
    assert sorted(e1) == list(range(1200)) == sorted(e2) and e1 != e2
    three = HDF5Data(tmp_path / "a.h5", ["y", "x", "y"][:2], shuffle=True, seed=1)
    three.reset_state()
    assert all(dp[1][0, 0] == dp[0] for dp in three)


def test_dict_datapoints_are_looked_up_by_path(tmp_path):
    dps = [{"a": i, "b": np.zeros(2) + i, "extra": "ignored"} for i in range(3)]
    HDF5Serializer.save(flow(dps), str(tmp_path / "d.h5"), ["b", "a"], progress=False)
    got = check_dataflow(HDF5Serializer.load(tmp_path / "d.h5", ["a", "b"], shuffle=False))
    assert got == to_plain([[i, np.zeros(2) + i] for i in range(3)])
    with pytest.raises(KeyError, match=r"datapoint 0 is a dict without key 'zz'"):
        HDF5Serializer.save(flow(dps), str(tmp_path / "e.h5"), ["a", "zz"], progress=False)
    assert listing(tmp_path) == ["d.h5"]


@pytest.mark.parametrize(
    ("dps", "paths", "match"),
    [
        ([[1, 2], [3]], ["a", "b"], r"datapoint 1 is list\[int\], with 1 components, but "),
        ([[1, 2]], ["a"], r"datapoint 0 .* with 2 components, but `data_paths` names 1"),
        ([[np.zeros(2)], [np.zeros(3)]], ["a"], r"component 0 .*'a'.* different shapes"),
        ([[{"x": 1}]], ["a"], r"hold \{'x': int\} .* cannot store"),
        ([[1], ["s"]], ["a"], r"mix numbers/arrays with str or bytes"),
        ([["s"], [1]], ["a"], r"mix str with other types"),
        ([[b"x"], [2]], ["a"], r"mix bytes with other types"),
        ([[[1, 2]], [[1, 2, 3]]], ["a"], r"different shapes"),
    ],
)
def test_mismatched_datapoints_are_clear_errors(tmp_path, dps, paths, match):
    with pytest.raises((ValueError, KeyError), match=match):
        _save(tmp_path / "bad.h5", dps, paths)
    assert listing(tmp_path) == []


def test_later_batches_must_match_the_first(tmp_path):
    shape_change = [[np.zeros(2)] for _ in range(4096)] + [[np.zeros(3)]]
    with pytest.raises(ValueError, match=r"from index 4096 have shape \(3,\), earlier ones \(2,\)"):
        _save(tmp_path / "a.h5", shape_change, ["x"])
    dtype_change = [[np.zeros(2, np.int32)] for _ in range(4096)] + [[np.zeros(2)]]
    with pytest.raises(ValueError, match=r"dtype float64 but earlier ones int32; cast"):
        _save(tmp_path / "a.h5", dtype_change, ["x"])
    kind_change = [["s"] for _ in range(4096)] + [[1]]
    with pytest.raises(ValueError, match=r"hold numbers/arrays but earlier ones hold str"):
        _save(tmp_path / "a.h5", kind_change, ["x"])
    assert listing(tmp_path) == []


def test_bad_data_paths_and_files(tmp_path):
    with pytest.raises(TypeError, match=r"`data_paths` must be a non-empty list .*'img'"):
        _save(tmp_path / "a.h5", [[1]], "img")
    with pytest.raises(ValueError, match=r"`data_paths` has duplicates"):
        _save(tmp_path / "a.h5", [[1, 2]], ["a", "a"])
    _save(tmp_path / "a.h5", [[1, 2]], ["a", "b"])
    with pytest.raises(KeyError, match=r"has no dataset 'c'; it holds \['a', 'b'\]"):
        HDF5Data(tmp_path / "a.h5", ["a", "c"])
    with h5py.File(tmp_path / "uneven.h5", "w") as f:
        f["a"], f["b"] = np.zeros(3), np.zeros(4)
    with pytest.raises(CorruptFileError, match=r"different lengths \('a': 3, 'b': 4\)"):
        HDF5Data(tmp_path / "uneven.h5", ["a", "b"])
    (tmp_path / "t.txt").write_text("not hdf5" * 100)
    with pytest.raises(CorruptFileError, match=r"t.txt' is not a readable HDF5 file"):
        HDF5Data(tmp_path / "t.txt", ["a"])
    with pytest.raises(FileNotFoundError, match=r"`filename` '.*nope.h5' does not exist"):
        HDF5Data(tmp_path / "nope.h5", ["a"])


def test_empty_flow(tmp_path):
    _save(tmp_path / "e.h5", [], ["a", "b"])
    df = HDF5Serializer.load(tmp_path / "e.h5", ["a", "b"])
    assert len(df) == 0 and check_dataflow(df) == []
    assert epoch(df) == []
