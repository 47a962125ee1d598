"""Exceptions raised by dataflow.

Every error is also a builtin exception (``ValueError``, ``TypeError``, ``RuntimeError``) so code
written against tensorpack, which raised builtins, keeps catching them.
"""

from __future__ import annotations

__all__ = [
    "CorruptFileError",
    "DataFlowError",
    "DataFlowReentrantError",
    "DataFlowTerminated",
    "DatasetNotFoundError",
    "DownloadError",
    "ErrorBudgetError",
    "HeadNodeLostError",
    "ImageDecodeError",
    "NoneResultError",
    "ObjectGoneError",
    "ReconstructedError",
    "ShardReadError",
    "StateMismatchError",
    "UnknownLengthError",
    "WorkerError",
    "WorkerStopped",
]


class DataFlowError(Exception):
    """Base class of the errors that dataflow raises itself."""


class DataFlowTerminated(BaseException):
    """A dataflow can no longer produce data (its transport was closed or terminated).

    Derives from ``BaseException`` as in tensorpack, so ``except Exception`` does not catch it.
    """


class DataFlowReentrantError(DataFlowError, RuntimeError):
    """A non-reentrant dataflow was iterated while a previous iteration was still alive."""


class ImageDecodeError(DataFlowError, ValueError):
    """Encoded image data that cannot be decoded: not an image, corrupt or truncated.

    Raised by :func:`dataflow.jpeg.decode_jpeg`, by ``ImageFromFile`` for a file that exists but
    does not decode, and by the augmentation flows with ``decode="jpeg"``. The message names the
    size of the data (and the file, where there is one) and libjpeg's or OpenCV's reason.
    """


class UnknownLengthError(NotImplementedError, TypeError):
    """``len(df)`` of a dataflow whose length is not known.

    It is a ``NotImplementedError`` (tensorpack's contract) and also a ``TypeError``, so that
    ``list(df)`` and ``operator.length_hint`` treat the length as unknown instead of failing.
    """


class WorkerError(DataFlowError, RuntimeError):
    """An exception raised inside a worker (thread or process), re-raised in the consumer.

    Attributes:
        exc_type: the qualified name of the original exception's type.
        exc_message: ``str()`` of the original exception.
        remote_traceback: the traceback formatted in the worker, as text.
        worker_id: which worker raised it (``None`` when not known).
        index: for mappers, the index of the input datapoint being mapped (else ``None``).
    """

    def __init__(
        self,
        exc_type: str,
        exc_message: str,
        remote_traceback: str = "",
        worker_id: int | None = None,
        index: int | None = None,
        stage: str | None = None,
    ) -> None:
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        self.worker_id = worker_id
        self.index = index
        self.stage = stage
        where = []
        if stage:
            where.append(stage)
        if worker_id is not None:
            where.append(f"worker {worker_id}")
        if index is not None:
            where.append(f"input index {index}")
        origin = f" in {', '.join(where)}" if where else ""
        msg = f"{exc_type}: {exc_message} (raised{origin})"
        if remote_traceback:
            msg += "\n\nRemote traceback:\n" + remote_traceback.rstrip()
        super().__init__(msg)

    def __reduce__(self):  # keep every field when pickled across processes
        return (
            type(self),
            (
                self.exc_type,
                self.exc_message,
                self.remote_traceback,
                self.worker_id,
                self.index,
                self.stage,
            ),
        )


class WorkerStopped(BaseException):
    """Raised inside a worker by its ``emit``/``receive`` callables to make the worker loop
    return quietly (the consumer stopped it). Never reaches user code."""


class ReconstructedError(Exception):
    """Stands in for a worker exception whose type could not be unpickled in the consumer."""


class StateMismatchError(DataFlowError, ValueError):
    """A state does not match the pipeline it is loaded into."""


class CorruptFileError(DataFlowError, ValueError):
    """A stored file is truncated, corrupt or of another format. The message names the file
    and, where it applies, the index of the record that could not be read."""


class DatasetNotFoundError(DataFlowError, FileNotFoundError):
    """The files of a dataset are missing and could not be downloaded."""


class DownloadError(DataFlowError, OSError):
    """A download finished but is not what was expected (empty, or of the wrong size)."""


class NoneResultError(DataFlowError, ValueError):
    """A strict parallel mapper's ``map_func`` returned ``None`` (a strict epoch must hold a
    result for every input)."""


class ErrorBudgetError(DataFlowError, RuntimeError):
    """A map stage with ``on_error="skip"`` or ``"warn"`` skipped more inputs in one epoch than
    its ``max_errors`` allows; the message summarizes the failures."""


class ObjectGoneError(DataFlowError, LookupError):
    """An id of :class:`~dataflow.parallel.PlasmaPutData` whose object is no longer in the
    shared store: it was taken already (each id can be got once), or its store was closed."""


class HeadNodeLostError(DataFlowError, ConnectionError):
    """The head node of the Ray cluster a flow runs on (its GCS, which places and tracks every
    actor) no longer answers: the flow cannot recover without it and stops."""


class ShardReadError(DataFlowError, OSError):
    """Reading a shard failed for good: the retries are exhausted, or the failure is not one
    that a retry can cure (a missing object, a refused permission). ``url`` and ``offset``
    (the first byte not received) say where; ``cause`` is the last underlying error."""

    def __init__(self, url: str, offset: int, cause: BaseException | None = None) -> None:
        self.url = url
        self.offset = offset
        self.cause = cause
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else "unknown error"
        super().__init__(f"reading {url} failed at byte {offset}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, int, BaseException | None]]:
        return type(self), (self.url, self.offset, self.cause)
