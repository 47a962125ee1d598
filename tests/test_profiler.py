from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import dataflow as df
from dataflow.profiler import pipeline_stages, profile


def _slow_source():
    def gen():
        for i in range(10_000):
            time.sleep(0.002)
            yield [i, float(i)]

    return df.BatchData(df.MapDataComponent(df.DataFromGenerator(gen), abs), 4)


def _slow_map_func(x):
    time.sleep(0.002)
    return x


def _slow_map():
    src = df.DataFromList([[i, float(i)] for i in range(1000)], shuffle=False)
    return df.BatchData(df.MapDataComponent(src, _slow_map_func), 4)


def _slow_batch():
    big = np.zeros((256, 256, 4), np.float32)
    src = df.DataFromList([[big, i] for i in range(192)], shuffle=False)
    return df.BatchData(df.MapDataComponent(src, abs, index=1), 64)


@pytest.mark.parametrize(
    ("make", "stage", "words", "batch_size"),
    [
        (_slow_source, "DataFromGenerator", "source", 4),
        (_slow_map, "MapDataComponent", "MultiProcessMapDataZMQ", 4),
        (_slow_batch, "BatchData", "batching is the bottleneck", 64),
    ],
)
def test_names_the_known_bottleneck(make, stage, words, batch_size):
    report = profile(make(), num=6, warmup=1)
    assert report.bottleneck_stage.name == stage
    assert words in report.suggestion
    assert report.items == 6
    names = [s.name for s in report.stages]
    assert names == ["BatchData", "MapDataComponent", names[2]]
    assert [s.depth for s in report.stages] == [0, 1, 2]
    assert report.stages[1].items == report.stages[2].items == 6 * batch_size


def test_counts_bytes_and_restores_classes():
    flow = _slow_batch()
    inner = flow.ds
    report = profile(flow, num=2, warmup=0)
    assert type(flow) is df.BatchData and type(inner) is df.MapDataComponent
    assert report.stages[0].items == 2
    assert report.stages[0].bytes == 2 * (64 * 256 * 256 * 4 * 4 + 64 * 4)
    assert report.stages[1].items == 128


def test_json_and_trace(tmp_path):
    report = profile(_slow_map(), num=3, warmup=0, trace=True)
    data = json.loads(report.to_json())
    assert data["items"] == 3
    assert data["bottleneck"]["stage"] == "MapDataComponent"
    assert [s["name"] for s in data["stages"]] == ["BatchData", "MapDataComponent",
                                                    "DataFromList"]
    path = tmp_path / "trace.json"
    report.write_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {0, 1, 2}
    assert sum(1 for e in spans if e["tid"] == 1) == 12
    assert all(e["dur"] >= 0 for e in spans)
    rows = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert rows == {0: "0: BatchData", 1: "1:   MapDataComponent", 2: "2:     DataFromList"}


def test_table_format():
    text = profile(_slow_map(), num=2, warmup=0).format()
    assert "Pipeline profile" in text
    assert "bottleneck: stage 1 (MapDataComponent, " in text


def test_stages_of_combined_flows():
    a = df.DataFromList([[1]], shuffle=False)
    flow = df.ConcatData([a, df.MapData(a, abs)])
    assert [(d, type(f).__name__) for d, f in pipeline_stages(flow)] == [
        (0, "ConcatData"), (1, "DataFromList"), (1, "MapData")]


def test_cli_profile(tmp_path):
    mod = tmp_path / "mypipe.py"
    mod.write_text(
        "import dataflow as df\n"
        "def build():\n"
        "    return df.BatchData(df.DataFromList([[i] for i in range(100)], shuffle=False), 5)\n"
    )
    trace = tmp_path / "t.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow", "profile", "mypipe:build", "--num", "5", "--json",
         "--trace", str(trace)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["items"] == 5 and [s["name"] for s in out["stages"]] == ["BatchData",
                                                                          "DataFromList"]
    assert json.loads(trace.read_text())["traceEvents"]


def _spin_map_func(x):
    """Pure-Python work that holds the GIL for about 2 ms."""
    deadline = time.thread_time() + 0.002
    while time.thread_time() < deadline:
        pass
    return x


