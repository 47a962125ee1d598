"""Ray Data interop against a real local Ray: a DataFlow as a ray.data.Dataset and back,
streaming (nothing materialised), order, exactly once, length, resume, errors."""

from __future__ import annotations

import itertools
import json
import time

import numpy as np
import pytest

from dataflow.errors import UnknownLengthError
from dataflow.ray.data import DataFromRayDataset, to_ray_dataset
from dataflow.sources import DataFromList
from tests.parallel import flows
from tests.ray import flows as rflows

pytestmark = [
    pytest.mark.usefixtures("local_ray"), pytest.mark.allow_children,
    # (Ray Data's DataContext reads its own deprecated fields when it is created)
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data"),
]


def _points(n: int) -> list[list]:
    return [[i, np.full((2, 3), i, np.uint8), f"s{i}", np.arange(i % 3)] for i in range(n)]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True))


def test_a_dataflow_round_trips_through_ray_data_in_order():
    points = _points(23)
    ds = to_ray_dataset(DataFromList(points, shuffle=False), rows_per_block=4)
    assert ds.count() == 23
    back = DataFromRayDataset(ds)
    for _ in range(2):  # each pass executes the dataset again: the same rows, once each
        got = list(back)
        assert _same(got, points)
    assert isinstance(got[5][1], np.ndarray)
    assert got[5][1].dtype == np.uint8
    row = ds.take(1)[0]
    assert sorted(row) == ["0", "1", "2", "3"]


def test_columns_and_dict_rows():
    ds = to_ray_dataset(DataFromList([[i, 2 * i] for i in range(5)], shuffle=False),
                        columns=["x", "y"])
    assert ds.take(2) == [{"x": 0, "y": 0}, {"x": 1, "y": 2}]
    assert list(DataFromRayDataset(ds, columns=["y"])) == [[0], [2], [4], [6], [8]]
    assert list(DataFromRayDataset(ds, as_dict=True))[4] == {"x": 4, "y": 8}
    dicts = to_ray_dataset(DataFromList([{"a": i} for i in range(3)], shuffle=False))
    assert list(DataFromRayDataset(dicts)) == [[0], [1], [2]]


def test_a_dataflow_is_streamed_not_materialised(tmp_path):
    progress = tmp_path / "progress"
    n = 10**5  # 1 GB in all: more than the object store holds
    ds = to_ray_dataset(rflows.PulledRange(n, progress), rows_per_block=100)
    it = iter(ds.iter_rows())
    assert [next(it)["0"] for _ in range(5)] == [0, 1, 2, 3, 4]
    del it  # stops the execution: the read task is cancelled
    pulled = int(progress.read_text())
    assert 0 <= pulled < n // 2  # (a few blocks of ~400 rows: Ray Data's backpressure)
    # and it stops being pulled (the task is gone), not later than in a minute
    deadline = time.monotonic() + 60
    last = None
    while time.monotonic() < deadline:
        now = progress.read_text()
        if now == last:
            break
        last = now
        time.sleep(1.0)
    assert now == last
    assert int(now) < n


def test_a_ray_dataset_is_streamed_not_materialised():
    df = DataFromRayDataset(__import__("ray").data.range(10**9))  # 10**9 rows: 8 GB
    it = iter(df)
    got = [next(it) for _ in range(3)]
    it.close()
    # (its read tasks run in parallel: the first rows are those of the first block done)
    assert len({k for (k,) in got}) == 3
    assert all(isinstance(k, int) and 0 <= k < 10**9 for (k,) in got)
    assert [b - a for (a,), (b,) in itertools.pairwise(got)] == [1, 1]  # (one block's rows)


def test_length_is_known_for_known_flows_and_materialized_datasets():
    import ray

    assert to_ray_dataset(flows.Range(7)).count() == 7
    with pytest.raises(UnknownLengthError, match=r"call ds.materialize\(\) first"):
        len(DataFromRayDataset(ray.data.range(4)))
    assert len(DataFromRayDataset(ray.data.range(4).materialize())) == 4


def test_resume_skips_the_delivered_rows():
    ds = to_ray_dataset(flows.Range(20), rows_per_block=3)
    first = DataFromRayDataset(ds)
    first.reset_state()
    it = iter(first)
    head = [dp[0] for dp in itertools.islice(it, 7)]
    state = json.loads(json.dumps(first.state_dict()))
    it.close()
    fresh = DataFromRayDataset(ds)
    fresh.reset_state()
    fresh.load_state_dict(state)
    assert head + [dp[0] for dp in fresh] == list(range(20))


def test_bad_arguments_and_datapoints_are_refused():
    with pytest.raises(TypeError, match="`df` must be a DataFlow, got"):
        to_ray_dataset([1, 2])
    with pytest.raises(TypeError, match="`columns` must be a sequence of str"):
        to_ray_dataset(flows.Range(2), columns="ab")
    with pytest.raises(ValueError, match="`columns` must be distinct"):
        to_ray_dataset(flows.Range(2), columns=["a", "a"])
    with pytest.raises(ValueError, match="`rows_per_block` must be a positive int, got 0"):
        to_ray_dataset(flows.Range(2), rows_per_block=0)
    with pytest.raises(TypeError, match=r"`ds` must be a ray\.data\.Dataset, got"):
        DataFromRayDataset([1])
    ds = to_ray_dataset(flows.Range(2), columns=["a", "b"])
    with pytest.raises(Exception, match="a datapoint has 1 components, but `columns` names 2"):
        ds.take(1)
