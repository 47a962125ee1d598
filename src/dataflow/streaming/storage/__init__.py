"""Storage clients: one small interface over local files, HTTP(S), S3 and fsspec's schemes.

A client answers two questions about an object named by a URL: its size, and the bytes of a
range, as a body that is read progressively (``read(n)`` returns what arrived, ``b""`` at the
end of the range). It does not retry: a failure that a retry may cure (a timeout, a reset
connection, a 5xx or 429 answer, S3's ``SlowDown``) is raised as :class:`TransientError`, a
missing object as ``FileNotFoundError``, a refused one as ``PermissionError``; the fetcher
(:mod:`dataflow.streaming.fetch`) decides what to retry and resumes where the bytes stopped.

Which client serves a URL (:func:`client_for`): plain paths and ``file://`` read the file;
``http://`` and ``https://`` use the standard library's ``http.client`` with keep-alive
connections (``dataflow.streaming.storage._http``); ``s3://`` uses boto3
(``dataflow.streaming.storage._s3``, extra ``s3``); any other scheme goes through fsspec (extra
``streaming``; ``gs://`` needs gcsfs, extra ``gcs``; ``az://`` adlfs, extra ``azure``).
``storage_options`` are passed to the client (for S3: ``endpoint_url``, ``region_name``,
credentials; otherwise the standard AWS chain: environment variables, ``~/.aws/config`` and
``~/.aws/credentials``, and ``AWS_ENDPOINT_URL``). Their values are never logged nor shown in a
repr.

The package: :mod:`.base` (the interface and its errors, all a client imports), one module per
client (:mod:`.local`, ``_http``, ``_s3``, ``_fsspec``) and :mod:`.schemes` (the table of which
client serves which scheme; a new scheme is one client module and one row there).
"""

from __future__ import annotations

from dataflow.streaming.storage.base import (
    RangeBody,
    StorageClient,
    TransientError,
    is_transient,
    shutdown_socket,
)
from dataflow.streaming.storage.local import LocalClient
from dataflow.streaming.storage.schemes import SCHEMES, check_storage, check_url, client_for

__all__ = [
    "SCHEMES",
    "LocalClient",
    "RangeBody",
    "StorageClient",
    "TransientError",
    "check_storage",
    "check_url",
    "client_for",
    "is_transient",
    "shutdown_socket",
]
