"""``SVMLightData``: rows of an SVMLight/libsvm file, read with a parser of its own.

The file is read the way ``sklearn.datasets.load_svmlight_file(path)`` reads it with its
defaults (tensorpack's reader calls it), without needing scikit-learn: one datapoint per line,
``label [qid:n] index:value ...``, ``#`` starts a comment; a ``qid`` is ignored; indices are
one-based unless one of them is 0; the row width is the largest index (at least 1); values and
labels are ``float64``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow.base import RNGDataFlow
from dataflow.serialize._atomic import check_source_path
from dataflow.state import ReaderState

__all__ = ["SVMLightData"]


def _svmlight_error(path: str, lineno: int, problem: str) -> ValueError:
    return ValueError(
        f"SVMLightData: {path!r}, line {lineno}: {problem}; each line must read "
        "`label [qid:n] index:value ...` with increasing integer indices."
    )


def load_svmlight(path: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of an SVMLight file: dense ``float64`` rows and ``float64`` labels, as
    ``sklearn.datasets.load_svmlight_file`` gives them (densified) with its defaults."""
    labels: list[float] = []
    rows: list[tuple[list[int], list[float]]] = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            tokens = raw.split(b"#", 1)[0].split()
            if not tokens:
                continue
            try:
                labels.append(float(tokens[0]))
            except ValueError:
                label = tokens[0].decode(errors="replace")
                raise _svmlight_error(path, lineno, f"the label {label!r} is not a number"
                                      ) from None
            feats = tokens[1:]
            if feats and feats[0].startswith(b"qid:"):
                feats = feats[1:]
            idx: list[int] = []
            vals: list[float] = []
            for tok in feats:
                key, sep, value = tok.partition(b":")
                try:
                    i, v = int(key), float(value)
                except ValueError:
                    i, v, sep = -1, 0.0, b""
                if not sep or i < 0:
                    text = tok.decode(errors="replace")
                    raise _svmlight_error(path, lineno, f"{text!r} is not index:value")
                if idx and i <= idx[-1]:
                    raise _svmlight_error(path, lineno, f"index {i} follows index {idx[-1]}")
                idx.append(i)
                vals.append(v)
            rows.append((idx, vals))
    used = [i for idx, _ in rows for i in idx]
    shift = 1 if used and min(used) > 0 else 0  # one-based unless an index is 0
    width = (max(used) - shift if used else 0) + 1  # (one column even when there are none)
    x = np.zeros((len(rows), width), np.float64)
    for r, (idx, vals) in enumerate(rows):
        x[r, np.asarray(idx, np.int64) - shift] = vals
    return x, np.asarray(labels, np.float64)


class SVMLightData(ReaderState, RNGDataFlow):
    """Yields ``[x_row, y]`` (a dense ``float64`` row and its ``float64`` label) of an
    SVMLight/libsvm file, read whole at construction (see the module docstring for the format;
    a malformed line raises a ValueError naming it). ``len`` is exact; not reentrant.
    Resumable: ``state_dict()`` saves epoch, position and seed; a restored flow continues at the
    position.
    """

    def __init__(
        self, filename: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None
    ) -> None:
        self._filename = check_source_path(filename, "SVMLightData", "filename")
        self.X, self.y = load_svmlight(self._filename)
        self._init_reader(shuffle, seed)

    def __len__(self) -> int:
        return len(self.y)

    def __iter__(self) -> Iterator[list[Any]]:
        return self._run(*self._begin_epoch())

    def _run(self, token: object, epoch: int, start: int) -> Iterator[list[Any]]:
        with self._guard:
            n = len(self.y)
            order = self._epoch_rng(epoch).permutation(n).tolist() if self._shuffle else range(n)
            for self._pos, i in enumerate(order[start:], start + 1):
                yield [self.X[i], self.y[i]]
            self._end(token)
