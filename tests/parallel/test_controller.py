"""The worker-count controller, driven by synthetic measurements: a model of a stage (its rate
for a worker count, the consumer's speed, noise) stands in for the clock and the machine."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.parallel.autotuning.controller import Controller, Measurement


def model(per_worker: float, cores: float, consumer: float, noise: float = 0.0,
          seed: int = 0):
    """``measure(n)``: ``n`` workers each map ``per_worker``/s, together at most ``cores``
    workers' worth; the consumer takes at most ``consumer``/s and waits the rest."""
    rnd = random.Random(seed)

    def measure(n: int) -> Measurement:
        supply = per_worker * min(n, cores)
        rate = min(supply, consumer)
        wait = max(0.0, 1.0 - supply / consumer)
        jitter = 1 + rnd.uniform(-noise, noise)
        return Measurement(n, rate * jitter, min(1.0, wait * jitter))

    return measure


def run(ctl: Controller, measure, windows: int) -> list[int]:
    counts = []
    for _ in range(windows):
        counts.append(ctl.step(measure(ctl.workers)))
    return counts


def test_climbs_to_the_cores_and_stops() -> None:
    # the usual steps (no quick start): one or half as many more workers at a time
    ctl = Controller(1, 16, 1, quick_start=False)
    counts = run(ctl, model(100, 4, 1e9), 30)
    assert counts[-1] == 4
    assert ctl.converged_at is not None and ctl.converged_at <= 20
    # a big and a small probe past the knee, both reverted; none below it (the climb from 3
    # paid: 3 is a floor); nothing after
    assert [(d.old, d.new) for d in ctl.decisions] == [
        (1, 2), (2, 3), (3, 4), (4, 6), (6, 4), (4, 5), (5, 4)]
    assert ctl.converged_at == 15
    assert counts[ctl.converged_at:] == [4] * (30 - ctl.converged_at)


def test_consumer_bound_gives_cpu_back() -> None:
    # 3 workers keep up with the consumer (250/s); 8 were started: half are given back while
    # that keeps up, then 2 lose throughput (200/s) and 4 are taken back; one at a time from
    # there, down to 3
    ctl = Controller(1, 16, 8)
    counts = run(ctl, model(100, 16, 250), 40)
    assert [(d.old, d.new) for d in ctl.decisions] == [(8, 4), (4, 2), (2, 4), (4, 3)]
    assert [d.window for d in ctl.decisions] == [1, 3, 5, 7]
    assert ctl.decisions[0].reason == "consumer-bound (waited 0%): giving 4 worker(s) back"
    assert ctl.decisions[2].reason == "2 workers lost throughput (200.0 vs 250.0/s): back to 4"
    assert ctl.decisions[3].reason == "consumer-bound (waited 0%): giving 1 worker(s) back"
    assert counts[-30:] == [3] * 30
    assert ctl.converged_at == 9


def test_consumer_bound_halves_down_to_one() -> None:
    # one worker keeps up with a slow consumer: 16 -> 8 -> 4 -> 2 -> 1 in 4 give-backs (a
    # settling window and a measured one each), where one at a time took 15
    ctl = Controller(1, 32, 16)
    counts = run(ctl, model(100, 16, 50), 12)
    assert [(d.old, d.new) for d in ctl.decisions] == [(16, 8), (8, 4), (4, 2), (2, 1)]
    assert counts[-4:] == [1] * 4 and ctl.converged_at == 9


def test_worker_bound_past_the_cores_halves_then_steps() -> None:
    # 8 threads on 2 cores' worth of work: more do not pay (a big and a small probe), then
    # half are given back twice (no loss: a ceiling just above), 1 loses, 2 it is
    ctl = Controller(1, 32, 8, quick_start=False)
    counts = run(ctl, model(1200, 2, 1e9), 24)
    assert [(d.old, d.new) for d in ctl.decisions] == [
        (8, 12), (12, 8), (8, 9), (9, 8), (8, 4), (4, 2), (2, 1), (1, 2)]
    assert ctl.decisions[-1].reason == "1 workers lost throughput (1200.0 vs 2400.0/s): back to 2"
    assert counts[-6:] == [2] * 6 and ctl.converged_at == 17


