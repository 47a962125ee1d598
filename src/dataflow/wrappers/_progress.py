"""Progress bars: ``tqdm`` with readable defaults (``TestDataSpeed``'s bar, and the serializers'
while they save; tensorpack's ``utils.get_tqdm`` is this one)."""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["get_tqdm", "get_tqdm_kwargs"]


def get_tqdm_kwargs(**kwargs: Any) -> dict[str, Any]:
    """Default tqdm arguments: a readable bar with rates, refreshed sensibly on and off a TTY.

    ``DATAFLOW_PROGRESS_REFRESH`` (or tensorpack's ``TENSORPACK_PROGRESS_REFRESH``) sets the
    minimum refresh interval in seconds.
    """
    default: dict[str, Any] = {
        "smoothing": 0.5,
        "dynamic_ncols": True,
        "ascii": True,
        "bar_format": "{l_bar}{bar}|{n_fmt}/{total_fmt}[{elapsed}<{remaining},{rate_noinv_fmt}]",
    }
    refresh = os.environ.get("DATAFLOW_PROGRESS_REFRESH") or os.environ.get(
        "TENSORPACK_PROGRESS_REFRESH"
    )
    if refresh is not None:
        default["mininterval"] = float(refresh)
    else:
        isatty = getattr(sys.stderr, "isatty", lambda: False)()
        default["mininterval"] = 0.5 if isatty else 30.0
    default.update(kwargs)
    return default


def get_tqdm(*args: Any, **kwargs: Any):
    """A ``tqdm`` progress bar with :func:`get_tqdm_kwargs` defaults."""
    from tqdm import tqdm

    return tqdm(*args, **get_tqdm_kwargs(**kwargs))
