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

:data:`OPS` is the one table of every operation and the type of each of its fields, for each
receiver (the dispatcher, a worker, a consumer); :func:`check` validates a decoded message
against it before any of its fields is used. A message that fails is dropped and counted by
cause (:class:`Invalid`); a field not in the table is refused as well, so that nothing a sender
adds reaches the code unchecked.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from dataflow.parallel.remote import dumps_msgpack, loads_msgpack

__all__ = ["OPS", "TOKEN_ENV", "Invalid", "check", "curve_client", "curve_keys",
           "curve_server", "curve_setting", "decode", "encode", "host_of", "is_loopback",
           "new_instance", "token_ok"]

#: the environment variable that holds the shared secret when ``token=`` is not given
TOKEN_ENV = "DATAFLOW_SERVICE_TOKEN"
#: arrays of at least this many bytes travel as frames of their own (no copy when sent)
ARRAY_FRAME_BYTES = 4096


#: the most items one ``map`` request may ask (a consumer asks a few at a time)
MAX_ITEMS = 1024
#: the longest string a field may hold (names, tokens, addresses); error texts may hold more
MAX_NAME = 1024
MAX_TEXT = 1 << 20
#: the largest int a count, an epoch, a position or an index may be
MAX_INT = (1 << 63) - 1


class Invalid(ValueError):  # noqa: N818 (a reason to drop a message, not an error raised to users)
    """A message that does not match :data:`OPS`; ``cause`` is what ``stats()["dropped_by_cause"]``
    counts it under (a few words, never a value taken from the message)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def _int(lo: int, hi: int = MAX_INT) -> Callable[[Any], bool]:
    return lambda v: type(v) is int and lo <= v <= hi


def _str(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is str and lo <= len(v) <= hi


def _seconds(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and 0 <= v <= 1e12


def _items(v: Any) -> bool:
    return type(v) is list and 0 < len(v) <= MAX_ITEMS and all(
        type(x) is list and len(x) == 3 and all(type(k) is int and 0 <= k <= MAX_INT for k in x)
        for x in v)


def _workers(v: Any) -> bool:
    return type(v) is list and len(v) <= 1 << 16 and all(
        type(x) is list and len(x) == 3 and type(x[0]) is int and type(x[1]) is int
        and type(x[2]) is str and len(x[2]) <= MAX_NAME for x in v)


def _pipeline(v: Any) -> bool:
    return type(v) is dict and NAT(v.get("n")) and type(v.get("seed")) is int \
        and type(v.get("shuffle")) is bool and (
            "identity" not in v or (type(v["identity"]) is dict
                                    and all(type(k) is str for k in v["identity"])))


def _jobs(v: Any) -> bool:
    return type(v) is dict and len(v) <= 1 << 16 and all(
        type(k) is str and _pipeline(x) for k, x in v.items())


def _crashed(v: Any) -> bool:
    return type(v) is list and len(v) <= 1 << 12 and all(
        type(x) is list and len(x) == 6 and type(x[0]) is str
        and all(type(k) is int and k >= 0 for k in x[1:5]) and type(x[5]) is str for x in v)


def _bool(v: Any) -> bool:
    return type(v) is bool


def _dict(v: Any) -> bool:
    return type(v) is dict


def _list(v: Any) -> bool:
    return type(v) is list


NAT = _int(0)
_TOKEN = _str(0, MAX_NAME)
_NAME = _str(0, MAX_NAME)
_TEXT = _str(0, MAX_TEXT)
#: what a consumer tells the dispatcher about itself in every message
_CONSUMER = {"token": _TOKEN, "job": _str(1, 256), "rank": _int(0, (1 << 31) - 1),
             "world_size": _int(1, 1 << 31)}

#: receiver -> op -> field -> its check; ``op`` is implied, and the fields in ``REQUIRED``
#: must be there (every other one may be left out)
OPS: dict[str, dict[str, dict[str, Callable[[Any], bool]]]] = {
    "dispatcher": {
        "hello": _CONSUMER,
        "workers": _CONSUMER,
        "bye": _CONSUMER,
        "stats": _CONSUMER,
        "report": {**_CONSUMER, "received": NAT, "waited": _seconds, "elapsed": _seconds,
                   "bytes": NAT, "in_flight": NAT, "ready": NAT, "skipped": NAT},
    },
    "worker": {
        "map": {"token": _TOKEN, "j": _str(0, 256), "items": _items, "ring": _str(1, 255)},
    },
    "consumer": {
        "config": {"instance": _NAME, "n": NAT, "seed": _int(-MAX_INT - 1), "shuffle": _bool,
                   "identity": _dict, "jobs": _jobs, "workers": _workers, "service": _NAME,
                   "crashed": _crashed},
        "refused": {"error": _TEXT},
        "closed": {"service": _NAME},
        "stats": {"stats": _dict},
        "out": {"o": _list, "nr": NAT},
        "err": {"e": NAT, "p": NAT, "type": _TEXT, "message": _TEXT, "traceback": _TEXT,
                "worker": _int(-1), "index": _int(-1), "kind": _NAME},
    },
}
#: the fields an op cannot do without
REQUIRED: dict[str, tuple[str, ...]] = {
    "map": ("items",), "config": ("instance", "n", "seed", "shuffle", "workers"),
    "out": ("o",), "err": ("e", "p", "type", "message"), "refused": ("error",),
    "stats": (),
}


def check(msg: dict[str, Any], receiver: str) -> str:
    """The op of ``msg`` (a decoded message) once every field is of the type and in the range
    :data:`OPS` gives for ``receiver``; else :class:`Invalid` naming the op and the field."""
    op = msg["op"]
    fields = OPS[receiver].get(op)
    if fields is None:
        raise Invalid("unknown op")
    for key, value in msg.items():
        if key == "op":
            continue
        ok = fields.get(key)
        if ok is None:
            raise Invalid(f"{op}: unknown field")
        if not ok(value):
            raise Invalid(f"{op}.{key}: wrong type or range")
    for key in REQUIRED.get(op, ()):
        if key not in msg:
            raise Invalid(f"{op}.{key}: missing")
    return op


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
            for k in obj:
                if type(k) not in _KEY_TYPES or k == b"nd":
                    raise TypeError(
                        f"a dict key {k!r:.40} ({type(k).__name__}) cannot travel: a receiver "
                        "could not decode it (keys must be str, int, float or bytes other "
                        "than b'nd')")
            return {k: strip(v) for k, v in obj.items()}
        return obj

    return [dumps_msgpack(strip(msg)), *buffers]


#: the dict keys that msgpack decodes as they were sent
_KEY_TYPES = (str, int, float, bytes, bool, type(None))


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


def curve_keys(token: str) -> tuple[bytes, bytes]:
    """The service's CURVE key pair ``(public, secret)``, z85-encoded, derived from its
    shared secret: whoever holds the token knows the public key its sockets present, and
    nobody without it can read what they send."""
    import zmq
    from zmq.utils import z85

    if not zmq.has("curve"):
        raise RuntimeError("ZeroMQ was built without CURVE (libsodium), which a DataService "
                           "beyond loopback needs: install pyzmq's wheel (pip install -U "
                           "pyzmq), whose libzmq has it.")
    secret = z85.encode(hashlib.sha256(b"dataflow-service-curve\0" + token.encode()).digest())
    return zmq.curve_public(secret), secret


def curve_server(sock: Any, keys: tuple[bytes, bytes]) -> None:
    """Make ``sock`` (a service's ROUTER, before it binds) a CURVE server of ``keys``
    (public, secret)."""
    sock.curve_publickey, sock.curve_secretkey = keys
    sock.curve_server = True


def curve_client(sock: Any, server_key: bytes) -> None:
    """Make ``sock`` (a consumer's DEALER, before it connects) a CURVE client of the service
    whose public key is ``server_key`` (its own key pair is a fresh one: consumers
    authenticate by the token that each message carries, encrypted)."""
    import zmq

    public, secret = zmq.curve_keypair()
    sock.curve_serverkey = server_key
    sock.curve_publickey, sock.curve_secretkey = public, secret


def _certificate(path: str, who: str, secret: bool) -> tuple[bytes, bytes | None]:
    import zmq.auth

    try:
        public, key = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"{who}: `curve` {path!r} is not a readable ZeroMQ certificate file "
                         f"({e}); make one with zmq.auth.create_certificates(folder, name), "
                         "or pass curve=True to derive the keys from the token.") from e
    if secret and key is None:
        raise ValueError(f"{who}: `curve` {path!r} holds no secret key: a service needs its "
                         "'.key_secret' file (consumers take the public '.key' one).")
    return public, key


def curve_setting(curve: Any, host: str, token: str, who: str, server: bool) -> Any:
    """What a socket of ``who`` at ``host`` does for CURVE: None (off), the service's key
    pair (``server``), or the service's public key (a consumer). ``curve``: None (on beyond
    loopback only), True (keys derived from ``token``), False (off: refused beyond loopback),
    or the path of a ZeroMQ certificate file (``zmq.auth.create_certificates``: the service
    takes its ``.key_secret`` file, a consumer the public ``.key`` one)."""
    if curve is not None and not isinstance(curve, bool | str):
        raise ValueError(f"`curve` must be None (on beyond loopback), True, False or the path "
                         f"of a ZeroMQ certificate file, got {curve!r}.")
    loopback = is_loopback(host)
    if curve is False and not loopback:
        raise ValueError(f"{who}: `curve=False` at {host!r}, which is not a loopback address: "
                         "beyond loopback the messages and the samples are encrypted (ZeroMQ "
                         "CURVE, keys derived from the token). Leave curve=None.")
    if isinstance(curve, str):
        public, secret = _certificate(curve, who, server)
        return (public, secret) if server else public
    if not ((not loopback) if curve is None else curve):
        return None
    if not token:
        raise ValueError(f"{who}: CURVE encryption needs a shared secret to derive its keys "
                         f"from: pass token='...' (or set {TOKEN_ENV}), or curve='<path of a "
                         "ZeroMQ certificate file>'.")
    keys = curve_keys(token)
    return keys if server else keys[0]


def resolve_token(token: str | None) -> str:
    return token if token is not None else os.environ.get(TOKEN_ENV, "")


def new_instance() -> str:
    """An id for one start of a service (a restarted one has another)."""
    return uuid.uuid4().hex
