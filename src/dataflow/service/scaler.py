"""``num_workers="auto"`` for a :class:`~dataflow.service.DataService`: the autotune
controller of the mappers (:mod:`dataflow.parallel.autotuning`) sizes the pool from how long
the consumers wait."""

from __future__ import annotations

import logging
import time
from typing import Any

from dataflow.parallel.autotuning.controller import Controller, Measurement
from dataflow.parallel.autotuning.stage import START_WINDOW, WINDOW, default_share

__all__ = ["Scaler"]

logger = logging.getLogger("dataflow.service")


class Scaler:
    """``num_workers="auto"``: the autotune controller sizes the pool from the consumers'
    waits (the share of their time spent waiting for outputs) and the pool's rate, one
    window at a time, within the CPU budget it shares with the autotuned stages of this
    process. A window in which no consumer received anything decides nothing."""

    def __init__(self, pool: Any, maximum: int) -> None:
        # (a Ray pool's budget is its cluster's CPUs, not this process's)
        self.pool, self.share = pool, getattr(pool, "share", None) or default_share()
        self.controller = Controller(1, maximum, 1)
        self.controller.skip_window()
        self.share.claim(self, 1, 1.0)
        self._t = time.monotonic()
        self._items: dict[tuple[int, int], float] = {}
        self._consumers: dict[bytes, tuple[float, float, int]] = {}

    def due(self, now: float) -> bool:
        return now - self._t >= (START_WINDOW * 5 if self.controller.starting else WINDOW)

    def step(self, now: float, consumers: dict[bytes, dict[str, Any]]) -> None:
        dt, self._t = now - self._t, now
        items = 0.0
        seen: dict[tuple[int, int], float] = {}
        workers = self.pool.workers()
        for w in workers:
            key = (w.wid, w.generation)
            seen[key] = w.figures()[1]
            items += seen[key] - self._items.get(key, 0.0)
        self._items = seen
        starting = any(w.address is None for w in workers)
        waited = spent = 0.0
        received = 0
        for ident, info in consumers.items():
            cur = (float(info.get("waited", 0.0)), float(info.get("elapsed", 0.0)),
                   int(info.get("received", 0)))
            before = self._consumers.get(ident)
            self._consumers[ident] = cur
            if before is None or cur[1] <= before[1]:
                continue
            waited += cur[0] - before[0]
            spent += cur[1] - before[1]
            received += cur[2] - before[2]
        ctl = self.controller
        if received <= 0 or spent <= 0 or starting:
            # (nobody read: no demand to measure; or a worker is still starting: a window
            # without it would misread what the count gives)
            return
        m = Measurement(len(self.pool.workers()), items / max(dt, 1e-9),
                        min(1.0, max(0.0, waited / spent)))
        ctl.maximum = self.share.maximum(self, 1.0)
        old = ctl.workers
        new = ctl.step(m)
        if new != old:
            logger.info("DataService: %d -> %d workers: %s", old, new,
                        ctl.decisions[-1].reason)
            self.pool.resize(new)
            self.share.claim(self, new, 1.0)

    def close(self) -> None:
        self.share.release(self)
