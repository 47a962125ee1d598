from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.serialize import CorruptFileError, TFRecordData, TFRecordSerializer, dumps, loads
from dataflow.serialize.tfrecord_format import _Scanner, frame_records
from tests.helpers import check_dataflow
from tests.serialize._samples import flow, listing, rich_datapoints


def _save(path, dps, **kw):
    kw.setdefault("progress", False)
    TFRecordSerializer.save(flow(dps), str(path), **kw)


def test_round_trip_builtin_reader_two_epochs(tmp_path):
    dps = rich_datapoints()
    _save(tmp_path / "a.tfrecord", dps)
    df = TFRecordSerializer.load(tmp_path / "a.tfrecord", reader="builtin")
    assert len(df) == 12
    check_dataflow(df, expected=dps, epochs=2)
    assert df._pos == 12
    assert listing(tmp_path) == ["a.tfrecord"]


def test_env_var_selects_the_reader(tmp_path, monkeypatch):
    _save(tmp_path / "a", [[1], [2]])
    monkeypatch.setenv("DATAFLOW_TFRECORD_READER", "builtin")
    assert TFRecordSerializer.load(tmp_path / "a")._reader == "builtin"
    monkeypatch.setenv("DATAFLOW_TFRECORD_READER", "bogus")
    with pytest.raises(ValueError, match=r"`reader` must be one of .*'bogus'"):
        TFRecordSerializer.load(tmp_path / "a")


def test_framing_layout(tmp_path):
    _save(tmp_path / "a", [[1], "two"])
    data = (tmp_path / "a").read_bytes()
    first = dumps([1])
    (n,) = struct.unpack_from("<Q", data, 0)
    assert n == len(first) and data[12 : 12 + n] == first
    assert data == frame_records([first, dumps("two")])


def test_many_records_in_several_batches_and_size_argument(tmp_path):
    dps = [[i, np.full(i % 7, i, dtype=np.int32)] for i in range(2500)]
    _save(tmp_path / "a", dps, codec="msgpack")
    df = TFRecordSerializer.load(tmp_path / "a", reader="builtin")
    assert len(df) == 2500
    got = check_dataflow(df, epochs=2)
    assert [dp[0] for dp in got] == list(range(2500))
    head = TFRecordSerializer.load(tmp_path / "a", size=10, reader="builtin")
    assert len(head) == 10
    assert [dp[0] for dp in check_dataflow(head, epochs=2)] == list(range(10))
    too_many = TFRecordSerializer.load(tmp_path / "a", size=3000, reader="builtin")
    too_many.reset_state()
    with pytest.raises(CorruptFileError, match=r"has only 2500 records but `size` is 3000"):
        list(too_many)


def test_empty_flow_gives_empty_file(tmp_path):
    _save(tmp_path / "a", [])
    assert (tmp_path / "a").read_bytes() == b""
    df = TFRecordSerializer.load(tmp_path / "a", reader="builtin")
    assert len(df) == 0
    assert check_dataflow(df) == []


def test_truncated_file_names_file_and_record(tmp_path):
    _save(tmp_path / "a", [[i, "x" * 50] for i in range(5)])
    data = (tmp_path / "a").read_bytes()
    rec = len(data) // 5
    (tmp_path / "cut").write_bytes(data[: 3 * rec + 20])
    with pytest.raises(CorruptFileError, match=r"'.*cut': record 3 at byte \d+ is cut short"):
        TFRecordSerializer.load(tmp_path / "cut", reader="builtin")
    df = TFRecordSerializer.load(tmp_path / "cut", size=5, reader="builtin")
    df.reset_state()
    it = iter(df)
    assert [next(it)[0] for _ in range(3)] == [0, 1, 2]
    with pytest.raises(CorruptFileError, match=r"record 3 at byte"):
        next(it)


