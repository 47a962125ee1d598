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


def test_a_thread_that_retires_while_the_group_is_checked_is_not_taken_for_dead():
    """The check reads whether a thread ended before why: a thread that records "retired"
    and ends between the two reads is not reported as died. Here the thread retires exactly
    when the check reads the retired set (it read "not retired" first, then "not alive", and
    raised WorkerDied for a thread that ended on purpose)."""
    import threading

    from dataflow.parallel.thread import _ThreadGroup

    go = threading.Event()

    class RetiresOnLookup(set):
        """The set of retired threads; looking it up lets thread 0 retire and end first."""

        def __contains__(self, i):
            found = super().__contains__(i)  # (read now; the thread retires right after)
            if not go.is_set():
                go.set()
                group.threads[0].join(5)
            return found

    def loop():
        go.wait(5)
        group.retired.add(0)

    group = _ThreadGroup("g", [loop])
    group.retired = RetiresOnLookup()
    group.start()
    group.check()  # alive when read: no error, whatever happens after
    go.set()
    group.threads[0].join(5)
    assert not group.threads[0].is_alive() and 0 in group.retired
    group.check()  # ended, and retired
    group.join()
