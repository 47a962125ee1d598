"""Shard URLs: brace patterns expanded into lists, and the storage scheme of each URL.

``expand_urls("s3://bucket/train-{000000..000127}.tar")`` gives the 128 URLs in order. A
pattern may hold several groups (expanded left to right, the rightmost varying fastest), each
either a numeric range ``{a..b}`` (zero-padded to the width of the wider bound when either bound
has a leading zero; descending when ``a > b``) or an alternation ``{x,y,z}``. Several patterns
may be given in one string separated by ``::`` (webdataset's convention), or as a list.

After the braces, a local path or ``file://`` URL holding glob characters (``*``, ``?``,
``[...]``, as the shell's) is replaced by the regular files it matches, sorted by name (so the
list, and with it the epoch plan, is the same on every rank that sees the same files); index
files (``*.idx.json``) are left out. A path that exists as written is kept as it is, glob
characters or not. A glob that matches no file raises ``FileNotFoundError``. Remote storage is
not listed: a ``*`` in a remote URL raises a ``ValueError`` pointing to brace ranges.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable

__all__ = ["LOCAL", "expand_urls", "scheme_of", "strip_file_scheme"]

#: the scheme reported for plain paths and ``file://`` URLs
LOCAL = "file"

_GROUP = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: "::" between patterns, but not inside brackets (an IPv6 host: http://[::1]:8000/a.tar)
_SEPARATOR = re.compile(r"::(?![^\[]*\])")
_GLOB = re.compile(r"[*?\[]")
#: what a glob leaves out: the shards' index files, which sit next to them
_INDEX_SUFFIX = ".idx.json"
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


def _expand_glob(url: str) -> list[str]:
    """``[url]``, or the sorted files that the glob ``url`` (a local path) matches."""
    if scheme_of(url) != LOCAL:
        path = url.split("?", 1)[0]  # a "?" in a remote URL starts its query
        if "*" in path:
            raise ValueError(
                f"`urls`: {url!r} holds the glob character '*', but globs are expanded for "
                f"local paths and file:// URLs only, not for {scheme_of(url)}:// URLs (they are "
                "not listed); name the shards with a brace range such as "
                "'train-{000..099}.tar', or give the list of URLs"
            )
        return [url]
    path = strip_file_scheme(url)
    if not _GLOB.search(path) or os.path.exists(path):
        return [url]
    found = sorted(p for p in glob.glob(path)
                   if os.path.isfile(p) and not p.endswith(_INDEX_SUFFIX))
    if not found:
        where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()!r})"
        raise FileNotFoundError(
            f"`urls`: the glob {url!r} matched no file{where}; check the directory and the "
            "pattern (`*`, `?` and `[...]` match as in the shell)"
        )
    prefix = url[:len(url) - len(path)]  # "file://" or ""
    return [prefix + p for p in found]


def expand_urls(urls: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """The list of shard URLs that ``urls`` names: a brace pattern, several patterns joined
    by ``::``, a path, a local glob, or a list/tuple of any of these (each expanded in turn,
    order kept; a glob's files sorted)."""
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
        for part in _SEPARATOR.split(item):
            if not part:
                raise ValueError(f"`urls`: empty URL in {item!r}")
            for url in _expand_one(part):
                out.extend(_expand_glob(url))
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
