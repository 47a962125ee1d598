"""Messages a service must survive: every operation of the protocol with every field replaced by
values of other types, sizes and ranges, sent to the dispatcher and to a worker (real sockets on
127.0.0.1 and abstract Unix sockets, real worker processes). After them the service still serves
exact epochs, replaces a killed worker and answers ``service status``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import msgpack
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataflow.service import DataService, ServiceData, ServiceError, protocol
from tests.helpers import wait_until
from tests.service import pipelines

ROOT = Path(__file__).resolve().parents[2]

#: a valid message of each operation a service receives, by receiver
VALID = {
    "dispatcher": {
        "hello": {"job": "j", "rank": 0, "world_size": 1},
        "workers": {"job": "j", "rank": 0, "world_size": 1},
        "bye": {"job": "j", "rank": 0, "world_size": 1},
        "stats": {},
        "report": {"job": "j", "rank": 0, "world_size": 1, "received": 3, "waited": 0.5,
                   "elapsed": 1.0, "bytes": 10, "in_flight": 1, "ready": 0, "skipped": 0},
    },
    "worker": {"map": {"j": "", "items": [[0, 1, 1]], "ring": "dataflow-x"}},
}

_INTS = st.one_of(st.integers(-(1 << 63), (1 << 64) - 1), st.sampled_from(
    [-1, 0, 1, 1 << 31, 1 << 62, (1 << 64) - 1, -(1 << 63)]))
_SCALARS = st.one_of(st.none(), st.booleans(), _INTS, st.floats(), st.text(max_size=40),
                     st.binary(max_size=40), st.sampled_from(["x" * 5000, b"\x00" * 70000]))
#: anything msgpack carries: scalars, lists and maps of them, nested
HOSTILE = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), _INTS), inner,
                                                  max_size=4)), max_leaves=8)


def _message(receiver: str, op: str, field: str | None, value: object) -> bytes:
    msg: dict = {"op": op, **VALID[receiver][op]}
    if field == "op":
        msg["op"] = value
    elif field is not None:
        msg[field] = value
    return msgpack.packb(msg, use_bin_type=True)


@st.composite
def hostile_messages(draw: st.DrawFn) -> tuple[str, bytes]:
    receiver = draw(st.sampled_from(sorted(VALID)))
    op = draw(st.sampled_from(sorted(VALID[receiver])))
    fields = ["op", "extra", *protocol.OPS[receiver][op]]
    field = draw(st.sampled_from(fields))
    return receiver, _message(receiver, op, field, draw(HOSTILE))


def _epoch(address: str) -> list[int]:
    c = ServiceData(address, rank=0, world_size=1, job="check", timeout=20)
    c.reset_state()
    try:
        return [dp[0] for dp in c]
    finally:
        c.close()


def test_every_operation_with_hostile_fields_never_stops_the_service():
    with DataService(pipelines.source(40), pipelines.tag, num_workers=2, seed=5,
                     shuffle=False) as svc:
        ctx = zmq.Context()
        socks = {"dispatcher": ctx.socket(zmq.DEALER), "worker": ctx.socket(zmq.DEALER)}
        socks["dispatcher"].connect(svc.address)
        socks["worker"].connect(svc._workers_now()[0].address)
        sent = Counter()

        @settings(max_examples=150, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(hostile_messages())
        def send(message: tuple[str, bytes]) -> None:
            receiver, payload = message
            socks[receiver].send(payload)
            sent[receiver] += 1

        send()
        try:
            # every one was taken (dropped, answered or used) and the service goes on
            assert _epoch(svc.address) == list(range(40))
            assert svc.stats()["dropped"] > 0
            victim = svc.worker_pids()[1]
            os.kill(victim, signal.SIGKILL)
            assert wait_until(lambda: svc.stats()["restarts"] == 1, 20)
            assert _epoch(svc.address) == list(range(40))
            out = subprocess.run([sys.executable, "-m", "dataflow", "service", "status",
                                  svc.address, "--json"], cwd=ROOT, capture_output=True,
                                 text=True, timeout=60, check=False)
            assert out.returncode == 0, out.stderr
        finally:
            for s in socks.values():
                s.close(linger=0)
            ctx.term()
    assert sent["dispatcher"] > 0 and sent["worker"] > 0


def test_a_report_of_the_wrong_type_then_stats_leaves_the_dispatcher_serving():
    # (once, a report whose `received` was a str ended the dispatcher's thread at the next
    # stats(): no consumer served, no worker replaced, no status)
    with DataService(pipelines.source(20), pipelines.tag, num_workers=1, seed=5,
                     shuffle=False) as svc:
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.connect(svc.address)
        s.send(protocol.encode({"op": "report", "received": "many", "job": "x", "rank": 0,
                                "world_size": 1}))
        s.send(protocol.encode({"op": "stats"}))
        assert s.poll(10_000)
        assert protocol.decode(s.recv())["op"] == "stats"
        s.close(linger=0)
        ctx.term()
        stats = svc.stats()
        assert stats["dropped_by_cause"] == {"report.received: wrong type or range": 1}
        assert stats["dropped"] == 1
        assert _epoch(svc.address) == list(range(20))


def test_a_worker_answers_only_indices_of_its_pipeline():
    with DataService(pipelines.source(10), pipelines.tag, num_workers=1, seed=5,
                     shuffle=False) as svc:
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.connect(svc._workers_now()[0].address)
        for index in (-1, 10, 1 << 40):
            s.send(msgpack.packb({"op": "map", "j": "", "items": [[0, 0, index]]}))
        s.send(protocol.encode({"op": "map", "j": "", "items": [[0, 3, 9]]}))
        assert s.poll(10_000)
        answer = protocol.decode_frames(s.recv_multipart())
        assert answer["op"] == "out" and [o[:2] for o in answer["o"]] == [[0, 3]]
        assert answer["o"][0][2][0] == 9  # (the last index, asked by its number)
        assert not s.poll(300)  # nothing for the indices out of range
        s.close(linger=0)
        ctx.term()
        assert wait_until(lambda: svc.stats()["dropped"] == 3, 10)


#: a valid message of each operation a consumer's control socket receives
CONSUMER_VALID = {
    "config": {"instance": "i", "n": 4, "seed": 1, "shuffle": False, "jobs": {},
               "workers": [], "service": "s", "crashed": [],
               "identity": {"seed": 1, "n": 4}},
    "stats": {"stats": {}},
    "closed": {"service": "s"},
    "refused": {"error": "e"},
}


@st.composite
def hostile_answers(draw: st.DrawFn) -> bytes:
    op = draw(st.sampled_from(sorted(CONSUMER_VALID)))
    field = draw(st.sampled_from(["op", "extra", *protocol.OPS["consumer"][op]]))
    msg: dict = {"op": op, **CONSUMER_VALID[op]}
    if op in ("closed", "refused") and field not in ("op", "extra"):
        field = "extra"  # (a valid one ends the consumer, as it should: keep them invalid)
    msg[field] = draw(HOSTILE)
    return msgpack.packb(msg, use_bin_type=True)


def _connect(c: ServiceData) -> str | None:
    """Connect ``c``: None, or the ServiceError it raised."""
    try:
        c.reset_state()
    except ServiceError as e:
        return str(e)
    return None


def test_a_consumer_drops_hostile_answers_of_its_dispatcher():
    # whatever its dispatcher answers, a consumer uses only a config of the protocol's types,
    # or raises ServiceError (another pipeline); never another exception
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    valid = msgpack.packb({"op": "config", **CONSUMER_VALID["config"]}, use_bin_type=True)
    dropped = []
    earlier: set[bytes] = set()  # the router's identities of earlier examples' consumers
    try:
        @settings(max_examples=60, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(st.lists(hostile_answers(), min_size=1, max_size=4))
        def connect(answers: list[bytes]) -> None:
            c = ServiceData(f"tcp://127.0.0.1:{port}", rank=0, world_size=1, timeout=20)

            def answer() -> None:
                # this example's consumer: a message of an earlier one (its goodbye, sent as
                # it closed, can arrive after that example drained the socket) is skipped
                while True:
                    assert router.poll(20_000)
                    ident = router.recv_multipart()[0]
                    if ident not in earlier:
                        break
                earlier.add(ident)
                for frame in [*answers, valid]:
                    router.send_multipart([ident, frame])

            t = threading.Thread(target=answer)
            t.start()
            try:
                error = _connect(c)
                if error is not None:
                    assert "now serves another pipeline" in error
                else:
                    assert c._config is not None
                    protocol.check(c._config, "consumer")
                    assert len(c) == c._config["n"]
            finally:
                t.join()
                dropped.append(c._link.dropped)
                c.close()
                while router.poll(0):  # (a hello asked again, a goodbye)
                    router.recv_multipart()

        connect()
    finally:
        router.close(linger=0)
        ctx.term()
    assert sum(dropped) > 0
