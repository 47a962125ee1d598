"""The snapshot key: stable across processes and hash seeds, new when the code, a constant, a
closure value, a global, a helper or the source changes, and explained part by part."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflow as df
from dataflow.snapshot.explain import explain_change
from dataflow.snapshot.key import (
    function_parts,
    make_key,
    source_parts,
    value_digest,
)

SCALE = 3


def _helper(x):
    return x * SCALE


def decode(dp, k=2):
    return [_helper(dp[0]) + k, np.sqrt(float(dp[0]))]


def _key(fn, ds):
    return make_key({**source_parts(ds), **function_parts(fn)})


_MODULE = textwrap.dedent("""
    import numpy as np
    SCALE = {scale}
    def helper(x):
        return x * SCALE{extra}
    def decode(dp, k={k}):
        return [helper(dp[0]) + k, np.float32(dp[0])]
""")

_PRINT_KEYS = textwrap.dedent("""
    import importlib, sys
    sys.path.insert(0, sys.argv[1])
    import dataflow as df
    from dataflow.snapshot.key import function_parts, make_key, source_parts
    ds = df.DataFromList([[i, f"name{i}"] for i in range(5)], shuffle=False)
    for name in sys.argv[2:]:
        decode = importlib.import_module(name).decode
        print(make_key({**source_parts(ds), **function_parts(decode)}))
""")


def _keys_in_subprocess(folder, hashseed, names):
    env = {**os.environ, "PYTHONHASHSEED": str(hashseed)}
    out = subprocess.run([sys.executable, "-c", _PRINT_KEYS, str(folder), *names], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_the_key_is_the_same_in_other_processes_and_hash_seeds_and_changes_with_the_code(
        tmp_path):
    # the same module, then a changed global, default and helper's code (each its own module)
    variants = [(3, 2, ""), (4, 2, ""), (3, 5, ""), (3, 2, " + 0"), (3, 2, "")]
    names = [f"pipeline_mod{k}" for k in range(len(variants))]
    for name, (scale, k, extra) in zip(names, variants):
        (tmp_path / f"{name}.py").write_text(_MODULE.format(scale=scale, k=k, extra=extra))
    keys = _keys_in_subprocess(tmp_path, 1, names)
    assert len(keys[0]) == 20 and keys[4] == keys[0]  # (the module's name is no part of it)
    assert len(set(keys[:4])) == 4
    assert _keys_in_subprocess(tmp_path, 2, names[:1]) == keys[:1]  # another hash seed


def test_a_closure_value_a_constant_and_the_source_change_the_key():
    def make(offset):
        def f(dp):
            return [dp[0] + offset]
        return f

    ds = df.DataFromList([[1], [2]], shuffle=False)
    assert _key(make(1), ds) == _key(make(1), ds)
    assert _key(make(1), ds) != _key(make(2), ds)
    assert _key(lambda dp: [dp[0] + 1], ds) != _key(lambda dp: [dp[0] + 2], ds)
    assert _key(make(1), ds) != _key(make(1), df.DataFromList([[1], [3]], shuffle=False))
    # the order of the source is part of what a position means; its shuffle flag is not
    assert _key(make(1), ds) == _key(make(1), df.DataFromList([[1], [2]], shuffle=True))
    assert _key(make(1), [[1], [2]]) != _key(make(1), [[2], [1]])
    assert source_parts([["a", 1]]) != source_parts([["a", "1"]]) != source_parts([("a", "1")])
    big = np.zeros(5000)  # (its repr would abbreviate: arrays count by their bytes)
    assert source_parts([[big]]) != source_parts([[np.where(np.arange(5000) == 2500, 1.0, big)]])


def test_files_of_a_source_count_by_name_size_and_mtime(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(b"x" * 10)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    files = [[str(path), 0]]
    before = source_parts(files)
    assert source_parts(files) == before
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    assert source_parts(files) != before
    lmdb_path = str(tmp_path / "x.lmdb")
    df.LMDBSerializer.save(df.DataFromList([[i] for i in range(4)], shuffle=False), lmdb_path,
                           progress=False)
    first = source_parts(df.LMDBSerializer.load(lmdb_path, shuffle=False))
    assert source_parts(df.LMDBSerializer.load(lmdb_path, shuffle=True)) == first
    df.LMDBSerializer.save(df.DataFromList([[i] for i in range(5)], shuffle=False), lmdb_path,
                           overwrite=True, progress=False)
    assert source_parts(df.LMDBSerializer.load(lmdb_path, shuffle=False)) != first


class Decoder:
    def __init__(self, size):
        self.size = size

    def __call__(self, dp):
        return [dp[0] * self.size]


def test_callable_objects_partials_and_library_stages_key_by_their_state():
    import functools

    ds = [[1]]
    assert _key(Decoder(2), ds) == _key(Decoder(2), ds) != _key(Decoder(3), ds)
    assert _key(functools.partial(decode, k=1), ds) != _key(functools.partial(decode, k=2), ds)
    select = df.SelectComponent(df.DataFromList([[1, 2]]), [0]).func
    other = df.SelectComponent(df.DataFromList([[1, 2]]), [1]).func
    assert _key(select, ds) != _key(other, ds)
    import operator

    assert _key(operator.itemgetter(0), ds) != _key(operator.itemgetter(1), ds)
    assert _key(np.sqrt, ds) == _key(np.sqrt, ds) != _key(np.exp, ds)
    # a closure made by a library's factory: its code by the version, its values by digest
    ns = {"__name__": "dataflow.a_factory"}
    exec("def make(k):\n    def f(dp):\n        return [dp[0] + k]\n    return f", ns)
    assert _key(ns["make"](1), ds) == _key(ns["make"](1), ds) != _key(ns["make"](2), ds)


def test_explain_change_names_the_changed_part():
    def f(dp):
        return [SCALE]

    def g(dp):
        return [SCALE + 1]

    before, now = function_parts(f), function_parts(g)
    assert "func.global:SCALE" in now
    assert explain_change(now, before) == ["func.code: changed"]
    assert explain_change(function_parts(decode), function_parts(f)) == [
        "func.code: changed", "func.defaults: new", "func.global:SCALE: gone",
        "func.global:_helper.code: new",
        "func.global:_helper.global:SCALE: new", "func.global:np: new"]


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=12)


@settings(max_examples=40, deadline=None)
@given(_VALUES, _VALUES)
def test_a_value_digest_is_its_values(a, b):
    assert value_digest(a) == value_digest(copy.deepcopy(a))
    if json.dumps(a, default=repr, sort_keys=True) != json.dumps(b, default=repr, sort_keys=True):
        assert value_digest(a) != value_digest(b)


def test_a_snapshot_of_a_snapshot_is_keyed_by_the_inner_key(tmp_path):
    from dataflow.snapshot import SnapshotData

    inner = SnapshotData([[1], [2], [3]], tmp_path, map_func=_helper_list)
    outer = SnapshotData(inner, tmp_path, map_func=_negate)
    assert outer.parts["source.identity"] != SnapshotData(
        SnapshotData([[1], [2], [4]], tmp_path, map_func=_helper_list), tmp_path,
        map_func=_negate).parts["source.identity"]
    outer.reset_state()
    assert [int(x[0]) for x in outer] == [-3, -6, -9]
    assert inner.stats()["misses"] == 3  # (the outer one reads the inner one by position)
    assert [int(x[0]) for x in outer] == [-3, -6, -9] and outer.stats()["hits"] == 3
    outer.close()


def _helper_list(dp):
    return [np.int64(_helper(dp[0]))]


def _negate(dp):
    return [-dp[0]]
