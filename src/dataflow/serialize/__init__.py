"""Serializers (save a DataFlow to a file, load it back) and format readers.

* :class:`LMDBSerializer` / :class:`LMDBData` / :class:`LMDBDataDecoder` / :func:`CaffeLMDB`
  (and :func:`LMDBDataPoint`, tensorpack's older name of ``LMDBSerializer.load``)
* :class:`TFRecordSerializer` / :class:`TFRecordData`
* :class:`NumpySerializer`
* :class:`HDF5Serializer` / :class:`HDF5Data`
* :class:`SVMLightData`
* :func:`dumps` / :func:`loads`: the datapoint codec (pickle protocol 5, or msgpack)

On-disk layouts are tensorpack's, so files are exchangeable in both directions. Saves are
atomic (a temporary file renamed on success, so a failed save leaves an existing file as it
was). As in tensorpack, the NumPy, HDF5 and TFRecord saves replace an existing file
(``overwrite=False`` refuses it) and the LMDB save refuses one (``overwrite=True`` replaces
it). lmdb, h5py and tensorflow are imported only when used.
"""

from dataflow.serialize._atomic import CorruptFileError
from dataflow.serialize.caffe_format import CaffeLMDB
from dataflow.serialize.codec import dumps, loads
from dataflow.serialize.hdf5_format import HDF5Data, HDF5Serializer
from dataflow.serialize.lmdb_data import LMDBData, LMDBDataDecoder
from dataflow.serialize.lmdb_format import LMDBDataPoint, LMDBSerializer
from dataflow.serialize.npz_format import NumpySerializer
from dataflow.serialize.svmlight_format import SVMLightData
from dataflow.serialize.tfrecord_format import TFRecordData, TFRecordSerializer

__all__ = [
    "CaffeLMDB",
    "CorruptFileError",
    "HDF5Data",
    "HDF5Serializer",
    "LMDBData",
    "LMDBDataDecoder",
    "LMDBDataPoint",
    "LMDBSerializer",
    "NumpySerializer",
    "SVMLightData",
    "TFRecordData",
    "TFRecordSerializer",
    "dumps",
    "loads",
]


def __getattr__(name: str):
    if name == "TarShardSerializer":
        # the tar shard writer belongs to the streaming layer, which sits above the file formats
        raise AttributeError(
            "module 'dataflow.serialize' has no attribute 'TarShardSerializer': the WebDataset "
            "tar shard writer is in the streaming layer, above the file formats; use "
            "dataflow.TarShardSerializer or dataflow.streaming.TarShardSerializer.")
    raise AttributeError(f"module 'dataflow.serialize' has no attribute {name!r}")
