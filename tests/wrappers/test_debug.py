from __future__ import annotations

import io

import numpy as np
import pytest

import dataflow as df


def test_print_data_summary_on_numpy2():
    out = io.StringIO()
    dps = [[np.arange(6, dtype=np.float32).reshape(2, 3), 5, "hello", [1, 2, 3, 4]]]
    flow = df.PrintData(df.DataFromList(dps * 3, shuffle=False), num=2, name="train", file=out)
    flow.reset_state()
    assert len(list(flow)) == 3
    text = out.getvalue()
    assert text.count("[PrintData train] datapoint") == 2
    assert text.splitlines()[:7] == [
        "[PrintData train] datapoint 0",
        "  list of len 4",
        "    [0] ndarray dtype=float32 shape=(2, 3) range=[0.0, 5.0]",
        "    [1] int value=5",
        "    [2] str len=5 value='hello'",
        "    ... 1 more",
        "[PrintData train] datapoint 1",
    ]


def test_print_data_nested_depth_and_width():
    out = io.StringIO()
    dp = [[[1, [2, [3]]], 7, 8, 9, 10]]
    list(df.PrintData(df.DataFromList([dp], shuffle=False), max_depth=2, max_list=2, file=out))
    assert out.getvalue().splitlines() == [
        "[PrintData] datapoint 0",
        "  list of len 1",
        "    [0] list of len 5",
        "      [0] list of len 2",
        "      [1] int value=7",
        "      ... 3 more",
    ]


def test_print_data_dict():
    out = io.StringIO()
    flow = df.PrintData(df.DataFromList([{"y": np.int64(3)}], shuffle=False), file=out)
    list(flow)
    assert out.getvalue().splitlines() == [
        "[PrintData] datapoint 0", "  dict of len 1", "    ['y'] int64 value=np.int64(3)"]


def test_test_data_speed_returns_rate_and_loops_epochs():
    flow = df.TestDataSpeed(df.DataFromList([[i] for i in range(10)], shuffle=False), size=25)
    rate = flow.start(progress=False)
    assert rate > 0
    assert flow.result.items == 25
    assert flow.result.rate == rate


def test_start_test_is_the_old_name_of_start(capsys):
    seen = []
    src = df.MapData(df.DataFromList([[i] for i in range(10)], shuffle=False),
                     lambda dp: seen.append(dp[0]) or dp)
    flow = df.TestDataSpeed(src, size=12, warmup=3)
    rate = flow.start_test()  # tensorpack's scripts call it so
    assert flow.result.items == 12 and flow.result.rate == rate
    assert seen == [*range(10), *range(5)]  # 3 warm-up + 12 timed, across epochs
    assert "12/12" in capsys.readouterr().err


def test_test_data_speed_iter_yields_one_pass():
    flow = df.TestDataSpeed(df.DataFromList([[i] for i in range(4)], shuffle=False), size=3)
    assert list(flow) == [[0], [1], [2], [3]]


def test_test_data_speed_progress_bar(capsys):
    flow = df.TestDataSpeed(df.DataFromList([[i] for i in range(4)], shuffle=False), size=8)
    flow.start()
    err = capsys.readouterr().err
    assert "8/8" in err and "it/s" in err


def test_test_data_speed_validates():
    with pytest.raises(ValueError, match="`size` must be >= 1"):
        df.TestDataSpeed(df.DataFromList([[1]]), size=0)
