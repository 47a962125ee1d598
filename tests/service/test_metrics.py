"""The service's figures in the Prometheus text format: the exact text for a fixed stats dict,
its validity under a strict line grammar and prometheus_client's parser, and the loopback port
that serves it, read over real HTTP."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dataflow.service import DataService
from dataflow.service.metrics import CONTENT_TYPE, MetricsServer, prometheus_text
from tests.service import pipelines

STATS = {
    "address": "tcp://127.0.0.1:5555", "instance": "abc", "backend": "process",
    "identity": "f00d",
    "datapoints": 100, "seed": 5, "shuffle": True, "uptime": 12.5,
    "jobs": {"eval": {"n": 10, "seed": 1, "shuffle": False}},
    "num_workers": 2,
    "workers": [
        {"worker": 0, "generation": 1, "address": "tcp://127.0.0.1:6000", "busy": 0.5,
         "items": 60, "items_per_second": 4.8, "rate_10s": 6.0, "bytes_out": 6000,
         "dropped": 0, "queued": 2},
        {"worker": 1, "generation": 2, "address": "tcp://127.0.0.1:6001", "busy": 0.25,
         "items": 40, "items_per_second": 3.2, "bytes_out": 4000, "dropped": 1, "queued": 0},
    ],
    "consumers": [
        {"job": None, "rank": 0, "world_size": 1, "received": 100, "wait": 0.75,
         "items_per_second": 8.0, "rate_10s": 10.0, "bytes_in": 10000, "in_flight": 4,
         "ready": 1},
    ],
    "restarts": 1, "autotune": {"workers": 2, "maximum": 8, "decisions": []},
    "dropped": 3, "dropped_by_cause": {"token": 1, "decode": 2}, "bytes_out": 10000,
    "bottleneck": "pool",
    "dispatcher_cpu_seconds": 0.125,
}

P = "dataflow_service_"
DROPPED_HELP = "Messages dropped (malformed, wrong token, unknown operation)."
BOTTLENECK_HELP = ("1 for the side that limits the rate: the pool (consumers wait for more than "
                   "half of their time) or the consumers; 0 for both before any consumer "
                   "received.")
RATE_HELP = "Items the consumer received per second over the last 10 seconds."
EXPECTED = f"""\
# HELP {P}info Always 1; the labels say which service this is.
# TYPE {P}info gauge
{P}info{{address="tcp://127.0.0.1:5555",instance="abc",backend="process",identity="f00d"}} 1
# HELP {P}uptime_seconds Seconds since the service started.
# TYPE {P}uptime_seconds gauge
{P}uptime_seconds 12.5
# HELP {P}datapoints Datapoints in one epoch of the default pipeline.
# TYPE {P}datapoints gauge
{P}datapoints 100
# HELP {P}workers Workers in the pool now.
# TYPE {P}workers gauge
{P}workers 2
# HELP {P}restarts_total Workers replaced after they died or froze.
# TYPE {P}restarts_total counter
{P}restarts_total 1
# HELP {P}dropped_messages_total {DROPPED_HELP}
# TYPE {P}dropped_messages_total counter
{P}dropped_messages_total 3
# HELP {P}dropped_messages_by_cause_total Messages dropped, by cause.
# TYPE {P}dropped_messages_by_cause_total counter
{P}dropped_messages_by_cause_total{{cause="decode"}} 2
{P}dropped_messages_by_cause_total{{cause="token"}} 1
# HELP {P}bytes_sent_total Bytes of outputs the workers sent.
# TYPE {P}bytes_sent_total counter
{P}bytes_sent_total 10000
# HELP {P}dispatcher_cpu_seconds_total CPU seconds the dispatcher's loop used.
# TYPE {P}dispatcher_cpu_seconds_total counter
{P}dispatcher_cpu_seconds_total 0.125
# HELP {P}bottleneck {BOTTLENECK_HELP}
# TYPE {P}bottleneck gauge
{P}bottleneck{{side="pool"}} 1
{P}bottleneck{{side="consumers"}} 0
# HELP {P}autotune_workers Workers the autotune controller chose.
# TYPE {P}autotune_workers gauge
{P}autotune_workers 2
# HELP {P}autotune_maximum_workers Most workers the autotune controller may choose.
# TYPE {P}autotune_maximum_workers gauge
{P}autotune_maximum_workers 8
# HELP {P}worker_generation How many times this worker's slot was filled (1: never replaced).
# TYPE {P}worker_generation gauge
{P}worker_generation{{worker="0"}} 1
{P}worker_generation{{worker="1"}} 2
# HELP {P}worker_busy_ratio Share of its lifetime the worker spent mapping (0 to 1).
# TYPE {P}worker_busy_ratio gauge
{P}worker_busy_ratio{{worker="0"}} 0.5
{P}worker_busy_ratio{{worker="1"}} 0.25
# HELP {P}worker_items_total Items the worker mapped.
# TYPE {P}worker_items_total counter
{P}worker_items_total{{worker="0"}} 60
{P}worker_items_total{{worker="1"}} 40
# HELP {P}worker_items_per_second Items the worker mapped per second over its lifetime.
# TYPE {P}worker_items_per_second gauge
{P}worker_items_per_second{{worker="0"}} 4.8
{P}worker_items_per_second{{worker="1"}} 3.2
# HELP {P}worker_items_per_second_10s Items the worker mapped per second over the last 10 seconds.
# TYPE {P}worker_items_per_second_10s gauge
{P}worker_items_per_second_10s{{worker="0"}} 6.0
# HELP {P}worker_bytes_sent_total Bytes of outputs the worker sent.
# TYPE {P}worker_bytes_sent_total counter
{P}worker_bytes_sent_total{{worker="0"}} 6000
{P}worker_bytes_sent_total{{worker="1"}} 4000
# HELP {P}worker_dropped_messages_total Messages the worker dropped.
# TYPE {P}worker_dropped_messages_total counter
{P}worker_dropped_messages_total{{worker="0"}} 0
{P}worker_dropped_messages_total{{worker="1"}} 1
# HELP {P}worker_queued Items waiting in the worker's queue.
# TYPE {P}worker_queued gauge
{P}worker_queued{{worker="0"}} 2
{P}worker_queued{{worker="1"}} 0
# HELP {P}consumer_world_size Ranks the consumer's job was started with.
# TYPE {P}consumer_world_size gauge
{P}consumer_world_size{{job="",rank="0"}} 1
# HELP {P}consumer_received_total Items the consumer received.
# TYPE {P}consumer_received_total counter
{P}consumer_received_total{{job="",rank="0"}} 100
# HELP {P}consumer_wait_ratio Share of its time the consumer waited for outputs (0 to 1).
# TYPE {P}consumer_wait_ratio gauge
{P}consumer_wait_ratio{{job="",rank="0"}} 0.75
# HELP {P}consumer_items_per_second Items the consumer received per second since it started.
# TYPE {P}consumer_items_per_second gauge
{P}consumer_items_per_second{{job="",rank="0"}} 8.0
# HELP {P}consumer_items_per_second_10s {RATE_HELP}
# TYPE {P}consumer_items_per_second_10s gauge
{P}consumer_items_per_second_10s{{job="",rank="0"}} 10.0
# HELP {P}consumer_bytes_received_total Bytes of outputs received.
# TYPE {P}consumer_bytes_received_total counter
{P}consumer_bytes_received_total{{job="",rank="0"}} 10000
# HELP {P}consumer_in_flight Items the consumer asked for and awaits.
# TYPE {P}consumer_in_flight gauge
{P}consumer_in_flight{{job="",rank="0"}} 4
# HELP {P}consumer_ready Items received and not yet read.
# TYPE {P}consumer_ready gauge
{P}consumer_ready{{job="",rank="0"}} 1
# HELP {P}job_datapoints Datapoints in one epoch of a named job's pipeline.
# TYPE {P}job_datapoints gauge
{P}job_datapoints{{job="eval"}} 10
"""

# the text format's grammar, line by line (version 0.0.4)
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
_VALUE = r"(?:[+-]?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|Inf)|NaN)"
_SAMPLE = re.compile(rf"({_NAME})(?:\{{(?:{_LABEL}(?:,{_LABEL})*)?\}})? {_VALUE}")
_HELP = re.compile(rf"# HELP ({_NAME}) (?:[^\\\n]|\\\\|\\n)*")
_TYPE = re.compile(rf"# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)")


def _check_grammar(text: str) -> dict[str, str]:
    """Every line valid, each family's HELP and TYPE before its samples, counters named
    ``*_total``, every name prefixed; the families and their types."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    current = None
    for line in text[:-1].split("\n"):
        if m := _HELP.fullmatch(line):
            current = m.group(1)
            assert current not in types, f"family {current} written twice"
        elif m := _TYPE.fullmatch(line):
            assert m.group(1) == current, line
            types[current] = m.group(2)
        else:
            m = _SAMPLE.fullmatch(line)
            assert m is not None, f"not a sample line: {line!r}"
            assert m.group(1) == current, line
    for name, kind in types.items():
        assert name.startswith("dataflow_service_")
        assert (kind == "counter") == name.endswith("_total"), name
    return types


