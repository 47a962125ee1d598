"""What a snapshot is keyed by and what changed: the text of ``SnapshotData.explain()``.

Each snapshot's ``meta.json`` keeps the named parts of its key (``func.code``,
``func.global:SCALE``, ``source.items``...: see :mod:`dataflow.snapshot.key`). A snapshot that is
not found under its key is a changed pipeline: comparing its parts with those of the snapshots
already under the same path says which part changed.
"""

from __future__ import annotations

import json
import os

__all__ = ["explain_change", "explain_snapshot", "stored_parts"]


def explain_change(now: dict[str, str], before: dict[str, str]) -> list[str]:
    """What differs between two sets of parts, one line per part (``[]``: none); a part whose
    change is explained by a changed part inside it (``func`` by ``func.global:K``) is left
    out."""
    lines = []
    names = sorted(set(now) | set(before))
    differs = {n for n in names if now.get(n) != before.get(n)}
    for name in names:
        if any(other.startswith(name + ".") for other in differs):
            continue
        if name not in before:
            lines.append(f"{name}: new")
        elif name not in now:
            lines.append(f"{name}: gone")
        elif now[name] != before[name]:
            lines.append(f"{name}: changed")
    return lines


def stored_parts(path: str, skip: str = "") -> dict[str, dict[str, str]]:
    """``{key: parts}`` of the snapshots under ``path`` (but ``skip``), from their
    ``meta.json``."""
    out: dict[str, dict[str, str]] = {}
    try:
        names = os.listdir(path)
    except OSError:
        return out
    for name in names:
        if name == skip:
            continue
        try:
            with open(os.path.join(path, name, "meta.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            continue
        parts = meta.get("parts") or (meta.get("meta") or {}).get("parts")
        if isinstance(parts, dict):
            out[name] = parts
    return out


def explain_snapshot(path: str, key: str, parts: dict[str, str], stored: int, size: int) -> str:
    """The text of ``SnapshotData.explain()``: the key and its parts, how much is stored, and
    for each other snapshot under ``path`` the parts that differ."""
    lines = [f"snapshot {key} under {path!r}: {len(parts)} parts ({', '.join(sorted(parts))})",
             f"  this one: {stored} of {size} outputs stored"]
    for other, theirs in sorted(stored_parts(path, skip=key).items()):
        diff = explain_change(parts, theirs)
        lines.append(f"  {other}: " + ("; ".join(diff) if diff else
                                       "the same parts (a key given by the user)"))
    if len(lines) == 2:
        lines.append("  no other snapshot under this path")
    return "\n".join(lines)
