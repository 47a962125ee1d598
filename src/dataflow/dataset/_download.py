"""Where datasets live, and how missing files are fetched safely.

* :func:`get_dataset_path` resolves the data directory: ``$DATAFLOW_DATASET``, else
  ``$TENSORPACK_DATASET`` (compatibility), else ``~/dataflow_data``.
* :func:`download` fetches one URL into a folder. It writes to a temporary name next to the
  target, checks the size (when known) and only then renames it, so an interrupted or truncated
  download never remains under the final name.
* :func:`ensure_files` / :func:`ensure_extracted` are what the loaders call: they download only
  when the files are missing, and when that fails they raise :class:`DatasetNotFoundError`,
  whose message names the expected files, the URL and the folder to put them in.

Network access goes through the module attribute ``urlopen`` (``urllib.request.urlopen`` by
default, imported on first use); replace it to forbid or redirect downloads (the test-suite does).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence

from dataflow.errors import DatasetNotFoundError, DownloadError
from dataflow.serialize._atomic_write import atomic_output

__all__ = [
    "DATASET_ENV_VARS",
    "DEFAULT_DATASET_DIR",
    "DatasetNotFoundError",
    "DownloadError",
    "download",
    "ensure_extracted",
    "ensure_files",
    "get_dataset_path",
]

logger = logging.getLogger(__name__)

DATASET_ENV_VARS = ("DATAFLOW_DATASET", "TENSORPACK_DATASET")
DEFAULT_DATASET_DIR = os.path.join("~", "dataflow_data")
_CHUNK = 1 << 20
_TIMEOUT_S = 60.0


def _urlopen(url: str, timeout: float):
    import urllib.request  # imported on first use: it costs ~20 ms at import time

    return urllib.request.urlopen(url, timeout=timeout)


urlopen = _urlopen
"""The URL opener used by :func:`download`, called as ``urlopen(url, timeout=seconds)``;
replace it to forbid or redirect network access."""


def get_dataset_path(*parts: str) -> str:
    """``os.path.join(<dataset root>, *parts)``.

    The root is ``$DATAFLOW_DATASET``, else ``$TENSORPACK_DATASET``, else ``~/dataflow_data``.
    Nothing is created here; folders are made when a download needs them.
    """
    root = None
    for var in DATASET_ENV_VARS:
        value = os.environ.get(var)
        if value:
            root = value
            break
    if root is None:
        root = DEFAULT_DATASET_DIR
    return os.path.join(os.path.expanduser(root), *parts)


def resolve_dir(dir: str | os.PathLike | None, default_subdir: str) -> str:
    """The user's ``dir`` (``~`` expanded), else ``get_dataset_path(default_subdir)``."""
    if dir is None:
        return get_dataset_path(default_subdir)
    if not isinstance(dir, str | os.PathLike):
        raise TypeError(
            f"`dir` must be a path (str or os.PathLike) or None, got {dir!r} "
            f"(type {type(dir).__name__}); pass the folder that holds the dataset files."
        )
    return os.path.expanduser(os.fspath(dir))


def _progress(total: int | None, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a core dependency
        return None
    # disable=None: no bar when stderr is not a terminal (CI logs, tests)
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=None, leave=False)


