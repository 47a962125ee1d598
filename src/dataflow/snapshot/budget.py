"""A snapshot under a byte budget: store the outputs that are most expensive per byte.

``budget=`` caps the bytes a snapshot holds on disk. Every output that is computed has a
measured cost (the seconds ``map_func`` took) and a size (its bytes); its *density* is seconds
per byte. While the budget has room, outputs are stored as they come. When it is full, an output
whose density beats the cheapest stored ones replaces them (they are discarded), so that over
the epochs the snapshot comes to hold the outputs that save the most time per byte, and the
rest are computed each time: an epoch's time falls in proportion to the work stored.

The decision is :func:`admit`'s, a pure function of the stored costs; :class:`Budget` keeps
the running total of one process (processes sharing a snapshot each count what they see).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["Budget", "admit", "parse_budget"]

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def parse_budget(budget: Any) -> int | None:
    """``budget`` in bytes: ``None`` (no limit), an int, or a string like ``"20GB"``,
    ``"512MiB"`` or ``"1.5e9"``."""
    if budget is None:
        return None
    if isinstance(budget, bool):
        raise TypeError(f"`budget` must be a number of bytes or a string like '20GB', got "
                        f"{budget!r}.")
    if isinstance(budget, int | float):
        value = float(budget)
    elif isinstance(budget, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", budget.lower())
        if m is None or m.group(2) not in _UNITS:
            raise ValueError(
                f"`budget` must be a number of bytes or a size like '20GB', '512MiB', got "
                f"{budget!r}; units: {', '.join(u.upper() for u in _UNITS if u)}.")
        value = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise TypeError(f"`budget` must be a number of bytes or a string like '20GB', got "
                        f"{type(budget).__name__} {budget!r}.")
    if value < 0 or value != value:
        raise ValueError(f"`budget` must be >= 0 bytes, got {budget!r}.")
    return int(value)


def admit(size: int, seconds: float, free: int, stored: dict[int, tuple[float, int]]
          ) -> tuple[bool, list[int]]:
    """Whether an output of ``size`` bytes that took ``seconds`` is stored, and which stored
    outputs (``{index: (seconds, bytes)}``) to discard for it: the cheapest per byte, and only
    those cheaper per byte than it. ``free``: the budget's bytes left."""
    if size <= free:
        return True, []
    density = seconds / max(size, 1)
    victims: list[int] = []
    for i, (s, b) in sorted(stored.items(), key=lambda kv: (kv[1][0] / max(kv[1][1], 1),
                                                           kv[0])):
        if s / max(b, 1) >= density:
            break
        victims.append(i)
        free += b
        if size <= free:
            return True, victims
    return False, []


class Budget:
    """The budget of one process's writer: ``limit`` bytes (``None``: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.evicted = 0
        self.refused = 0

    def place(self, store: Any, index: int, size: int, seconds: float) -> bool:
        """Make room for an output in ``store`` (discarding cheaper ones); whether it fits."""
        if self.limit is None:
            return True
        ok, victims = admit(size, seconds, self.limit - store.nbytes(), store.costs())
        if not ok:
            self.refused += 1
            return False
        for i in victims:
            store.discard(i)
            self.evicted += 1
        return True
