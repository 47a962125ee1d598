"""Shard URLs: brace patterns expanded into lists, and the storage scheme of each URL.

``expand_urls("s3://bucket/train-{000000..000127}.tar")`` gives the 128 URLs in order. A
pattern may hold several groups (expanded left to right, the rightmost varying fastest), each
either a numeric range ``{a..b}`` (zero-padded to the width of the wider bound when either bound
has a leading zero; descending when ``a > b``) or an alternation ``{x,y,z}``. Several patterns
may be given in one string separated by ``::`` (webdataset's convention), or as a list.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

__all__ = ["LOCAL", "expand_urls", "scheme_of", "strip_file_scheme"]

#: the scheme reported for plain paths and ``file://`` URLs
LOCAL = "file"

_GROUP = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: at most this many URLs from one pattern (a typo such as ``{0..99999999}`` fails loudly)
MAX_URLS = 10_000_000


def _expand_group(body: str, pattern: str) -> list[str]:
    m = _RANGE.match(body)
    if m:
        a, b = m.group(1), m.group(2)
        lo, hi = int(a), int(b)
        padded = any(s.lstrip("-").startswith("0") and len(s.lstrip("-")) > 1 for s in (a, b))
        width = max(len(a), len(b)) if padded else 0
        step = 1 if hi >= lo else -1
        if abs(hi - lo) + 1 > MAX_URLS:
            raise ValueError(
                f"`urls`: the range {{{body}}} in {pattern!r} expands to {abs(hi - lo) + 1} "
                f"URLs, more than {MAX_URLS}; check the bounds"
            )
        return [str(i).zfill(width) for i in range(lo, hi + step, step)]
    if "," in body:
        return body.split(",")
    raise ValueError(
        f"`urls`: the brace group {{{body}}} in {pattern!r} is neither a numeric range "
        "{a..b} nor a list {x,y}; write e.g. 'train-{000000..000127}.tar' or '{train,val}.tar'"
    )


def _expand_one(pattern: str) -> list[str]:
    groups = list(_GROUP.finditer(pattern))
    stray = _GROUP.sub("", pattern)
    if "{" in stray or "}" in stray:
        raise ValueError(
            f"`urls`: unbalanced or nested braces in {pattern!r}; brace groups look like "
            "{000..127} or {a,b} and do not nest"
        )
    out = [""]
    pos = 0
    for m in groups:
        literal = pattern[pos:m.start()]
        choices = _expand_group(m.group(1), pattern)
        out = [prefix + literal + c for prefix in out for c in choices]
        if len(out) > MAX_URLS:
            raise ValueError(f"`urls`: {pattern!r} expands to more than {MAX_URLS} URLs")
        pos = m.end()
    tail = pattern[pos:]
    return [prefix + tail for prefix in out]


def expand_urls(urls: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """The list of shard URLs that ``urls`` names: a brace pattern, several patterns joined
    by ``::``, a path, or a list/tuple of any of these (each expanded in turn, order kept)."""
    if isinstance(urls, (str, os.PathLike)):
        items: list[str | os.PathLike[str]] = [urls]
    elif isinstance(urls, Iterable) and not isinstance(urls, (bytes, bytearray)):
        items = list(urls)
    else:
        raise TypeError(
            f"`urls` must be a string pattern, a path or a list of them, got "
            f"{type(urls).__name__}: {urls!r}"
        )
    out: list[str] = []
    for item in items:
        if isinstance(item, os.PathLike):
            item = os.fspath(item)
        if not isinstance(item, str):
            raise TypeError(
                f"`urls`: every entry must be a string or a path, got "
                f"{type(item).__name__}: {item!r}"
            )
        for part in item.split("::"):
            if not part:
                raise ValueError(f"`urls`: empty URL in {item!r}")
            out.extend(_expand_one(part))
    if not out:
        raise ValueError(f"`urls` names no shard: {urls!r}; give at least one URL or path")
    return out


def scheme_of(url: str) -> str:
    """The storage scheme of ``url``, lower case: ``"file"`` for plain paths and ``file://``,
    else the URL's own (``"http"``, ``"https"``, ``"s3"``, ``"gs"``, ...)."""
    m = _SCHEME.match(url)
    return m.group(1).lower() if m else LOCAL


def strip_file_scheme(url: str) -> str:
    """The local path of a plain path or a ``file://`` URL."""
    if scheme_of(url) != LOCAL:
        raise ValueError(f"`url`: {url!r} is not a local path or file:// URL")
    return url[len("file://"):] if url.lower().startswith("file://") else url
