"""PlasmaPutData / PlasmaGetData: datapoints as ids of objects in shared memory."""

from __future__ import annotations

import gc
import glob
import mmap
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dataflow
from dataflow import DataFromList, MultiProcessRunnerZMQ
from dataflow.errors import ObjectGoneError
from dataflow.parallel import PlasmaGetData, PlasmaPutData
from dataflow.parallel._bootstrap import get_context
from dataflow.parallel.plasma import MIN_SEGMENT_BYTES, PlasmaId
from dataflow.parallel.shared_memory import SHM_DIR, _segments
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _dps(n: int = 4) -> list[list]:
    # a large array (a segment), a small one (inside the id), a label and a string
    return [[np.full((200, 300), i, np.float32), np.arange(3, dtype=np.int64) + i, i, f"s{i}"]
            for i in range(n)]


def _files(store: str) -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(SHM_DIR, store + "-*")))


def _ids(put: PlasmaPutData) -> list[PlasmaId]:
    return [dp[0] for dp in put]


def _base_chain(a):
    chain, obj = [], a
    while obj is not None:
        chain.append(obj)
        obj = getattr(obj, "base", None) if not isinstance(obj, memoryview) else obj.obj
    return chain


def test_namespace():
    # importable from tensorpack's path (dataflow.parallel) and, like every name, the top level
    assert dataflow.PlasmaPutData is PlasmaPutData
    assert {"PlasmaGetData", "PlasmaPutData"} <= {*dataflow.parallel.__all__, *dataflow.__all__}
    import dataflow.dataflow.parallel as nested

    assert nested.PlasmaGetData is PlasmaGetData


def test_round_trip_in_one_process_gives_the_datapoints_back():
    put = PlasmaPutData(DataFromList(_dps(), shuffle=False), socket="/tmp/plasma")
    put.reset_state()
    ids = _ids(put)
    assert [type(i) for i in ids] == [PlasmaId] * 4
    assert len(pickle.dumps(ids[0])) < 600  # the id is small: the large array is in a segment
    assert ids[0].segments() == [f"{ids[0].store}-plasma-0"]
    assert _files(ids[0].store) == sorted([*(f"{ids[0].store}-plasma-{i}" for i in range(4)),
                                           f"{ids[0].store}-store"])
    get = PlasmaGetData(DataFromList([[i] for i in ids], shuffle=False))
    out = list(get)
    for i, dp in enumerate(out):
        assert dp[0].dtype == np.float32 and dp[0].shape == (200, 300)
        assert np.array_equal(dp[0], np.full((200, 300), i, np.float32))
        assert dp[1].tolist() == [i, i + 1, i + 2]
        assert dp[2:] == [i, f"s{i}"]
    assert _files(ids[0].store) == [f"{ids[0].store}-store"]  # taken: freed
    put.close()
    put.close()  # idempotent
    assert _files(ids[0].store) == []


def test_arrays_are_writable_views_on_shared_memory_kept_alive_while_referenced():
    with PlasmaPutData(DataFromList(_dps(1), shuffle=False)) as put:
        put.reset_state()
        (oid,) = _ids(put)
        arr = next(iter(PlasmaGetData(DataFromList([[oid]], shuffle=False))))[0]
    # no copy: the array views the segment's mapping
    assert not arr.flags.owndata and arr.flags.writeable
    assert any(isinstance(o, mmap.mmap) for o in _base_chain(arr))
    view = arr[10:20, 5]
    del arr
    gc.collect()
    view[:] = 7.0  # the mapping is still there, after the store closed too
    assert view.tolist() == [7.0] * 10


def test_non_contiguous_and_large_pickles_round_trip():
    big_list = list(range(MIN_SEGMENT_BYTES))  # a pickle larger than MIN_SEGMENT_BYTES
    strided = np.arange(400 * 400, dtype=np.int32).reshape(400, 400)[::2, ::3]
    with PlasmaPutData(DataFromList([[big_list, strided]], shuffle=False)) as put:
        put.reset_state()
        (oid,) = _ids(put)
        assert isinstance(oid.pickle, str)  # in a segment
        dp = next(iter(PlasmaGetData(DataFromList([[oid]], shuffle=False))))
    assert dp[0] == big_list
    assert np.array_equal(dp[1], strided)


def test_an_id_is_taken_once_and_ids_outliving_their_store_say_so():
    put = PlasmaPutData(DataFromList(_dps(2), shuffle=False))
    put.reset_state()
    first, second = _ids(put)
    get = PlasmaGetData(DataFromList([[first]], shuffle=False))
    assert next(iter(get))[2] == 0
    with pytest.raises(ObjectGoneError, match="it was taken already: an id can be got once") as e:
        next(iter(get))
    assert repr(first) in str(e.value)
    put.close()
    with pytest.raises(ObjectGoneError, match="its store was closed") as e:
        next(iter(PlasmaGetData(DataFromList([[second]], shuffle=False))))
    assert str(e.value).startswith(f"PlasmaGetData: the object of PlasmaId(store='{second.store}'"
                                   f", segments=['{second.store}-plasma-1']) is gone:")
    assert isinstance(e.value, LookupError)


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="expected datapoints \\[PlasmaId\\] made by PlasmaPutData"):
        next(iter(PlasmaGetData(DataFromList([[b"id"]], shuffle=False))))
    with pytest.raises(TypeError, match="`socket` must be a path or None"):
        PlasmaPutData(DataFromList([[1]]), socket=5)
    with PlasmaPutData(DataFromList([[lambda: 1]], shuffle=False)) as put:
        put.reset_state()
        with pytest.raises(TypeError, match="cannot store a datapoint of type list"):
            next(iter(put))


