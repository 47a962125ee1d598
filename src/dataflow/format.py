"""tensorpack's ``dataflow.format`` path (old imports): the readers of :mod:`dataflow.serialize`
(importing it imports neither lmdb nor h5py)."""
# ruff: noqa: F403, F405
from dataflow.serialize import *

__all__ = ["CaffeLMDB", "HDF5Data", "LMDBData", "LMDBDataDecoder", "LMDBDataPoint", "SVMLightData"]
