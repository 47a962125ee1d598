"""tensorpack's ``utils.logger``: the package's logger, and a log directory.

Importing this module gives the ``dataflow`` logger (the one every module of the package logs
to) a console handler on stdout at INFO level, as importing tensorpack's logger did, and stops
its records from also reaching the root logger (so they are not printed twice). Use the
module's functions (``info``, ``warning``/``warn``, ``error``, ``exception``, ``debug``,
``critical``, ``setLevel``) as tensorpack's.

:func:`set_logger_dir` also writes the log to ``<dirname>/log.log``; :func:`auto_set_dir` picks
``train_log/<script name>``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from datetime import datetime

__all__ = [
    "auto_set_dir",
    "critical",
    "debug",
    "error",
    "exception",
    "get_logger_dir",
    "info",
    "setLevel",
    "set_logger_dir",
    "warn",
    "warning",
]

_DATEFMT = "%m%d %H:%M:%S"
_ACTIONS = {"k": "keep", "d": "delete", "b": "backup", "n": "new", "q": "quit"}


class _Formatter(logging.Formatter):
    """tensorpack's layout: ``[<time> @<file>:<line>] <message>``, with ``WRN``, ``ERR`` or
    ``DBG`` before the message of other levels than INFO."""

    _PREFIX = {logging.DEBUG: "DBG ", logging.WARNING: "WRN ", logging.ERROR: "ERR ",
               logging.CRITICAL: "ERR "}

    def __init__(self) -> None:
        super().__init__("[%(asctime)s @%(filename)s:%(lineno)d] %(message)s", _DATEFMT)
        self._by_level = {
            level: logging.Formatter(
                f"[%(asctime)s @%(filename)s:%(lineno)d] {prefix}%(message)s", _DATEFMT)
            for level, prefix in self._PREFIX.items()}

    def format(self, record: logging.LogRecord) -> str:
        fmt = self._by_level.get(record.levelno)
        return super().format(record) if fmt is None else fmt.format(record)


def _get_logger() -> logging.Logger:
    logger = logging.getLogger("dataflow")
    if not any(getattr(h, "_dataflow_console", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(_Formatter())
        handler._dataflow_console = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


_logger = _get_logger()
info = _logger.info
warning = _logger.warning
warn = _logger.warning
error = _logger.error
exception = _logger.exception
debug = _logger.debug
critical = _logger.critical
setLevel = _logger.setLevel  # noqa: N816 (tensorpack's name)

_LOG_DIR: str | None = None
_FILE_HANDLER: logging.FileHandler | None = None


def _time_str() -> str:
    return datetime.now().strftime("%m%d-%H%M%S")


def _timed_name(dirname: str) -> str:
    """``<dirname><time>``, or ``<dirname><time>-<n>`` when that exists already."""
    name = base = dirname + _time_str()
    n = 0
    while os.path.exists(name):
        n += 1
        name = f"{base}-{n}"
    return name


def _set_file(path: str) -> None:
    global _FILE_HANDLER
    if os.path.isfile(path):
        backup = f"{path}.{_time_str()}"
        shutil.move(path, backup)
        _logger.info("Existing log file '%s' backuped to '%s'", path, backup)
    handler = logging.FileHandler(filename=path, encoding="utf-8", mode="w")
    handler.setFormatter(_Formatter())
    if _FILE_HANDLER is not None:
        _logger.removeHandler(_FILE_HANDLER)
        _FILE_HANDLER.close()
    _FILE_HANDLER = handler
    _logger.addHandler(handler)
    _logger.info("Argv: %s", " ".join(sys.argv))


def _nonempty_dir(dirname: str) -> bool:
    # hidden files (an editor's, a file system's) do not count
    return os.path.isdir(dirname) and any(not x.startswith(".") for x in os.listdir(dirname))


def set_logger_dir(dirname: str | os.PathLike, action: str | None = None) -> None:
    """Log to ``<dirname>/log.log`` too (the console handler stays), and remember ``dirname``
    for :func:`get_logger_dir`.

    When ``dirname`` exists and is not empty, ``action`` says what to do (``None``: ask on the
    terminal): ``"k"`` keep it (an old ``log.log`` is renamed ``log.log.<time>``), ``"d"``
    delete it, ``"b"`` rename it ``<dirname><time>`` as a backup, ``"n"`` use a new folder
    ``<dirname><time>`` instead, ``"q"`` quit (``FileExistsError``). ``<time>`` is
    ``%m%d-%H%M%S`` (with ``-1``, ``-2``, ... added when such a folder exists already).
    """
    global _LOG_DIR
    dirname = os.path.normpath(os.fspath(dirname))
    if action is not None and action not in _ACTIONS:
        raise ValueError(f"`action` must be one of {', '.join(map(repr, _ACTIONS))} or None, "
                         f"got {action!r}.")
    if _FILE_HANDLER is not None:  # stop writing to the previous folder's log
        _logger.removeHandler(_FILE_HANDLER)
    if _nonempty_dir(dirname):
        if action is None:
            _logger.warning("Log directory %s exists! Use 'd' to delete it.", dirname)
            _logger.warning("If you're resuming from a previous run, you can choose to keep "
                            "it. Press any other key to exit.")
        while action not in _ACTIONS:
            action = input("Select Action: k (keep) / d (delete) / b (backup) / n (new) / "
                           "q (quit):").lower().strip()
        if action == "b":
            backup = _timed_name(dirname)
            shutil.move(dirname, backup)
            _logger.info("Directory '%s' backuped to '%s'", dirname, backup)
        elif action == "d":
            shutil.rmtree(dirname)
        elif action == "n":
            dirname = _timed_name(dirname)
            _logger.info("Use a new log directory %s", dirname)
        elif action == "q":
            raise FileExistsError(f"Log directory {dirname!r} exists and is not empty; pass "
                                  "action='k' (keep), 'd' (delete), 'b' (backup) or 'n' (new).")
    os.makedirs(dirname, exist_ok=True)
    _LOG_DIR = dirname
    _set_file(os.path.join(dirname, "log.log"))


def auto_set_dir(action: str | None = None, name: str | None = None) -> None:
    """:func:`set_logger_dir` to ``train_log/<script>`` (the main file's name without its
    extension), or ``train_log/<script>:<name>`` (``_`` instead of ``:`` on Windows)."""
    main = sys.modules["__main__"]
    path = getattr(main, "__file__", None)
    if not path:
        raise RuntimeError("auto_set_dir() needs a main script file (it is not available in an "
                           "interactive session); call set_logger_dir(dirname) instead.")
    basename = os.path.basename(path)
    dirname = os.path.join("train_log", basename[: basename.rfind(".")] if "." in basename
                           else basename)
    if name:
        dirname += ("_%s" if os.name == "nt" else ":%s") % name
    set_logger_dir(dirname, action=action)


def get_logger_dir() -> str | None:
    """The folder given to :func:`set_logger_dir` (or :func:`auto_set_dir`), or None."""
    return _LOG_DIR
