"""One pipeline identity at an address, and the bad-sample policy of the service's consumers:
real services, worker processes and consumers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

import pytest

from dataflow.errors import ErrorBudgetError, StateMismatchError, WorkerError
from dataflow.service import DataService, ServiceData, ServiceError
from tests.helpers import free_port, wait_until
from tests.service import pipelines
from tests.service.helpers import serve


def _consumer(address, rank=0, world=1, **kw):
    c = ServiceData(address, rank=rank, world_size=world, timeout=kw.pop("timeout", 20), **kw)
    c.reset_state()
    return c


def _read(c, got, on_item=None):
    for k, dp in enumerate(c):
        got.append(dp[0])
        if on_item is not None:
            on_item(k)


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    proc.stdout.close()


def test_another_pipeline_restarted_at_the_address_is_an_error_not_mixed_data():
    address = f"tcp://127.0.0.1:{free_port()}"
    env = {"SVC_N": "200", "SVC_SLEEP": "0.005", "SVC_SEED": "5"}
    procs = [serve(address, env)]
    try:
        c = _consumer(address)
        got: list[int] = []

        def restart(k):
            if k == 20:  # (another seed this time)
                os.kill(procs[0].pid, signal.SIGKILL)
                procs[0].wait(timeout=10)
                procs.append(serve(address, {**env, "SVC_SEED": "6"}))

        with pytest.raises(ServiceError, match=rf"the DataService at {address} now serves "
                           r"another pipeline for job 'default' than the one this consumer "
                           r"read \(seed: 5 -> 6\)"):
            _read(c, got, restart)
        c.close()
    finally:
        for p in procs:
            _stop(p)
    assert 21 <= len(got) < 200


def test_a_state_saved_against_one_pipeline_is_refused_by_another():
    states = []
    for seed in (5, 6):
        with DataService(pipelines.source(50), pipelines.tag, num_workers=1,
                         seed=seed) as svc:
            c = _consumer(svc.address)
            if not states:
                for k, _dp in enumerate(c):
                    if k == 9:
                        break
                states.append(json.loads(json.dumps(c.state_dict())))
                c.close()
                continue
            with pytest.raises(StateMismatchError, match=r"serves another pipeline than the "
                               r"saved run's \(seed: 5 -> 6\)"):
                c.load_state_dict(states[0])
            c.close()
    assert states[0]["pipeline"]["seed"] == 5
    assert states[0]["pipeline"]["map_func"].startswith("tests.service.pipelines.tag #")


def test_a_failed_input_is_raised_at_its_turn_naming_index_and_position():
    # (shuffled: the dataset index and the epoch position differ)
    with DataService(pipelines.source(60), pipelines.poison, num_workers=2, seed=5) as svc:
        c = _consumer(svc.address, prefetch=64)
        order = c._job()  # (the plan the consumer reads)
        got: list[int] = []
        with pytest.raises(WorkerError) as err:
            _read(c, got)
        c.close()
    first_bad = next(k for k, i in enumerate(_order(order, 60)) if i in pipelines.POISON)
    bad = _order(order, 60)[first_bad]
    assert got == _order(order, 60)[:first_bad]  # every output before it, then the error
    assert err.value.index == bad
    assert f"epoch 0 position {first_bad}" in str(err.value)
    assert f"input index {bad}" in str(err.value)


def _order(cfg, n):
    from dataflow.service import plan

    return [int(i) for i in plan.rank_steps(n, cfg["seed"], 0, cfg["shuffle"], 0, 1)[1]]


def test_skipped_inputs_keep_every_rank_at_the_same_count(caplog):
    # every way a map call fails: it ends its process (asked twice, never a third time), exits,
    # gives an output that cannot be encoded or decoded, raises
    with DataService(pipelines.source(60), pipelines.poison, num_workers=2, seed=5,
                     shuffle=False) as svc:
        readers = [_consumer(svc.address, r, 2, on_error="skip", max_errors=6)
                   for r in range(2)]
        outs = [[list(dp) for dp in c] for c in readers]
        states = [c.state_dict() for c in readers]
        # (a consumer reports its figures at the end of an epoch)
        assert wait_until(lambda: sorted(c["skipped"] for c in svc.stats()["consumers"])
                          == [0, 6], 10)
        stats = svc.stats()
        for c in readers:
            c.close()
    assert [len(x) for x in outs] == [30, 30]
    for r, out in enumerate(outs):
        want = []
        for i in range(r, 60, 2):
            want.append([i, "ok"] if i not in pipelines.POISON else want[-1])
        assert out == want, r  # (a skipped input's turn gives the rank's last output again)
    assert [s["errors"]["skipped"] for s in states] == [0, 6]
    assert stats["restarts"] == 2  # (datapoint 11 ended two processes; not asked a third time)
    assert "input 11 (epoch 0, position 11) ended a worker's process" in caplog.text


def test_past_max_errors_the_epoch_ends_with_the_budget_error():
    with DataService(pipelines.source(40), pipelines.poison, num_workers=1, seed=5,
                     shuffle=False) as svc:
        c = _consumer(svc.address, on_error="skip", max_errors=2)
        got: list[int] = []
        with pytest.raises(ErrorBudgetError, match=r"ServiceData: 3 inputs failed in this "
                           r"epoch .* First: input index 11: WorkerCrash"):
            _read(c, got)
        c.close()
    assert len(got) == 17  # (through datapoint 17's turn: 11 and 13 stood in for)
    assert Counter(got)[10] == 2 and Counter(got)[12] == 2


def test_workers_that_end_again_and_again_start_later_each_time(caplog):
    with DataService(pipelines.source(3), pipelines.crash_below_2, num_workers=1,
                     shuffle=False) as svc:
        c = _consumer(svc.address, on_error="skip")
        got = [dp[0] for dp in c]
        c.close()
        restarts = svc.stats()["restarts"]
    assert got == [2, 2, 2]  # (0 and 1 skipped: the first output stands in for them)
    assert restarts == 4  # (each asked twice, never a third time)
    waits = [r.getMessage().rsplit(" in ", 1)[1] for r in caplog.records
             if "the next one starts in" in r.getMessage()]
    assert waits == ["0.2 s", "0.4 s", "0.8 s"]
