"""Optional dependencies: the one import helper, and the table of what installs each.

A missing optional package raises an ``ImportError`` that names what needed it, the package,
and the command that installs it (usually an extra of ``dataflow-reloaded``).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EXTRAS", "import_optional"]

#: importable module -> (its name for people, the extra of dataflow-reloaded that installs it,
#: or the pip command for packages that no extra installs)
EXTRAS: dict[str, tuple[str, str]] = {
    "lmdb": ("lmdb", "lmdb"), "h5py": ("h5py", "hdf5"), "cv2": ("OpenCV", "imgaug"),
    "tensorflow": ("TensorFlow", "tf"), "scipy": ("SciPy", "datasets"), "ray": ("Ray", "ray"),
    "ray.data": ("Ray Data (with pandas and pyarrow)", "ray"),
    "torch": ("PyTorch", "torch"), "jax": ("JAX", "jax"), "zmq": ("pyzmq", "pip install pyzmq"),
    "imgaug": ("the imgaug library", "pip install imgaug"),
    "albumentations": ("albumentations", "pip install albumentations"),
    "simplejpeg": ("simplejpeg", "pip install simplejpeg"),
    "boto3": ("boto3", "s3"), "botocore.config": ("boto3", "s3"),
    "botocore.exceptions": ("boto3", "s3"), "urllib3": ("urllib3", "s3"),
    "fsspec": ("fsspec", "streaming"),
}


def install_hint(module: str) -> str:
    """The command that installs ``module``."""
    _, how = EXTRAS.get(module, (module, f"pip install {module}"))
    return how if how.startswith("pip ") else f"pip install 'dataflow-reloaded[{how}]'"


def import_optional(module: str, what: str) -> Any:
    """``import module``, or an ImportError saying that ``what`` needs it and how to install
    it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        name = EXTRAS.get(module, (module, ""))[0]
        raise ImportError(
            f"{what} needs {name}, which is not installed: {install_hint(module)}"
        ) from e
