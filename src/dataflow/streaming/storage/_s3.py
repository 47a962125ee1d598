"""``s3://bucket/key`` through boto3 (extra ``s3``).

boto3, s3fs and obstore were measured side by side on the same server
(``benchmarks/bench_streaming_s3.py``, figures in ``benchmarks/RESULTS.md``): obstore's raw
GETs were the fastest, s3fs's the slowest by far; the fetcher over boto3 reached 0.70-0.83 of
boto3's raw GETs on a quiet two-core machine, and 0.92-1.02 of the same GETs delivered to one
reader in object order (the bytes of the objects the reader has not reached wait in fresh
memory, which the raw GETs never hold). boto3 is the client because it follows the whole
standard AWS chain for credentials (environment, ``~/.aws/credentials`` and ``~/.aws/config``,
profiles, instance roles) and ``AWS_ENDPOINT_URL``. boto3's own retries are turned off: the
fetcher retries, resuming at the first byte it lacks.
"""

from __future__ import annotations

import difflib
import re
import threading
from collections.abc import Mapping
from typing import Any

from dataflow._optional import import_optional
from dataflow.streaming.storage import base

__all__ = ["ACCEPTED_KEYS", "S3Client", "check_options", "split_s3_url"]

_CONTENT_RANGE = re.compile(r"bytes\s+\d+-\d+/(\d+)")
#: S3 error codes that a later attempt may not meet
_TRANSIENT_CODES = {
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
    "ThrottlingException", "RequestTimeTooSkewed", "500", "502", "503", "504", "429",
}
#: the storage_options keys passed to boto3's Session; the rest go to its client
_SESSION_KEYS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token",
                 "profile_name", "region_name")
_S3FS_NAMES = {"key": "aws_access_key_id", "secret": "aws_secret_access_key",
               "token": "aws_session_token", "profile": "profile_name"}
#: the keys passed on to boto3's ``Session.client()`` (its own arguments, but ``config``,
#: which is merged with ours)
_CLIENT_KEYS = ("api_version", "endpoint_url", "region_name", "use_ssl", "verify",
                "aws_access_key_id", "aws_secret_access_key", "aws_session_token")
#: every key of ``storage_options`` that an S3 client takes
ACCEPTED_KEYS = tuple(sorted({*_SESSION_KEYS, *_CLIENT_KEYS, *_S3FS_NAMES, "client_kwargs",
                              "config", "max_pool_connections"}))


def _unknown_key(where: str, key: Any, accepted: tuple[str, ...]) -> ValueError:
    close = difflib.get_close_matches(str(key), accepted, n=1)
    fix = f"; did you mean {close[0]!r}?" if close else "."
    return ValueError(
        f"`{where}`: s3:// URLs take no option {key!r}{fix} The keys accepted for s3:// are: "
        f"{', '.join(accepted)} (see docs/streaming-io.md)."
    )


def check_options(options: Mapping[str, Any]) -> None:
    """Raise a ValueError for a key of ``options`` that boto3 would refuse (naming the key,
    never a value), and for one option given twice under two names."""
    for key in options:
        if key not in ACCEPTED_KEYS:
            raise _unknown_key("storage_options", key, ACCEPTED_KEYS)
    client_kwargs = options.get("client_kwargs") or {}
    if not isinstance(client_kwargs, Mapping):
        raise TypeError("`storage_options['client_kwargs']` must be a dict, got "
                        f"{type(client_kwargs).__name__}")
    for key in client_kwargs:
        if key not in _CLIENT_KEYS:
            raise _unknown_key("storage_options['client_kwargs']", key, _CLIENT_KEYS)
    names: dict[str, str] = {}
    for where, keys in (("storage_options", options), ("client_kwargs", client_kwargs)):
        for key in keys:
            if key == "client_kwargs":
                continue
            name = _S3FS_NAMES.get(key, key)
            shown = key if where == "storage_options" else f"client_kwargs[{key!r}]"
            if name in names:
                raise ValueError(
                    f"`storage_options`: {names[name]!r} and {shown!r} give the same option "
                    f"({name}); give it once."
                )
            names[name] = shown


def split_s3_url(url: str) -> tuple[str, str]:
    """``("bucket", "key")`` of ``s3://bucket/key``."""
    rest = url.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise ValueError(f"`url`: {url!r} is not of the form s3://bucket/key")
    return bucket, key


