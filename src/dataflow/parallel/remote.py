"""Send a dataflow to another machine over tcp: ``send_dataflow_zmq`` and ``RemoteDataZMQ``.

Wire format: each datapoint is one ZeroMQ message ``[format tag, body]``.

* ``format=None`` / ``'msgpack'`` (default, tag ``b"M"``): msgpack with NumPy arrays in
  msgpack-numpy's layout. The receiver decodes it **without unpickling**: arrays of object
  dtype are refused, so a peer cannot run code on the receiver.
* ``format='pickle'`` (tag ``b"P"``): pickle protocol 5, faster and able to carry any Python
  object, but unpickling runs code chosen by the sender: use it **only between trusted peers**
  (the receiver must opt in with ``format='pickle'`` too).

Unlike tensorpack, ``RemoteDataZMQ`` works without ``reset_state()`` (its counters exist from
``__init__``), and a message in the other format fails with a clear error instead of garbage.
"""

from __future__ import annotations

import pickle
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np

from dataflow.base import DataFlow, DataFlowReentrantGuard
from dataflow.parallel._zmq import import_zmq
from dataflow.state import check_state
from dataflow.validation import check_positive_int, known_length

__all__ = ["RemoteDataZMQ", "send_dataflow_zmq"]

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


def _decode(frames: list[bytes], tag: bytes) -> Any:
    if len(frames) != 2 or frames[0] not in (b"M", b"P"):
        raise ValueError("received a message that is not from send_dataflow_zmq")
    if frames[0] != tag:
        if frames[0] == b"P":
            raise ValueError(
                "the sender uses format='pickle'; receiving it runs code chosen by the sender. "
                "If you trust the sender, pass format='pickle' to RemoteDataZMQ."
            )
        raise ValueError("the sender uses the msgpack format; pass format=None to RemoteDataZMQ")
    if tag == b"P":
        return pickle.loads(frames[1])
    return loads_msgpack(frames[1])


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
    count the messages received on each address. ``format`` must match the sender's;
    ``'pickle'`` is for trusted peers only.

    Not resumable beyond its counters: ``state_dict()`` saves ``cnt1``/``cnt2`` only.
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
    ) -> None:
        self._addr1, self._addr2 = addr1, addr2
        self._hwm = check_positive_int(hwm, "hwm", 50)
        self._bind = bind
        self._tag = _check_format(format)
        self._guard = DataFlowReentrantGuard(type(self).__name__)
        self.cnt1 = 0
        self.cnt2 = 0

    def reset_state(self) -> None:
        self.cnt1 = 0
        self.cnt2 = 0

    def state_dict(self) -> dict[str, Any]:
        """The counters ``cnt1``/``cnt2`` only: not resumable beyond them. What the senders
        produce is not under this flow's control; after a restore it receives whatever they
        send next."""
        return {"type": "RemoteDataZMQ", "num_addrs": 1 if self._addr2 is None else 2,
                "cnt1": self.cnt1, "cnt2": self.cnt2}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters (see :meth:`state_dict`)."""
        check_state(state, self, num_addrs=1 if self._addr2 is None else 2)
        self.cnt1, self.cnt2 = int(state["cnt1"]), int(state["cnt2"])

    def _socket(self, ctx: Any, zmq: Any, addr: str) -> Any:
        sock = ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, self._hwm)
        if self._bind:
            sock.bind(addr)
        else:
            sock.connect(addr)
        return sock

    def __iter__(self) -> Iterator[Any]:
        zmq = import_zmq()
        with self._guard:
            ctx = zmq.Context()
            try:
                s1 = self._socket(ctx, zmq, self._addr1)
                if self._addr2 is None:
                    while True:
                        dp = _decode(s1.recv_multipart(), self._tag)
                        self.cnt1 += 1
                        yield dp
                s2 = self._socket(ctx, zmq, self._addr2)
                poller = zmq.Poller()
                poller.register(s1, zmq.POLLIN)
                poller.register(s2, zmq.POLLIN)
                while True:
                    for sock, _ in poller.poll():
                        dp = _decode(sock.recv_multipart(), self._tag)
                        if sock is s1:
                            self.cnt1 += 1
                        else:
                            self.cnt2 += 1
                        yield dp
            finally:
                ctx.destroy(linger=0)
