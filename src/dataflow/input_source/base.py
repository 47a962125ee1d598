"""``InputSource``: turns data into a model's input tensors, in TF2 and in TF1-style graph mode.

Two ways to use a source:

* **TF2 (eager, ``tf.function``, Keras)**: ``src.to_dataset(signature=None)`` returns a
  ``tf.data.Dataset`` for ``model.fit`` or a ``for`` loop; feed-free sources also return their
  tensors from ``src.get_input_tensors()`` called inside a ``tf.function`` training step.
* **Graph mode** (inside ``with tf.Graph().as_default():``, ``tf.compat.v1`` APIs, a
  ``Session``): ``callbacks = src.setup(signature)`` once, ``src.get_input_tensors()`` per
  tower, and the returned callbacks run by the training loop. A callback is a
  ``tf.compat.v1.train.SessionRunHook`` (duck-typed: pass them as ``hooks=`` of a
  ``MonitoredSession``) and also answers tensorpack's ``setup_graph`` / ``before_train`` /
  ``before_run`` / ``after_run`` / ``after_train``.

Every source is a context manager; ``close()`` (idempotent) stops the threads it started and
closes its dataflow. TensorFlow is imported on first use, never at import time.
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

from dataflow.input_source._tf import import_tf, is_graph_mode, normalize_signature, spec_list

__all__ = [
    "FeedfreeInput",
    "InputCallback",
    "InputSource",
    "ProxyInputSource",
    "build_or_reuse_placeholder",
    "remap_input_source",
]

logger = logging.getLogger(__name__)


class InputCallback:
    """A hook that drives an input source inside a training loop (see the module docstring).

    Subclasses override the underscored methods; the public ones adapt both protocols.
    """

    chief_only = False

    def __init__(self, source: InputSource) -> None:
        self.source: Any = source  # the source it was made for (a subclass with its own hooks)

    # -- tf.compat.v1.train.SessionRunHook protocol ---------------------------------------
    def begin(self) -> None:
        self._setup_graph()

    def after_create_session(self, session: Any, coord: Any) -> None:
        ctx = session.as_default() if session is not None else contextlib.nullcontext()
        with ctx:
            self._before_train(session, coord)

    def before_run(self, run_context: Any) -> Any:
        return self._before_run(run_context)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._after_run(run_context, run_values)

    def end(self, session: Any) -> None:
        self._after_train(session)

    # -- tensorpack callback protocol -----------------------------------------------------
    def setup_graph(self, trainer: Any = None) -> None:
        self.begin()

    def before_train(self) -> None:
        tf = import_tf()
        self._before_train(tf.compat.v1.get_default_session(), None)

    def after_train(self) -> None:
        tf = import_tf()
        self._after_train(tf.compat.v1.get_default_session())

    # -- hooks ------------------------------------------------------------------------------
    def _setup_graph(self) -> None:
        pass

    def _before_train(self, session: Any, coord: Any) -> None:
        pass

    def _before_run(self, run_context: Any) -> Any:
        return None

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        pass

    def _after_train(self, session: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.source).__name__})"


class _ResetCallback(InputCallback):
    """Calls ``source.reset_state()`` before training (always the first callback)."""

    def _before_train(self, session: Any, coord: Any) -> None:
        self.source.reset_state()


class InputSource(ABC):
    """Base class of input sources. Public methods validate and call the ``_``-prefixed hooks."""

    _setup_done = False
    _signature: Any = None
    _graph_mode = False
    _callbacks: list[InputCallback] | None = None
    _closed = False
    _name_scope_name: str | None = None

    # -- setup ---------------------------------------------------------------------------------
    def setup(self, input_signature: Sequence[Any]) -> list[InputCallback]:
        """Builds what the source needs for ``input_signature`` (a list of ``tf.TensorSpec``)
        and returns the callbacks to run in the training loop. Call only once."""
        if self._setup_done:
            raise RuntimeError(
                f"{type(self).__name__}.setup() was already called (with "
                f"{self._signature!r}); an input source is set up once. Build a new one for "
                "another model."
            )
        sig = normalize_signature(input_signature)
        self._graph_mode = is_graph_mode()
        self._signature = sig
        self._setup(sig)
        self._setup_done = True
        return self.get_callbacks()

    def setup_done(self) -> bool:
        return self._setup_done

    @property
    def input_signature(self) -> Any:
        """The signature given to :meth:`setup` (``None`` before)."""
        return self._signature

    def _setup(self, input_signature: Any) -> None:  # noqa: B027 (optional hook)
        pass

    def _require_setup(self, what: str) -> None:
        if not self._setup_done:
            raise RuntimeError(
                f"{type(self).__name__}.{what}() needs setup(input_signature) first "
                "(or call to_dataset(), which sets the source up)."
            )

    # -- tensors and callbacks -----------------------------------------------------------------
    def get_input_tensors(self) -> list[Any]:
        """The input tensors, in signature order (new tensors on each call unless placeholders)."""
        self._require_setup("get_input_tensors")
        return list(self._get_input_tensors())

    @abstractmethod
    def _get_input_tensors(self) -> Sequence[Any]: ...

    def get_callbacks(self) -> list[InputCallback]:
        """The callbacks (memoized): a reset callback first, then the source's own."""
        self._require_setup("get_callbacks")
        if self._callbacks is None:
            cbs = [_ResetCallback(self), *self._get_callbacks()]
            for cb in cbs:
                cb.chief_only = False
            self._callbacks = cbs
        return list(self._callbacks)

    def _get_callbacks(self) -> list[InputCallback]:
        return []

    def reset_state(self) -> None:
        """Restarts the data stream (graph mode: under the default session)."""
        self._reset_state()

    def _reset_state(self) -> None:  # noqa: B027 (optional hook)
        pass

    def size(self) -> int:
        """The number of steps in one epoch, where known."""
        return self._size()

    def _size(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not know its size.")

    # -- TF2 -----------------------------------------------------------------------------------
    def to_dataset(self, input_signature: Sequence[Any] | None = None):
        """A ``tf.data.Dataset`` of this source's inputs, for ``model.fit`` or a ``for`` loop.

        Sets the source up on first call (``input_signature`` may be omitted for sources fed
        by a DataFlow: it is inferred from the first datapoint).
        """
        if not self._setup_done:
            if input_signature is None:
                input_signature = self._infer_signature()
            self.setup(input_signature)
        elif input_signature is not None and (
            normalize_signature(input_signature) != self._signature
        ):
            raise ValueError(
                f"`input_signature` {input_signature!r} differs from the one given to setup() "
                f"({self._signature!r}); omit it or pass the same signature."
            )
        return self._to_dataset()

    def _infer_signature(self) -> Any:
        raise ValueError(
            f"{type(self).__name__}.to_dataset() needs `input_signature` (a list of "
            "tf.TensorSpec): this source cannot infer it."
        )

    def _to_dataset(self):
        raise NotImplementedError(f"{type(self).__name__} cannot produce a tf.data.Dataset.")

    def __iter__(self) -> Iterator[Any]:
        """Iterates :meth:`to_dataset` (eager)."""
        return iter(self.to_dataset())

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stops what this source started (threads, sockets, its dataflow). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._close()

    def _close(self) -> None:  # noqa: B027 (optional hook)
        pass

    def __enter__(self) -> InputSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def cached_name_scope(self):
        """A ``tf.name_scope`` named after the class, reused on later calls (graph mode)."""
        tf = import_tf()
        if self._name_scope_name is None:
            with tf.compat.v1.name_scope(type(self).__name__) as scope:
                self._name_scope_name = scope
                yield scope
        else:
            with tf.compat.v1.name_scope(self._name_scope_name) as scope:
                yield scope


class FeedfreeInput(InputSource):
    """Marker base: the input tensors come from the graph itself, not from ``feed_dict``."""

    def _reset_state(self) -> None:
        pass


class ProxyInputSource(InputSource):
    """Forwards everything to ``self._input``."""

    def __init__(self, input: InputSource) -> None:
        if not isinstance(input, InputSource):
            raise TypeError(f"`input` must be an InputSource, got {type(input).__name__}")
        self._input = input

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_input":
            raise AttributeError(name)
        return getattr(self._input, name)

    def _setup(self, input_signature: Any) -> None:
        self._input.setup(input_signature)

    def _get_input_tensors(self) -> Sequence[Any]:
        return self._input.get_input_tensors()

    def _get_callbacks(self) -> list[InputCallback]:
        return self._input.get_callbacks()

    def _reset_state(self) -> None:
        self._input.reset_state()

    def _size(self) -> int:
        return self._input.size()

    def _infer_signature(self) -> Any:
        return self._input._infer_signature()

    def _to_dataset(self):
        return self._input._to_dataset()

    def _close(self) -> None:
        self._input.close()


def build_or_reuse_placeholder(spec: Any):
    """A ``tf.compat.v1.placeholder`` for ``spec`` in the default graph, outside any name scope;
    an existing placeholder of the same name, dtype and compatible shape is reused."""
    tf = import_tf()
    graph = tf.compat.v1.get_default_graph()
    name = spec.name or "input"
    try:
        tensor = graph.get_tensor_by_name(name + ":0")
    except KeyError:
        tensor = None
    if tensor is not None and tensor.op.type == "Placeholder":
        if tensor.dtype == spec.dtype and tensor.shape.is_compatible_with(spec.shape):
            return tensor
        raise ValueError(
            f"a placeholder named {name!r} already exists with dtype {tensor.dtype.name} and "
            f"shape {tensor.shape}, incompatible with {spec!r}; rename the tf.TensorSpec."
        )
    with graph.name_scope(None):
        return tf.compat.v1.placeholder(spec.dtype, spec.shape, name=name)


class _RemapMixin(ProxyInputSource):
    _remap_names: tuple[str, ...] = ()

    def _setup(self, input_signature: Any) -> None:
        specs = spec_list(input_signature)
        names = [s.name for s in specs]
        unknown = [n for n in self._remap_names if n not in names]
        if unknown:
            raise ValueError(
                f"remap_input_source: `names` {unknown} are not in the signature {names}; "
                "use the tf.TensorSpec names of the model inputs."
            )
        self._all_specs = specs
        self._placeholders = (
            [build_or_reuse_placeholder(s) for s in specs] if self._graph_mode else None
        )
        sub = [s for s in specs if s.name in self._remap_names]
        self._input.setup(sorted(sub, key=lambda s: self._remap_names.index(s.name)))

    def _get_input_tensors(self) -> Sequence[Any]:
        produced = dict(zip(self._remap_names, self._input.get_input_tensors()))
        if self._placeholders is None:
            raise RuntimeError(
                "remap_input_source: the other inputs are placeholders, which exist only in "
                "graph mode; in TF2 use to_dataset() of the wrapped source."
            )
        return [produced.get(s.name, p) for s, p in zip(self._all_specs, self._placeholders)]

    def _to_dataset(self):
        return self._input._to_dataset()


def remap_input_source(input: InputSource, names: Sequence[str]) -> InputSource:
    """Wraps ``input`` so that it provides only the model inputs named in ``names`` (in the
    order of ``names``) and placeholders for the others. The result is still an instance of
    ``type(input)``."""
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"`names` must be a list of input names, got {names!r}")
    cls = type(input)
    remapped = type(f"{cls.__name__}Remapped", (_RemapMixin, cls), {})
    obj = remapped(input)
    obj._remap_names = tuple(names)
    return obj
