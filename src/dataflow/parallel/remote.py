"""Send a dataflow to another machine over tcp: ``send_dataflow_zmq`` and ``RemoteDataZMQ``.

Wire format: each datapoint is one ZeroMQ message ``[format tag, body]``.

* ``format=None`` / ``'msgpack'`` (default, tag ``b"M"``): msgpack with NumPy arrays in
  msgpack-numpy's layout. The receiver decodes it **without unpickling**: arrays of object
  dtype are refused, so a peer cannot run code on the receiver.
* ``format='pickle'`` (tag ``b"P"``): pickle protocol 5, faster and able to carry any Python
  object, but unpickling runs code chosen by the sender: use it **only between trusted peers**
  (the receiver must opt in with ``format='pickle'`` too).

Unlike tensorpack, ``RemoteDataZMQ`` works without ``reset_state()`` (its counters exist from
``__init__``), and one bad sender cannot stop it: a message that is not a datapoint of
``send_dataflow_zmq`` in the expected format (garbage, a truncated or foreign message, an array
of object dtype, a pickle when msgpack is expected, a shape that does not match its data...) is
dropped, counted in ``dropped`` and logged with the reason and the sender's address (the first
at once, then at most one line per :data:`DROP_LOG_INTERVAL` seconds), and the datapoints of
the same and of the other senders keep flowing.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np

from dataflow.base import DataFlow, DataFlowReentrantGuard
from dataflow.parallel._wire import import_zmq
from dataflow.state import check_state
from dataflow.validation import check_positive_int, known_length

__all__ = ["RemoteDataZMQ", "send_dataflow_zmq"]

logger = logging.getLogger("dataflow.parallel")

#: seconds between two log lines about dropped messages
DROP_LOG_INTERVAL = 1.0

_TAGS = {None: b"M", "msgpack": b"M", "pickle": b"P"}


def _check_format(format: Any) -> bytes:
    if format not in _TAGS:
        raise ValueError(
            f"`format` must be None (msgpack, safe) or 'pickle' (trusted peers only), got "
            f"{format!r}. 'zmq_op' (tensorpack's zmq_ops) is not supported; use the default."
        )
    return _TAGS[format]


def _encode_np(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError(
                "arrays of object dtype cannot be sent with the default msgpack format; convert "
                "them to a numeric dtype or lists, or use format='pickle' between trusted peers."
            )
        arr = obj if obj.flags.c_contiguous else obj.copy(order="C")
        if arr.dtype.kind == "V":
            return {b"nd": True, b"type": arr.dtype.descr, b"kind": b"V", b"shape": arr.shape,
                    b"data": arr.tobytes()}
        return {b"nd": True, b"type": arr.dtype.str, b"kind": b"", b"shape": arr.shape,
                b"data": arr.tobytes()}
    if isinstance(obj, np.bool_ | np.number):
        return {b"nd": False, b"type": obj.dtype.str, b"data": obj.tobytes()}
    if isinstance(obj, complex):
        return {b"complex": True, b"data": repr(obj)}
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(
        f"cannot send an object of type {type(obj).__name__} with the default msgpack format; "
        "send lists, dicts, numbers, strings, bytes and NumPy arrays, or use format='pickle' "
        "between trusted peers."
    )


def _safe_dtype(descr: Any) -> np.dtype:
    if isinstance(descr, list | tuple):
        descr = [
            (d[0].decode() if isinstance(d[0], bytes) else d[0], _safe_dtype(d[1]), *d[2:])
            for d in descr
        ]
    dtype = np.dtype(descr.decode() if isinstance(descr, bytes) else descr)
    if dtype.hasobject:
        raise ValueError("refusing to decode an array of object dtype (it would unpickle)")
    return dtype


def _decode_np(obj: dict) -> Any:
    if b"nd" in obj:
        if obj.get(b"kind") == b"O":
            raise ValueError("refusing to decode an array of object dtype (it would unpickle)")
        dtype = _safe_dtype(obj[b"type"])
        data = obj[b"data"]
        if obj[b"nd"] is True:
            return np.frombuffer(bytearray(data), dtype=dtype).reshape(tuple(obj[b"shape"]))
        return np.frombuffer(data, dtype=dtype)[0]
    if b"complex" in obj:
        return complex(obj[b"data"])
    return obj


def dumps_msgpack(obj: Any) -> bytes:
    """Encode ``obj`` with msgpack (NumPy arrays in msgpack-numpy's layout)."""
    return msgpack.packb(obj, default=_encode_np, use_bin_type=True)


def loads_msgpack(data: Any) -> Any:
    """Decode :func:`dumps_msgpack` output without ever unpickling."""
    return msgpack.unpackb(data, object_hook=_decode_np, raw=False, strict_map_key=False)


def _encode(dp: Any, tag: bytes) -> list[Any]:
    if tag == b"P":
        return [tag, pickle.dumps(dp, protocol=5)]
    return [tag, dumps_msgpack(dp)]


class MalformedMessageError(ValueError):
    """A received message that is not a datapoint of :func:`send_dataflow_zmq` in the expected
    format; ``RemoteDataZMQ`` drops it."""


def _decode(frames: list[Any], tag: bytes) -> Any:
    """The datapoint of one message (``zmq.Frame`` or bytes), or ``MalformedMessageError`` saying
    why it is refused."""
    parts = [f.buffer if hasattr(f, "buffer") else f for f in frames]
    found = bytes(parts[0]) if len(parts) == 2 and len(parts[0]) == 1 else None
    if found not in (b"M", b"P"):
        raise MalformedMessageError(
            f"a message of {len(parts)} frame(s) that is not from send_dataflow_zmq (its "
            "messages are 2 frames: a format tag b'M' or b'P', and the body)"
        )
    if found != tag:
        if tag == b"M":
            raise MalformedMessageError(
                "the sender uses format='pickle'; receiving it runs code chosen by the sender. "
                "If you trust the sender, pass format='pickle' to RemoteDataZMQ."
            )
        raise MalformedMessageError(
            "the sender uses the msgpack format; pass format=None to RemoteDataZMQ"
        )
    try:
        if tag == b"P":
            return pickle.loads(parts[1])
        return loads_msgpack(parts[1])
    except Exception as e:  # any garbage: msgpack's ExtraData, a bad dtype, a bad shape...
        what = "pickle" if tag == b"P" else "msgpack"
        raise MalformedMessageError(
            f"a {what} body of {len(parts[1])} bytes that does not decode "
            f"({type(e).__name__}: {str(e)[:200]})"
        ) from e


def _peer(frames: list[Any]) -> str:
    """The address of the peer that sent ``frames`` (``zmq.Frame``), when ZeroMQ knows it."""
    try:
        return str(frames[0].get("Peer-Address"))
    except Exception:
        return "an unknown address"


class _DropLog:
    """Logs dropped messages: the first one at once, then at most one line per ``interval``
    seconds, which counts the drops since the previous line and gives the last reason."""

    def __init__(self, name: str, interval: float = DROP_LOG_INTERVAL,
                 clock: Any = time.monotonic) -> None:
        self.name, self.interval, self.clock = name, interval, clock
        self.next_time = float("-inf")
        self.unlogged = 0
        self.last = ""

    def drop(self, reason: str, total: int) -> None:
        self.unlogged += 1
        self.last = reason
        if self.clock() >= self.next_time:
            self.flush(total)

    def flush(self, total: int) -> None:
        if not self.unlogged:
            return
        logger.warning("%s dropped %d message(s) (%d in all); the last: %s",
                       self.name, self.unlogged, total, self.last)
        self.unlogged = 0
        self.next_time = self.clock() + self.interval


def send_dataflow_zmq(
    df: DataFlow,
    addr: str,
    hwm: int = 50,
    format: str | None = None,
    bind: bool = False,
    *,
    num_epochs: int | None = None,
    drain_timeout: float = 600.0,
) -> None:
    """Send the datapoints of ``df`` to ``addr`` (a PUSH socket), epoch after epoch.

    Calls ``df.reset_state()``, then sends each datapoint; a tqdm bar per epoch shows the
    progress and the average send latency of the last 200 datapoints. Runs forever, like
    tensorpack, unless ``num_epochs`` is given. ``bind=True`` binds ``addr`` instead of
    connecting. ``format``: see the module docstring (default msgpack, safe to receive).

    After the last epoch it waits until every queued datapoint has reached the receiver's
    queue, however slowly the receiver reads, for at most ``drain_timeout`` seconds (a
    receiver that is gone cannot make it hang forever); if datapoints are still queued then,
    they are dropped and a ``RuntimeWarning`` says so.
    """
    from tqdm import tqdm

    tag = _check_format(format)
    hwm = check_positive_int(hwm, "hwm", 50)
    if num_epochs is not None:
        check_positive_int(num_epochs, "num_epochs", 1)
    if not isinstance(drain_timeout, int | float) or not drain_timeout >= 0:
        raise ValueError(
            f"`drain_timeout` must be a number of seconds >= 0, got {drain_timeout!r}; use e.g. "
            "600 to wait up to ten minutes for a slow receiver."
        )
    zmq = import_zmq()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.LINGER, 0)  # on errors, never block in close
    try:
        if bind:
            sock.bind(addr)
        else:
            sock.connect(addr)
        df.reset_state()
        total = known_length(df) or 0
        latencies: deque[float] = deque(maxlen=200)
        epoch = 0
        while num_epochs is None or epoch < num_epochs:
            with tqdm(total=total, desc=f"send epoch {epoch}", leave=False) as bar:
                for dp in df:
                    start = time.perf_counter()
                    sock.send_multipart(_encode(dp, tag), copy=False)
                    latencies.append(time.perf_counter() - start)
                    bar.update(1)
                    if bar.n % 100 == 0:
                        avg = sum(latencies) / len(latencies)
                        bar.set_postfix(AvgSendLat=f"{avg * 1e3:.3f}ms")
            epoch += 1
        _drain(zmq, ctx, sock, drain_timeout)
    finally:
        if not sock.closed:  # an error: drop what is queued, never block
            sock.close()
            ctx.term()


