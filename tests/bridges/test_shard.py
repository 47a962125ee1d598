from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflow as df
from dataflow.sharding import ShardData, shard
from dataflow.state import StateMismatchError
from dataflow.wrappers import BatchData, FilterData, MapDataComponent
from tests.helpers import check_dataflow, check_resume


def _src(n, shuffle=False, seed=None):
    return df.DataFromList([[i] for i in range(n)], shuffle=shuffle, seed=seed)


def _ranks(n, world_size, drop_remainder, shuffle=False):
    return [[dp[0] for dp in check_dataflow(shard(_src(n, shuffle, seed=7), r, world_size,
                                                  drop_remainder), epochs=1)]
            for r in range(world_size)]


def test_drop_remainder_equal_counts():
    assert _ranks(10, 3, True) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]  # 9 dropped
    assert [len(shard(_src(10), r, 3)) for r in range(3)] == [3, 3, 3]


def test_keep_remainder_first_ranks_get_one_more():
    assert _ranks(10, 3, False) == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert [len(shard(_src(10), r, 3, drop_remainder=False)) for r in range(3)] == [4, 3, 3]
    assert _ranks(2, 4, False) == [[0], [1], [], []]
    assert [len(shard(_src(2), r, 4, drop_remainder=False)) for r in range(4)] == [1, 1, 0, 0]


def test_world_size_one_is_identity():
    assert _ranks(5, 1, True) == [[0, 1, 2, 3, 4]]


def test_shuffled_source_same_seed_is_disjoint():
    parts = _ranks(20, 4, True, shuffle=True)
    flat = [x for p in parts for x in p]
    assert [len(p) for p in parts] == [5, 5, 5, 5]
    assert sorted(flat) == list(range(20))
    order = [dp[0] for dp in check_dataflow(_src(20, True, seed=7), epochs=1)]
    assert parts[1] == order[1::4]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), world_size=st.integers(1, 6), drop=st.booleans())
