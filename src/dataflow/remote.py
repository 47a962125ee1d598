"""tensorpack's ``dataflow.remote`` module path, for old code that imports from it
(``from tensorpack.dataflow.remote import send_dataflow_zmq``); the code lives in
:mod:`dataflow.parallel.remote`."""

from dataflow.parallel.remote import RemoteDataZMQ, send_dataflow_zmq

__all__ = ["RemoteDataZMQ", "send_dataflow_zmq"]
