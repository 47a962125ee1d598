"""tensorpack's ``dataflow.format`` module path, for old code that imports from it
(``from tensorpack.dataflow.format import LMDBData``); the readers live in
:mod:`dataflow.serialize`. Importing this module does not import lmdb or h5py."""

from dataflow.serialize import (
    CaffeLMDB,
    HDF5Data,
    LMDBData,
    LMDBDataDecoder,
    LMDBDataPoint,
    SVMLightData,
)

__all__ = ["CaffeLMDB", "HDF5Data", "LMDBData", "LMDBDataDecoder", "LMDBDataPoint",
           "SVMLightData"]