def test_a_fixed_stats_dict_renders_to_the_exact_text():
    text = prometheus_text(STATS)
    assert text == EXPECTED
    assert prometheus_text(STATS) == text  # pure: the same dict, the same text
    types = _check_grammar(text)
    assert len(types) == 29
    assert sum(kind == "counter" for kind in types.values()) == 10


def test_missing_figures_are_left_out_and_an_int_dropped_has_no_cause():
    text = prometheus_text({"num_workers": 0, "dropped": 3, "workers": [], "consumers": []})
    assert text == (
        '# HELP dataflow_service_info Always 1; the labels say which service this is.\n'
        '# TYPE dataflow_service_info gauge\n'
        'dataflow_service_info{address="",instance="",backend="process"} 1\n'
        '# HELP dataflow_service_workers Workers in the pool now.\n'
        '# TYPE dataflow_service_workers gauge\n'
        'dataflow_service_workers 0\n'
        '# HELP dataflow_service_dropped_messages_total Messages dropped (malformed, wrong '
        'token, unknown operation).\n'
        '# TYPE dataflow_service_dropped_messages_total counter\n'
        'dataflow_service_dropped_messages_total 3\n')
    _check_grammar(text)


def test_dropped_counted_by_cause_only_gives_the_total_too():
    text = prometheus_text({"dropped": {"size": 2, "decode": 5}})
    assert text.split("\n")[3:10] == [
        "# HELP dataflow_service_dropped_messages_total Messages dropped (malformed, wrong "
        "token, unknown operation).",
        "# TYPE dataflow_service_dropped_messages_total counter",
        "dataflow_service_dropped_messages_total 7",
        "# HELP dataflow_service_dropped_messages_by_cause_total Messages dropped, by cause.",
        "# TYPE dataflow_service_dropped_messages_by_cause_total counter",
        'dataflow_service_dropped_messages_by_cause_total{cause="decode"} 5',
        'dataflow_service_dropped_messages_by_cause_total{cause="size"} 2']


