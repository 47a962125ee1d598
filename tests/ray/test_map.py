"""RayMapData against a real local Ray (2 CPUs): the mappers' contract, errors, lost actors."""

from __future__ import annotations

import gc
import itertools
import json
import os
import signal
import threading
import time
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow import rng as _rng
from dataflow.errors import DataFlowReentrantError, DataFlowTerminated, NoneResultError, WorkerError
from dataflow.ray import RayMapData
from dataflow.sources import DataFromList
from dataflow.state import StateMismatchError
from tests.helpers import check_resume
from tests.parallel import flows
from tests.ray import flows as rflows
from tests.ray.conftest import pid_gone

pytestmark = [pytest.mark.usefixtures("local_ray"), pytest.mark.allow_children]


@pytest.mark.parametrize("ordered", [False, True])
def test_strict_epochs_are_exact(ordered):
    with RayMapData(flows.Range(50), 2, flows.slow_identity, strict=True, ordered=ordered,
                    chunk_size=4) as ds:
        assert len(ds) == 50
        for _ in range(2):
            got = [dp[0] for dp in ds]
            if ordered:
                assert got == list(range(50))
            else:
                assert Counter(got) == Counter(range(50))


@settings(max_examples=4, deadline=None)
@given(n=st.integers(0, 40), buffer_size=st.integers(1, 30), chunk_size=st.integers(1, 12),
       num_workers=st.integers(1, 2), ordered=st.booleans())
def test_strict_is_the_serial_map_for_any_sizes(n, buffer_size, chunk_size, num_workers,
                                                ordered):
    with RayMapData(flows.Range(n), num_workers, flows.double, strict=True,
                    ordered=ordered, buffer_size=buffer_size, chunk_size=chunk_size) as ds:
        got = [dp[0] for dp in ds]
    want = [2 * i for i in range(n)]
    assert (got if ordered else sorted(got)) == want


def test_strict_small_buffer_and_a_none_result_raises():
    with RayMapData(flows.Range(40), 2, flows.double, strict=True, buffer_size=3) as ds:
        assert sorted(dp[0] for dp in ds) == list(range(0, 80, 2))
        assert sorted(dp[0] for dp in ds) == list(range(0, 80, 2))
    none = r"RayMapData: map_func returned None for input index \d*[13579] of the epoch"
    with RayMapData(flows.Range(40), 2, flows.drop_odd, strict=True, buffer_size=3) as ds, \
            pytest.raises(NoneResultError, match=none):
        list(ds)


def test_non_strict_stream_continues_across_iterations():
    with RayMapData(flows.Range(10), 2, flows.double, ordered=True, chunk_size=3) as ds:
        got = [dp[0] for _ in range(3) for dp in itertools.islice(ds, 7)]
    assert got == [2 * (i % 10) for i in range(21)]


def test_one_actor_delivers_its_chunks_in_the_order_it_ran_them():
    # Unordered results come in completion order, and one actor runs its chunks in turn: so
    # with one worker they come in input order, even when the consumer, slower than the actor,
    # finds many chunks finished at once (Ray's wait would hand back any one of them).
    with RayMapData(flows.Range(60), 1, flows.double, strict=True, buffer_size=60,
                    chunk_size=3) as ds:
        for _ in range(2):
            it = iter(ds)
            got = [next(it)[0]]
            time.sleep(1.0)  # every other chunk finishes meanwhile
            got += [dp[0] for dp in it]
            assert got == list(range(0, 120, 2))


def test_arrays_come_through_the_object_store():
    with RayMapData(flows.Range(20), 2, rflows.image, strict=True, ordered=True) as ds:
        got = list(ds)
    assert [dp[0] for dp in got] == list(range(20))
    for i, img in got:
        assert img.shape == (64, 64, 3)
        assert img.dtype == np.uint8
        assert np.array_equal(img, np.full((64, 64, 3), i, np.uint8))
        assert not img.flags.writeable  # a view of the object store, not a copy


