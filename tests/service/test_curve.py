"""ZeroMQ CURVE: the dispatcher's and the workers' sockets encrypt, their keys derived from the
token (always beyond loopback; forced on here, on 127.0.0.1 and abstract Unix sockets)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from dataflow.service import DataService, ServiceData, ServiceError, protocol
from tests.service import pipelines

ROOT = Path(__file__).resolve().parents[2]


def test_a_curve_service_serves_curve_consumers_and_no_one_else():
    with DataService(pipelines.source(30), pipelines.tag, num_workers=2, seed=5, shuffle=False,
                     token="s3cret", curve=True) as svc:
        c = ServiceData(svc.address, rank=0, world_size=1, token="s3cret", curve=True,
                        timeout=20)
        c.reset_state()
        assert [dp[0] for dp in c] == list(range(30))
        c.close()
        # without CURVE, or with the keys of another token: no handshake, no answer
        for kw in ({"curve": False}, {"curve": True, "token": "other"}):
            plain = ServiceData(svc.address, rank=0, world_size=1, timeout=1,
                                **{"token": "s3cret", **kw})
            with pytest.raises(ServiceError, match="no DataService answered"):
                plain.reset_state()
            plain.close()
        # a worker answers nothing to a socket without its key either
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.connect(svc._workers_now()[0].address)
        s.send(protocol.encode({"op": "map", "token": "s3cret", "items": [[0, 0, 0]]}))
        assert not s.poll(500)
        s.close(linger=0)
        ctx.term()
        status = subprocess.run([sys.executable, "-m", "dataflow", "service", "status",
                                 svc.address, "--json", "--curve", "--token", "s3cret"],
                                cwd=ROOT, capture_output=True, text=True, timeout=60,
                                check=False)
    assert status.returncode == 0, status.stderr
    assert '"datapoints": 30' in status.stdout


def test_curve_is_required_beyond_loopback_and_needs_a_token():
    with pytest.raises(ValueError, match=r"DataService: `curve=False` at '0.0.0.0', which is "
                       r"not a loopback address"):
        DataService(pipelines.source(3), pipelines.tag, address="tcp://0.0.0.0:0",
                    token="t", curve=False)
    with pytest.raises(ValueError, match=r"ServiceData: CURVE encryption needs a shared "
                       r"secret"):
        ServiceData("tcp://127.0.0.1:1", curve=True, token="")
    svc = DataService(pipelines.source(3), pipelines.tag, address="tcp://0.0.0.0:0", token="t")
    assert svc.curve is True  # (on by itself beyond loopback; not started: nothing listens)
    svc.close()
    public, secret = protocol.curve_keys("t")
    assert (public, secret) == protocol.curve_keys("t") and public != protocol.curve_keys("u")[0]


def test_curve_keys_from_certificate_files(tmp_path):
    import zmq.auth

    public, secret = zmq.auth.create_certificates(str(tmp_path), "service")
    with pytest.raises(ValueError, match=r"DataService: `curve` .*service.key' holds no "
                       r"secret key: a service needs its '.key_secret' file"):
        DataService(pipelines.source(3), pipelines.tag, curve=public)
    with pytest.raises(ValueError, match=r"ServiceData: `curve` 'nowhere.key' is not a "
                       r"readable ZeroMQ certificate file"):
        ServiceData("tcp://127.0.0.1:1", curve="nowhere.key")
    with DataService(pipelines.source(12), pipelines.tag, num_workers=1, seed=5,
                     shuffle=False, curve=secret) as svc:
        c = ServiceData(svc.address, rank=0, world_size=1, curve=public, timeout=20)
        c.reset_state()
        assert [dp[0] for dp in c] == list(range(12))
        c.close()
        status = subprocess.run([sys.executable, "-m", "dataflow", "service", "status",
                                 svc.address, "--json", "--curve", public], cwd=ROOT,
                                capture_output=True, text=True, timeout=60, check=False)
    assert status.returncode == 0, status.stderr
    assert '"datapoints": 12' in status.stdout
