"""Failure injection: a failed save leaves no temporary file and an existing target as it was."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dataflow.serialize import HDF5Serializer, LMDBSerializer, NumpySerializer, TFRecordSerializer
from tests.helpers import check_dataflow
from tests.serialize._samples import FailingFlow, flow, listing


def _lmdb(df, path, **kw):
    LMDBSerializer.save(df, str(path), write_frequency=50, **{"progress": False, **kw})


def _tfrecord(df, path, **kw):
    TFRecordSerializer.save(df, str(path), **{"progress": False, **kw})


def _npz(df, path, **kw):
    NumpySerializer.save(df, str(path), **{"progress": False, **kw})


def _hdf5(df, path, **kw):
    HDF5Serializer.save(df, str(path), ["x", "y"], **{"progress": False, **kw})


def _load(name, path):
    if name == "lmdb":
        return LMDBSerializer.load(path, shuffle=False)
    if name == "tfrecord":
        return TFRecordSerializer.load(path, reader="builtin")
    if name == "npz":
        return NumpySerializer.load(path, shuffle=False)
    return HDF5Serializer.load(path, ["x", "y"], shuffle=False)


SAVERS = {"lmdb": _lmdb, "tfrecord": _tfrecord, "npz": _npz, "hdf5": _hdf5}
DPS = [[np.full(4, i, dtype=np.int32), i] for i in range(5000)]


@pytest.mark.parametrize("name", SAVERS)
@pytest.mark.parametrize("exc", [RuntimeError("source broke"), KeyboardInterrupt()])
def test_exception_from_the_flow_mid_save_leaves_nothing(tmp_path, name, exc):
    with pytest.raises(type(exc)):
        SAVERS[name](FailingFlow(DPS, 4500, exc), tmp_path / "out")
    assert listing(tmp_path) == []


@pytest.mark.parametrize("name", SAVERS)
def test_failed_overwrite_leaves_the_old_file_byte_identical(tmp_path, name):
    SAVERS[name](flow(DPS[:3]), tmp_path / "out")
    old = (tmp_path / "out").read_bytes()
    with pytest.raises(RuntimeError, match="source broke"):
        SAVERS[name](FailingFlow(DPS, 4000, RuntimeError("source broke")), tmp_path / "out",
                     overwrite=True)  # fmt: skip
    assert listing(tmp_path) == ["out"]
    assert (tmp_path / "out").read_bytes() == old
    got = check_dataflow(_load(name, tmp_path / "out"), epochs=1)
    assert [int(dp[1]) for dp in got] == [0, 1, 2]


@pytest.mark.parametrize("name", ["tfrecord", "npz", "hdf5"])
def test_save_replaces_an_existing_file_like_tensorpack(tmp_path, name):
    SAVERS[name](flow(DPS[:3]), tmp_path / "out")
    SAVERS[name](flow(DPS[:4]), tmp_path / "out")  # a re-run preprocessing script
    assert listing(tmp_path) == ["out"]
    assert [int(dp[1]) for dp in check_dataflow(_load(name, tmp_path / "out"), epochs=1)] == [
        0, 1, 2, 3]
    with pytest.raises(FileExistsError, match=r"`path` '.*out' already exists; pass overwrite="):
        SAVERS[name](flow(DPS[:5]), tmp_path / "out", overwrite=False)
    assert len(_load(name, tmp_path / "out")) == 4


def test_lmdb_refuses_an_existing_database_like_tensorpack(tmp_path):
    _lmdb(flow(DPS[:3]), tmp_path / "out")
    with pytest.raises(FileExistsError, match=r"`path` '.*out' already exists; pass overwrite="):
        _lmdb(flow(DPS[:4]), tmp_path / "out")
    assert len(_load("lmdb", tmp_path / "out")) == 3
    _lmdb(flow(DPS[:4]), tmp_path / "out", overwrite=True)
    assert listing(tmp_path) == ["out"]
    assert len(_load("lmdb", tmp_path / "out")) == 4


@pytest.mark.parametrize("name", SAVERS)
def test_missing_directory_raises_before_any_work_or_progress_bar(tmp_path, name, capfd):
    target = tmp_path / "missing" / "out"
    with pytest.raises(FileNotFoundError, match=r"the directory '.*missing' of `path` '.*out' "
                       r"does not exist; create it first"):
        SAVERS[name](flow(DPS[:3]), target, progress=True)
    assert capfd.readouterr().err == ""
    assert listing(tmp_path) == []


@pytest.mark.parametrize("name", ["lmdb", "tfrecord", "npz"])
def test_unserializable_datapoint_names_its_index(tmp_path, name):
    dps = [*DPS[:1234], [np.zeros(4, np.int32), lambda: 0], *DPS[1235:1300]]
    with pytest.raises(TypeError, match=r"datapoint 1234 cannot be serialized .*list\[ndarray"):
        SAVERS[name](flow(dps), tmp_path / "out")
    assert listing(tmp_path) == []


_DISK_FULL = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    import numpy as np
    sys.path.insert(0, {root!r})
    from tests.serialize.test_save_failures import SAVERS
    from tests.serialize._samples import flow
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    rng = np.random.default_rng(0)
    dps = [[rng.integers(0, 2**62, 1000), i] for i in range(1000)]  # 8 MB, incompressible
    out = {{}}
    for name, save in SAVERS.items():
        d = os.path.join({tmp!r}, name)
        os.mkdir(d)
        try:
            save(flow(dps), os.path.join(d, "out"))
            out[name] = ["saved", sorted(os.listdir(d))]
        except Exception as e:
            out[name] = [type(e).__name__, sorted(os.listdir(d))]
    print(json.dumps(out))
    """
)


def test_disk_full_mid_save_leaves_nothing(tmp_path):
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    code = _DISK_FULL.format(root=root, tmp=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=root)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == {"lmdb", "tfrecord", "npz", "hdf5"}
    for name, (outcome, files) in result.items():
        assert outcome != "saved", name
        assert files == [], (name, outcome, files)