def test_map_error_surfaces_with_remote_traceback():
    ds = RayMapData(flows.Range(30), 2, flows.fail_at_7, strict=True, ordered=True)
    ds.reset_state()  # (the actors' start-up is not part of the delay)
    start = time.monotonic()
    with pytest.raises(WorkerError) as ei:
        list(ds)
    assert time.monotonic() - start < 5
    err = ei.value
    assert type(err.__cause__) is ValueError
    assert err.exc_type == "ValueError"
    assert err.exc_message == "cannot map 7"
    assert err.index == 7
    assert err.stage == "RayMapData"
    assert "in fail_at_7" in err.remote_traceback
    ds.close()


def test_a_result_ray_cannot_serialize_raises():
    # one chunk: the error names its first input whichever way Ray reports it
    ds = RayMapData(flows.Range(10), 1, rflows.lock_result, strict=True, chunk_size=10)
    with pytest.raises(WorkerError) as ei:
        list(ds)
    ds.close()
    err = ei.value
    assert err.exc_type == "TypeError"
    assert "cannot pickle '_thread.lock' object" in err.exc_message
    assert isinstance(err.__cause__, TypeError)
    assert err.index == 0


def test_a_result_the_consumer_cannot_deserialize_raises_without_retries():
    ds = RayMapData(flows.Range(10), 1, rflows.ResultTheConsumerCannotLoad(), strict=True)
    ds.reset_state()
    start = time.monotonic()
    with pytest.raises(WorkerError) as ei:
        list(ds)
    assert time.monotonic() - start < 5
    ds.close()
    assert ei.value.exc_type == "ray.exceptions.RaySystemError"
    assert "this result cannot be loaded in the consumer" in ei.value.exc_message


def test_after_an_error_the_next_iteration_starts_fresh_actors():
    with RayMapData(flows.Range(10), 1, flows.fail_at_7, strict=True, ordered=True) as ds:
        with pytest.raises(WorkerError):
            list(ds)
        assert ds.worker_pids() == []  # the error stopped the actors
        with pytest.raises(WorkerError) as ei:
            list(ds)
        assert ei.value.index == 7


@pytest.mark.parametrize("ordered", [False, True])
def test_lost_actor_is_replaced_and_every_item_comes_once(tmp_path, ordered):
    func = rflows.KillOnce(tmp_path / "killed", at=13)
    with RayMapData(flows.Range(60), 2, func, strict=True, ordered=ordered, chunk_size=4) as ds:
        got = [dp[0] for dp in ds]
        assert (tmp_path / "killed").exists()
        if ordered:
            assert got == [2 * i for i in range(60)]
        else:
            assert Counter(got) == Counter(2 * i for i in range(60))
        assert sorted(dp[0] for dp in ds) == [2 * i for i in range(60)]  # next epoch too


def test_actor_killed_from_outside_mid_epoch():
    with RayMapData(flows.Range(200), 2, flows.sleepy, strict=True, chunk_size=2) as ds:
        it = iter(ds)
        got = [next(it)[0] for _ in range(20)]
        pid = ds.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        got += [dp[0] for dp in it]
        assert Counter(got) == Counter(range(200))
        assert pid_gone(pid)


def test_a_chunk_that_always_kills_its_actor_raises_after_retries():
    ds = RayMapData(flows.Range(10), 2, rflows.always_die_at_3, strict=True, chunk_size=1,
                    max_retries=1)
    ds.reset_state()
    start = time.monotonic()
    with pytest.raises(WorkerError) as ei:
        list(ds)
    assert time.monotonic() - start < 20
    assert ei.value.exc_type == "WorkerDied"
    assert ei.value.index == 3
    assert "after 1 retries" in ei.value.exc_message
    ds.close()