def download(
    url: str,
    dir: str | os.PathLike,
    filename: str | None = None,
    expect_size: int | None = None,
    *,
    expect_md5: str | None = None,
) -> str:
    """Download ``url`` to ``dir/filename`` and return that path.

    A file already there with the expected size (or any size when ``expect_size`` is None) is
    kept. Otherwise the data goes to a temporary file in ``dir``, which is renamed to
    ``filename`` only when it is non-empty, of ``expect_size`` bytes and (when given) has the
    MD5 digest ``expect_md5``. On any failure the temporary file is removed and the error
    propagates: :class:`DownloadError` for a bad size or digest, ``OSError`` (including
    ``urllib.error.URLError``) for network problems.
    """
    dir = os.fspath(dir)
    if filename is None:
        filename = url.rstrip("/").rsplit("/", 1)[-1]
    if not filename or os.sep in filename or filename in (".", ".."):
        raise ValueError(
            f"`filename` must be a plain file name, got {filename!r}; pass filename= explicitly."
        )
    target = os.path.join(dir, filename)
    if os.path.isfile(target) and (expect_size is None or os.path.getsize(target) == expect_size):
        return target
    created = _missing_dirs(dir)
    os.makedirs(dir, exist_ok=True)
    try:
        # (the one atomic save of the package: a temporary file next to the target, synced and
        # renamed onto it only when every check passed, removed on any failure)
        with atomic_output(target, "download", overwrite=True) as tmp:
            with open(tmp, "wb") as out, urlopen(url, timeout=_TIMEOUT_S) as resp:
                total = expect_size
                if total is None:
                    length = resp.headers.get("Content-Length") if resp.headers else None
                    total = int(length) if length and length.isdigit() else None
                bar = _progress(total, filename)
                digest = hashlib.md5(usedforsecurity=False)
                try:
                    while chunk := resp.read(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        if bar is not None:
                            bar.update(len(chunk))
                finally:
                    if bar is not None:
                        bar.close()
            size = os.path.getsize(tmp)
            if size == 0:
                raise DownloadError(f"downloading {url} gave an empty file")
            if expect_size is not None and size != expect_size:
                raise DownloadError(
                    f"downloading {url} gave {size} bytes, expected {expect_size}; the download "
                    "was incomplete or the file changed upstream"
                )
            if expect_md5 is not None and digest.hexdigest() != expect_md5.lower():
                raise DownloadError(
                    f"downloading {url} gave a file with MD5 {digest.hexdigest()}, expected "
                    f"{expect_md5}; the download is corrupt or the file changed upstream"
                )
            os.chmod(tmp, 0o644)  # whatever the umask: a dataset folder may be shared
    except BaseException:
        for d in created:  # a failed download leaves no empty folder behind
            try:
                os.rmdir(d)
            except OSError:  # not empty (anymore): someone else uses it
                break
        raise
    logger.info("Downloaded %s (%d bytes) to %s", url, size, target)
    return target


def _missing_dirs(path: str) -> list[str]:
    """The directories ``os.makedirs(path)`` would create, deepest first."""
    out = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return out


def _not_found(
    owner: str, folder: str, names: Sequence[str], urls: Sequence[str], err, param: str
) -> str:
    files = ", ".join(repr(n) for n in names)
    where = " ".join(urls)
    return (
        f"{owner}: {files} not found in {folder!r}, and downloading failed "
        f"({type(err).__name__}: {err}). Download it by hand from {where} and put it in "
        f"{folder!r}, or pass the folder that holds it as the `{param}` argument, or set "
        f"$DATAFLOW_DATASET to the parent of that folder."
    )


def ensure_files(
    owner: str,
    folder: str,
    url_base: str,
    files: Mapping[str, int | None],
    param: str = "dir",
    md5: Mapping[str, str] | None = None,
) -> None:
    """Make sure every ``files`` name exists in ``folder``, downloading missing ones.

    ``files`` maps file name to its known size (``None`` when unknown). Files already present
    are used as they are, whatever their size. A failed download raises
    :class:`DatasetNotFoundError`; ``param`` is the loader's name for its folder argument.
    ``md5`` optionally maps file names to the MD5 digest a download must have.
    """
    for name, size in files.items():
        if os.path.isfile(os.path.join(folder, name)):
            continue
        url = url_base + name
        try:
            download(url, folder, name, size, expect_md5=(md5 or {}).get(name))
        except (OSError, ValueError) as e:
            missing = [n for n in files if not os.path.isfile(os.path.join(folder, n))]
            raise DatasetNotFoundError(
                _not_found(owner, folder, missing, [url_base + n for n in missing], e, param)
            ) from e


def _safe_extract(archive: str, dest: str) -> None:
    import tarfile

    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
            return
        root = os.path.realpath(dest)  # pragma: no cover - Python without extraction filters
        for member in tar.getmembers():  # pragma: no cover
            path = os.path.realpath(os.path.join(dest, member.name))
            if os.path.commonpath([root, path]) != root or member.issym() or member.islnk():
                raise ValueError(f"{archive!r}: refusing to extract {member.name!r}")
        tar.extractall(dest)  # pragma: no cover


def ensure_extracted(
    owner: str,
    folder: str,
    marker: str,
    url: str,
    archive: str,
    size: int | None,
    param: str = "dir",
) -> str:
    """Make sure ``folder/marker`` exists; else extract ``archive`` (downloading it if missing).

    Extraction goes to a temporary folder whose top-level entries are then moved into
    ``folder``, so an interrupted extraction never leaves a half-filled ``marker``. Returns
    ``folder/marker``.
    """
    target = os.path.join(folder, marker)
    if os.path.exists(target):
        return target
    archive_path = os.path.join(folder, archive)
    if not os.path.isfile(archive_path):
        try:
            download(url, folder, archive, size)
        except (OSError, ValueError) as e:
            raise DatasetNotFoundError(
                _not_found(owner, folder, [marker, archive], [url], e, param)
                + f" (either the extracted {marker!r} or the archive {archive!r} will do)"
            ) from e
    tmp = tempfile.mkdtemp(prefix=f".{archive}.", suffix=".extract", dir=folder)
    try:
        import tarfile

        try:
            _safe_extract(archive_path, tmp)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ValueError(
                f"{owner}: cannot extract {archive_path!r} ({type(e).__name__}: {e}); the "
                f"archive is damaged. Delete it and download it again from {url}."
            ) from e
        for entry in os.listdir(tmp):
            dst = os.path.join(folder, entry)
            if not os.path.exists(dst):
                os.replace(os.path.join(tmp, entry), dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not os.path.exists(target):
        raise DatasetNotFoundError(
            f"{owner}: the archive {archive_path!r} does not contain {marker!r}; it is not the "
            f"expected file. Delete it and download it again from {url}."
        )
    return target
