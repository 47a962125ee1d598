"""tensorpack's ``utils.timer``: :func:`timed_operation` and :class:`Timer`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

__all__ = ["Timer", "timed_operation"]

# the package's logger: what dataflow.utils.logger prints (that module is not imported here,
# so that timing something does not install a console handler)
_logger = logging.getLogger("dataflow")


@contextlib.contextmanager
def timed_operation(msg: str, log_start: bool = False) -> Iterator[None]:
    """Log the time the block took, on the ``dataflow`` logger at INFO level::

        with timed_operation('Good Stuff'):
            time.sleep(1)
        # logs "Good Stuff finished, time:1.0012 sec."

    With ``log_start``, ``"Start Good Stuff ..."`` is logged first.
    """
    if not isinstance(msg, str) or not msg:
        raise ValueError(f"`msg` must be a non-empty str, got {msg!r}.")
    if log_start:
        _logger.info("Start %s ...", msg)
    start = time.perf_counter()
    yield
    _logger.info("%s finished, time:%.4f sec.", msg, time.perf_counter() - start)


class Timer:
    """Measures the time since it was made (or :meth:`reset`), minus the time paused.

    It runs from creation; :meth:`pause` stops it and :meth:`start` resumes it;
    :meth:`seconds` is the running time so far.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start again from zero, running."""
        self._start = time.perf_counter()
        self._paused: float | None = None
        self._total_paused = 0.0

    def start(self) -> None:
        """Resume a paused timer (it must be paused)."""
        if self._paused is None:
            raise RuntimeError("Timer.start(): the timer is running already; pause() it first.")
        self._total_paused += time.perf_counter() - self._paused
        self._paused = None

    def pause(self) -> None:
        """Stop counting until :meth:`start` (it must be running)."""
        if self._paused is not None:
            raise RuntimeError("Timer.pause(): the timer is paused already; start() it first.")
        self._paused = time.perf_counter()

    def is_paused(self) -> bool:
        return self._paused is not None

    def seconds(self) -> float:
        """Seconds counted so far (time since reset, minus the pauses)."""
        end = self._paused if self._paused is not None else time.perf_counter()
        return end - self._start - self._total_paused
