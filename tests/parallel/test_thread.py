"""MultiThreadRunner and MultiThreadMapData specifics."""

from __future__ import annotations

import itertools

import pytest

from dataflow.parallel import MultiThreadMapData, MultiThreadPrefetchData, MultiThreadRunner
from tests.parallel import flows


def test_alias():
    assert MultiThreadPrefetchData is MultiThreadRunner


def test_get_df_called_once_per_thread_and_reset_once():
    made = []

    class Counting(flows.Range):
        resets = 0

        def reset_state(self):
            self.resets += 1

    def get_df():
        made.append(Counting(3))
        return made[-1]

    with MultiThreadRunner(get_df, 2, 3) as r:
        assert len(made) == 3
        assert len(r) == 3
        assert len(list(r)) == 3
        r.reset_state()
    assert [df.resets for df in made] == [1, 1, 1]


def test_get_df_must_be_callable():
    with pytest.raises(TypeError, match="`get_df` must be a zero-argument callable"):
        MultiThreadRunner(flows.Range(3), 2, 2)


def test_threads_stop_on_close():
    with MultiThreadMapData(flows.Range(5), 3, flows.sleepy) as m:
        list(itertools.islice(m, 7))
        threads = m._transport.group.threads
    assert not any(t.is_alive() for t in threads)
    r = MultiThreadRunner(lambda: flows.Range(100), 2, 2)
    next(iter(r))
    threads = r._group.threads
    r.close()
    assert not any(t.is_alive() for t in threads)


def test_map_num_thread_default_is_rejected_with_a_hint():
    with pytest.raises(ValueError, match=r"pass e\.g\. num_thread=4"):
        MultiThreadMapData(flows.Range(2), map_func=flows.double)
