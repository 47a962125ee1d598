from __future__ import annotations

import dataflow as df


class Counting(df.DataFlow):
    def __init__(self, n):
        self.n = n
        self.passes = 0

    def __len__(self):
        return self.n

    def __iter__(self):
        self.passes += 1
        for i in range(self.n):
            yield [i]


def test_cache_replays_without_reading_again():
    src = Counting(4)
    flow = df.CacheData(src)
    flow.reset_state()
    assert [list(flow) for _ in range(3)] == [[[0], [1], [2], [3]]] * 3
    assert src.passes == 1


def test_cache_shuffle_permutes_each_epoch():
    src = Counting(30)
    flow = df.CacheData(src, shuffle=True, seed=0)
    flow.reset_state()
    first = [dp[0] for dp in flow]
    second = [dp[0] for dp in flow]
    third = [dp[0] for dp in flow]
    assert first == list(range(30))
    assert sorted(second) == list(range(30)) and second != first and second != third


def test_interrupted_first_epoch_does_not_leave_partial_cache():
    src = Counting(5)
    flow = df.CacheData(src)
    flow.reset_state()
    it = iter(flow)
    next(it)
    it.close()
    assert [dp[0] for dp in flow] == [0, 1, 2, 3, 4]
    assert src.passes == 2
    assert len(flow) == 5
