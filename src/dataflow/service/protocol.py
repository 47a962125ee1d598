"""What crosses the network between a :class:`DataService`, its workers and its consumers.

Every message is one ZeroMQ frame of msgpack (NumPy arrays in msgpack-numpy's layout, never a
pickle: :func:`dataflow.parallel.remote.loads_msgpack`), a map with an ``"op"`` and the
service's ``"token"`` (empty on loopback unless one was set). A message that does not decode,
carries a wrong token or an unknown op is dropped and counted; it never stops the service.

Consumer -> dispatcher (a DEALER to its ROUTER): ``hello`` (its job, rank, world size; the
answer holds the dataset's length, the seed, ``shuffle``, the service's instance id and its
workers' addresses), ``workers`` (the same answer: sent every heartbeat, it tells a consumer
that a worker was replaced or that the service restarted), ``report`` (the consumer's wait
figures, for ``stats()``), ``stats``.

Consumer -> worker (a DEALER to the worker's ROUTER): ``map`` with ``items``, a list of
``[epoch, position, index]``, ``j`` (the job whose pipeline maps them; ``""``: the service's
own) and, from a consumer on the worker's machine, ``ring`` (the name of the shared ring it
made for this worker's answers). The worker answers with ``{"op": "out", "o": [[epoch,
position, result], ...]}`` (the results of one turn: several items) or, for an item that
failed, ``{"op": "err", "e", "p", "type", "message", "traceback"}``. Arrays of the results
travel as frames of their own, or in the consumer's ring (:func:`encode_frames`).

Dispatcher -> consumers, when the service closes: ``closed``.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
import uuid
from typing import Any
from urllib.parse import urlparse

from dataflow.parallel.remote import dumps_msgpack, loads_msgpack

__all__ = ["TOKEN_ENV", "decode", "encode", "host_of", "is_loopback", "new_instance",
           "token_ok"]

#: the environment variable that holds the shared secret when ``token=`` is not given
TOKEN_ENV = "DATAFLOW_SERVICE_TOKEN"
#: arrays of at least this many bytes travel as frames of their own (no copy when sent)
ARRAY_FRAME_BYTES = 4096


def encode(msg: dict[str, Any]) -> bytes:
    return dumps_msgpack(msg)


def encode_frames(msg: dict[str, Any], ring: Any = None) -> list[Any]:
    """``msg`` as frames: a msgpack header in which each numeric NumPy array of a few KB or
    more is a placeholder, then those arrays' memory, one frame each, sent without a copy (the
    worker's outputs: images). With a shared ``ring`` (a consumer on this machine), an array
    that fits the ring now is copied there instead: its placeholder ``{"__r": [offset, size,
    head], "dtype", "shape"}`` says where; else ``{"__a": k, "dtype", "shape"}`` names its
    frame."""
    import numpy as np

    buffers: list[Any] = []

    def strip(obj: Any) -> Any:
        if isinstance(obj, np.ndarray) and obj.nbytes >= ARRAY_FRAME_BYTES \
                and obj.dtype.kind in "biuf" and not obj.dtype.hasobject:
            arr = np.ascontiguousarray(obj)
            data = arr.data.cast("B")
            slot = ring.write(data, wait=False) if ring is not None else None
            if slot is not None:
                return {"__r": list(slot), "dtype": arr.dtype.str, "shape": list(arr.shape)}
            buffers.append(data)
            return {"__a": len(buffers) - 1, "dtype": arr.dtype.str, "shape": list(arr.shape)}
        if isinstance(obj, list | tuple):
            return [strip(x) for x in obj]
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items()}
        return obj

    return [dumps_msgpack(strip(msg)), *buffers]


def decode_frames(frames: list[Any], ring: Any = None) -> dict[str, Any]:
    """Inverse of :func:`encode_frames` (arrays are writable copies of their frames, or of
    their place in ``ring``, which the copy releases); a ``ValueError`` for anything that is
    not such a message."""
    import numpy as np

    msg = decode(frames[0])

    def fill(obj: Any) -> Any:
        if isinstance(obj, dict):
            slot = obj.get("__r")
            if slot is not None:
                if ring is None or not isinstance(slot, list) or len(slot) != 3:
                    raise ValueError("a ring placeholder without a ring")
                off, n, head = (int(x) for x in slot)
                if off < 0 or n < 0 or off + n > ring.capacity:
                    raise ValueError("a ring placeholder outside the ring")
                dtype = np.dtype(obj["dtype"])
                if dtype.kind not in "biuf":
                    raise ValueError("refusing an array of a non-numeric dtype")
                return np.frombuffer(ring.read(off, n, head), dtype).reshape(obj["shape"])
            k = obj.get("__a")
            if isinstance(k, int) and not isinstance(k, bool):
                if not 0 <= k < len(frames) - 1:
                    raise ValueError("an array placeholder without its frame")
                dtype = np.dtype(obj["dtype"])
                if dtype.kind not in "biuf":
                    raise ValueError("refusing an array of a non-numeric dtype")
                data = bytearray(frames[k + 1].buffer if hasattr(frames[k + 1], "buffer")
                                 else frames[k + 1])
                return np.frombuffer(data, dtype).reshape(obj["shape"])
            return {key: fill(v) for key, v in obj.items()}
        if isinstance(obj, list):
            return [fill(x) for x in obj]
        return obj

    try:
        return fill(msg)
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed array placeholder ({e})") from None


def decode(frame: Any) -> dict[str, Any]:
    """A message, or a ``ValueError`` for anything that is not one."""
    try:
        msg = loads_msgpack(frame)
    except Exception as e:  # (msgpack raises several types on garbage)
        raise ValueError(f"undecodable message ({type(e).__name__})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise ValueError("a message must be a map with an 'op'")
    return msg


def token_ok(msg: dict[str, Any], token: str) -> bool:
    given = msg.get("token", "")
    return isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode())


def host_of(address: str) -> str:
    """The host of a ``tcp://host:port`` address."""
    parsed = urlparse(address)
    if parsed.scheme != "tcp" or not parsed.hostname:
        raise ValueError(
            f"`address` must be 'tcp://host:port' (e.g. 'tcp://127.0.0.1:0' for a free port), "
            f"got {address!r}.")
    return parsed.hostname


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except OSError:
            return False


def resolve_token(token: str | None) -> str:
    return token if token is not None else os.environ.get(TOKEN_ENV, "")


def new_instance() -> str:
    """An id for one start of a service (a restarted one has another)."""
    return uuid.uuid4().hex