def _drain(zmq: Any, ctx: Any, sock: Any, timeout: float) -> None:
    """Close ``sock`` and wait (``ctx.term()``) until its queue has reached the peer, for at most
    ``timeout`` seconds; warn if the wait ran out (ZeroMQ then drops what is left)."""
    import warnings

    sock.setsockopt(zmq.LINGER, int(timeout * 1000))
    sock.close()
    start = time.monotonic()
    ctx.term()
    if time.monotonic() - start >= timeout - 0.01:
        warnings.warn(
            f"send_dataflow_zmq: the receiver did not take the last datapoints within "
            f"drain_timeout={timeout} s; what was still queued was dropped. Raise drain_timeout "
            "for a slow receiver.",
            RuntimeWarning,
            stacklevel=3,
        )


class RemoteDataZMQ(DataFlow):
    """Receive datapoints sent by :func:`send_dataflow_zmq` on one or two addresses.

    Endless. Each ``__iter__`` opens fresh PULL socket(s) that bind (default) or connect to
    ``addr1`` (and ``addr2``), and closes them when the iteration ends. ``cnt1``/``cnt2``
    count the datapoints received on each address. ``format`` must match the sender's;
    ``'pickle'`` is for trusted peers only.

    A message that is not a datapoint in that format is dropped, counted in ``dropped`` and
    logged (rate-limited, see the module docstring): one bad sender cannot stop the others.
    ``max_message_size`` (bytes, default unlimited as in tensorpack) bounds what one sender can
    make the receiver hold: ZeroMQ disconnects a sender whose message has a frame larger than
    that before reading it (the sender reconnects; that message is lost, and not counted).
    A datapoint's frame is its whole serialized body: set it above your largest datapoint.

    Not resumable beyond its counters: ``state_dict()`` saves ``cnt1``/``cnt2``/``dropped``
    only.
    """

    profile_hint = "remote"

    def __init__(
        self,
        addr1: str,
        addr2: str | None = None,
        hwm: int = 50,
        bind: bool = True,
        *,
        format: str | None = None,
        max_message_size: int | None = None,
    ) -> None:
        self._addr1, self._addr2 = addr1, addr2
        self._hwm = check_positive_int(hwm, "hwm", 50)
        self._max_size = (None if max_message_size is None else
                          check_positive_int(max_message_size, "max_message_size", 1 << 30))
        self._bind = bind
        self._tag = _check_format(format)
        self._guard = DataFlowReentrantGuard(type(self).__name__)
        self.cnt1 = 0
        self.cnt2 = 0
        self.dropped = 0  # messages refused (malformed, or in the other format)

    def reset_state(self) -> None:
        self.cnt1 = 0
        self.cnt2 = 0
        self.dropped = 0

    def state_dict(self) -> dict[str, Any]:
        """The counters ``cnt1``/``cnt2``/``dropped`` only: not resumable beyond them. What the
        senders produce is not under this flow's control; after a restore it receives whatever
        they send next."""
        return {"type": "RemoteDataZMQ", "num_addrs": 1 if self._addr2 is None else 2,
                "cnt1": self.cnt1, "cnt2": self.cnt2, "dropped": self.dropped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters (see :meth:`state_dict`; a state saved before ``dropped``
        existed restores it to 0)."""
        check_state(state, self, num_addrs=1 if self._addr2 is None else 2)
        self.cnt1, self.cnt2 = int(state["cnt1"]), int(state["cnt2"])
        self.dropped = int(state.get("dropped", 0))

    def _socket(self, ctx: Any, zmq: Any, addr: str) -> Any:
        sock = ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, self._hwm)
        if self._max_size is not None:
            sock.setsockopt(zmq.MAXMSGSIZE, self._max_size)
        if self._bind:
            sock.bind(addr)
        else:
            sock.connect(addr)
        return sock

    def _receive(self, sock: Any, log: _DropLog) -> tuple[bool, Any]:
        """``(True, datapoint)``, or ``(False, None)`` for a message that was dropped."""
        frames = sock.recv_multipart(copy=False)
        try:
            return True, _decode(frames, self._tag)
        except MalformedMessageError as e:
            self.dropped += 1
            log.drop(f"from {_peer(frames)}: {e}", self.dropped)
            return False, None

    def __iter__(self) -> Iterator[Any]:
        zmq = import_zmq()
        with self._guard:
            ctx = zmq.Context()
            log = _DropLog(type(self).__name__)
            try:
                s1 = self._socket(ctx, zmq, self._addr1)
                if self._addr2 is None:
                    while True:
                        ok, dp = self._receive(s1, log)
                        if ok:
                            self.cnt1 += 1
                            yield dp
                s2 = self._socket(ctx, zmq, self._addr2)
                poller = zmq.Poller()
                poller.register(s1, zmq.POLLIN)
                poller.register(s2, zmq.POLLIN)
                while True:
                    for sock, _ in poller.poll():
                        ok, dp = self._receive(sock, log)
                        if not ok:
                            continue
                        if sock is s1:
                            self.cnt1 += 1
                        else:
                            self.cnt2 += 1
                        yield dp
            finally:
                log.flush(self.dropped)
                ctx.destroy(linger=0)
