from __future__ import annotations

import gc
import json
import logging
import pickle
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import dataflow as df
from dataflow.parallel import MultiProcessMapDataZMQ, MultiThreadMapData
from dataflow.wrappers import BatchData, FilterData, MapData

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from dataflow.torch import to_torch  # noqa: E402


def _ints(n, shuffle=False, seed=None):
    return df.DataFromList([[np.int64(i)] for i in range(n)], shuffle=shuffle, seed=seed)


def _children():
    return [c for c in psutil.Process().children(recursive=True)
            if c.status() != psutil.STATUS_ZOMBIE]


def _wait_no_children(timeout=10.0):
    deadline = time.monotonic() + timeout
    while _children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return _children()


def _double(dp):
    return [dp[0] * 2]


def _fail_at_5(dp):
    if dp[0] == 5:
        raise ValueError("boom at 5")
    return dp


def _odd(dp):
    return dp[0] % 2 == 1


def test_import_is_lazy_and_missing_torch_names_the_extra():
    code = """
import sys
import dataflow, dataflow.torch, dataflow.jax, dataflow.sharding
assert "torch" not in sys.modules and "jax" not in sys.modules, "eager import"
sys.modules["torch"] = None
sys.modules["jax"] = None
out = []
for mod, fn in ((dataflow.torch, "to_torch"), (dataflow.jax, "to_jax")):
    try:
        getattr(mod, fn)(dataflow.DataFromList([[1]], shuffle=False))
    except ImportError as e:
        out.append(str(e))
print(out)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == str([
        "dataflow.torch needs PyTorch, which is not installed: pip install 'torch>=2.1' (the "
        "extra [torch] of dataflow-reloaded; in a clone: pip install -e '.[torch]')",
        "dataflow.jax needs JAX, which is not installed: pip install 'jax>=0.4.20' (the extra "
        "[jax] of dataflow-reloaded; in a clone: pip install -e '.[jax]')",
    ])


def test_exact_delivery_and_structure():
    dps = [[np.full((2, 3), i, np.float32), np.int64(i), f"s{i}", (np.arange(i, i + 2), b"x"),
            {"k": np.array([i], np.uint8), "n": i}] for i in range(4)]
    ds = to_torch(df.DataFromList(dps, shuffle=False))
    got = list(ds)  # the dataset itself, no DataLoader
    assert len(got) == 4
    for i, (a, s, name, (t, b), d) in enumerate(got):
        assert a.dtype == torch.float32 and a.tolist() == [[float(i)] * 3] * 2
        assert s.dtype == torch.int64 and s.shape == () and s.item() == i
        assert name == f"s{i}" and b == b"x"
        assert t.dtype == torch.int64 and t.tolist() == [i, i + 1]
        assert set(d) == {"k", "n"} and d["k"].dtype == torch.uint8 and d["k"].tolist() == [i]
        assert d["n"] == i and type(d["n"]) is int
    assert type(got[0][3]) is tuple
    # through a DataLoader: the same values, in order (its default_convert makes tuples lists)
    loaded = list(DataLoader(ds, batch_size=None, num_workers=0))
    assert [dp[0].tolist() for dp in loaded] == [dp[0].tolist() for dp in got]
    assert [dp[3][0].tolist() for dp in loaded] == [[i, i + 1] for i in range(4)]
    assert [dp[2] for dp in loaded] == ["s0", "s1", "s2", "s3"]


def test_zero_copy():
    arrs = [np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(6).reshape(2, 3).T]
    ds = to_torch(df.DataFromList([arrs], shuffle=False))
    (t, u), = list(DataLoader(ds, batch_size=None, num_workers=0))
    assert t.data_ptr() == arrs[0].__array_interface__["data"][0]
    assert np.shares_memory(t.numpy(), arrs[0]) and np.shares_memory(u.numpy(), arrs[1])
    assert u.stride() == (1, 3) and u.tolist() == [[0, 3], [1, 4], [2, 5]]
    t[0, 0] = 100.0  # the same memory
    assert arrs[0][0, 0] == 100.0


def test_non_writable_and_negative_strides_are_copied_without_warning():
    ro = np.frombuffer(bytes(range(6)), np.uint8)
    rev = np.arange(4)[::-1]
    (a, b), = list(to_torch(df.DataFromList([[ro, rev]], shuffle=False)))  # warnings are errors
    assert a.tolist() == [0, 1, 2, 3, 4, 5] and not np.shares_memory(a.numpy(), ro)
    assert b.tolist() == [3, 2, 1, 0]


def test_pin_memory_without_accelerator_is_skipped(caplog):
    arr = np.ones(3, np.float32)
    with caplog.at_level(logging.INFO, logger="dataflow.torch"):
        (t,), = list(to_torch(df.DataFromList([[arr]], shuffle=False), pin_memory=True))
    if torch.accelerator.is_available():  # pragma: no cover (CPU here)
        assert t.is_pinned() and not np.shares_memory(t.numpy(), arr)
    else:
        assert not t.is_pinned() and np.shares_memory(t.numpy(), arr)
        assert caplog.messages == ["to_torch(pin_memory=True): no accelerator is available, "
                                   "so tensors are not pinned."]


def test_len():
    assert len(DataLoader(to_torch(_ints(7)), batch_size=None)) == 7
    with pytest.raises(TypeError, match="FilterData has no length"):
        len(DataLoader(to_torch(FilterData(_ints(7), _odd)), batch_size=None))


def test_validation():
    with pytest.raises(TypeError, match="`df` must be a DataFlow, got list"):
        to_torch([1, 2])
    with pytest.raises(TypeError, match="`pin_memory` must be a bool, got 1"):
        to_torch(_ints(2), pin_memory=1)


@pytest.mark.parametrize("shuffle", [False, True])
def test_two_workers_no_duplicates(shuffle):
    ds = to_torch(MapData(_ints(53, shuffle=shuffle), _double))
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    assert len(loader) == 53
    for _ in range(2):  # two epochs, fresh workers each
        got = [dp[0].item() for dp in loader]
        assert len(got) == 53 and sorted(got) == list(range(0, 106, 2))
    assert _wait_no_children() == []


def test_spawned_workers():
    # spawn pickles the dataset into each worker (the default on macOS and Windows); run in a
    # subprocess, since spawning starts multiprocessing's resource tracker, which outlives a test
    code = """
