"""dataflow.utils.timer: timed_operation and Timer."""

from __future__ import annotations

import logging
import re

import pytest

from dataflow.utils.timer import Timer, timed_operation


def test_timed_operation_logs_the_time(caplog):
    with caplog.at_level(logging.INFO, logger="dataflow"):
        with timed_operation("Good Stuff"):
            pass
        with timed_operation("Other", log_start=True):
            pass
    msgs = [r.getMessage() for r in caplog.records if r.name == "dataflow"]
    assert len(msgs) == 3
    assert re.fullmatch(r"Good Stuff finished, time:\d+\.\d{4} sec\.", msgs[0])
    assert msgs[1] == "Start Other ..."
    assert re.fullmatch(r"Other finished, time:\d+\.\d{4} sec\.", msgs[2])
    with pytest.raises(ValueError, match="`msg` must be a non-empty str"):
        timed_operation("").__enter__()


def test_timer_counts_running_time_only():
    t = Timer()
    assert not t.is_paused()
    t.pause()
    assert t.is_paused()
    a = t.seconds()
    assert a >= 0 and t.seconds() == a  # paused: it does not move
    with pytest.raises(RuntimeError, match="paused already"):
        t.pause()
    t.start()
    assert t.seconds() >= a
    with pytest.raises(RuntimeError, match="running already"):
        t.start()
    t.pause()
    t.reset()
    assert not t.is_paused()
