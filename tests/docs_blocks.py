"""Run the ``python`` code blocks of README.md and docs/*.md as written, on small data.

Each block runs in a fresh namespace, in a temporary working directory that holds what the
recipes name: ``train.lmdb`` (small JPEGs with labels, as ``[jpeg bytes, label]``). A recipe
may use names it leaves to the reader (a training step, checkpoint functions, a flow ``ds``
built earlier on the page); :func:`namespace` provides them, small and real. Where a recipe
names something a test cannot reach (a bucket, a cluster's head), :data:`SUBSTITUTIONS` lists
the exact text replaced and why; a substitution whose text is no longer in its block fails,
so that the table cannot drift from the docs. Flows a block leaves open are closed after it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FILES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

#: images in train.lmdb: 8 batches of 64
IMAGES = 512

#: (file, text in a block) -> (replacement, why)
SUBSTITUTIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("README.md", '"s3://bucket/train-{000000..000127}.tar"'): (
        '"out/train-{000000..000000}.tar"',
        "the shards the block just wrote stand for the bucket they would be uploaded to"),
    ("README.md", 'ray.init(address="auto")'): (
        'ray.init(address="auto", ignore_reinit_error=True)',
        "the test's local Ray stands for the cluster"),
    ("README.md", "RayMapData(ds, 8, decode_and_augment, strict=True)"): (
        "RayMapData(ds, 2, decode_and_augment, strict=True)",
        "the test's local Ray has 2 CPUs (8 actors of one CPU would never start)"),
    ("README.md", '"head-ip:6379"'): (
        "RAY_ADDRESS", "the test's local Ray stands for the cluster's head"),
    ("docs/parallel_backends.md", 'ray.init(address="auto")'): (
        'ray.init(address="auto", ignore_reinit_error=True)',
        "the test's local Ray stands for the cluster"),
    ("docs/parallel_backends.md", '"head-ip:6379"'): (
        "RAY_ADDRESS", "the test's local Ray stands for the cluster's head"),
    ("docs/parallel_backends.md", '"tcp://10.0.0.5:5555"'): (
        "ZMQ_ADDRESS", "the trainer's private interface: a free port on 127.0.0.1 here"),
    ("docs/streaming.md", '"s3://bucket/train-{000000..000127}.tar"'): (
        '"out/train-{000000..000000}.tar"',
        "the shards the block just wrote stand for the bucket they would be uploaded to"),
    ("docs/streaming.md", 'cache_dir="/local/cache"'): (
        'cache_dir="cache"', "a local disk's directory, in the test's directory"),
}


def blocks(path: str) -> list[tuple[int, str]]:
    """``(line, source)`` of every ```python block of ``path`` (relative to the repository)."""
    text = (ROOT / path).read_text()
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def all_blocks() -> list[tuple[str, int, str]]:
    return [(f, line, src) for f in FILES for line, src in blocks(f)]


def uses_ray(source: str) -> bool:
    return "dataflow.ray" in source or "import ray" in source


def substituted(path: str, source: str, values: dict[str, str] | None = None) -> str:
    """``source`` with the substitutions of :data:`SUBSTITUTIONS`; a replacement that is a
    name in capitals (``ZMQ_ADDRESS``) is a value known at run time, from ``values``."""
    from tests.helpers import free_port

    values = {"ZMQ_ADDRESS": repr(f"tcp://127.0.0.1:{free_port()}"), **(values or {})}
    for (where, old), (new, _why) in SUBSTITUTIONS.items():
        if where == path and old in source:
            source = source.replace(old, values.get(new, new))
    return source


def check_substitutions() -> None:
    """Every substitution still finds its text in its file's blocks."""
    for (where, old), _ in SUBSTITUTIONS.items():
        assert any(old in src for _, src in blocks(where)), (where, old)


def small_jpegs(n: int = IMAGES, seed: int = 0) -> list[list[Any]]:
    """``n`` datapoints ``[JPEG bytes, label]`` of 40x48 noisy images."""
    import cv2

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        img = rng.integers(0, 256, size=(40, 48, 3), dtype=np.uint8)
        ok, buf = cv2.imencode(".jpg", img)
        assert ok
        out.append([buf.tobytes(), i % 10])
    return out


def make_workdir(path: Path) -> Path:
    """``train.lmdb`` in ``path``."""
    import dataflow as df

    df.LMDBSerializer.save(df.DataFromList(small_jpegs(), shuffle=False), str(path / "train.lmdb"))
    return path


class Checkpoints:
    """``save_checkpoint(state)`` / ``load_checkpoint()`` as a trainer would: a JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path / "checkpoint.json"
        self.saved = 0

    def save(self, state: Any) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.path)
        self.saved += 1

    def load(self) -> Any:
        return json.loads(self.path.read_text())


def namespace(workdir: Path, source: str = "", extra: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """The names a recipe leaves to the reader."""
    import cv2

    import dataflow as df
    from dataflow import imgaug

    augs = imgaug.AugmentorList([imgaug.Flip(horiz=True), imgaug.Brightness(30)])

    def decode_and_augment(dp: list[Any]) -> list[Any]:
        image = cv2.imdecode(np.frombuffer(dp[0], np.uint8), cv2.IMREAD_COLOR)
        return [augs.augment(image), dp[1]]

    steps: list[Any] = []

    def train_step(*args: Any) -> Any:
        steps.append(args)
        if len(args) == 3:  # (params, x, y) -> (params, loss), as a JAX step
            return args[0], 0.0
        return None

    ckpt = Checkpoints(workdir)
    jpegs = small_jpegs(64)
    images = df.MapData(df.DataFromList(jpegs, shuffle=False), decode_and_augment)

    def build() -> Any:
        return df.BatchData(df.MapData(df.DataFromList(jpegs, shuffle=False),
                                       decode_and_augment), 16)

    # a flow of samples as the tar shard writer takes them
    samples = df.DataFromList([{"__key__": f"s{i:04d}", "jpg": j, "cls": c}
                               for i, (j, c) in enumerate(jpegs)], shuffle=False)
    ns: dict[str, Any] = {
        "__name__": "__docs__",
        # the imports the README makes once, at its top (a fragment may rely on them)
        "df": df, "np": np, "imgaug": imgaug,
        "decode_and_augment": decode_and_augment,
        "train_step": train_step,
        "steps": steps,
        "params": None,
        "save_checkpoint": ckpt.save,
        "load_checkpoint": ckpt.load,
        # a flow built earlier on the page: 4 batches of 16 decoded images with their labels;
        # [jpeg bytes, label] where the block decodes them, single images for Ray Data
        "ds": (df.DataFromList(jpegs, shuffle=False) if "decode_and_augment" in source
               else images if "to_ray_dataset" in source else df.BatchData(images, 16)),
        "ds_pipeline": build(),
        "build": build,
    }
    if "TarShardSerializer.save(ds" in source:
        ns["ds"] = samples
    ns.update(extra or {})
    return ns


def run_block(path: str, source: str, workdir: Path, extra: dict[str, Any] | None = None,
              values: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one block in ``workdir``; returns its namespace (its flows closed)."""
    from dataflow.base import DataFlow

    code = compile(substituted(path, source, values), f"{path} (code block)", "exec")
    ns = namespace(workdir, source, extra)
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        exec(code, ns)
    finally:
        os.chdir(cwd)
        for value in list(ns.values()):
            if isinstance(value, DataFlow):
                value.close()
    return ns


def in_subprocess(source: str) -> bool:
    """Blocks that load JAX run in a subprocess: once JAX's backend is up in a process, every
    ``os.fork()`` there warns (and may deadlock), which would break the tests that fork."""
    return "import jax" in source


def loads_frameworks(source: str) -> bool:
    """Blocks that load PyTorch or TensorFlow into the test process: they run after the other
    tests (see ``tests/conftest.py``)."""
    return not in_subprocess(source) and re.search(
        r"\b(torch|tensorflow|dataflow\.input_source)\b", source) is not None


def run_in_subprocess(path: str, line: int, workdir: Path) -> None:
    """Run the block of ``path`` at ``line`` in a fresh interpreter (see :func:`main`)."""
    import subprocess
    import sys

    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "tests.docs_blocks", path, str(line),
                           str(workdir)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert proc.returncode == 0, f"{path}:{line} failed:\n{proc.stdout}\n{proc.stderr}"


def main(argv: list[str]) -> None:
    path, line, workdir = argv[0], int(argv[1]), Path(argv[2])
    source = next(src for at, src in blocks(path) if at == line)
    run_block(path, source, workdir)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
