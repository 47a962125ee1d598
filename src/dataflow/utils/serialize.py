"""tensorpack's ``utils.serialize``: ``dumps``/``loads`` of datapoints.

:func:`dumps` writes pickle (tensorpack's default since 0.9.9). :func:`loads` reads both forms
that tensorpack's ``LMDBSerializer`` (and ``TFRecordSerializer``) wrote: pickle
(``pickle.dumps(obj, protocol=-1)``) and msgpack with msgpack-numpy (``use_bin_type=True``,
the default of tensorpack 0.8.9 - 0.9.8); it tells them apart by the first bytes. These are the
functions of :mod:`dataflow.serialize.codec`. ``dumps_once``/``loads_once`` (tensorpack's
in-process IPC pair) are the same functions.
"""

from dataflow.serialize.codec import dumps, loads

dumps_once = dumps
loads_once = loads

__all__ = ["dumps", "dumps_once", "loads", "loads_once"]
