from __future__ import annotations

import collections
import itertools

import pytest

import dataflow as df


def _src(n):
    return df.DataFromList([[i] for i in range(n)], shuffle=False)


@pytest.mark.parametrize("buffer_size", [1, 2, 3, 7, 50])
def test_finite_epochs_have_len_items_and_everything_is_delivered(buffer_size):
    flow = df.LocallyShuffleData(_src(20), buffer_size, seed=3, finite=True)
    flow.reset_state()
    epochs = [[dp[0] for dp in flow] for _ in range(3)]
    assert [len(e) for e in epochs] == [20, 20, 20]
    yielded = collections.Counter(x for e in epochs for x in e)
    buffered = collections.Counter(dp[0] for dp in flow._buffer)
    assert sum(buffered.values()) == buffer_size
    # nothing is lost or duplicated: yielded + still buffered == what was read from the source
    pulled = collections.Counter(i % 20 for i in range(60 + buffer_size))
    assert yielded + buffered == pulled


def test_buffer_one_is_identity_order():
    flow = df.LocallyShuffleData(_src(5), 1, seed=0, finite=True)
    flow.reset_state()
    assert [dp[0] for dp in flow] == [0, 1, 2, 3, 4]


def test_num_reuse():
    flow = df.LocallyShuffleData(_src(4), 2, num_reuse=2, seed=0, finite=True)
    flow.reset_state()
    out = [dp[0] for dp in flow]
    assert len(out) == 8 == len(flow)
    assert collections.Counter(out) == collections.Counter([0, 0, 1, 1, 2, 2, 3, 3])


def test_seeded_golden_sequence():
    flow = df.LocallyShuffleData(_src(10), 4, seed=1, finite=True)
    flow.reset_state()
    first = [dp[0] for dp in flow]
    again = df.LocallyShuffleData(_src(10), 4, seed=1, finite=True)
    again.reset_state()
    assert [dp[0] for dp in again] == first
    assert first != list(range(10))


def test_validation():
    with pytest.raises(ValueError, match="`buffer_size` must be an int >= 1, got 0"):
        df.LocallyShuffleData(_src(3), 0)
    with pytest.raises(ValueError, match="`shuffle_interval` must be an int >= 1"):
        df.LocallyShuffleData(_src(3), 3, shuffle_interval=0)
    with pytest.raises(TypeError, match=r"`finite` must be a bool, got 1 \(type int\)"):
        df.LocallyShuffleData(_src(3), 3, finite=1)


def test_default_is_endless_with_len_times_num_reuse_like_tensorpack():
    flow = df.LocallyShuffleData(_src(10), 4, num_reuse=2, seed=1)
    assert len(flow) == 20
    flow.reset_state()
    # one iteration runs past len(): scripts islice many epochs' worth out of it
    got = [dp[0] for dp in itertools.islice(flow, 95)]
    assert len(got) == 95
    # the endless stream is the finite flow's epochs back to back
    finite = df.LocallyShuffleData(_src(10), 4, num_reuse=2, seed=1, finite=True)
    finite.reset_state()
    assert got == [dp[0] for _ in range(5) for dp in finite][:95]
    counts = collections.Counter(got[:80])  # 4 epochs' worth, minus the 4 still buffered
    assert sum(counts.values()) == 80 and set(counts) == set(range(10))


def test_one_epoch_of_the_endless_stream_with_islice():
    flow = df.LocallyShuffleData(_src(6), 1, seed=0)
    flow.reset_state()
    assert [dp[0] for dp in itertools.islice(flow, len(flow))] == [0, 1, 2, 3, 4, 5]
    assert [dp[0] for dp in itertools.islice(flow, len(flow))] == [0, 1, 2, 3, 4, 5]


def test_dict_points():
    flow = df.LocallyShuffleData(df.DataFromList([{"a": i} for i in range(6)], shuffle=False), 3,
                                 seed=0, finite=True)
    flow.reset_state()
    out = [dp["a"] for dp in flow]
    assert len(out) == 6 and set(out) <= set(range(6))
