"""``ZMQInput``: datapoints sent by ``send_dataflow_zmq``, pulled with pyzmq (no custom ops).

Accepted messages: the two-frame ``[tag, body]`` messages of
:func:`dataflow.parallel.remote.send_dataflow_zmq` (tag ``b"M"``: msgpack; ``b"P"``: pickle,
only with ``format='pickle'``), and single-frame msgpack messages with NumPy arrays in
msgpack-numpy's layout (``msgpack.packb(dp, default=msgpack_numpy.encode, use_bin_type=True)``).
Object arrays are refused, so nothing received is ever unpickled unless you opt in.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dataflow._optional import import_optional
from dataflow.base import DataFlow
from dataflow.errors import DataFlowTerminated
from dataflow.input_source._feeder import DataFlowFeeder, feeder_dataset
from dataflow.input_source._tf import import_tf, spec_list
from dataflow.input_source.base import FeedfreeInput

__all__ = ["ZMQInput"]


def _import_zmq() -> Any:
    return import_optional("zmq", "ZMQInput")


def _decode_np(obj: dict) -> Any:
    if b"nd" not in obj:
        if b"complex" in obj:
            return complex(obj[b"data"])
        return obj
    kind = obj.get(b"kind", b"")
    if kind == b"O":
        raise ValueError(
            "received an object array, which would have to be unpickled; send numeric arrays"
        )
    if obj[b"nd"]:
        descr = obj[b"type"]
        dtype = np.dtype([tuple(d) for d in descr]) if kind == b"V" else np.dtype(descr)
        return np.frombuffer(obj[b"data"], dtype=dtype).reshape(obj[b"shape"])
    return np.frombuffer(obj[b"data"], dtype=np.dtype(obj[b"type"]))[0]


def decode_message(frames: list[Any], allow_pickle: bool = False) -> Any:
    """Decodes one message (see the module docstring)."""
    import msgpack

    frames = [bytes(f) for f in frames]
    if len(frames) == 2 and frames[0] in (b"M", b"P"):
        tag, body = frames
        if tag == b"P":
            if not allow_pickle:
                raise ValueError(
                    "the sender uses format='pickle'; receiving it runs code chosen by the "
                    "sender. If you trust it, pass format='pickle' to ZMQInput."
                )
            return pickle.loads(body)
    elif len(frames) == 1:
        body = frames[0]
    else:
        raise ValueError(f"received a {len(frames)}-frame message not sent by send_dataflow_zmq")
    return msgpack.unpackb(body, object_hook=_decode_np, raw=False, strict_map_key=False)


class _PullFlow(DataFlow):
    """The endless stream of datapoints arriving on the source's socket."""

    def __init__(self, source: ZMQInput) -> None:
        self.source = source

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.source.recv()


class ZMQInput(FeedfreeInput):
    """Input pulled from a ZeroMQ PULL socket that binds (default) or connects to
    ``end_point``; pair it with ``send_dataflow_zmq(df, end_point, bind=not bind)``.

    Infinite. The socket opens on first use and closes in ``close()``. ``get_input_tensors()``
    (graph mode, or inside a ``tf.function``) receives one datapoint per evaluation;
    ``to_dataset()`` gives a ``tf.data.Dataset`` (signature inferred from the first datapoint
    when not given). ``format='pickle'`` accepts pickled messages (trusted senders only).
    """

    def __init__(
        self, end_point: str, hwm: int = 50, bind: bool = True, *, format: str | None = None
    ) -> None:
        if not isinstance(end_point, str) or "://" not in end_point:
            raise ValueError(
                f"`end_point` must be a ZeroMQ address like 'tcp://127.0.0.1:5555' or "
                f"'ipc:///tmp/feed', got {end_point!r}"
            )
        if isinstance(hwm, bool) or not isinstance(hwm, int) or hwm < 1:
            raise ValueError(f"`hwm` must be a positive int, got {hwm!r}")
        if format not in (None, "msgpack", "pickle"):
            raise ValueError(f"`format` must be None, 'msgpack' or 'pickle', got {format!r}")
        self.end_point = end_point
        self.hwm = hwm
        self.bind = bind
        self._allow_pickle = format == "pickle"
        self._sock_lock = threading.Lock()
        self._stop = threading.Event()
        self._ctx: Any = None
        self._sock: Any = None
        self._feeder: DataFlowFeeder | None = None
        self.received = 0

    # -- socket ------------------------------------------------------------------------------
    def open(self) -> ZMQInput:
        """Binds or connects the socket now (else on first use); returns ``self``."""
        with self._sock_lock:
            if self._stop.is_set():
                raise RuntimeError("ZMQInput was closed; build a new one")
            self._open()
        return self

    def _open(self) -> Any:
        if self._sock is None:
            zmq = _import_zmq()
            self._ctx = zmq.Context()
            sock = self._ctx.socket(zmq.PULL)
            sock.setsockopt(zmq.RCVHWM, self.hwm)
            if self.bind:
                sock.bind(self.end_point)
            else:
                sock.connect(self.end_point)
            self._sock = sock
        return self._sock

    def recv(self) -> Any:
        """Blocks until the next datapoint arrives; DataFlowTerminated once closed."""
        with self._sock_lock:
            if self._stop.is_set():
                raise DataFlowTerminated("ZMQInput was closed")
            sock = self._open()
            while not sock.poll(100):
                if self._stop.is_set():
                    raise DataFlowTerminated("ZMQInput was closed")
            frames = sock.recv_multipart(copy=False)
        self.received += 1
        return decode_message([f.buffer for f in frames], self._allow_pickle)

    def _close(self) -> None:
        self._stop.set()
        if self._feeder is not None:
            self._feeder.close()
        with self._sock_lock:
            if self._sock is not None:
                self._sock.close(linger=0)
                self._ctx.term()
                self._sock = self._ctx = None

    # -- InputSource -------------------------------------------------------------------------
    def _get_feeder(self, signature: Any) -> DataFlowFeeder:
        if self._feeder is None or (signature is not None and self._feeder.signature != signature):
            self._feeder = DataFlowFeeder(_PullFlow(self), signature)
        return self._feeder

    def _infer_signature(self) -> Any:
        return self._get_feeder(None).signature

    def _setup(self, input_signature: Any) -> None:
        self.open()
        self._get_feeder(input_signature)

    def _pull(self) -> list:
        feeder = self._feeder
        assert feeder is not None  # (made by _setup)
        comps = feeder.next_components()
        if comps is None:  # not started yet, or the previous message failed to decode
            feeder.new_epoch()
            comps = feeder.next_components()
        assert comps is not None  # the stream is endless
        return comps

    def _get_input_tensors(self) -> Sequence[Any]:
        tf = import_tf()
        specs = spec_list(self._signature)
        out = tf.numpy_function(self._pull, [], [s.dtype for s in specs], stateful=True)
        for tensor, spec in zip(out, specs):
            tensor.set_shape(spec.shape)
        return list(out)

    def _to_dataset(self):
        # no read-ahead: a pull blocks until a message arrives, and a pending pull would keep
        # the dataset iterator from being destroyed after the last element the loop takes
        tf = import_tf()
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        return feeder_dataset(self._feeder, prefetch=None, chunk=1).with_options(options)

    def to_dataset(self, input_signature: Sequence[Any] | None = None):
        """The endless ``tf.data.Dataset`` of received datapoints."""
        return super().to_dataset(input_signature)