@given(noise=st.floats(0, 0.03), seed=st.integers(0, 2**16))
@settings(max_examples=30, deadline=None)
def test_work_that_scales_to_the_maximum_stays_there(noise: float, seed: int) -> None:
    # waiting work: every thread adds its share up to the cap of 64; the climb reaches the
    # largest count below the cap, a step up that could not show a 5 % gain (63 -> 64) is not
    # tried, and the count the climb paid for in full is not walked back one at a time (each
    # thread fewer would cost 1.6 %, inside the noise); after `hold` windows one re-probe
    # (half the threads) loses and is taken back, and the count it returns to stays
    ctl = Controller(1, 64, 4, quick_start=False)
    counts = run(ctl, model(100, 1000, 1e9, noise=noise, seed=seed), 70)
    assert [(d.old, d.new, d.window) for d in ctl.decisions] == [
        (4, 6, 1), (6, 9, 3), (9, 13, 5), (13, 19, 7), (19, 28, 9), (28, 42, 11), (42, 63, 13),
        (63, 32, 55), (32, 63, 57)]
    assert counts[13:54] == [63] * 41 and counts[57:] == [63] * 13
    assert ctl.converged_at == 59


def test_a_climb_that_paid_less_than_its_share_is_walked_back() -> None:
    # 9 -> 13 workers on 10 cores' worth: +11 % for +44 % workers, a knee between them; 13 is
    # not kept: after a big and a small step up that do not pay, it gives back down to the
    # floor the climb found (one above 9)
    ctl = Controller(1, 16, 9, quick_start=False)
    counts = run(ctl, model(10, 10, 1e9), 30)
    assert [(d.old, d.new, d.window) for d in ctl.decisions] == [
        (9, 13, 1), (13, 16, 3), (16, 13, 5), (13, 14, 7), (14, 13, 9), (13, 10, 11)]
    assert counts[11:] == [10] * 19 and ctl.converged_at == 13


def test_a_failed_give_back_is_a_floor_that_expires() -> None:
    # the floor (the count that lost) holds for `hold` windows: no give-back below it; then
    # the controller probes again, one at a time, and finds the same floor
    ctl = Controller(1, 16, 4, hold=10)
    measure = model(100, 16, 250)
    run(ctl, measure, 10)
    assert ctl.workers == 3 and ctl._floor == (2, 3)
    counts = run(ctl, measure, 14)
    moves = [(d.old, d.new, d.window) for d in ctl.decisions]
    assert moves == [(4, 2, 1), (2, 4, 3), (4, 3, 5), (3, 2, 13), (2, 3, 15)]
    assert counts[-9:] == [3] * 9


@settings(max_examples=80, deadline=None)
@given(needed=st.integers(1, 32), extra=st.integers(0, 31), noise=st.floats(0, 0.01),
       seed=st.integers(0, 2**16))
def test_give_backs_keep_up_and_stop_at_what_is_needed(needed: int, extra: int, noise: float,
                                                      seed: int) -> None:
    """Consumer-bound from any start above what keeps up: the settled count keeps the
    consumer's rate but for the allowed loss (4 %, plus the noise on both figures compared),
    and runs no more workers than needed."""
    per = 100.0
    consumer = per * needed - 1  # `needed` workers just keep up, `needed - 1` do not
    ctl = Controller(1, 32, min(32, needed + extra), hold=1000)
    run(ctl, model(per, 64, consumer, noise=noise, seed=seed), 80)
    assert ctl.workers <= needed
    assert min(per * ctl.workers, consumer) >= consumer * (1 - 0.04) * (1 - noise) / (1 + noise)
    assert ctl.converged_at is not None


def test_never_exceeds_the_maximum_and_follows_a_lowered_budget() -> None:
    ctl = Controller(1, 3, 1)
    assert max(run(ctl, model(100, 16, 1e9), 20)) == 3
    ctl.maximum = 2
    assert ctl.step(Measurement(3, 300, 0.9)) == 2
    assert ctl.decisions[-1].reason == "budget lowered"


