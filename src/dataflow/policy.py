"""What a map stage does with an input whose mapping fails: the bad-sample policy.

Every map stage (``MapData``, ``MapDataComponent``, the parallel mappers, the augmentation
flows) takes ``on_error`` and ``max_errors``:

* ``on_error="raise"`` (the default): the exception is raised (in a parallel mapper, as a
  :class:`~dataflow.errors.WorkerError` naming the input);
* ``"skip"``: the input is dropped and counted;
* ``"warn"``: the same, and one log line (logger ``dataflow``) names the stage, the input's
  index in the epoch and the exception.

``max_errors`` is the budget of skipped inputs per epoch: an int (a count), a float in
``(0, 1)`` (a fraction of the epoch's length; of the inputs seen so far, once 100 were, when the
length is unknown), or ``None`` (no limit). One more failure than the budget raises
:class:`~dataflow.errors.ErrorBudgetError` with a summary (how many, the first and the last).

A skipped input is accounted for like a delivered one: strict parallel mappers still end their
epoch exactly (every input delivered or skipped), and the counts are part of the stage's
``state_dict()``, so a resumed epoch goes on counting from where it was.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from dataflow.errors import ErrorBudgetError

__all__ = ["ON_ERROR", "ErrorPolicy", "make_policy"]

logger = logging.getLogger("dataflow")

ON_ERROR = ("raise", "skip", "warn")
#: with a fractional budget and no known length, the fraction is checked after this many inputs
MIN_SEEN_FOR_FRACTION = 100


def _check(on_error: Any, max_errors: Any) -> None:
    if on_error not in ON_ERROR:
        raise ValueError(
            f"`on_error` must be one of 'raise', 'skip', 'warn'; got {on_error!r}. 'skip' drops "
            "an input whose mapping raises (and counts it); 'warn' also logs it."
        )
    ok = max_errors is None or (
        isinstance(max_errors, int) and not isinstance(max_errors, bool) and max_errors >= 0
    ) or (isinstance(max_errors, float) and 0 < max_errors < 1)
    if not ok:
        raise ValueError(
            f"`max_errors` must be None (no limit), an int >= 0 (inputs per epoch) or a float in "
            f"(0, 1) (a fraction of the epoch); got {max_errors!r}. Pass e.g. max_errors=0.01."
        )


def make_policy(stage: str, on_error: str, max_errors: int | float | None
                ) -> ErrorPolicy | None:
    """The policy of a stage, or ``None`` for ``on_error="raise"`` (nothing to do: exceptions
    propagate). Validates both arguments."""
    _check(on_error, max_errors)
    if on_error == "raise":
        if max_errors is not None:
            raise ValueError(
                f"`max_errors` ({max_errors!r}) needs on_error='skip' or 'warn': with "
                "on_error='raise' the first failure raises."
            )
        return None
    return ErrorPolicy(stage, on_error, max_errors)


class ErrorPolicy:
    """The counts of one stage: inputs seen and skipped in the epoch in progress, skipped in
    all, and the first and last failure of the epoch (for the summary)."""

    def __init__(self, stage: str, on_error: str, max_errors: int | float | None) -> None:
        self.stage, self.on_error, self.max_errors = stage, on_error, max_errors
        self.seen = 0  # inputs of the epoch in progress (mapped or skipped)
        self.skipped = 0  # inputs skipped in the epoch in progress
        self.total = 0  # inputs skipped since the stage was built
        self._size: int | None = None
        self._first: str | None = None
        self._last: str | None = None

    def begin_epoch(self, size: int | None) -> None:
        """A new epoch of ``size`` inputs (``None``: unknown)."""
        self.seen = self.skipped = 0
        self._size = size
        self._first = self._last = None

    def continue_epoch(self, size: int | None) -> None:
        """The epoch restored by :meth:`load` goes on (its counts are kept)."""
        self._size = size

    def _budget(self) -> float:
        m = self.max_errors
        if m is None:
            return math.inf
        if isinstance(m, int):
            return m
        if self._size:
            return m * self._size
        return m * self.seen if self.seen >= MIN_SEEN_FOR_FRACTION else math.inf

    def failed(self, index: int | None, exc: BaseException | str) -> None:
        """Input ``index`` (its position in the epoch) failed with ``exc`` (an exception, or
        its description): count it, log it under ``"warn"``, raise past the budget."""
        what = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        where = f"input index {index}" if index is not None else "an input"
        self.skipped += 1
        self.total += 1
        self._last = f"{where}: {what}"
        if self._first is None:
            self._first = self._last
        if self.on_error == "warn":
            logger.warning("%s: skipped %s (%s); %d skipped in this epoch", self.stage, where,
                           what, self.skipped)
        budget = self._budget()
        if self.skipped > budget:
            limit = (f"max_errors={self.max_errors!r}" if isinstance(self.max_errors, int) else
                     f"max_errors={self.max_errors!r} of the epoch ({budget:.0f} inputs)")
            raise ErrorBudgetError(
                f"{self.stage}: {self.skipped} inputs failed in this epoch (of {self.seen} "
                f"seen), more than {limit}. First: {self._first}. Last: {self._last}. Fix the "
                "data or the map function, or raise max_errors."
            ) from (exc if isinstance(exc, BaseException) else None)

    def state(self) -> dict[str, Any]:
        """The counts, for the stage's ``state_dict()``."""
        return {"seen": self.seen, "skipped": self.skipped, "total": self.total}

    def load(self, state: Any) -> None:
        """Restore the counts saved by :meth:`state`."""
        from dataflow.state import mismatch

        if not (isinstance(state, dict) and all(
            isinstance(state.get(k), int) and not isinstance(state.get(k), bool)
            and state[k] >= 0 for k in ("seen", "skipped", "total")
        )):
            raise mismatch(self.stage, "error counts", "{'seen', 'skipped', 'total': int >= 0}",
                           state, "the state was saved without on_error='skip'/'warn', or "
                           "is damaged.")
        self.seen, self.skipped, self.total = state["seen"], state["skipped"], state["total"]
