"""Writers of tiny dataset files in the real formats, for the dataset tests."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np


def write_idx_gz(path: Path, array: np.ndarray, magic: int | None = None) -> None:
    """A gzip IDX file of uint8 data: magic 2051 for (n, rows, cols), 2049 for (n,)."""
    array = np.asarray(array, dtype=np.uint8)
    if magic is None:
        magic = 2051 if array.ndim == 3 else 2049
    header = struct.pack(f">{1 + array.ndim}I", magic, *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


def py2_pickle(obj) -> bytes:
    """A protocol-2 pickle that names numpy's globals as Python 2 / NumPy 1 did."""
    data = pickle.dumps(obj, protocol=2)
    return data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def cifar_rows(images_rgb: np.ndarray) -> np.ndarray:
    """(n, 32, 32, 3) RGB images -> the CIFAR (n, 3072) rows: R plane, G plane, B plane."""
    return np.ascontiguousarray(images_rgb.transpose(0, 3, 1, 2)).reshape(len(images_rgb), -1)


def write_cifar_batch(path: Path, images_rgb: np.ndarray, labels, label_key: bytes) -> None:
    obj = {
        b"batch_label": b"tiny batch",
        b"data": cifar_rows(images_rgb),
        label_key: [int(x) for x in labels],
        b"filenames": [f"img_{i}.png".encode() for i in range(len(labels))],
    }
    if label_key == b"fine_labels":
        obj[b"coarse_labels"] = [int(x) // 5 for x in labels]
    Path(path).write_bytes(py2_pickle(obj))


def make_tar_gz(archive: Path, root: Path, member: str) -> None:
    """``root/member`` (a folder) packed as ``member/...`` into ``archive``."""
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root / member, arcname=member)


def write_png_as(path: Path, image_bgr: np.ndarray) -> None:
    """PNG bytes under any name (OpenCV decodes by content): exact pixel values after reading."""
    import cv2

    ok, buf = cv2.imencode(".png", image_bgr)
    assert ok
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Path(path).write_bytes(buf.tobytes())


def write_jpeg(path: Path, image_bgr: np.ndarray) -> None:
    import cv2

    os.makedirs(os.path.dirname(path), exist_ok=True)
    assert cv2.imwrite(str(path), image_bgr)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def blob_proto_bytes(chw: np.ndarray, legacy: bool = True) -> bytes:
    """A Caffe BlobProto of a (c, h, w) float array with packed ``data`` and either the legacy
    num/channels/height/width fields or a ``shape``, serialized with the protobuf library."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="tiny_caffe.proto", package="tinycaffe")
    fdp.syntax = "proto2"
    shape = fdp.message_type.add(name="BlobShape")
    shape.field.add(name="dim", number=1, type=3, label=3).options.packed = True
    blob = fdp.message_type.add(name="BlobProto")
    blob.field.add(name="shape", number=7, type=11, label=1, type_name=".tinycaffe.BlobShape")
    blob.field.add(name="data", number=5, type=2, label=3).options.packed = True
    blob.field.add(name="diff", number=6, type=2, label=3).options.packed = True
    for name, number in (("num", 1), ("channels", 2), ("height", 3), ("width", 4)):
        blob.field.add(name=name, number=number, type=5, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("tinycaffe.BlobProto"))
    c, h, w = chw.shape
    msg = cls(num=1, channels=c, height=h, width=w) if legacy else cls()
    if not legacy:
        msg.shape.dim.extend([1, c, h, w])
    msg.data.extend(chw.astype(np.float32).ravel().tolist())
    return msg.SerializeToString()


def savemat(path: Path, variables: dict) -> None:
    import scipy.io

    os.makedirs(os.path.dirname(path), exist_ok=True)
    scipy.io.savemat(path, variables)


def bsds_ground_truth(boundaries: list[np.ndarray]) -> np.ndarray:
    """The ``groundTruth`` cell array (1, k) of structs with Segmentation and Boundaries."""
    cell = np.empty((1, len(boundaries)), dtype=object)
    for i, b in enumerate(boundaries):
        cell[0, i] = {"Segmentation": np.ones(b.shape, np.uint16), "Boundaries": b}
    return cell


def bytes_io_tar(entries: dict[str, bytes]) -> bytes:
    """A .tar.gz holding ``entries`` (name -> content), names used verbatim."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, content in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()