def test_put_and_get_across_a_runner_process_boundary():
    n = 5
    flow = PlasmaGetData(MultiProcessRunnerZMQ(PlasmaPutData(DataFromList(_dps(n), shuffle=False)),
                                               2))
    stores = set()
    flow.reset_state()
    try:
        # each of the two workers runs its own copy (and its own store): a datapoint is
        # consistent with itself, and the two workers' stores are not the parent's
        got = []
        for _epoch in range(2):
            for dp in flow.ds:
                stores.add(dp[0].store)
                full = next(iter(PlasmaGetData(DataFromList([dp], shuffle=False))))
                got.append(full[2])
                assert np.array_equal(full[0], np.full((200, 300), full[2], np.float32))
                assert full[3] == f"s{full[2]}"
        assert set(got) <= set(range(n)) and len(got) == 2 * n
        labels = [dp[2] for dp in flow]  # the Get side itself
        assert len(labels) == n and set(labels) <= set(range(n))
        assert all(not s.startswith(f"dataflow-{os.getpid()}-") for s in stores)
    finally:
        flow.close()
    assert 1 <= len(stores) <= 2
    # the workers ended: their stores' segments (ids never taken) are removed
    assert wait_until(lambda: all(_files(s) == [] for s in stores))


def _get_in_child(q_in, q_out) -> None:
    ids = q_in.get()
    dps = [next(iter(PlasmaGetData(DataFromList([[i]], shuffle=False)))) for i in ids]
    q_out.put([(float(dp[0].sum()), dp[2]) for dp in dps])


def test_ids_sent_through_a_multiprocessing_queue():
    ctx = get_context("fork")  # (spawn would start a resource tracker that outlives the test)
    q_in, q_out = ctx.Queue(), ctx.Queue()
    with PlasmaPutData(DataFromList(_dps(3), shuffle=False)) as put:
        put.reset_state()
        ids = _ids(put)
        proc = ctx.Process(target=_get_in_child, args=(q_in, q_out))
        proc.start()
        q_in.put(ids)
        assert q_out.get(timeout=120) == [(0.0, 0), (60000.0, 1), (120000.0, 2)]
        proc.join(60)
        assert proc.exitcode == 0
        assert _files(ids[0].store) == [f"{ids[0].store}-store"]  # all taken


PUT_AND_WAIT = """
import json, sys
import numpy as np
from dataflow import DataFromList, MultiProcessRunnerZMQ
from dataflow.parallel import PlasmaPutData
ds = DataFromList([[np.full((256, 256), i, np.float32), i] for i in range(8)], shuffle=False)
flow = PlasmaPutData(ds) if sys.argv[1] == "put" else MultiProcessRunnerZMQ(PlasmaPutData(ds), 2)
flow.reset_state()
ids = [dp[0] for _, dp in zip(range(8), flow)]
print(json.dumps(sorted({i.store for i in ids})), flush=True)
sys.stdin.readline()  # killed while waiting here
"""


@pytest.mark.parametrize("kind", ["put", "runner"])
def test_nothing_is_left_when_the_process_holding_ids_is_sigkilled(kind, tmp_path):
    """``put``: the store's own process is killed; ``runner``: the consumer of a runner whose
    workers hold the stores is killed (its workers die with it)."""
    import json

    script = tmp_path / "put_and_wait.py"
    script.write_text(textwrap.dedent(PUT_AND_WAIT))
    proc = subprocess.Popen([sys.executable, str(script), kind], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"})
    try:
        stores = json.loads(proc.stdout.readline())
        assert len(stores) >= 1
        assert all(len(_files(s)) >= 2 for s in stores)  # objects never taken, and the marker
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    assert wait_until(lambda: all(_files(s) == [] for s in stores))


def test_with_too_little_dev_shm_the_ids_carry_the_data(monkeypatch):
    monkeypatch.setattr(_segments, "MIN_FREE_BYTES", 1 << 62)
    put = PlasmaPutData(DataFromList(_dps(2), shuffle=False))
    with pytest.warns(RuntimeWarning, match="not using shared memory"):
        put.reset_state()
    ids = _ids(put)
    assert [i.segments() for i in ids] == [[], []]
    out = list(PlasmaGetData(DataFromList([[i] for i in ids], shuffle=False)))
    assert [float(dp[0][0, 0]) for dp in out] == [0.0, 1.0]
    put.close()