def test_label_values_are_escaped():
    stats = {"consumers": [{"job": 'a"b\\c\nd', "rank": 1, "received": 7}]}
    text = prometheus_text(stats)
    assert ('dataflow_service_consumer_received_total{job="a\\"b\\\\c\\nd",rank="1"} 7\n'
            in text)
    _check_grammar(text)


def test_stats_that_is_not_a_dict_is_refused():
    with pytest.raises(TypeError, match=r"`stats` must be the dict that DataService.stats\(\)"):
        prometheus_text([1, 2])


def test_prometheus_clients_parser_reads_every_family():
    from prometheus_client import parser  # (in the test dependency group: never skipped)

    families = {f.name: f for f in parser.text_string_to_metric_families(EXPECTED)}
    # the parser names a counter's family without its _total
    assert families["dataflow_service_restarts"].type == "counter"
    assert [s.value for s in families["dataflow_service_dropped_messages"].samples] == [3]
    assert [s.value for s in families["dataflow_service_dropped_messages_by_cause"].samples] \
        == [2, 1]
    assert families["dataflow_service_worker_busy_ratio"].samples[1].labels == {"worker": "1"}


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers["Content-Type"], e.read().decode()


def test_the_metrics_port_serves_the_text_and_survives_a_failing_stats():
    calls = []

    def get_stats():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the dispatcher did not answer\nin 5 s")
        return STATS

    with MetricsServer(get_stats) as server:
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        assert _get(server.url) == (200, CONTENT_TYPE, EXPECTED)
        assert _get(server.url) == (
            500, "text/plain",
            "reading the service's stats failed: RuntimeError: the dispatcher did not answer "
            "in 5 s\n")
        assert _get(server.url) == (200, CONTENT_TYPE, EXPECTED)  # still serving
        assert _get(server.url.replace("/metrics", "/other")) == (
            404, "text/plain", "not found: the metrics are at /metrics\n")
        assert len(calls) == 3
        server.close()
        server.close()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url, timeout=5)


def test_the_metrics_port_refuses_a_non_loopback_host():
    with pytest.raises(ValueError, match=r"`host` of the metrics port must be a loopback "
                                         r"address, got '0.0.0.0'"):
        MetricsServer(dict, host="0.0.0.0")
    with pytest.raises(ValueError, match=r"`port` must be an int in 0..65535"):
        MetricsServer(dict, port=70000)
    with pytest.raises(TypeError, match=r"`get_stats` must be callable"):
        MetricsServer(STATS)


def test_a_live_services_stats_over_the_port():
    with DataService(pipelines.source(20), pipelines.tag, num_workers=1, seed=5) as svc, \
            MetricsServer(svc.stats) as server:
        status, ctype, text = _get(server.url)
    assert (status, ctype) == (200, CONTENT_TYPE)
    lines = text.split("\n")
    assert "dataflow_service_workers 1" in lines
    assert "dataflow_service_datapoints 20" in lines
    assert "dataflow_service_restarts_total 0" in lines
    (info,) = [line for line in lines if line.startswith("dataflow_service_info{")]
    assert info.startswith(f'dataflow_service_info{{address="{svc.address}",'
                           f'instance="{svc.instance}",backend="process"')
    assert info.endswith("} 1")
    _check_grammar(text)


def test_docs_list_exactly_the_names_rendered():
    text = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    section = text.split("## Prometheus metrics", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(dataflow_service_\w+)` \| (\w+) \|", section, re.M)
    assert dict(documented) == _check_grammar(prometheus_text(STATS))
