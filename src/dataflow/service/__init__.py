"""A data service: one pool of CPU workers feeding many trainers, with exact distributed epochs.

:class:`DataService` runs ``map_func`` over a pipeline's cheap part on a pool of worker
processes; each trainer rank reads its share of every epoch through a :class:`ServiceData`
flow. See ``docs/service.md``: the epoch contract, faults, deployment and security.
"""

from dataflow.service.client import ServiceData, ServiceError
from dataflow.service.server import DataService

__all__ = ["DataService", "ServiceData", "ServiceError"]
