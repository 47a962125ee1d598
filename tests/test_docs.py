"""Every ``python`` code block of README.md and docs/*.md runs as written (the blocks that use
Ray run in ``tests/ray/test_docs_blocks.py``, on the test's local Ray), and the README's
parallel recipe resumes exactly: a random map with no seed anywhere, restored from a state
saved mid-epoch or after a ``break``, gives exactly the batches, pixels included, of an
uninterrupted run."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests import docs_blocks
from tests.helpers import to_plain

BLOCKS = [b for b in docs_blocks.all_blocks() if not docs_blocks.uses_ray(b[2])]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return docs_blocks.make_workdir(tmp_path_factory.mktemp("docs"))


def test_every_substitution_still_matches_its_block():
    docs_blocks.check_substitutions()
    assert len(BLOCKS) >= 15 and {f for f, _, _ in BLOCKS} >= {"README.md", "docs/state.md"}


@pytest.mark.parametrize(("path", "line", "source"), [
    pytest.param(*b, id=f"{b[0]}:{b[1]}",
                 marks=[pytest.mark.loads_frameworks] if docs_blocks.loads_frameworks(b[2]) else [])
    for b in BLOCKS])
def test_code_block_runs(path, line, source, workdir, tmp_path, capsys):
    # each block in its own directory, with the shared train.lmdb
    (tmp_path / "train.lmdb").symlink_to(workdir / "train.lmdb")
    if docs_blocks.in_subprocess(source):
        docs_blocks.run_in_subprocess(path, line, tmp_path)
        return
    ns = docs_blocks.run_block(path, source, tmp_path)
    out = capsys.readouterr().out
    for text in _printed_outputs(path, line):  # a ```text block right after shows its output
        assert _shape(text) == _shape(out), f"{path}:{line} prints other lines than its docs"
    assert ns["__name__"] == "__docs__"


def _printed_outputs(path: str, line: int) -> list[str]:
    """The ```text block that follows the code block at ``line`` with only prose between, when
    that prose says the block prints it ("prints")."""
    text = (docs_blocks.ROOT / path).read_text()
    lines = text.splitlines()
    end = next(i for i in range(line, len(lines)) if lines[i].startswith("```"))
    rest = "\n".join(lines[end + 1:])
    m = re.match(r"\s*((?:(?!```).)*?)```text\n(.*?)```", rest, re.S)
    if m is None or "print" not in m.group(1):
        return []
    return [m.group(2)]


def _shape(text: str) -> list[str]:
    """The lines of an output with their figures blanked (timings vary) and columns joined."""
    out = []
    for row in text.strip().splitlines():
        row = re.sub(r"[-+]?\d[\d,.]*", "N", row)
        out.append(" ".join(row.split()))
    return [r for r in out if r and set(r) - {"-", "=", " "}]


# ---- the README's parallel recipe resumes exactly ---------------------------------------------


def _recipe(workdir):
    """The README's `decode_and_augment` and `build`, from the README's own text."""
    path, line, source = next(b for b in BLOCKS if b[0] == "README.md" and "def build()" in b[2])
    head = source[:source.index("ds = build()")]
    assert "seed" not in head  # (no seed anywhere: the resume must not rest on one)
    assert "finite=True" in head and "strict=True" in head
    ns = docs_blocks.namespace(workdir)
    del ns["decode_and_augment"]  # (the recipe's own)
    exec(compile(head, f"{path}:{line}", "exec"), ns)
    return ns["build"]


def _batches(it, n):
    out = []
    for batch in it:
        out.append(to_plain(batch))
        if len(out) == n:
            break
    return out


def test_the_readme_recipe_resumes_exactly_without_a_seed(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    build = _recipe(workdir)
    saved = build()
    saved.reset_state()
    start = json.loads(json.dumps(saved.state_dict()))
    n = len(saved)
    assert n == docs_blocks.IMAGES // 64 == 8

    # the saved pipeline's own uninterrupted run: two epochs, from its state before the first
    ref = build()
    ref.reset_state()
    ref.load_state_dict(start)
    whole = [to_plain(b) for b in ref] + [to_plain(b) for b in ref]
    ref.close()
    assert len(whole) == 2 * n
    first = np.asarray(whole[0][0]["__array__"], np.uint8)
    assert first.shape == (64, 40, 48, 3)

    # a state taken mid-epoch while the loop goes on, and one taken after a `break`
    it = iter(saved)
    head = _batches(it, 3)
    mid = json.loads(json.dumps(saved.state_dict()))
    head += _batches(it, 2)
    del it  # (the loop ends: the iterator is closed)
    for step, batch in enumerate(saved):  # a new epoch (the last one was not finished)
        if step == 0:
            assert to_plain(batch) == whole[n]
        if step == 1:
            break
    after_break = json.loads(json.dumps(saved.state_dict()))
    saved.close()
    assert head == whole[:5]

    for state, at in ((mid, 3), (after_break, n + 2)):
        fresh = build()
        fresh.reset_state()
        fresh.load_state_dict(state)
        rest = [to_plain(b) for b in fresh]
        if at < n:
            rest += [to_plain(b) for b in fresh]
        fresh.close()
        assert rest == whole[at:], f"resume at batch {at} differs"
