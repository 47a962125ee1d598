"""tensorpack's ``dataflow.remote`` path (old imports); the code is in
:mod:`dataflow.parallel.remote`."""

from dataflow.parallel.remote import RemoteDataZMQ, send_dataflow_zmq

__all__ = ["RemoteDataZMQ", "send_dataflow_zmq"]