def test_partition_property(n, world_size, drop):
    parts = _ranks(n, world_size, drop)
    flat = sorted(x for p in parts for x in p)
    counts = [len(p) for p in parts]
    if drop:
        assert counts == [n // world_size] * world_size
        assert flat == list(range(n // world_size * world_size))
    else:
        assert flat == list(range(n))
        assert max(counts) - min(counts) <= (1 if n else 0)
        assert counts == sorted(counts, reverse=True)


def _not_four(dp):
    return dp[0] != 4


def test_without_length():
    # FilterData has no length: shard still splits, reading world_size at a time
    flow = shard(FilterData(_src(11), _not_four), 1, 2)
    assert [dp[0] for dp in check_dataflow(flow, epochs=2)] == [1, 3, 6, 8, 10]
    with pytest.raises(NotImplementedError, match="ShardData has no length"):
        len(flow)


def test_two_epochs_and_batches():
    flow = BatchData(shard(_src(9), 0, 2, drop_remainder=False), 2, remainder=True)
    flow.reset_state()
    assert [[b[0].tolist() for b in flow] for _ in range(2)] == [[[0, 2], [4, 6], [8]]] * 2


@pytest.mark.parametrize("drop", [True, False])
@pytest.mark.parametrize("rank", [0, 2])
def test_resume(drop, rank):
    seq = check_resume(lambda: shard(_src(11, shuffle=True, seed=3), rank, 3, drop), epochs=2)
    assert len(seq) == 2 * len(shard(_src(11), rank, 3, drop))


def test_resume_after_map():
    def make():
        return shard(MapDataComponent(_src(7, shuffle=True, seed=1), lambda x: x * 10), 1, 2,
                     drop_remainder=False)

    seq = check_resume(make, epochs=2)
    assert len(seq) == 6


def test_state_mismatch_names_stage_and_values():
    state = shard(_src(6), 0, 2).state_dict()
    with pytest.raises(StateMismatchError, match="ShardData: expected world_size=3, found "
                                                 "world_size=2"):
        shard(_src(6), 0, 3).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="DataFromList: expected size=7, found size=6"):
        shard(_src(7), 0, 2).load_state_dict(state)


def test_validation_errors():
    with pytest.raises(ValueError, match=r"`rank` must be in \[0, world_size\) = \[0, 2\), "
                                         r"got 2; pass this process's index"):
        shard(_src(3), 2, 2)
    with pytest.raises(ValueError, match=r"`rank` must be in .*got -1"):
        shard(_src(3), -1, 2)
    with pytest.raises(ValueError, match="`world_size` must be >= 1, got 0"):
        shard(_src(3), 0, 0)
    with pytest.raises(TypeError, match=r"`rank` must be an int, got 0.5 \(type float\)"):
        shard(_src(3), 0.5, 2)
    with pytest.raises(TypeError, match="`world_size` must be an int, got True"):
        shard(_src(3), 0, True)
    with pytest.raises(TypeError, match="`drop_remainder` must be a bool, got 1"):
        shard(_src(3), 0, 2, drop_remainder=1)
    with pytest.raises(TypeError, match="`ds` must be a DataFlow, got list"):
        shard([1, 2], 0, 2)


def test_close_cascades_and_class():
    flow = shard(_src(3), 0, 1)
    assert isinstance(flow, ShardData)
    flow.close()
    flow.close()


# ---- right over an LMDB reader the other ranks' records are not read -----------------------


def _lmdb(tmp_path, n=10):
    from dataflow.serialize import LMDBSerializer

    path = str(tmp_path / "data.lmdb")
    LMDBSerializer.save(_src(n), path)
    return path


class _CountingLoad(df.LMDBData):
    """LMDBSerializer.load's reader, counting the records it decodes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.decoded = 0

    def _decoder(self):
        from dataflow.serialize.codec import get_loads

        loads = get_loads(self._codec)

        def decode(v):
            self.decoded += 1
            return loads(v)

        return decode


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop", [True, False])
def test_lmdb_ranks_get_their_positions_of_the_epoch(tmp_path, shuffle, drop):
    from dataflow.serialize import LMDBSerializer

    path = _lmdb(tmp_path)
    whole = [dp[0] for dp in check_dataflow(LMDBSerializer.load(path, shuffle, seed=3), epochs=1)]
    assert sorted(whole) == list(range(10))
    stop = 9 if drop else 10
    for r in range(3):
        part = shard(LMDBSerializer.load(path, shuffle, seed=3), r, 3, drop_remainder=drop)
        assert [dp[0] for dp in check_dataflow(part, epochs=1)] == whole[:stop][r::3]


@pytest.mark.parametrize("shuffle", [False, True])
def test_lmdb_reads_only_the_records_of_its_rank(tmp_path, shuffle):
    path = _lmdb(tmp_path)
    src = _CountingLoad(path, shuffle, seed=3)
    part = shard(src, 1, 4)
    part.reset_state()
    assert len([dp[0] for dp in part]) == 2  # positions 1 and 5 (9: incomplete last group)
    assert src.decoded == 3  # positions 1, 5 and 9, not the 7 others
    src.decoded = 0
    assert sorted(dp[0] for dp in src) == list(range(10))
    assert src.decoded == 10  # the next plain iteration reads everything again


def test_raw_lmdb_data_yields_key_value_of_its_rank(tmp_path):
    path = _lmdb(tmp_path)
    whole = list(check_dataflow(df.LMDBData(path, shuffle=False), epochs=1))
    part = check_dataflow(shard(df.LMDBData(path, shuffle=False), 2, 3), epochs=1)
    assert [list(kv) for kv in part] == [list(kv) for kv in whole[2:9:3]]


def test_lmdb_without_keys_entry(tmp_path):
    import lmdb

    path = str(tmp_path / "raw.lmdb")
    env = lmdb.open(path, subdir=True, map_size=1 << 20)
    with env.begin(write=True) as txn:
        for i in range(7):
            txn.put(f"k{i}".encode(), f"v{i}".encode())
    env.close()
    part = check_dataflow(shard(df.LMDBData(path, shuffle=False), 0, 2, False), epochs=1)
    assert [list(kv) for kv in part] == [[b"k0", b"v0"], [b"k2", b"v2"], [b"k4", b"v4"],
                                         [b"k6", b"v6"]]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop", [True, False])
def test_lmdb_shard_resumes_exactly(tmp_path, shuffle, drop):
    from dataflow.serialize import LMDBSerializer

    path = _lmdb(tmp_path)
    seq = check_resume(lambda: shard(LMDBSerializer.load(path, shuffle, seed=3), 1, 3, drop),
                       epochs=2)
    assert len(seq) == 6  # 10 records, rank 1 of 3: positions 1, 4, 7 either way
