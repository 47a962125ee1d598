"""Ray back end of the parallel engine (extra ``ray``): the same pipelines on a Ray cluster.

* :class:`RayMapData`: a parallel map whose workers are Ray actors (like
  :class:`~dataflow.parallel.MultiProcessMapDataZMQ`);
* :class:`RayRunner`: independent copies of a flow in Ray actors (like
  :class:`~dataflow.parallel.MultiProcessRunnerZMQ`);
* :func:`to_ray_dataset` / :class:`DataFromRayDataset`: a flow as a streaming
  ``ray.data.Dataset``, and back (:mod:`dataflow.ray.data`).

A multi-node cluster on one machine, for trials and tests:
:class:`dataflow.ray.local_cluster.LoopbackCluster`.

Same ``strict`` / ``ordered`` / error / seed / lifecycle / resume semantics as the local back
ends, plus recovery from lost actors. Ray is imported lazily: this module imports without Ray;
using the classes without it raises an ``ImportError`` naming
``pip install 'ray[data]>=2.9'`` (or the extra ``[ray]``). If Ray is not initialized, the first
flow started runs a local Ray (or connects to ``address=``) and the last one closed shuts it down.
"""

from dataflow.ray.data import DataFromRayDataset, to_ray_dataset
from dataflow.ray.map import RayMapData
from dataflow.ray.runner import RayRunner

__all__ = ["DataFromRayDataset", "RayMapData", "RayRunner", "to_ray_dataset"]
