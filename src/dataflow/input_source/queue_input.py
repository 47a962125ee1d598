"""``QueueInput`` and ``BatchQueueInput``: a background thread fills a ``tf.queue.FIFOQueue``.

The thread iterates the dataflow forever (like ``RepeatedData(ds, -1)``) and enqueues each
datapoint; the model dequeues inside its step (graph mode: a dequeue op; TF2: call
``get_input_tensors()`` inside the ``tf.function``, or iterate ``to_dataset()``).

The default queue carries one extra string component, the *status*: empty for data, the error
text when the dataflow raised. Dequeuing a status element fails the training step with that
text (graph mode with a ``MonitoredSession``: with the original exception, through the
coordinator), so an exception in the dataflow ends training instead of hanging it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

from dataflow.base import DataFlow
from dataflow.errors import DataFlowTerminated
from dataflow.input_source._feeder import DataFlowFeeder, check_dataflow
from dataflow.input_source._tf import dummy_components, import_tf, pack, spec_list
from dataflow.input_source.base import FeedfreeInput, InputCallback

__all__ = ["BatchQueueInput", "QueueInput"]

logger = logging.getLogger(__name__)


class _EnqueueThread(threading.Thread):
    """Moves datapoints from the feeder into the queue until stopped or the queue closes."""

    def __init__(self, source: _QueueInputBase, session: Any = None, coord: Any = None) -> None:
        super().__init__(name=f"{type(source).__name__}-enqueue", daemon=True)
        self.source = source
        self.session = session
        self.coord = coord
        self.stop_event = threading.Event()
        self.pause_request = threading.Event()
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.enqueued = 0

    def _run_op(self, op: Any, feed: dict | None = None) -> Any:
        return self.session.run(op, feed_dict=feed)

    def enqueue(self, comps: list, status: bytes) -> None:
        src = self.source
        if self.session is None:  # eager
            vals = [*comps, status] if src._with_status else comps
            src._queue.enqueue(vals)
        else:
            feed = dict(zip(src._placeholders, comps))
            if src._with_status:
                feed[src._status_ph] = status
            self._run_op(src._enqueue_op, feed)

    def queue_size(self) -> int:
        src = self.source
        if self.session is None:
            return int(src._queue.size())
        return int(self._run_op(src._size_op))

    def close_queue(self, cancel: bool) -> None:
        src = self.source
        try:
            if self.session is None:
                src._queue.close(cancel_pending_enqueues=cancel)
            else:
                self._run_op(src._close_op_cancel if cancel else src._close_op)
        except Exception:  # the session or queue is already gone
            pass

    def run(self) -> None:
        tf = import_tf()
        quiet = (tf.errors.CancelledError, tf.errors.OutOfRangeError, DataFlowTerminated)
        feeder = self.source._feeder
        assert feeder is not None  # (made by the source's _setup)
        try:
            feeder.new_epoch()
            while not self.stop_event.is_set():
                if self.pause_request.is_set():
                    self.paused.set()
                    while not self.resume.wait(0.1):
                        if self.stop_event.is_set():
                            return
                    self.resume.clear()
                    self.paused.clear()
                comps = feeder.next_components()
                if comps is None:  # cannot happen with repeat=True; be safe
                    break
                self.enqueue(comps, b"")
                self.enqueued += 1
                if self.enqueued % self.source.report_every == 0:
                    self.source._report_fill(self.queue_size())
        except quiet:  # the queue was closed, or the dataflow ended for good:
            self.close_queue(cancel=False)  # dequeues then fail instead of waiting forever
        except BaseException as e:
            if self.stop_event.is_set() or _closed_session_error(e):
                return
            self.source._error = e
            logger.error("%s: the dataflow raised %s: %s", self.name, type(e).__name__, e)
            if self.coord is not None:
                self.coord.request_stop(e)
            if self.source._with_status:
                text = "".join(traceback.format_exception_only(type(e), e)).strip()
                try:
                    for _ in range(self.source._status_repeat):
                        self.enqueue(self.source._dummy, f"dataflow raised {text}".encode())
                except Exception:
                    pass
            self.close_queue(cancel=False)
            return
        finally:
            if self.stop_event.is_set():
                self.close_queue(cancel=True)


def _closed_session_error(e: BaseException) -> bool:
    return isinstance(e, RuntimeError) and "closed Session" in str(e)


class _StartCallback(InputCallback):
    def _before_train(self, session: Any, coord: Any) -> None:
        self.source.start(session, coord)

    def _after_train(self, session: Any) -> None:
        self.source.stop()


class _QueueInputBase(FeedfreeInput):
    report_every = 100
    _queue: Any = None
    _thread: _EnqueueThread | None = None
    _error: BaseException | None = None
    _with_status = True
    _status_repeat = 1

    def __init__(self, ds: DataFlow, queue: Any = None) -> None:
        self.ds = check_dataflow(ds, "ds")
        self._user_queue = queue
        self._feeder: DataFlowFeeder | None = None
        self.queue_fill_ema: float | None = None
        self._lock = threading.Lock()

    # the per-datapoint signature; BatchQueueInput strips the batch dimension
    def _datapoint_signature(self, input_signature: Any) -> Any:
        return input_signature

    def _report_fill(self, size: int) -> None:
        ema = self.queue_fill_ema
        self.queue_fill_ema = float(size) if ema is None else 0.5 * ema + 0.5 * size
        logger.debug("%s queue fill level: %d (EMA %.1f)", type(self).__name__, size,
                     self.queue_fill_ema)

    def _make_queue(self, tf: Any, dtypes: list, shapes: list | None) -> Any:
        raise NotImplementedError

    def _setup(self, input_signature: Any) -> None:
        tf = import_tf()
        dp_sig = self._datapoint_signature(input_signature)
        if self._feeder is None or self._feeder.signature != dp_sig:
            self._feeder = DataFlowFeeder(self.ds, dp_sig, repeat=True)
        self._dp_specs = spec_list(dp_sig)
        dtypes = [s.dtype for s in self._dp_specs]
        self._with_status = self._user_queue is None
        self._dummy = dummy_components(dp_sig)
        with tf.init_scope() if not self._graph_mode else contextlib.nullcontext():
            if self._user_queue is not None:
                queue = self._user_queue
                if list(queue.dtypes) != dtypes:
                    raise ValueError(
                        f"`queue` has dtypes {[d.name for d in queue.dtypes]} but the input "
                        f"signature needs {[d.name for d in dtypes]}; build the queue with "
                        "the signature's dtypes (or leave `queue=None`)."
                    )
            else:
                queue = self._make_queue(tf, [*dtypes, tf.string], self._queue_shapes())
            self._queue = queue
        if self._graph_mode:
            with self.cached_name_scope():
                self._placeholders = [
                    tf.compat.v1.placeholder(s.dtype, s.shape, name=f"enqueue_{i}")
                    for i, s in enumerate(self._dp_specs)
                ]
                vals = list(self._placeholders)
                if self._with_status:
                    self._status_ph = tf.compat.v1.placeholder(tf.string, [], name="status")
                    vals.append(self._status_ph)
                self._enqueue_op = queue.enqueue(vals, name="enqueue")
                self._close_op = queue.close(name="close")
                self._close_op_cancel = queue.close(cancel_pending_enqueues=True,
                                                    name="close_cancel")
                self._size_op = queue.size(name="size")
                self._drain_op = queue.dequeue(name="drain")
                tf.compat.v1.summary.scalar("queue_size", tf.cast(self._size_op, tf.float32))

    def _queue_shapes(self) -> list | None:
        return None

    def _infer_signature(self) -> Any:
        self._feeder = DataFlowFeeder(self.ds, None, repeat=True)
        return self._model_signature(self._feeder.signature)

    def _model_signature(self, dp_sig: Any) -> Any:
        return dp_sig

    def _get_callbacks(self) -> list[InputCallback]:
        return [_StartCallback(self)]

    # -- thread lifecycle ----------------------------------------------------------------------
    def start(self, session: Any = None, coord: Any = None) -> None:
        """Starts the enqueue thread (graph mode: with ``session``); a no-op if running."""
        self._require_setup("start")
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} was closed; build a new one")
        with self._lock:
            if self._thread is not None:
                return
            if self._graph_mode and session is None:
                tf = import_tf()
                session = tf.compat.v1.get_default_session()
                if session is None:
                    raise RuntimeError(
                        f"{type(self).__name__}.start() in graph mode needs a session: run its "
                        "callbacks (setup() returns them) or call start(session)."
                    )
            self._thread = _EnqueueThread(self, session if self._graph_mode else None, coord)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stops the enqueue thread and closes the queue (pending enqueues are cancelled)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        thread.stop_event.set()
        thread.close_queue(cancel=True)
        thread.join(timeout)
        if thread.is_alive():
            logger.warning("%s did not stop within %.0f s", thread.name, timeout)

    def refill_queue(self, timeout: float = 10.0) -> None:
        """Drops the queued datapoints and restarts the dataflow at a new epoch (e.g. after
        the model changed what it needs). The enqueue thread pauses meanwhile."""
        thread = self._thread
        if thread is None:
            raise RuntimeError(f"{type(self).__name__}.refill_queue() needs a running thread")
        thread.pause_request.set()
        deadline = time.monotonic() + timeout
        while not thread.paused.wait(0.05):  # it may be blocked on a full queue: drain
            self._drain(thread)
            if time.monotonic() > deadline or not thread.is_alive():
                thread.pause_request.clear()
                raise RuntimeError(f"{thread.name} did not pause within {timeout} s")
        self._drain(thread)
        assert self._feeder is not None
        self._feeder.new_epoch()
        thread.pause_request.clear()
        thread.resume.set()

    def _drain(self, thread: _EnqueueThread) -> None:
        # only the (paused or blocked) enqueue thread adds elements: `size` dequeues never block
        for _ in range(thread.queue_size()):
            if thread.session is None:
                self._queue.dequeue()
            else:
                thread.session.run(self._drain_op)

    @property
    def thread(self) -> _EnqueueThread | None:
        return self._thread

    def _close(self) -> None:
        self.stop()
        if self._feeder is not None:
            self._feeder.close()
        self.ds.close()

    # -- tensors -------------------------------------------------------------------------------
    def _dequeue(self, tf: Any) -> list:
        raise NotImplementedError

    def _checked_dequeue(self) -> list:
        tf = import_tf()
        if not self._graph_mode and self._thread is None:
            self.start()
        scope = self.cached_name_scope() if self._graph_mode else contextlib.nullcontext()
        with scope, tf.device("/cpu:0"):
            out = self._dequeue(tf)
            if not isinstance(out, list | tuple):
                out = [out]
            out = list(out)
            if self._with_status:
                status = out.pop()
                ok = tf.reduce_all(tf.equal(status, ""))
                check = tf.debugging.Assert(ok, [tf.strings.reduce_join(status)], summarize=1)
                with tf.control_dependencies([check]):
                    out = [tf.identity(t) for t in out]
        return out

    def _get_input_tensors(self) -> Sequence[Any]:
        out = self._checked_dequeue()
        for tensor, spec in zip(out, spec_list(self._signature)):
            tensor.set_shape(spec.shape)
        return out

    def _to_dataset(self):
        tf = import_tf()
        if self._thread is None:
            self.start()
        sig = self._signature

        @tf.autograph.experimental.do_not_convert
        def dequeue(_):
            return pack(sig, self._get_input_tensors())

        return tf.data.Dataset.from_tensors(0).repeat().map(dequeue)

    def _size(self) -> int:
        return len(self.ds)


class QueueInput(_QueueInputBase):
    """Enqueues datapoints (each already a batch) into a ``FIFOQueue(50)`` from a background
    thread; the model dequeues one per step. ``queue``: your own ``tf.queue.FIFOQueue`` with the
    signature's dtypes (then a dataflow error closes the queue instead of carrying its text).
    ``queue_fill_ema`` tracks the fill level (EMA, decay 0.5; also a ``queue_size`` summary in
    graph mode). The stream is infinite; ``size()`` is ``len(ds)``."""

    def _make_queue(self, tf: Any, dtypes: list, shapes: list | None) -> Any:
        return tf.queue.FIFOQueue(50, dtypes, name="input_queue")

    def _dequeue(self, tf: Any) -> list:
        return self._queue.dequeue(name="input_deque")


class BatchQueueInput(_QueueInputBase):
    """Enqueues single datapoints and dequeues ``batch_size`` of them per step
    (``dequeue_many``). The non-batch shapes must be fully defined; the default queue holds
    3000 datapoints. ``size()`` is ``len(ds) // batch_size``."""

    def __init__(self, ds: DataFlow, batch_size: int, queue: Any = None) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}")
        super().__init__(ds, queue)
        self.batch_size = batch_size
        self._status_repeat = batch_size

    def _datapoint_signature(self, input_signature: Any) -> Any:
        tf = import_tf()
        specs = spec_list(input_signature)
        out = []
        for s in specs:
            shape = s.shape[1:] if s.shape.rank else s.shape
            if s.shape.rank is None or not shape.is_fully_defined():
                raise ValueError(
                    f"BatchQueueInput needs fully defined non-batch shapes, got {s!r}; give "
                    "every dimension except the first a size."
                )
            out.append(tf.TensorSpec(shape, s.dtype, name=s.name))
        return tuple(out)

    def _model_signature(self, dp_sig: Any) -> Any:
        tf = import_tf()
        return tuple(
            tf.TensorSpec([self.batch_size, *s.shape], s.dtype, name=s.name)
            for s in spec_list(dp_sig)
        )

    def _queue_shapes(self) -> list:
        return [s.shape for s in self._dp_specs] + [[]]

    def _make_queue(self, tf: Any, dtypes: list, shapes: list | None) -> Any:
        return tf.queue.FIFOQueue(3000, dtypes, shapes=shapes, name="input_queue")

    def _dequeue(self, tf: Any) -> list:
        return self._queue.dequeue_many(self.batch_size, name="input_deque")

    def _get_input_tensors(self) -> Sequence[Any]:
        out = self._checked_dequeue()
        for tensor, spec in zip(out, self._dp_specs):
            tensor.set_shape([self.batch_size, *spec.shape])
        return out

    def _size(self) -> int:
        return len(self.ds) // self.batch_size
