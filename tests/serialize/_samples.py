"""Datapoints and helpers shared by the serializer tests."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dataflow.base import DataFlow
from dataflow.sources import DataFromList


def rich_datapoints(n: int = 12) -> list[list[Any]]:
    """Datapoints with arrays of several dtypes/shapes, bytes, str, ints, floats, lists, dicts."""
    rng = np.random.default_rng(7)
    dps = []
    for i in range(n):
        dps.append(
            [
                rng.integers(0, 255, size=(i % 4 + 1, 3, 2), dtype=np.uint8),
                rng.standard_normal((2, i % 3 + 1)).astype(np.float32),
                np.arange(i, dtype=np.int64),
                np.float16(i / 4),
                b"\x00raw\xff" * (i % 3),
                f"text-{i}-é",
                i - 5,
                i * 0.25,
                [i, [str(i), {"k": i}], []],
                {"label": i, "names": ["a", "b"], "arr": np.full(2, i, dtype=np.int16)},
            ]
        )
    return dps


def tabular_datapoints(n: int = 20) -> list[list[Any]]:
    """What HDF5 can hold: one shape/dtype per component, str and bytes."""
    rng = np.random.default_rng(3)
    return [
        [
            rng.standard_normal((3, 2)).astype(np.float32),
            np.int64(i),
            i * 0.5,
            rng.integers(0, 255, size=(4,), dtype=np.uint8),
            f"name-{i}-é",
            b"\x00b" * (i % 3),
            bool(i % 2),
        ]
        for i in range(n)
    ]


def flow(dps: list[Any]) -> DataFromList:
    return DataFromList(dps, shuffle=False)


class FailingFlow(DataFlow):
    """Yields ``dps`` and raises ``exc`` before datapoint ``fail_at``."""

    def __init__(self, dps: list[Any], fail_at: int, exc: BaseException) -> None:
        self.dps = dps
        self.fail_at = fail_at
        self.exc = exc

    def __len__(self) -> int:
        return len(self.dps)

    def __iter__(self):
        for i, dp in enumerate(self.dps):
            if i == self.fail_at:
                raise self.exc
            yield dp


def listing(directory: Any) -> list[str]:
    return sorted(os.listdir(directory))