import numpy as np
from torch.utils.data import DataLoader
import dataflow as df
from dataflow.torch import to_torch

if __name__ == "__main__":
    ds = to_torch(df.DataFromList([[np.int64(i)] for i in range(30)], shuffle=True))
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    print(sorted(int(dp[0]) for dp in loader))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(list(range(30)))


def test_two_workers_persistent_batches():
    ds = to_torch(BatchData(_ints(40, shuffle=True, seed=3), 4))
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    epochs = [sorted(x for b in loader for x in b[0].tolist()) for _ in range(2)]
    assert epochs == [list(range(40))] * 2
    del loader
    gc.collect()
    assert _wait_no_children() == []


@pytest.mark.parametrize("num_workers", [0, 2])
def test_errors_surface_in_the_loop(num_workers, monkeypatch):
    # after an iterable dataset raised in a worker, PyTorch's shutdown never reaches the workers
    # (with any dataset): it waits this long per worker, then terminates them
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.5)
    # a terminated worker cannot remove the pymp-* directory multiprocessing made to pass the
    # tensors' file descriptors; with file_system sharing no descriptor is passed
    strategy = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        _check_errors_surface_in_the_loop(num_workers)
    finally:
        torch.multiprocessing.set_sharing_strategy(strategy)


def _check_errors_surface_in_the_loop(num_workers):
    loader = DataLoader(to_torch(MapData(_ints(10), _fail_at_5)), batch_size=None,
                        num_workers=num_workers)
    got = []

    def loop():
        for dp in loader:
            got.append(dp[0].item())

    with pytest.raises(ValueError, match="boom at 5") as excinfo:
        loop()
    if num_workers == 0:
        assert got == [0, 1, 2, 3, 4]
    else:
        assert "Caught ValueError in DataLoader worker process" in str(excinfo.value)
    del excinfo  # its traceback holds the loader's iterator, which holds the workers
    gc.collect()
    assert _wait_no_children() == []


def test_worker_error_from_parallel_mapper_surfaces():
    ds = to_torch(MultiProcessMapDataZMQ(_ints(20), 2, _fail_at_5))
    with pytest.raises(df.WorkerError, match="boom at 5"):
        list(DataLoader(ds, batch_size=None, num_workers=0))
    ds.close()
    assert _wait_no_children() == []


def test_closing_the_loader_stops_the_dataflow_workers():
    ds = to_torch(MultiProcessMapDataZMQ(_ints(200), 2, _double, strict=True, ordered=True))
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    it = iter(loader)
    assert [next(it)[0].item() for _ in range(3)] == [0, 2, 4]
    assert len(_children()) == 2
    del it  # the loader's iterator is gone: the dataflow is closed
    assert _wait_no_children() == []
    # the next epoch starts the workers again and is whole
    assert [dp[0].item() for dp in loader] == list(range(0, 400, 2))
    for dp in loader:  # break out of a for loop: closed as well
        if dp[0].item() == 10:
            break
    assert _wait_no_children() == []
    ds.close()
    ds.close()


def test_state_dict_resume_through_the_bridge():
    def make():
        return to_torch(_ints(10, shuffle=True, seed=5))

    ref = make()
    full = [dp[0].item() for dp in DataLoader(ref, batch_size=None)]
    ds = make()
    it = iter(DataLoader(ds, batch_size=None))
    head = [next(it)[0].item() for _ in range(4)]
    state = json.loads(json.dumps(ds.state_dict()))
    fresh = make()
    fresh.load_state_dict(state)
    rest = [dp[0].item() for dp in DataLoader(fresh, batch_size=None)]
    assert head + rest == full and sorted(full) == list(range(10))


