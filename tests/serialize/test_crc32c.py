from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.serialize._crc32c import (
    _crc_small,
    crc32c,
    crc32c_many,
    masked_crc32c_lengths,
    masked_crc32c_many,
)


def test_known_vectors():
    assert crc32c(b"") == 0
    assert crc32c(b"a") == 0xC1D04330
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E


def test_masked_value_of_tfrecord_length_header():
    # masked_crc32c of the 8-byte little-endian length 0 is a fixed TFRecord constant
    crc = crc32c(bytes(8))
    expected = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert int(masked_crc32c_many([bytes(8)])[0]) == expected


def test_many_buffers_of_mixed_sizes_match_the_bytewise_reference():
    rng = np.random.default_rng(0)
    bufs = [rng.integers(0, 256, size=int(n), dtype=np.uint8).tobytes() for n in
            rng.integers(0, 700, 200)]  # fmt: skip
    bufs.append(rng.integers(0, 256, size=100_000, dtype=np.uint8).tobytes())
    got = crc32c_many(bufs)
    assert got.dtype == np.uint32
    assert got.tolist() == [_crc_small(b) for b in bufs]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8))
def test_property_matches_reference(bufs):
    assert crc32c_many(bufs).tolist() == [_crc_small(b) for b in bufs]


def test_length_header_checksums_match_the_generic_path():
    lengths = [0, 1, 255, 256, 2**32 - 1, 2**32, 2**63 + 5]
    as_bytes = [n.to_bytes(8, "little") for n in lengths]
    assert masked_crc32c_lengths(lengths).tolist() == masked_crc32c_many(as_bytes).tolist()
