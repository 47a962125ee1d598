"""Missing optional backends raise an ImportError naming the extra; progress bars report."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dataflow.serialize import (
    HDF5Data,
    HDF5Serializer,
    LMDBData,
    LMDBSerializer,
    TFRecordSerializer,
)
from dataflow.serialize._atomic import import_optional
from tests.serialize._samples import flow


def test_import_optional_names_the_extra_or_the_package():
    msg = r"X needs no_such_mod_x, which is not installed: pip install no_such_mod_x"
    with pytest.raises(ImportError, match=msg):
        import_optional("no_such_mod_x", "X")


def test_missing_lmdb(tmp_path, monkeypatch):
    (tmp_path / "db").write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "lmdb", None)  # makes `import lmdb` fail
    with pytest.raises(ImportError, match=r"pip install 'lmdb>=1\.4' \(the extra \[lmdb\]"):
        LMDBData(tmp_path / "db")
    with pytest.raises(ImportError, match=r"LMDBSerializer needs .*\[lmdb\]"):
        LMDBSerializer.save(flow([[1]]), str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def test_missing_h5py(tmp_path, monkeypatch):
    (tmp_path / "a.h5").write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ImportError, match=r"HDF5Data needs .*'h5py>=3\.8' \(the extra \[hdf5\]"):
        HDF5Data(tmp_path / "a.h5", ["a"])
    with pytest.raises(ImportError, match=r"\[hdf5\]"):
        HDF5Serializer.save(flow([[1]]), str(tmp_path / "b.h5"), ["a"])


def test_missing_tensorflow_only_matters_for_the_tf_reader(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    TFRecordSerializer.save(flow([[1], [2]]), str(tmp_path / "t"), progress=False)
    builtin = TFRecordSerializer.load(tmp_path / "t", reader="builtin")
    builtin.reset_state()
    assert list(builtin) == [[1], [2]]
    tf_reader = TFRecordSerializer.load(tmp_path / "t", reader="tf")
    tf_reader.reset_state()
    with pytest.raises(ImportError, match=r"pip install 'tensorflow>=2\.15' \(the extra \[tf\]"):
        list(tf_reader)


@pytest.mark.parametrize("saver", ["lmdb", "tfrecord"])
def test_progress_bar_shows_items_and_megabytes_per_second(tmp_path, capsys, saver):
    dps = [[np.zeros(1000, np.uint8), i] for i in range(300)]
    if saver == "lmdb":
        LMDBSerializer.save(flow(dps), str(tmp_path / "out"))
    else:
        TFRecordSerializer.save(flow(dps), str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert "300/300" in err and "dp/s, " in err and " MB/s]" in err