@pytest.mark.parametrize(
    ("make", "words"),
    [
        # work that sleeps: more workers help, whatever they are
        (lambda src: df.MultiThreadMapData(src, 2, _slow_map_func, buffer_size=8),
         "its workers wait (they used 0.0"),
        (lambda src: df.MultiProcessMapDataZMQ(src, 2, _slow_map_func, buffer_size=8),
         "Threads do this as well as processes, without copying data between processes."),
        # pure Python on four threads: one core in all, they take turns on the GIL
        (lambda src: df.MultiThreadMapData(src, 4, _spin_map_func, buffer_size=16),
         "cores: they take turns on the GIL (pure Python)"),
    ],
)
def test_a_starved_parallel_stage_gets_advice_for_its_kind(make, words):
    src = df.DataFromList([[i, float(i)] for i in range(1000)], shuffle=False)
    mapper = make(src)
    try:
        report = profile(df.BatchData(mapper, 16), num=12, warmup=1)
    finally:
        mapper.close()
    assert report.bottleneck_stage.name == type(mapper).__name__
    # (threads that take turns on the GIL leave results waiting while this thread waits
    # for its turn: the queue need not be empty)
    assert re.match(rf"{type(mapper).__name__}'s queue is (nearly empty \(1?\d% full\): "
                    r"|\d+% full, yet it has the most own time: )", report.suggestion)
    assert words in report.suggestion


def test_advice_for_an_autotuned_stage_matches_what_it_does():
    """An "auto" stage still adding workers is not told to add them; one at its budget's
    maximum is told to give it more cores; idle workers are not said to be unable to keep
    up."""
    from dataflow.profiler import StageStats, _suggest

    mapper = df.MultiThreadMapData(df.DataFromList([[1]]), 2, _slow_map_func)
    stats = StageStats(0, 0, "MultiThreadMapData", items=10, queue_fill=0.0, workers=8,
                       workers_mean=8.0, workers_busy=0.95, workers_cpu=0.9,
                       autotune={"workers": 8, "maximum": 32, "converged_at": None})
    assert _suggest(mapper, stats, False) == (
        "MultiThreadMapData's queue is nearly empty (0% full) and its autotuner is still "
        "adding workers "
        "(8 now, at most 32 in its CPU budget): profile longer to see where it settles.")
    stats.autotune = {"workers": 32, "maximum": 32, "converged_at": 5, "backend": "thread"}
    assert _suggest(mapper, stats, False) == (
        "MultiThreadMapData's queue is nearly empty (0% full): it runs the most workers its "
        "CPU budget "
        "allows (32): give the pipeline more cores (autotune(ds, cores=...), the container's "
        "CPU limit) or make the work cheaper; its threads take turns on the GIL, so "
        "ParallelMapData(backend='auto') or MultiProcessMapDataZMQ would run them in "
        "parallel.")
    stats.workers_busy = 0.48
    assert _suggest(mapper, stats, False).startswith(
        "MultiThreadMapData's queue is nearly empty (0% full), yet its workers were busy only "
        "48% of "
        "the time: they wait for inputs")
    mapper.close()


def test_figures_add_up_across_stages():
    """Delivered rates are per second of the run; what a stage takes in is what its children
    gave it; a batching stage takes in batch_size per batch."""
    src = df.DataFromList([[np.zeros(10, np.uint8), i] for i in range(10_000)], shuffle=False)
    report = profile(df.BatchData(df.MapData(src, lambda dp: dp), 8), num=50, warmup=2)
    batch, mapped, source = report.stages
    assert (batch.items, batch.items_in, mapped.items, mapped.items_in, source.items) == (
        50, 400, 400, 400, 400)
    assert source.items_in is None and (batch.held, mapped.held) == (350, 0)
    assert batch.items_per_second == pytest.approx(50 / report.seconds)
    assert mapped.items_per_second == pytest.approx(8 * batch.items_per_second)
    # (per batch: 8 images of 10 bytes, 8 labels stacked as int32)
    assert batch.bytes_per_second == pytest.approx(50 * (8 * 10 + 8 * 4) / report.seconds)
    assert batch.ceiling_per_second == pytest.approx(50 / batch.own_seconds)
    header = report.format().splitlines()[3].split()
    assert header == ["#", "stage", "in", "out", "out/s", "MB/s", "own", "us/out", "own", "%",
                      "ceiling/s", "queue", "workers", "skipped"]
    row = report.format().splitlines()[5].split()
    assert row[:4] == ["0", "BatchData", "400", "50"]


def test_help_profile_explains_every_column():
    doc = profile.__doc__
    for column in ["``in``", "``out``", "``out/s``", "``MB/s``", "``own us/out``", "``own %``",
                   "``ceiling/s``", "``queue``", "``workers``", "``skipped``"]:
        assert column in doc


def test_profile_closes_what_it_started():
    import psutil

    mapper = df.MultiProcessMapDataZMQ(df.DataFromList([[i] for i in range(50)], shuffle=False),
                                       2, _slow_map_func, buffer_size=8)
    report = profile(df.BatchData(mapper, 4), num=3, warmup=1)
    assert report.items == 3
    assert mapper._pool is None  # closed: its workers are gone now, not at garbage collection
    assert [c for c in psutil.Process().children() if c.status() != "zombie"] == []
    kept = df.MultiThreadMapData(df.DataFromList([[i] for i in range(50)]), 2, lambda dp: dp)
    kept.reset_state()
    profile(kept, num=3, warmup=0, reset=False)  # reset by the caller: left running
    assert kept._transport is not None
    kept.close()


