"""The data service with real processes and sockets (127.0.0.1 only): exact epochs, faults,
jobs, security. Every fault test counts missing and repeated outputs (both must be 0) and
measures the consumer's longest stall."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import zmq

import dataflow as df
from dataflow.errors import WorkerError
from dataflow.service import DataService, ServiceData, ServiceError
from tests.helpers import free_port, timed, wait_until
from tests.service import pipelines
from tests.service.helpers import serve

ROOT = Path(__file__).resolve().parents[2]


def _service(n=pipelines.N, workers=2, shuffle=True, seed=5, **kw):
    return DataService(pipelines.source(n), pipelines.tag, num_workers=workers, seed=seed,
                       shuffle=shuffle, **kw)


def _consumer(address, rank=0, world=1, **kw):
    c = ServiceData(address, rank=rank, world_size=world, timeout=kw.pop("timeout", 20), **kw)
    c.reset_state()
    return c


def _reference(n=pipelines.N, seed=5):
    """What a strict, ordered, seeded parallel mapper yields over the same source."""
    m = df.MultiProcessMapDataZMQ(pipelines.source(n), 2, pipelines.tag, strict=True,
                                  ordered=True, seed=seed)
    m.reset_state()
    out = [list(dp) for dp in m] + [list(dp) for dp in m]
    m.close()
    return out[:n], out[n:]


def test_one_rank_receives_what_a_seeded_ordered_mapper_yields():
    want0, want1 = _reference()
    with _service(shuffle=False) as svc:
        c = _consumer(svc.address)
        assert len(c) == pipelines.N
        assert [list(dp) for dp in c] == want0
        assert [list(dp) for dp in c] == want1  # the next epoch: keys of epoch 1
        c.close()


@pytest.mark.parametrize(("world", "partial"), [(3, "drop"), (3, "pad"), (4, "drop")])
def test_ranks_share_each_epoch_exactly(world, partial):
    with _service(n=50, workers=2) as svc:
        consumers = [_consumer(svc.address, r, world, partial=partial) for r in range(world)]
        per_rank = [[dp[0] for dp in c] for c in consumers]
        again = [[dp[0] for dp in c] for c in consumers]
        for c in consumers:
            c.close()
    assert {len(x) for x in per_rank} == {50 // world if partial == "drop" else -(-50 // world)}
    seen = Counter(i for x in per_rank for i in x)
    if partial == "drop":
        assert max(seen.values()) == 1 and len(seen) == 50 - 50 % world
    else:
        assert set(seen) == set(range(50))
    assert per_rank != again  # a new permutation for epoch 1 (another remainder left out)
    seen_again = Counter(i for x in again for i in x)
    assert sum(seen_again.values()) == sum(seen.values())
    assert max(seen_again.values()) == max(seen.values())


def test_the_order_does_not_depend_on_the_pool():
    outs = []
    for workers in (1, 3):
        with _service(n=40, workers=workers) as svc:
            c = _consumer(svc.address)
            outs.append([list(dp) for dp in c])
            c.close()
    assert outs[0] == outs[1]


def test_a_worker_killed_mid_epoch_loses_and_repeats_nothing(monkeypatch):
    monkeypatch.setenv("SVC_SLEEP", "0.005")
    with _service(n=300, workers=2) as svc:
        c = _consumer(svc.address)
        victim = svc.worker_pids()[0]

        def kill(k):
            if k == 60:
                os.kill(victim, signal.SIGKILL)

        got, stall = timed(c, kill)
        assert svc.stats()["restarts"] == 1
        c.close()
    ids = Counter(dp[0] for dp in got)
    assert len(ids) == 300 and max(ids.values()) == 1  # 0 missing, 0 repeated
    assert stall < 5.0, stall


def test_a_frozen_worker_is_replaced_and_nothing_is_lost(monkeypatch, caplog):
    # SIGSTOP: the process lives, its sockets stay open, it answers nothing (as a machine cut
    # off without its connections closing): after worker_timeout it is killed and replaced
    monkeypatch.setenv("SVC_SLEEP", "0.005")
    want = _reference(300)[0]
    with _service(n=300, workers=2, shuffle=False, worker_timeout=1.5) as svc:
        c = _consumer(svc.address)
        victim = svc.worker_pids()[0]

        def freeze(k):
            if k == 60:
                os.kill(victim, signal.SIGSTOP)

        try:
            got, stall = timed(c, freeze)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
        stats = svc.stats()
        c.close()
    assert [list(dp) for dp in got] == want  # 0 missing, 0 repeated, the same outputs
    assert stats["restarts"] == 1
    assert not psutil.pid_exists(victim)  # (killed while stopped, and reaped)
    assert 1.5 <= stall < 5.0, stall  # (the timeout, then the replacement's start)
    print(f"worker frozen: longest stall {stall:.3f} s")
    lost = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert len(lost) == 1 and "no sign of life for 1." in lost[0], lost


def test_a_map_call_that_holds_the_gil_is_not_taken_for_a_frozen_worker():
    # no heartbeat while the call computes with the GIL held, but CPU time: a sign of life
    svc = DataService(pipelines.source(8), pipelines.gil_hog_at_3, num_workers=1,
                      shuffle=False, worker_timeout=1.0)
    with svc:
        c = _consumer(svc.address, timeout=60)
        got, stall = timed(c)
        assert svc.stats()["restarts"] == 0
        c.close()
    assert [dp[0] for dp in got] == list(range(8))
    assert stall > 1.0, stall  # (the call did outlast worker_timeout)


def test_a_map_call_that_never_returns_ends_the_wait_with_an_error():
    # its process beats (it is not frozen): the consumer's timeout, counted from the workers'
    # last answer (the dispatcher keeps answering), ends the wait
    svc = DataService(pipelines.source(20), pipelines.stuck_at_5, num_workers=1, shuffle=False)
    with svc:
        c = _consumer(svc.address, timeout=2)
        got: list[int] = []
        t0 = time.monotonic()

        def read() -> None:
            for dp in c:
                got.append(dp[0])

        # (datapoint 4 may be held too: a worker answers a turn of up to 4 items at once)
        with pytest.raises(ServiceError, match=f"the DataService at {svc.address} gave nothing "
                           "for 2 s ") as err:
            read()
        waited = time.monotonic() - t0
        assert svc.stats()["restarts"] == 0
        c.close()
    assert got in ([0, 1, 2, 3], [0, 1, 2, 3, 4])
    assert f"output {len(got)})" in str(err.value)
    assert 2.0 <= waited < 6.0, waited


def test_worker_timeout_and_timeout_are_checked():
    for bad in (0, -1, "10", True):
        with pytest.raises(ValueError, match=f"`worker_timeout` must be a positive number of "
                           f"seconds or None \\(never\\), got {bad!r}"):
            _service(worker_timeout=bad)
    assert _service(worker_timeout=None).worker_timeout is None
    assert _service(worker_timeout=3).worker_timeout == 3.0
    with pytest.raises(ValueError, match=r"`timeout` must be a positive number of seconds, "
                       r"got 0\."):
        ServiceData("tcp://127.0.0.1:1", timeout=0)


def test_a_consumer_restarted_from_its_state_continues_exactly():
    with _service(n=80) as svc:
        ref = _consumer(svc.address)
        want = [list(dp) for dp in ref]
        ref.close()
        first = _consumer(svc.address)
        head = []
        for dp in first:
            head.append(list(dp))
            if len(head) == 30:
                break
        state = json.loads(json.dumps(first.state_dict()))
        first.close()  # (as if it had been killed)
        second = _consumer(svc.address)
        second.load_state_dict(state)
        rest = [list(dp) for dp in second]
        second.close()
    assert head + rest == want


def test_a_killed_consumer_process_resumes_from_its_checkpoint(tmp_path):
    """A real consumer process SIGKILLed mid-epoch; a new one resumes from its last saved
    state; another rank reads its own share meanwhile, untouched."""
    ckpt = tmp_path / "state.json"
    script = (
        "import json, os, sys, time\n"
        "from dataflow.service import ServiceData\n"
        "c = ServiceData(sys.argv[1], rank=0, world_size=2, timeout=20)\n"
        "c.reset_state()\n"
        "for k, dp in enumerate(c, 1):\n"
        "    tmp = sys.argv[2] + '.tmp'\n"
        "    with open(tmp, 'w') as f:\n"
        "        json.dump({'state': c.state_dict(), 'last': int(dp[0])}, f)\n"
        "    os.replace(tmp, sys.argv[2])\n"
        "    if k == 20:\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(60)\n"
    )
    with _service(n=100) as svc:
        ref = _consumer(svc.address, 0, 2)
        want = [dp[0] for dp in ref]
        ref.close()
        other = _consumer(svc.address, 1, 2)
        proc = subprocess.Popen([sys.executable, "-c", script, svc.address, str(ckpt)],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            proc.stdout.close()
        theirs = [dp[0] for dp in other]  # the other rank, unaffected
        saved = json.loads(ckpt.read_text())
        again = _consumer(svc.address, 0, 2)
        again.load_state_dict(saved["state"])
        rest = [dp[0] for dp in again]
        again.close()
        other.close()
    assert saved["last"] == want[19] and rest == want[20:]
    assert sorted(theirs + want) == list(range(100))


def test_all_ranks_restarted_with_another_world_size():
    with _service(n=90) as svc:
        old = [_consumer(svc.address, r, 2) for r in range(2)]
        before = []
        for c in old:
            for k, dp in enumerate(c, 1):
                before.append(dp[0])
                if k == 10:
                    break
        states = [json.loads(json.dumps(c.state_dict())) for c in old]
        for c in old:
            c.close()
        new = [_consumer(svc.address, r, 3) for r in range(3)]
        for c in new:
            c.load_state_dict(states[0])
        after = [[dp[0] for dp in c] for c in new]
        assert {len(x) for x in after} == {(90 - 20) // 3}
        nxt = [len(list(c)) for c in new]  # then whole epochs of the new world size
        for c in new:
            c.close()
    got = Counter(before + [i for x in after for i in x])
    assert max(got.values()) == 1 and len(got) == 90 - (90 - 20) % 3
    assert nxt == [30, 30, 30]


def test_the_dispatcher_killed_and_started_again_on_its_address():
    address = f"tcp://127.0.0.1:{free_port()}"
    env = {"SVC_N": "200", "SVC_SLEEP": "0.005"}
    proc = serve(address, env)
    procs = [proc]
    try:
        ref = _consumer(address)
        want = [list(dp) for dp in ref]
        ref.close()
        c = _consumer(address)
        restarted = []

        def kill(k):
            if k == 50:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
                proc.stdout.close()
                procs.append(serve(address, env))  # the same address again
                restarted.append(time.monotonic())

        got, stall = timed((list(dp) for dp in c), kill)
        c.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                assert p.wait(timeout=30) == 0
                assert p.stdout.read() == "closed\n"
                p.stdout.close()
    assert got == want  # exact: nothing lost, nothing repeated, the same outputs
    assert stall < 10.0, stall


def test_serve_prints_its_address_and_status_reads_it():
    address = f"tcp://127.0.0.1:{free_port()}"
    proc = serve(address, {"SVC_N": "30"})
    try:
        c = _consumer(address)
        assert len(list(c)) == 30
        status = subprocess.run([sys.executable, "-m", "dataflow", "service", "status", address,
                                 "--json"], cwd=ROOT, capture_output=True, text=True,
                                timeout=60, check=False)
        assert status.returncode == 0, status.stderr
        stats = json.loads(status.stdout)
        assert (stats["address"], stats["datapoints"], stats["num_workers"]) == (address, 30, 2)
        assert sum(w["items"] for w in stats["workers"]) == 30
        text = subprocess.run([sys.executable, "-m", "dataflow", "service", "status", address],
                              cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
        assert text.stdout.startswith(f"DataService at {address}: 30 datapoints, seed 5")
        c.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        proc.stdout.close()


def test_serve_refuses_a_target_that_is_not_a_service():
    out = subprocess.run([sys.executable, "-m", "dataflow", "serve",
                          "tests.service.pipelines:not_a_service"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert out.stderr == ("dataflow serve: error: 'tests.service.pipelines:not_a_service' "
                          "returned a list, not a DataService; return DataService(ds, "
                          "map_func, ...) without starting it.\n")


def test_status_of_nothing_is_one_line():
    address = f"tcp://127.0.0.1:{free_port()}"
    out = subprocess.run([sys.executable, "-m", "dataflow", "service", "status", address,
                          "--timeout", "0.5"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 2
    assert out.stderr == (f"dataflow service: error: no DataService answered at {address} "
                          "within 0.5 s.\n")


def test_a_consumer_before_the_service_or_at_a_wrong_address_gets_an_error_in_time():
    address = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(ServiceError, match=f"no DataService answered at {address} within 1 s"):
        ServiceData(address, timeout=1).reset_state()
    # connected first, the service starting within the timeout: it is found
    late = ServiceData(address, timeout=20)
    box = []
    t = threading.Thread(target=lambda: box.append(late.reset_state()))
    t.start()
    time.sleep(0.3)
    with _service(n=10, address=address) as svc:
        t.join(timeout=30)
        assert box == [None] and len(list(late)) == 10
        late.close()
        assert svc.address == address


def test_a_service_that_closes_ends_its_readers_with_an_error(monkeypatch):
    monkeypatch.setenv("SVC_SLEEP", "0.01")
    svc = _service(n=400).start()
    c = _consumer(svc.address)
    it = iter(c)
    next(it)
    svc.close()
    with pytest.raises(ServiceError, match=f"the DataService at {svc.address} closed while "
                       "this consumer was reading"):
        for _ in it:
            pass
    c.close()


def test_a_token_is_required_beyond_loopback_and_checked():
    with pytest.raises(ValueError, match="is not a loopback address, so consumers from the "
                       "network could connect: give a shared secret"):
        _service(address="tcp://0.0.0.0:0")
    with _service(n=10, token="s3cret") as svc:
        with pytest.raises(ServiceError, match="refused this consumer: wrong or missing token"):
            ServiceData(svc.address, timeout=5).reset_state()
        ok = ServiceData(svc.address, timeout=5, token="s3cret")
        ok.reset_state()
        assert len(list(ok)) == 10
        ok.close()


def test_hostile_messages_are_dropped_and_counted():
    with _service(n=20) as svc:
        ctx = zmq.Context()
        junk = [ctx.socket(zmq.DEALER) for _ in range(2)]
        targets = [svc.address, svc._workers_now()[0].address]
        for s, addr in zip(junk, targets):
            s.connect(addr)
            for payload in (b"\x00garbage", b"\xc1", b"\x92\x01\x02"):
                s.send(payload)
        assert wait_until(lambda: svc.stats()["dropped"] == 6, 10)
        for s in junk:
            s.close(linger=0)
        ctx.term()
        c = _consumer(svc.address)
        assert len(list(c)) == 20  # still serving
        c.close()


def _opaque(dp):
    return [object()]


def test_an_output_that_cannot_be_sent_names_its_type():
    with DataService(pipelines.source(5), _opaque, num_workers=1, shuffle=False) as svc:
        c = _consumer(svc.address)
        with pytest.raises(WorkerError, match=r"the output of map_func for index 0 cannot be "
                           r"sent to consumers: output\[0\] is a builtins.object\. ") as err:
            list(c)
        c.close()
    assert "pickle" not in str(err.value)  # (DataService has no such format to suggest)


def test_two_jobs_on_one_pool_are_each_exact():
    with _service(n=60, workers=2) as svc:
        a = _consumer(svc.address, job="a")
        b = _consumer(svc.address, job="b")
        outs: dict[str, list] = {}
        threads = [threading.Thread(target=lambda c=c, k=k: outs.__setitem__(
            k, [list(dp) for dp in c])) for k, c in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        ref = _consumer(svc.address, job="c")
        want = [list(dp) for dp in ref]
        jobs = {c["job"] for c in svc.stats()["consumers"]}
        for c in (a, b, ref):
            c.close()
        # (a consumer that closes says goodbye: it no longer counts)
        assert wait_until(lambda: svc.stats()["consumers"] == [], 10)
    assert outs["a"] == outs["b"] == want
    assert jobs == {"a", "b", "c"}


def test_the_profiler_shows_the_service_stage():
    with _service(n=64) as svc:
        c = ServiceData(svc.address, rank=0, world_size=1)
        report = df.profile(df.BatchData(c, 8), num=6, warmup=1)
    stage = report.stages[1]
    assert stage.name == "ServiceData" and stage.items == 48
    assert set(stage.metrics) == {"received", "mb_in", "wait_fraction", "pool_workers",
                                  "pool_busy", "pool_queued", "service_consumers"}
    assert (stage.metrics["received"], stage.metrics["pool_workers"],
            stage.metrics["service_consumers"]) == (56, 2, 1)
    assert "stage 1 (ServiceData): received" in report.format()


def test_nothing_listens_beyond_loopback():
    import psutil

    with _service(n=10) as svc:
        procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
        listening = []
        for p in procs:
            for conn in p.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    listening.append(conn.laddr.ip)
        port = int(svc.address.rsplit(":", 1)[1])
        mine = [c for p in procs for c in p.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
        assert len(mine) == 1 and set(listening) == {"127.0.0.1"}
        # the workers listen on abstract Unix sockets (Linux), nothing on TCP
        assert all(w.address.startswith("ipc://@dataflow-service-") for w in svc._workers_now())
