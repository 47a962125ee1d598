"""Resumable iteration of the parallel stages (issue 9): helpers for ``state_dict()``.

A strict mapper saves, for the pass in progress, ``read`` and ``pending`` (see
:meth:`~dataflow.parallel._worker.MapScheduler.progress`): the inputs below position ``read``
were delivered, except the positions in ``pending`` (at most ``buffer_size`` of them). With the
state of its child at the start of the pass, :func:`resume_source` replays the pass in the
consumer and dispatches only what was not delivered: ``map_func`` never runs again on a
delivered input.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from dataflow.state import StateMismatchError

__all__ = ["check_progress", "resume_source"]


def resume_source(
    source: Iterator[tuple[int, Any]], read: int, pending: list[int], stage: str
) -> Iterator[tuple[int, Any]]:
    """The ``(position, datapoint)`` pairs of ``source`` at positions in ``pending`` or from
    ``read`` on. Raises :class:`StateMismatchError` if the pass ends before ``read``."""
    wanted = set(pending)
    last = -1
    for pos, dp in source:
        last = pos
        if pos >= read:
            yield pos, dp
            yield from source
            return
        if pos in wanted:
            yield pos, dp
    if last + 1 < read:
        raise StateMismatchError(
            f"state for stage {stage}: expected a pass of at least {read} inputs (the state was "
            f"saved after reading {read}), found {last + 1}; the state was saved from another "
            "pipeline or dataset."
        )


def check_progress(state: dict[str, Any], stage: str) -> tuple[int, list[int]]:
    """``(read, pending)`` of a strict mapper's state, validated."""
    read, pending = state.get("read"), state.get("pending")
    ok = (
        isinstance(read, int) and not isinstance(read, bool) and read >= 0
        and isinstance(pending, list)
        and all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < read for p in pending)
        and all(a < b for a, b in itertools.pairwise(pending))
    )
    if not ok:
        raise StateMismatchError(
            f"state for stage {stage}: expected read=<int >= 0> and pending=<sorted positions "
            f"below read>, found read={read!r}, pending={pending!r:.80}; the state is corrupt "
            "or from another version."
        )
    return read, list(pending)