def test_pickles_for_spawned_workers():
    ds = to_torch(_ints(5), pin_memory=False)
    assert [dp[0].item() for dp in ds] == [0, 1, 2, 3, 4]
    copy = pickle.loads(pickle.dumps(ds))
    assert type(copy) is type(ds) and copy.pin_memory is False
    assert [dp[0].item() for dp in copy] == [0, 1, 2, 3, 4]
    assert isinstance(ds, torch.utils.data.IterableDataset)


def test_tiny_linear_regression_trains():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 3)).astype(np.float32)
    w_true = np.array([[1.5], [-2.0], [0.5]], np.float32)
    y = x @ w_true + 0.25
    ds = df.DataFromList([[x[i], y[i]] for i in range(512)], shuffle=True, seed=0)
    loader = DataLoader(to_torch(BatchData(ds, 32)), batch_size=None, num_workers=0)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for _ in range(10):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
    assert steps == 160
    final = torch.nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(y))
    assert final.item() < 1e-6
    assert np.allclose(model.weight.detach().numpy().ravel(), w_true.ravel(), atol=1e-3)


def test_parallel_stage_is_found_for_the_worker_warning():
    from dataflow.torch import _parallel_stage

    mapper = MultiProcessMapDataZMQ(_ints(4), 2, _double)  # not started
    assert _parallel_stage(BatchData(mapper, 2)) == "MultiProcessMapDataZMQ"
    assert _parallel_stage(BatchData(MapData(_ints(4), _double), 2)) is None
    mapper.close()


@pytest.mark.parametrize("num_workers", [1, 2])
@pytest.mark.parametrize("make", [
    lambda: BatchData(MultiProcessMapDataZMQ(_ints(8), 2, _double), 2),
    lambda: df.ConcatData([_ints(2), df.MultiProcessRunnerZMQ(_ints(4), 1)]),
], ids=["mapper", "runner-in-concat"])
def test_process_stage_inside_dataloader_workers_is_one_clear_error(monkeypatch, num_workers,
                                                                     make):
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.5)
    flow = make()
    stage = "MultiProcessMapDataZMQ" if isinstance(flow, BatchData) else "MultiProcessRunnerZMQ"
    with pytest.raises(df.DataFlowError, match=f"to_torch: {stage} cannot start its worker "
                       r"processes inside a DataLoader worker \(a daemonic process cannot have "
                       r"children\). Use DataLoader\(batch_size=None, num_workers=0\) and let "
                       "the dataflow parallelize.") as excinfo:
        list(DataLoader(to_torch(flow), batch_size=None, num_workers=num_workers))
    del excinfo
    gc.collect()
    flow.close()
    assert _wait_no_children() == []


class _FakeWorkerInfo:
    def __init__(self, id, num_workers):
        self.id, self.num_workers, self.seed = id, num_workers, 1000 + id


@pytest.mark.parametrize("worker", [0, 1])
def test_in_a_worker_a_process_stage_raises_before_any_warning(monkeypatch, caplog, worker):
    # what a DataLoader worker runs, in this process: the error comes first, nothing is started
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: _FakeWorkerInfo(worker, 2))
    mapper = MultiProcessMapDataZMQ(_ints(4), 2, _double)
    ds = to_torch(df.ConcatData([MultiThreadMapData(_ints(2), 2, _double), mapper]))
    with caplog.at_level(logging.INFO, logger="dataflow.torch"), pytest.raises(
            df.DataFlowError, match="to_torch: MultiProcessMapDataZMQ cannot start"):
        next(iter(ds))
    assert caplog.messages == []
    assert _children() == []
    mapper.close()


def test_in_worker_0_a_thread_stage_warns_about_duplicated_work(monkeypatch, caplog):
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: _FakeWorkerInfo(0, 2))
    flow = MultiThreadMapData(_ints(6), 2, _double, strict=True, ordered=True)
    ds = to_torch(flow)
    with caplog.at_level(logging.WARNING, logger="dataflow.torch"):
        got = [dp[0].item() for dp in ds]
    assert got == [0, 4, 8]  # worker 0's shard
    assert caplog.messages == [
        "to_torch: each of the 2 DataLoader workers runs its own copy of MultiThreadMapData and "
        "keeps 1/2 of the results; use DataLoader(num_workers=0) and let the dataflow "
        "parallelize."]
    ds.close()


def test_ordered_thread_stage_inside_dataloader_workers():
    # duplicated work, but exact: an ordered, strict mapper yields the same sequence everywhere
    flow = MultiThreadMapData(_ints(30, shuffle=True), 2, _double, strict=True, ordered=True)
    got = [dp[0].item() for dp in DataLoader(to_torch(flow), batch_size=None, num_workers=2)]
    assert sorted(got) == list(range(0, 60, 2))