def test_window_after_a_change_is_not_measured() -> None:
    ctl = Controller(1, 8, 1, quick_start=False)
    assert ctl.step(Measurement(1, 100, 0.9)) == 2
    # the settling window: even a terrible figure changes nothing
    assert ctl.step(Measurement(2, 1, 0.9)) == 2
    assert ctl.step(Measurement(2, 200, 0.9)) == 3


@settings(max_examples=60, deadline=None)
@given(per=st.floats(10, 1000), cores=st.integers(1, 12), consumer_x=st.floats(0.2, 30),
       start=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_stable_and_thrifty_under_noise(per: float, cores: int, consumer_x: float, start: int,
                                        seed: int) -> None:
    """With 2 % noise: at most one round of probes per hold period once converged (no
    oscillation), within 10 % of the best throughput, and no more workers than the best count
    needs plus one probe."""
    consumer = per * consumer_x
    ctl = Controller(1, 16, start, hold=40)
    measure = model(per, cores, consumer, noise=0.02, seed=seed)
    run(ctl, measure, 60)
    best = min(per * cores, consumer)
    needed = min(cores, int(-(-consumer // per)))  # the fewest workers reaching `best`
    tail = run(ctl, measure, 40)
    changes = sum(1 for a, b in itertools.pairwise(tail) if a != b)
    # at most one re-probe per hold period: a big and a small step up and one down, each
    # reverted
    assert changes <= 6
    # the settled count: enough for the best rate, not wasteful
    settled = max(set(tail), key=tail.count)
    assert min(per * min(settled, cores), consumer) >= 0.9 * best
    assert settled <= needed + 1


def test_state_is_plain_data() -> None:
    ctl = Controller(1, 4, 1, quick_start=False)
    run(ctl, model(100, 4, 1e9), 12)
    state = ctl.state()
    assert state["workers"] == 4 and state["maximum"] == 4 and state["window"] == 12
    assert state["decisions"][0] == {"window": 1, "old": 1, "new": 2, "rate": 100.0,
                                     "reason": "worker-bound (consumer waited 100%): trying more"}


def test_a_consumer_bound_stage_that_may_move_moves_to_processes_once() -> None:
    # a consumer at 50/s, 2 threads: one is given back (window 1), the window after the change
    # is not measured (2); consumer-bound at one worker in windows 3-6: the work moves at 6,
    # keeping the count; nothing after it
    ctl = Controller(1, 16, 2, move_after=4)
    counts = run(ctl, model(100, 16, 50), 30)
    assert counts == [1] * 30 and ctl.backend == "process" and ctl.move_after == 0
    assert [(d.window, d.old, d.new) for d in ctl.decisions] == [(1, 2, 1), (6, 1, 1)]
    assert ctl.decisions[1].reason == (
        "consumer-bound at 1 worker(s) for 4 windows: the work moves to processes (the "
        "consumer's own Python keeps the GIL)")
    assert ctl.converged_at == 8 and ctl.state()["backend"] == "process"


def test_only_consecutive_consumer_bound_windows_at_the_minimum_move_the_work() -> None:
    bound, waited = Measurement(1, 50.0, 0.0), Measurement(1, 50.0, 0.3)
    ctl = Controller(1, 1, 1, move_after=3)  # (one worker at most: a wait cannot climb)
    steps = [bound, bound, waited, bound, bound]
    assert [ctl.step(m) for m in steps] == [1] * 5 and ctl.backend == "thread"
    ctl.step(bound)
    assert ctl.backend == "process" and [d.window for d in ctl.decisions] == [6]
    # a stage that may not move (move_after 0: a process stage, a pinned back end) never does
    still = Controller(1, 16, 1)
    assert run(still, model(100, 16, 50), 30) == [1] * 30
    assert still.backend == "thread" and still.decisions == []
    # a move that failed: the stage stays on threads and does not try again
    ctl = Controller(1, 1, 1, move_after=1)
    ctl.step(bound)
    ctl.moved_back()
    assert [ctl.step(bound) for _ in range(5)] == [1] * 5
    assert ctl.backend == "thread" and len(ctl.decisions) == 1


def test_quick_start_climbs_by_what_the_consumer_waited() -> None:
    # waiting work, 256 workers allowed, a consumer that never keeps up: it waited all of
    # each window, so each climb is the largest (4x) and pays in full; the maximum ends the
    # quick start, and the count the last climb paid for in full is not walked back
    ctl = Controller(1, 256, 8)
    assert ctl.starting
    counts = run(ctl, model(100, 1000, 1e9), 20)
    assert [(d.window, d.old, d.new) for d in ctl.decisions] == [
        (1, 8, 32), (3, 32, 128), (5, 128, 256)]
    assert ctl.decisions[0].reason == "worker-bound (consumer waited 100%): trying more"
    assert counts[5:] == [256] * 15 and ctl.converged_at == 7 and not ctl.starting


def test_quick_start_climbs_no_more_than_the_consumer_waited() -> None:
    # a consumer that waited half of the window at 4 workers (400/s of the 799/s it takes):
    # twice as many; 8 keep up (it no longer waits): the usual give-backs from there find
    # that 7 do not (the count the climb came from, 4, is a floor)
    ctl = Controller(1, 64, 4)
    counts = run(ctl, model(100, 1000, 799), 20)
    assert [(d.window, d.old, d.new) for d in ctl.decisions] == [
        (1, 4, 8), (3, 8, 5), (5, 5, 8), (7, 8, 7), (9, 7, 8)]
    assert counts[9:] == [8] * 11 and ctl.converged_at == 11
    # a consumer that waited little: the usual step (half as many more), not less
    small = Controller(1, 64, 8)
    assert small.step(Measurement(8, 800.0, 0.1)) == 12


def test_quick_start_ends_where_a_climb_pays_less_than_in_full() -> None:
    # 200 workers' worth of work: 128 -> 256 gains 56 % for twice the workers (a knee between
    # them): the quick start ends there; the give-back probe from the maximum waits for the
    # window after (so that a short pass runs at the maximum); half of them lose, and from
    # there the give-backs bisect towards the floor: 193 keeps the rate but for 3.5 % (within
    # the allowed 4 %), 161 loses (a floor, and a loss that says each worker between them
    # paid in full): it settles at 193 (one at a time, it walked 256, 255, 254, ... for
    # minutes of windows)
    ctl = Controller(1, 256, 8)
    counts = run(ctl, model(100, 200, 1e9), 40)
    assert [(d.window, d.old, d.new) for d in ctl.decisions] == [
        (1, 8, 32), (3, 32, 128), (5, 128, 256), (8, 256, 129), (10, 129, 256),
        (12, 256, 193), (14, 193, 161), (16, 161, 193)]
    assert ctl.decisions[3].reason == "no more workers to try: trying fewer"
    assert counts[5:7] == [256, 256] and not ctl.starting
    assert counts[16:] == [193] * 24 and ctl.converged_at == 18


def test_quick_start_ends_where_a_climb_does_not_pay() -> None:
    # 8 workers on 2 cores' worth: 32 do no better; back to 8, and the usual steps (and
    # windows) from there, as without the quick start, to 2
    ctl = Controller(1, 32, 8)
    counts = run(ctl, model(1200, 2, 1e9), 26)
    assert [(d.window, d.old, d.new) for d in ctl.decisions] == [
        (1, 8, 32), (3, 32, 8), (5, 8, 12), (7, 12, 8), (9, 8, 9), (11, 9, 8), (13, 8, 4),
        (15, 4, 2), (17, 2, 1), (19, 1, 2)]
    assert ctl.decisions[1].reason == "32 workers gave no more than 8 (2400.0 vs 2400.0/s)"
    assert counts[19:] == [2] * 7 and not ctl.starting


def test_quick_start_ends_when_the_consumer_is_the_bottleneck() -> None:
    # consumer-bound from the first window: the usual give-backs; a restored controller
    # (end_start) has none
    ctl = Controller(1, 16, 8)
    assert ctl.step(Measurement(8, 250.0, 0.0)) == 4 and not ctl.starting
    restored = Controller(1, 16, 8)
    restored.end_start()
    assert restored.step(Measurement(8, 800.0, 1.0)) == 12
