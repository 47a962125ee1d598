"""The worker-count controller, driven by synthetic measurements: a model of a stage (its rate
for a worker count, the consumer's speed, noise) stands in for the clock and the machine."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.parallel._controller import Controller, Measurement


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
    ctl = Controller(1, 16, 1)
    counts = run(ctl, model(100, 4, 1e9), 30)
    assert counts[-1] == 4
    assert ctl.converged_at is not None and ctl.converged_at <= 20
    # a big and a small probe past the knee and one below it, all reverted; nothing after
    assert [(d.old, d.new) for d in ctl.decisions] == [
        (1, 2), (2, 3), (3, 4), (4, 6), (6, 4), (4, 5), (5, 4), (4, 3), (3, 4)]
    assert counts[ctl.converged_at:] == [4] * (30 - ctl.converged_at)


def test_consumer_bound_gives_cpu_back() -> None:
    # 3 workers keep up with the consumer (250/s); 8 were started
    ctl = Controller(1, 16, 8)
    counts = run(ctl, model(100, 16, 250), 40)
    assert counts[-1] == 3
    assert [(d.old, d.new) for d in ctl.decisions][-1] == (2, 3)
    assert all("consumer-bound" in d.reason for d in ctl.decisions[:5])
    assert counts[-10:] == [3] * 10


def test_never_exceeds_the_maximum_and_follows_a_lowered_budget() -> None:
    ctl = Controller(1, 3, 1)
    assert max(run(ctl, model(100, 16, 1e9), 20)) == 3
    ctl.maximum = 2
    assert ctl.step(Measurement(3, 300, 0.9)) == 2
    assert ctl.decisions[-1].reason == "budget lowered"


def test_window_after_a_change_is_not_measured() -> None:
    ctl = Controller(1, 8, 1)
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
    ctl = Controller(1, 4, 1)
    run(ctl, model(100, 4, 1e9), 12)
    state = ctl.state()
    assert state["workers"] == 4 and state["maximum"] == 4 and state["window"] == 12
    assert state["decisions"][0] == {"window": 1, "old": 1, "new": 2, "rate": 100.0,
                                     "reason": "worker-bound (consumer waited 100%): trying more"}