def test_corrupt_data_byte_names_the_record(tmp_path):
    _save(tmp_path / "a", [[i, f"payload-{i}"] for i in range(6)])
    data = bytearray((tmp_path / "a").read_bytes())
    at = data.index(b"payload-4")
    data[at] ^= 0x01
    (tmp_path / "bad").write_bytes(bytes(data))
    df = TFRecordSerializer.load(tmp_path / "bad", reader="builtin")
    assert len(df) == 6  # the header scan does not read data
    df.reset_state()
    got = []
    with pytest.raises(CorruptFileError, match=r"'.*bad': record 4 at byte \d+ has a bad data"):
        got.extend(dp[0] for dp in df)
    assert got == [0, 1, 2, 3]  # every good record comes first
    unchecked = TFRecordSerializer.load(tmp_path / "bad", reader="builtin", verify=False)
    unchecked.reset_state()
    assert [dp[1] for dp in unchecked][4] == "qayload-4"


def test_foreign_file_with_a_plausible_first_length_is_refused_at_construction(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\x10" + bytes(40))  # length 16, then zeros
    with pytest.raises(CorruptFileError, match=r"record 0 .*bad length checksum .*not a TFRec"):
        TFRecordSerializer.load(tmp_path / "x.bin", reader="builtin")


def test_foreign_and_missing_files(tmp_path):
    (tmp_path / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(CorruptFileError, match=r"record 0 .*not a TFRecord file"):
        TFRecordSerializer.load(tmp_path / "x.png", reader="builtin")
    with pytest.raises(FileNotFoundError, match=r"`path` '.*missing' does not exist"):
        TFRecordSerializer.load(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        TFRecordSerializer.load(tmp_path)
    with pytest.raises(ValueError, match=r"`size` must be a non-negative int"):
        TFRecordSerializer.load(tmp_path / "x.png", size=-1)


def test_raw_records_of_foreign_payloads(tmp_path):
    (tmp_path / "raw").write_bytes(frame_records([b"abc", b"", b"\x00" * 9]))
    df = TFRecordData(tmp_path / "raw", reader="builtin", decode=False)
    assert check_dataflow(df) == [b"abc", b"", b"\x00" * 9]
    undecodable = TFRecordData(tmp_path / "raw", reader="builtin")
    undecodable.reset_state()
    with pytest.raises(CorruptFileError, match=r"record 0 cannot be decoded .*decode=False"):
        list(undecodable)


@pytest.mark.slow
@pytest.mark.loads_frameworks
def test_tensorflow_interop_both_directions(tmp_path):
    tf = pytest.importorskip("tensorflow")
    dps = rich_datapoints(6)
    _save(tmp_path / "ours", dps)
    got = [loads(r) for r in tf.data.TFRecordDataset(str(tmp_path / "ours")).as_numpy_iterator()]
    assert check_dataflow(flow(got), expected=dps, epochs=1)
    with tf.io.TFRecordWriter(str(tmp_path / "theirs")) as w:
        for dp in dps:
            w.write(dumps(dp))
    assert (tmp_path / "theirs").read_bytes() == (tmp_path / "ours").read_bytes()
    for reader in ("builtin", "tf", "auto"):
        df = TFRecordSerializer.load(tmp_path / "theirs", reader=reader)
        check_dataflow(df, expected=dps, epochs=2)
    # TensorFlow's reader reports corruption with the file and record index too
    data = bytearray((tmp_path / "ours").read_bytes())
    data[-10] ^= 0xFF
    (tmp_path / "bad").write_bytes(bytes(data))
    df = TFRecordSerializer.load(tmp_path / "bad", reader="tf")
    df.reset_state()
    with pytest.raises(CorruptFileError, match=r"'.*bad': record 5 cannot be read"):
        list(df)


def _drain(scanner):
    got = []
    while batch := scanner.next_batch(None):
        got.extend(batch)
    return got


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=30), st.integers(0, 10_000))
def test_property_framing_round_trips_and_any_flipped_bit_is_caught(records, flip):
    framed = frame_records(records)
    assert _drain(_Scanner(framed, "mem", verify=True)) == records
    if not framed:
        return
    damaged = bytearray(framed)
    damaged[flip % len(damaged)] ^= 1 << (flip % 8)
    scanner = _Scanner(bytes(damaged), "mem", verify=True)
    with pytest.raises(CorruptFileError, match=r"'mem': record \d+ at byte \d+ "):
        _drain(scanner)
