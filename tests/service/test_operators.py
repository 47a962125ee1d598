"""What operators and new users meet: world sizes that disagree, a graceful redeploy, a torch
DataLoader with workers, the command line's answers at the wrong address or target, a map
function that cannot reach spawned workers, and the figures of the last 10 seconds. Real
services, processes and sockets on 127.0.0.1."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

import dataflow as df
from dataflow.errors import DataFlowError
from dataflow.service import DataService, ServiceData, ServiceError
from tests.helpers import free_port, timed
from tests.service import pipelines
from tests.service.helpers import serve

ROOT = Path(__file__).resolve().parents[2]


def _consumer(address, rank=0, world=1, **kw):
    c = ServiceData(address, rank=rank, world_size=world, timeout=kw.pop("timeout", 20), **kw)
    c.reset_state()
    return c


def _cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "dataflow", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_live_consumers_of_a_job_with_another_world_size_are_refused():
    with DataService(pipelines.source(40), pipelines.tag, num_workers=1, seed=5) as svc:
        reading = _consumer(svc.address, 0, 2)
        it = iter(reading)
        next(it)
        with pytest.raises(ServiceError, match=r"refused this consumer: job 'default' is read "
                           r"by rank 0 of world_size 2, and this consumer \(rank 1\) has "
                           r"world_size 3"):
            _consumer(svc.address, 1, 3)
        other_job = _consumer(svc.address, 1, 3, job="eval")  # (another job: its own ranks)
        assert len(list(other_job)) == 13
        other_job.close()
        rest = list(it)
        reading.close()  # (it says goodbye: its world size no longer counts)
        after = _consumer(svc.address, 1, 3)
        assert len(list(after)) == 13
        after.close()
    assert len(rest) == 19


def test_a_graceful_redeploy_is_transparent_to_idle_and_reading_consumers():
    address = f"tcp://127.0.0.1:{free_port()}"
    env = {"SVC_N": "120", "SVC_SLEEP": "0.004"}
    procs = [serve(address, env)]
    try:
        ref = _consumer(address)
        want = [[list(dp) for dp in ref] for _ in range(2)]
        ref.close()
        idle = _consumer(address)
        assert [list(dp) for dp in idle] == want[0]
        reading = _consumer(address)

        def redeploy(k):
            if k == 40:  # SIGTERM (as an orchestrator does), then the new version
                procs[0].send_signal(signal.SIGTERM)
                assert procs[0].wait(timeout=30) == 0
                procs.append(serve(address, env))

        got, _stall = timed((list(dp) for dp in reading), redeploy)
        assert got == want[0]
        assert [list(dp) for dp in idle] == want[1]  # (idle during the redeploy)
        idle.close()
        reading.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)
            p.stdout.close()


def test_serve_with_tell_consumers_is_a_permanent_stop_that_ends_its_consumers_at_once():
    address = f"tcp://127.0.0.1:{free_port()}"
    proc = serve(address, {"SVC_N": "120", "SVC_SLEEP": "0.004"},
                 "tests.service.pipelines:make", "--tell-consumers")
    try:
        ref = _consumer(address)
        want = [dp[0] for dp in ref]
        ref.close()
        reading = _consumer(address, timeout=60)  # (without the news it would wait 60 s)
        got = []

        def read():
            for k, dp in enumerate(reading):
                got.append(dp[0])
                if k == 20:
                    proc.send_signal(signal.SIGTERM)
                    assert proc.wait(timeout=30) == 0

        # told (not "stopped answering for 60 s", what its timeout would say)
        with pytest.raises(ServiceError, match=rf"the DataService at {address} closed while "):
            read()
        assert 21 <= len(got) < 120 and got == want[:len(got)]  # (what came, exactly)
        reading.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == 0


@pytest.mark.loads_frameworks
def test_a_dataloader_with_workers_is_one_clear_error_and_one_worker_works():
    torch = pytest.importorskip("torch")
    from dataflow.torch import to_torch

    with DataService(pipelines.source(20), pipelines.tag, num_workers=2, seed=5,
                     shuffle=False) as svc:
        c = ServiceData(svc.address, rank=0, world_size=1, timeout=20)
        one = torch.utils.data.DataLoader(to_torch(df.BatchData(c, 5)), batch_size=None,
                                          num_workers=1)
        assert [b[0].tolist() for b in one] == [list(range(k, k + 5)) for k in (0, 5, 10, 15)]
        two = torch.utils.data.DataLoader(to_torch(df.BatchData(c, 5)), batch_size=None,
                                          num_workers=2)
        it = iter(two)
        with pytest.raises(DataFlowError, match=r"ServiceData in a DataLoader with "
                           r"num_workers=2: .* Pass DataLoader\(\.\.\., num_workers=0\)") as err:
            next(it)
        del err, it  # (the loader's iterator ends its worker processes)
        gc.collect()
        c.close()


def test_status_at_a_socket_that_is_not_a_service_is_one_line():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    try:
        for answer in (b"\x00garbage", b"\x82\xa2op\xa5stats\xa5stats\xc0"):  # (stats: None)
            proc = subprocess.Popen([sys.executable, "-m", "dataflow", "service", "status",
                                     address], cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            assert router.poll(30_000)
            ident = router.recv_multipart()[0]
            router.send_multipart([ident, answer])
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 2 and out == ""
            assert err == (f"dataflow service: error: the ZeroMQ socket at {address} is not a "
                           "DataService (it answered something else than a service's "
                           "figures).\n")
    finally:
        router.close(linger=0)
        ctx.term()


def test_serve_refuses_a_started_service_and_an_open_address_without_a_token():
    out = _cli("serve", "tests.service.pipelines:started", "--address",
               f"tcp://127.0.0.1:{free_port()}")
    assert out.returncode == 2
    assert out.stderr.startswith("dataflow serve: error: 'tests.service.pipelines:started' "
                                 "returned a DataService already started (at tcp://127.0.0.1:")
    assert out.stderr.endswith("return it without calling start(), so that serve starts it "
                               "(at --address, if given) and closes it.\n")
    env = {k: v for k, v in os.environ.items() if k != "DATAFLOW_SERVICE_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "dataflow", "serve",
                          "tests.service.pipelines:make", "--address", "tcp://0.0.0.0:0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
                         env=env)
    assert out.returncode == 2
    assert out.stderr.startswith("dataflow serve: error: DataService: --address "
                                 "'tcp://0.0.0.0:0' is not a loopback address")
    out = _cli("serve", "tests.service.pipelines:nothing")
    assert out.returncode == 2
    assert "profile" not in out.stderr
    assert out.stderr.endswith("name a function that returns a DataService, not started.\n")


def _double(dp):
    return [dp[0] * 2]


def test_spawned_workers_and_a_lambda_name_the_argument_and_the_fix():
    svc = DataService(pipelines.source(5), lambda dp: dp, num_workers=1, start_method="spawn")
    with pytest.raises(TypeError, match=r"`map_func` must be picklable to start workers with "
                       r"start_method='spawn', but `map_func` is not .* replace lambdas by "
                       r"module-level functions"):
        svc.start()
    svc.close()
    jobs = {"eval": {"map_func": lambda dp: dp}}
    svc = DataService(pipelines.source(5), _double, num_workers=1, start_method="spawn",
                      jobs=jobs)
    with pytest.raises(TypeError, match=r"`jobs\['eval'\]\['map_func'\]` must be picklable"):
        svc.start()
    svc.close()


def test_status_shows_the_last_10_seconds_beside_the_lifetime_and_prometheus():
    with DataService(pipelines.source(30), pipelines.tag, num_workers=1, seed=5,
                     metrics_port=0) as svc:
        c = _consumer(svc.address)
        assert len(list(c)) == 30
        (worker,) = svc.stats()["workers"]
        assert worker["rate_10s"] > 0 and worker["rate"] > 0
        text = _cli("service", "status", svc.address)
        prom = _cli("service", "status", svc.address, "--prometheus")
        import urllib.request

        with urllib.request.urlopen(svc.metrics.url, timeout=30) as page:
            served = page.read().decode()
        c.close()
    assert text.returncode == 0, text.stderr
    assert "items/s in the last 10 s, " in text.stdout and " over its lifetime" in text.stdout
    assert prom.returncode == 0, prom.stderr
    for body in (prom.stdout, served):
        assert "dataflow_service_workers 1" in body.splitlines()
        assert "# TYPE dataflow_service_dropped_messages_total counter" in body


class _Keys:
    """A sequence that is neither a list nor a flow: ``__len__`` and ``__getitem__``."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        if not 0 <= i < 6:
            raise IndexError(i)
        return [i]


def _endless():
    k = 0
    while True:
        yield [k]
        k += 1


def test_a_duck_typed_sequence_is_served_and_a_flow_without_len_refused():
    with DataService(_Keys(), pipelines.tag, num_workers=1, shuffle=False) as svc:
        c = _consumer(svc.address)
        assert [dp[0] for dp in c] == list(range(6))
        c.close()
    svc = DataService(df.DataFromGenerator(_endless), pipelines.tag, num_workers=1)
    with pytest.raises(ValueError, match=r"`ds` \(DataFromGenerator\) has no len\(\): .* Pass "
                       r"a flow with a len\(\)"):
        svc.start()
    svc.close()