class _S3Body:
    def __init__(self, stream: Any, total: int | None, errors: tuple[type[BaseException], ...]
                 ) -> None:
        self._stream = stream
        self.total = total
        self._errors = errors

    def read(self, n: int) -> bytes:
        try:
            return bytes(self._stream.read(n))
        except (TimeoutError, ConnectionError) as e:
            raise base.TransientError(f"S3 body: {type(e).__name__}: {e}") from e
        except self._errors as e:
            raise base.TransientError(f"S3 body: {type(e).__name__}: {e}") from e

    def abort(self) -> None:
        raw = getattr(self._stream, "_raw_stream", None)
        conn = getattr(raw, "_connection", None)
        base.shutdown_socket(getattr(conn, "sock", None))

    def close(self) -> None:
        self._stream.close()


class S3Client(base.StorageClient):
    """S3 and S3-compatible stores (``endpoint_url``: e.g. MinIO, moto, R2)."""

    scheme = "s3"

    @classmethod
    def from_options(cls, scheme: str, options: Mapping[str, Any], timeout: float
                     ) -> S3Client:
        return cls(options, timeout=timeout)

    @classmethod
    def check_options(cls, scheme: str, options: Mapping[str, Any]) -> None:
        check_options(options)

    def __init__(self, options: Mapping[str, Any], timeout: float = 30.0) -> None:
        check_options(options)
        boto3 = import_optional("boto3", "reading s3:// URLs")
        botocore_config = import_optional("botocore.config", "reading s3:// URLs")
        self._exc = import_optional("botocore.exceptions", "reading s3:// URLs")
        opts = {_S3FS_NAMES.get(k, k): v for k, v in options.items()}
        client_kwargs = dict(opts.pop("client_kwargs", {}) or {})
        session = boto3.session.Session(**{k: opts.pop(k) for k in _SESSION_KEYS if k in opts})
        # boto3's retries stay off and the timeouts are ours, whatever a given config says
        config = botocore_config.Config(
            retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=timeout,
            read_timeout=timeout, max_pool_connections=int(opts.pop("max_pool_connections", 32)),
        )
        user_config = opts.pop("config", None)
        if user_config is not None:
            if not isinstance(user_config, botocore_config.Config):
                raise TypeError("`storage_options['config']` must be a botocore.config.Config, "
                                f"got {type(user_config).__name__}")
            config = user_config.merge(config)
        self._client = session.client("s3", config=config, **opts, **client_kwargs)
        self._lock = threading.Lock()
        urllib3 = import_optional("urllib3", "reading s3:// URLs")
        self._body_errors = (self._exc.BotoCoreError, urllib3.exceptions.HTTPError)

    def _translate(self, e: BaseException, url: str) -> BaseException:
        if isinstance(e, self._exc.ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in ("NoSuchKey", "NoSuchBucket", "404", "NotFound"):
                return FileNotFoundError(f"{url}: {code}")
            if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return PermissionError(f"{url}: {code}")
            if code in _TRANSIENT_CODES or status >= 500 or status == 429:
                return base.TransientError(f"{url}: {code} (HTTP {status})")
            return OSError(f"{url}: {code} (HTTP {status})")
        if isinstance(e, self._body_errors):
            return base.TransientError(f"{url}: {type(e).__name__}: {e}")
        return e

    def size(self, url: str) -> int:
        bucket, key = split_s3_url(url)
        try:
            return int(self._client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except Exception as e:
            raise self._translate(e, url) from e

    def open_range(self, url: str, start: int, end: int | None) -> base.RangeBody:
        bucket, key = split_s3_url(url)
        kwargs = {"Bucket": bucket, "Key": key}
        if start or end is not None:  # a whole object is asked without Range (served fastest)
            kwargs["Range"] = f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"
        try:
            resp = self._client.get_object(**kwargs)
        except Exception as e:
            if isinstance(e, self._exc.ClientError) and e.response.get("Error", {}).get(
                    "Code") == "InvalidRange":
                from dataflow.streaming.storage._http import EmptyBody

                return EmptyBody(start)
            raise self._translate(e, url) from e
        m = _CONTENT_RANGE.match(resp.get("ContentRange") or "")
        total = int(m.group(1)) if m else None
        if "Range" not in kwargs:
            total = int(resp["ContentLength"])
        return _S3Body(resp["Body"], total, self._body_errors)

    def close(self) -> None:
        self._client.close()