def test_an_lmdb_source_is_named_publicly_and_never_told_to_become_lmdb(tmp_path):
    path = str(tmp_path / "t.lmdb")
    df.LMDBSerializer.save(df.DataFromList([[i, np.zeros(2000)] for i in range(300)],
                                           shuffle=False), path, progress=False)
    ds = df.LMDBSerializer.load(path, shuffle=False)
    report = profile(ds, num=200, warmup=0)
    assert [s.name for s in report.stages] == ["LMDBData"]
    assert report.bottleneck_stage.name == "LMDBData"
    assert report.suggestion.startswith("the reader LMDBData is the bottleneck: read it "
                                        "sequentially")
    assert "LMDBSerializer.save" not in report.suggestion


def test_no_bottleneck_when_the_consumer_is_slower_than_every_stage():
    report = profile(df.BatchData(df.DataFromList([[i] for i in range(100)], shuffle=False), 4),
                     num=5, warmup=0, consume=lambda dp: time.sleep(0.01))
    assert report.bottleneck is None and report.bottleneck_stage is None
    assert report.suggestion.startswith(f"the consumer took {report.consumer_seconds:.2f} s "
                                        f"of the {report.seconds:.2f} s run, more than any "
                                        "stage's own time (the most: stage ")
    assert report.suggestion.endswith("so it is the one to make faster.")
    assert "no bottleneck: the consumer took " in report.format()
    assert json.loads(report.to_json())["bottleneck"]["stage"] is None


def _sleepy_source(seconds: float, n: int = 1000) -> df.DataFlow:
    def gen():
        for i in range(n):
            time.sleep(seconds)
            yield [i]

    return df.DataFromGenerator(gen)


def test_a_consumer_slower_than_the_source_is_named_though_the_source_takes_a_quarter():
    """The source takes 1 ms per datapoint, the consumer 3 ms: the pipeline produces a
    quarter of the time, and the verdict names the consumer (it named the source: only under
    a fifth of the time producing counted as the consumer's)."""
    report = profile(_sleepy_source(0.001), num=40, warmup=2,
                     consume=lambda dp: time.sleep(0.003))
    assert report.bottleneck is None
    assert report.consumer_seconds >= 40 * 0.003
    assert report.consumer_seconds > report.stages[0].own_seconds
    assert "; the consumer took " in report.format()


def test_the_named_bottleneck_has_the_lowest_ceiling_in_the_table():
    """A source of 1 ms per datapoint under a batch of 64 whose stacking costs a few ms per
    batch: the source has the most own time, and its ceiling (the pipeline's batches per
    second of its own time) is the lowest; per its own datapoints it was the highest, and
    the verdict named a stage whose ceiling the table showed above another's."""
    big = np.zeros((128, 128, 4), np.float32)

    def gen():
        for i in range(10_000):
            time.sleep(0.001)
            yield [big, i]

    report = profile(df.BatchData(df.DataFromGenerator(gen), 64), num=3, warmup=1)
    batch, source = report.stages
    assert report.bottleneck == 1
    assert source.ceiling_per_second == pytest.approx(3 / source.own_seconds)
    assert batch.ceiling_per_second == pytest.approx(3 / batch.own_seconds)
    assert min(s.ceiling_per_second for s in report.stages) == source.ceiling_per_second
    assert f"the lowest ceiling: {source.ceiling_per_second:,.0f}/s" in report.format()


def test_a_queue_a_quarter_full_is_not_called_full():
    from dataflow.profiler import StageStats, _suggest

    mapper = df.MultiThreadMapData(df.DataFromList([[1]]), 2, _slow_map_func)
    stats = StageStats(0, 0, "MultiThreadMapData", items=100, own_seconds=0.001,
                       queue_fill=0.23, workers=2, workers_mean=2.0, workers_busy=0.3)
    assert _suggest(mapper, stats, False) == (
        "MultiThreadMapData's queue is 23% full (results are waiting when they are asked "
        "for), yet it has the most own time (10.0 us per datapoint out): that is the cost of "
        "handing results over in this process (taking turns on the GIL with its threads, "
        "receiving and decoding what its processes send), not its workers' speed. Hand over "
        "fewer, larger datapoints (batch inside the parallel stage) or smaller ones (encoded).")
    stats.queue_fill = 0.19
    assert _suggest(mapper, stats, False).startswith(
        "MultiThreadMapData's queue is nearly empty (19% full), yet its workers were busy "
        "only 30% of the time")
    mapper.close()


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_mappers_queue_counts_the_results_waiting_in_its_transport(backend):
    """Behind a consumer of 2 ms per datapoint, an identity map keeps its buffer of finished
    results nearly full; the results waiting in the transport (a queue, a socket) count (the
    queue read 4% full: only those already taken out of the transport were counted)."""
    src = df.DataFromList([[i] for i in range(1000)], shuffle=False)
    mapper = (df.MultiThreadMapData(src, 2, _identity, buffer_size=8, strict=True)
              if backend == "thread" else
              df.MultiProcessMapDataZMQ(src, 2, _identity, buffer_size=8, strict=True))
    report = profile(mapper, num=60, warmup=10, consume=lambda dp: time.sleep(0.002))
    assert report.stages[0].queue_fill >= 0.5
    assert report.bottleneck is None  # the consumer is the slow part
    assert report.items == 60


