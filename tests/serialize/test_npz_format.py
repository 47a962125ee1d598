from __future__ import annotations

import numpy as np
import pytest

from dataflow.serialize import CorruptFileError, NumpySerializer
from tests.helpers import check_dataflow, epoch
from tests.serialize._samples import flow, listing, rich_datapoints


def test_round_trip_two_epochs(tmp_path):
    dps = rich_datapoints()
    NumpySerializer.save(flow(dps), tmp_path / "a.npz", progress=False)
    df = NumpySerializer.load(tmp_path / "a.npz", shuffle=False)
    assert len(df) == 12
    got = check_dataflow(df, expected=dps, epochs=2)
    assert len(got) == 12 and df._pos == 12
    assert listing(tmp_path) == ["a.npz"]


def test_layout_is_a_1d_object_buffer_of_datapoints(tmp_path):
    dps = [[np.zeros((2, 2)), 1], [np.ones((2, 2)), 2]]  # would stack to 3-D in tensorpack
    NumpySerializer.save(flow(dps), tmp_path / "a", progress=False)
    assert listing(tmp_path) == ["a"]  # written exactly at the path
    with np.load(tmp_path / "a", allow_pickle=True) as z:
        assert z.files == ["buffer"]
        buf = z["buffer"]
    assert buf.shape == (2,) and buf.dtype == object
    assert buf[1][1] == 2 and buf[1][0].tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_tensorpack_style_2d_buffer_and_npz_suffix_load(tmp_path):
    rows = np.empty((3, 2), dtype=object)
    for i in range(3):
        rows[i, 0], rows[i, 1] = np.full(2, i), i
    np.savez_compressed(tmp_path / "old", buffer=rows)  # NumPy writes old.npz
    df = NumpySerializer.load(tmp_path / "old", shuffle=False)
    got = check_dataflow(df)
    assert [dp[1] for dp in got] == [0, 1, 2]
    assert all(isinstance(dp, list) for dp in df)


def test_shuffle_is_a_seeded_permutation(tmp_path):
    NumpySerializer.save(flow([[i] for i in range(30)]), tmp_path / "a", progress=False)
    df = NumpySerializer.load(tmp_path / "a", shuffle=True, seed=5)
    df.reset_state()
    e1, e2 = epoch(df), epoch(df)
    assert sorted(e1) == [[i] for i in range(30)] == sorted(e2)
    assert e1 != e2 and e1 != [[i] for i in range(30)]


def test_corrupt_foreign_and_missing_files(tmp_path):
    NumpySerializer.save(flow([[i] for i in range(100)]), tmp_path / "a", progress=False)
    data = (tmp_path / "a").read_bytes()
    (tmp_path / "cut").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match=r"'.*cut' is not a readable .npz file"):
        NumpySerializer.load(tmp_path / "cut")
    (tmp_path / "t.txt").write_text("plain text")
    with pytest.raises(CorruptFileError, match=r"t.txt' is not a readable .npz file"):
        NumpySerializer.load(tmp_path / "t.txt")
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(CorruptFileError, match=r"has no `buffer` array .*\['x.npy'\]"):
        NumpySerializer.load(tmp_path / "other.npz")
    with pytest.raises(FileNotFoundError, match=r"`path` '.*nope' does not exist"):
        NumpySerializer.load(tmp_path / "nope")