def test_worker_seeds_are_distinct_and_reproducible():
    def run(seed: int) -> dict[int, list[int]]:
        """Each worker's random draws, in the order it mapped its inputs."""
        _rng.set_seed(seed)
        with RayMapData(flows.Range(24), 2, flows.global_random, strict=True,
                        chunk_size=1) as ds:
            got = sorted(ds)
        draws: dict[int, list[int]] = {}
        for _, wid, r, _ in got:
            draws.setdefault(wid, []).append(r)
        return draws

    a, b, c = run(5), run(5), run(6)
    assert set(a) == set(b) == {0, 1}
    for w in (0, 1):  # the same stream per worker (each run drew a prefix of it)
        n = min(len(a[w]), len(b[w]))
        assert a[w][:n] == b[w][:n]
    assert a[0][0] != a[1][0]
    assert c[0][0] != a[0][0]


def test_close_kills_the_actors_and_is_idempotent(local_ray):
    ds = RayMapData(flows.Range(8), 2, flows.double, strict=True)
    assert sorted(dp[0] for dp in ds) == list(range(0, 16, 2))
    pids = ds.worker_pids()
    assert len(set(pids)) == 2
    ds.close()
    ds.close()
    assert all(pid_gone(p) for p in pids)
    assert local_ray.is_initialized()  # the user's Ray stays up
    ds.reset_state()  # starts again
    assert sorted(dp[0] for dp in ds) == list(range(0, 16, 2))
    ds.close()


def test_garbage_collection_kills_the_actors():
    ds = RayMapData(flows.Range(10), 1, flows.double, strict=True)
    assert len(list(ds)) == 10
    pids = ds.worker_pids()
    del ds
    gc.collect()
    assert all(pid_gone(p) for p in pids)


def test_close_from_another_thread_stops_the_iteration():
    ds = RayMapData(flows.Range(10**6), 2, flows.sleepy)
    it = iter(ds)
    next(it)
    closer = threading.Timer(0.3, ds.close)
    closer.start()
    start = time.monotonic()
    with pytest.raises(DataFlowTerminated, match="RayMapData was closed while being iterated"):
        for _ in it:
            pass
    assert time.monotonic() - start < 5
    closer.join()


def test_not_reentrant():
    with RayMapData(flows.Range(10), 1, flows.double, strict=True) as ds:
        it = iter(ds)
        next(it)
        with pytest.raises(DataFlowReentrantError):
            next(iter(ds))
        it.close()
        assert len(list(ds)) == 10


def test_arguments_are_validated():
    with pytest.raises(ValueError, match="`chunk_size` must be a positive int, got 0"):
        RayMapData(flows.Range(3), 1, flows.double, chunk_size=0)
    with pytest.raises(ValueError, match="`max_retries` must be an int >= 0, got -1"):
        RayMapData(flows.Range(3), 1, flows.double, max_retries=-1)
    with pytest.raises(TypeError, match="`actor_options` must be a dict"):
        RayMapData(flows.Range(3), 1, flows.double, actor_options=1)
    ds = RayMapData(flows.Range(3), map_func=flows.double)  # num_workers: the cluster's CPUs
    assert ds.num_workers == 2
    assert ds._chunk_size() == 50  # buffer_size // (2 * num_workers)
    assert RayMapData(flows.Range(3), 2, flows.double, buffer_size=1000)._chunk_size() == 64
    tiny_epoch = RayMapData(flows.Range(3), map_func=flows.double, strict=True)
    assert tiny_epoch._chunk_size() == 1
    assert RayMapData(flows.Range(3), 1, flows.double, chunk_size=5)._chunk_size() == 5


OLD_ORDER = (r"RayMapData\(ds, map_func, num_workers\) is deprecated: the arguments are now "
             r"\(ds, num_workers, map_func\)")


@pytest.mark.parametrize("make", [
    pytest.param(lambda ds: RayMapData(ds, flows.double, 2), id="positional"),
    pytest.param(lambda ds: RayMapData(ds, flows.double, num_workers=2), id="mixed"),
    pytest.param(lambda ds: RayMapData(ds, flows.double, 2, strict=True), id="positional+opts"),
])
def test_the_old_argument_order_works_with_a_warning(make):
    with pytest.warns(DeprecationWarning, match=OLD_ORDER) as record:
        m = make(flows.Range(6))
    assert len(record) == 1
    assert record[0].filename == __file__  # (the warning points at the caller)
    assert (m.num_workers, m.map_func) == (2, flows.double)
    with m:
        assert sorted(dp[0] for dp in itertools.islice(m, 6)) == [0, 2, 4, 6, 8, 10]