def _identity(dp):
    return dp


@pytest.mark.parametrize("kind", ["process-map", "thread-map", "runner"])
def test_the_trace_shows_when_each_worker_was_busy(kind, tmp_path):
    src = df.DataFromList([[i, float(i)] for i in range(400)], shuffle=False)
    flow = {"process-map": lambda: df.MultiProcessMapDataZMQ(src, 2, _slow_map_func,
                                                              buffer_size=8),
            "thread-map": lambda: df.MultiThreadMapData(src, 2, _slow_map_func, buffer_size=8),
            "runner": lambda: df.MultiProcessRunnerZMQ(df.MapData(src, _slow_map_func), 2)}[kind]()
    assert type(flow).profile_hint == kind
    report = profile(flow, num=300, warmup=4, trace=True)
    stage = report.stages[0]
    assert stage.workers == stage.workers_start == 2 and stage.workers_mean == 2.0
    assert 0.3 < stage.workers_busy <= 1.0  # each item sleeps 2 ms; the workers are the limit
    assert "  2, " in report.format().splitlines()[5] and "% busy" in report.format()
    path = tmp_path / "trace.json"
    report.write_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    rows = {e["tid"]: e["args"]["name"] for e in events
            if e["name"] == "thread_name" and e["pid"] == 1}
    assert rows == {1000: f"0: {stage.name} worker 0", 1001: f"0: {stage.name} worker 1"}
    busy = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert {e["tid"] for e in busy} == {1000, 1001}
    assert all(e["dur"] >= 0 for e in busy)


def _fail_on_5(x):
    if x % 10 == 5:
        raise ValueError("bad")
    return x


def test_the_table_counts_skipped_inputs():
    src = df.DataFromList([[i] for i in range(200)], shuffle=False)
    flow = df.MapDataComponent(src, _fail_on_5, on_error="skip")
    report = profile(flow, num=90, warmup=0)
    assert report.stages[0].skipped == 10  # inputs 5, 15, ..., 95 for 90 results
    assert report.stages[1].skipped is None
    header, row = report.format().splitlines()[3], report.format().splitlines()[5]
    assert header.split()[-1] == "skipped" and row.split()[-1] == "10"


def test_the_report_says_when_the_jpeg_fast_path_is_off():
    """A stage that decodes JPEG without the fast path says so under the table (the extension
    switched off for a fresh interpreter: the fast path's state is read at import)."""
    import subprocess
    import sys

    code = (
        "import cv2, numpy as np, dataflow as df\n"
        "from dataflow import imgaug\n"
        "ok, buf = cv2.imencode('.jpg', np.zeros((32, 32, 3), np.uint8))\n"
        "src = df.DataFromList([[buf.tobytes()] for _ in range(20)], shuffle=False)\n"
        "flow = df.AugmentImageComponent(src, [imgaug.Flip(horiz=True)], decode='jpeg')\n"
        "print(df.profile(flow, num=10, warmup=1).format())\n"
        "two = df.AugmentImageComponents(df.MapData(src, lambda dp: [dp[0], dp[0]]),\n"
        "                                [imgaug.Flip(horiz=True)], index=(0, 1), decode='jpeg')\n"
        "print(df.profile(two, num=10, warmup=1).format())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False,
                         env={**__import__("os").environ, "DATAFLOW_NO_JPEG_EXT": "1",
                              "DATAFLOW_JPEG_FALLBACK": "cv2"})
    assert out.returncode == 0, out.stderr
    # (one note per report: each of the two image flows says it)
    notes = [x for x in out.stdout.splitlines() if x.startswith("note: ")]
    assert len(notes) == 2 and notes[0] == notes[1]
    assert notes[0].startswith("note: JPEG fast path off (")
    assert "decoding whole images with OpenCV's DCT-scaled cv2.imdecode instead; to get it, " \
        in notes[0]
