"""The bad-sample policy of every map stage: ``on_error="raise"|"skip"|"warn"``, ``max_errors``,
counts in ``state_dict()`` (so resume stays exact)."""

from __future__ import annotations

import logging

import pytest

import dataflow as df
from dataflow.errors import ErrorBudgetError, WorkerError
from dataflow.policy import make_policy
from tests.helpers import check_resume

N = 1000


def bad_one_percent(dp):
    """Raises on 1% of the inputs (those with i % 100 == 37)."""
    if dp[0] % 100 == 37:
        raise ValueError(f"damaged input {dp[0]}")
    return [dp[0] * 2]


def _src(n=N):
    return df.DataFromList([[i] for i in range(n)], shuffle=True, seed=4)


STAGES = {
    "MapData": lambda src, **kw: df.MapData(src, bad_one_percent, **kw),
    "MapDataComponent": lambda src, **kw: df.MapDataComponent(
        src, lambda x: bad_one_percent([x])[0], index=0, **kw),
    "MultiThreadMapData": lambda src, **kw: df.MultiThreadMapData(
        src, 2, bad_one_percent, strict=True, ordered=True, buffer_size=16, **kw),
    "MultiProcessMapDataZMQ": lambda src, **kw: df.MultiProcessMapDataZMQ(
        src, 2, bad_one_percent, strict=True, ordered=True, buffer_size=16, **kw),
}


def _expected(src):
    src.reset_state()
    return [2 * dp[0] for dp in src if dp[0] % 100 != 37]


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_skip_delivers_the_rest_counts_right_and_resumes_exactly(stage):
    with STAGES[stage](_src(), on_error="skip") as flow:
        flow.reset_state()
        got = [dp[0] for dp in flow]
        assert got == _expected(_src())
        assert flow.error_policy.state() == {"seen": N, "skipped": 10, "total": 10}
        assert flow.state_dict()["errors"] == {"seen": N, "skipped": 10, "total": 10}
        assert [dp[0] for dp in flow] != got  # the next epoch: a new order, 10 more skipped
        assert flow.error_policy.total == 20 and flow.error_policy.skipped == 10
    seq = check_resume(lambda: STAGES[stage](_src(), on_error="skip"), epochs=1, every=131)
    assert [dp[0] for dp in seq] == got


@pytest.mark.parametrize("stage", ["MapData", "MultiThreadMapData", "MultiProcessMapDataZMQ"])
def test_warn_logs_one_line_per_failure_naming_the_input(stage, caplog):
    with caplog.at_level(logging.WARNING, logger="dataflow"), \
            STAGES[stage](df.DataFromList([[i] for i in range(300)], shuffle=False),
                          on_error="warn") as flow:
        flow.reset_state()
        assert len(list(flow)) == 297
    lines = [r.getMessage() for r in caplog.records if r.name == "dataflow"]
    # one line per failure; a parallel mapper's may come in any order, each with the count so far
    heads = sorted(line.split("; ")[0] for line in lines)
    assert heads == [f"{stage}: skipped input index {i} (ValueError: damaged input {i})"
                     for i in (137, 237, 37)]
    assert sorted(line.split("; ")[1] for line in lines) == [
        f"{k} skipped in this epoch" for k in (1, 2, 3)]


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_past_the_budget_raises_a_summary(stage):
    with STAGES[stage](_src(), on_error="skip", max_errors=0.005) as flow:  # 5 of 1000
        flow.reset_state()
        with pytest.raises(ErrorBudgetError, match=rf"{stage}: 6 inputs failed in this epoch "
                                                   r"\(of \d+ seen\), more than max_errors=0\.005 "
                                                   r"of the epoch \(5 inputs\)\. First: input "
                                                   r"index \d+: ValueError: damaged input \d*37\. "
                                                   r"Last: input index \d+"):
            list(flow)


@pytest.mark.parametrize("stage", ["MultiThreadMapData", "MultiProcessMapDataZMQ"])
def test_raise_is_still_the_default(stage):
    with STAGES[stage](_src(), ) as flow:
        flow.reset_state()
        with pytest.raises(WorkerError, match=r"ValueError: damaged input \d*37"):
            list(flow)


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match=r"`on_error` must be one of 'raise', 'skip', 'warn'; "
                                         r"got 'ignore'"):
        make_policy("S", "ignore", None)
    for bad in (-1, 1.5, 0.0, True, "1%"):
        with pytest.raises(ValueError, match=r"`max_errors` must be None \(no limit\), an int "):
            make_policy("S", "skip", bad)
    with pytest.raises(ValueError, match=r"`max_errors` \(3\) needs on_error='skip' or 'warn'"):
        df.MapData(_src(), bad_one_percent, max_errors=3)