def test_the_old_order_without_a_count_uses_the_clusters_cpus():
    with pytest.warns(DeprecationWarning, match=OLD_ORDER):
        m = RayMapData(flows.Range(3), flows.double)
    assert (m.num_workers, m.map_func) == (2, flows.double)


@pytest.mark.parametrize("make", [
    pytest.param(lambda ds: RayMapData(ds, 2, flows.double), id="positional"),
    pytest.param(lambda ds: RayMapData(ds, 2, map_func=flows.double), id="mixed"),
    pytest.param(lambda ds: RayMapData(ds, num_workers=2, map_func=flows.double), id="keywords"),
    pytest.param(lambda ds: RayMapData(ds, map_func=flows.double, num_workers=2),
                 id="keywords-old-order"),
    pytest.param(lambda ds: RayMapData(ds=ds, num_workers=2, map_func=flows.double),
                 id="all-keywords"),
])
def test_the_new_order_and_keywords_work_without_a_warning(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = make(flows.Range(3))
    assert (m.num_workers, m.map_func) == (2, flows.double)


def test_a_value_given_twice_or_too_many_positionals_are_refused():
    with pytest.raises(TypeError, match=r"RayMapData got two values for `num_workers`: 2 by "
                                        r"position and 3 by keyword"):
        RayMapData(flows.Range(3), 2, flows.double, num_workers=3)
    with pytest.raises(TypeError, match=r"RayMapData got two values for `map_func`"):
        RayMapData(flows.Range(3), flows.double, map_func=abs)
    with pytest.raises(TypeError, match=r"RayMapData takes at most 2 positional arguments "
                                        r"after `ds` \(num_workers, map_func\), got 3"):
        RayMapData(flows.Range(3), 2, flows.double, 200)
    with pytest.raises(TypeError, match=r"RayMapData takes \(ds, num_workers, map_func\), but "
                                        r"got a callable for `num_workers`"):
        RayMapData(flows.Range(3), num_workers=flows.double, map_func=2)


# ---- resume -----------------------------------------------------------------------------------


def test_resume_is_exact_when_strict_and_ordered():
    check_resume(
        lambda: RayMapData(DataFromList(list(range(8)), shuffle=True, seed=3),
                           2, lambda x: x * 10, strict=True, ordered=True, buffer_size=4),
        epochs=2, every=11,
    )


@pytest.mark.parametrize(("strict", "ordered"), [(True, False), (False, True)])
def test_resume_delivers_the_rest_once(strict, ordered):
    def make():
        return RayMapData(DataFromList([[i] for i in range(30)], shuffle=False), 2, flows.sleepy,
                          strict=strict, ordered=ordered, buffer_size=8, chunk_size=2)

    ds = make()
    it = iter(ds)
    first = [next(it)[0] for _ in range(11)]
    state = json.loads(json.dumps(ds.state_dict()))
    it.close()
    ds.close()
    fresh = make()
    fresh.reset_state()
    fresh.load_state_dict(state)
    rest = [dp[0] for dp in itertools.islice(fresh, 19)]
    fresh.close()
    if ordered:
        assert first + rest == list(range(30))
    else:
        assert Counter(first + rest) == Counter(range(30))


def test_a_state_of_another_dataset_size_is_refused():
    state = RayMapData(flows.Range(10), 1, flows.double, strict=True).state_dict()
    with pytest.raises(StateMismatchError, match="RayMapData") as ei:
        RayMapData(flows.Range(12), 1, flows.double, strict=True).load_state_dict(state)
    assert "size" in str(ei.value)
    assert "12" in str(ei.value)
    assert "10" in str(ei.value)
