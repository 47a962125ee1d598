"""Optional dependencies: the one import helper, and the table of what installs each.

A missing optional package raises an ``ImportError`` that names what needed it, the package,
and the command that installs it: the packages themselves (``pip install 'lmdb>=1.4'``, which
works wherever dataflow came from: ``dataflow-reloaded`` is on no package index yet, so
``pip install 'dataflow-reloaded[lmdb]'`` finds nothing), and the extra that holds them, as a
clone installs it (``pip install -e '.[lmdb]'``).

OpenCV is imported through :func:`import_cv2` (by the augmentors, the image flows and the JPEG
decoder's fallback), which also makes its thread pool fork-safe. With OpenCV 5, once the parent
has run a parallel operation (its thread pool is up), a forked child that calls
``cv2.setNumThreads`` blocks forever: it waits for pool threads that were not copied by
``fork`` (worker start-up code and PyTorch-style ``worker_init_fn`` do exactly that). So around
every ``fork`` the pool is stopped (``setNumThreads(1)`` in the parent just before), and the
previous thread count is restored right after, in the parent and in the child; the child then
starts a fresh pool of its own when it needs one.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["EXTRAS", "EXTRA_PACKAGES", "NO_C_EXT_ENV", "c_extensions_off", "extra_hint",
           "import_cv2", "import_optional", "install_hint"]

#: set to 1 to run without any of dataflow's own C extensions (the JPEG region decoder and the
#: batch filler) even where they are built: to measure or test what an install without a
#: compiler gets
NO_C_EXT_ENV = "DATAFLOW_NO_C_EXT"


def c_extensions_off() -> bool:
    """Whether :data:`NO_C_EXT_ENV` turns dataflow's C extensions off in this process."""
    return os.environ.get(NO_C_EXT_ENV) == "1"


#: importable module -> (its name for people, the extra of dataflow-reloaded that installs it,
#: or the pip command for packages that no extra installs)
EXTRAS: dict[str, tuple[str, str]] = {
    "lmdb": ("lmdb", "lmdb"), "h5py": ("h5py", "hdf5"), "cv2": ("OpenCV", "imgaug"),
    "tensorflow": ("TensorFlow", "tf"), "scipy": ("SciPy", "datasets"), "ray": ("Ray", "ray"),
    "ray.data": ("Ray Data (with pandas and pyarrow)", "ray"),
    "torch": ("PyTorch", "torch"), "jax": ("JAX", "jax"), "zmq": ("pyzmq", "pip install pyzmq"),
    "imgaug": ("the imgaug library", "pip install imgaug"),
    "albumentations": ("albumentations", "pip install albumentations"),
    "simplejpeg": ("simplejpeg", "imgaug"),
    "boto3": ("boto3", "s3"), "botocore.config": ("boto3", "s3"),
    "botocore.exceptions": ("boto3", "s3"), "urllib3": ("urllib3", "s3"),
    "fsspec": ("fsspec", "streaming"),
    "lz4.block": ("lz4", "lz4"), "zstandard": ("zstandard", "zstd"),
}


#: each extra of dataflow-reloaded -> the packages it installs (pyproject.toml's
#: ``[project.optional-dependencies]``; tests/test_packaging.py checks that they agree)
EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {
    "lmdb": ("lmdb>=1.4",), "hdf5": ("h5py>=3.8",),
    "imgaug": ("opencv-python-headless>=4.8", "simplejpeg>=1.7.6"),
    "tf": ("tensorflow>=2.15",), "datasets": ("scipy>=1.10",), "ray": ("ray[data]>=2.9",),
    "torch": ("torch>=2.1",), "jax": ("jax>=0.4.20",), "streaming": ("fsspec>=2024.1",),
    "s3": ("boto3>=1.34",), "gcs": ("fsspec>=2024.1", "gcsfs>=2024.1"),
    "azure": ("fsspec>=2024.1", "adlfs>=2024.1"), "lz4": ("lz4>=4",),
    "zstd": ("zstandard>=0.22",),
}


def extra_hint(*extras: str) -> str:
    """The command that installs the packages of ``extras`` (works from a clone, a built
    wheel or anywhere else), then the extras as a clone installs them."""
    packages = list(dict.fromkeys(p for e in extras for p in EXTRA_PACKAGES[e]))
    quoted = " ".join(f"'{p}'" for p in packages)
    names = ",".join(extras)
    return (f"pip install {quoted} (the extra{'s' if len(extras) > 1 else ''} [{names}] of "
            f"dataflow-reloaded; in a clone: pip install -e '.[{names}]')")


def install_hint(module: str) -> str:
    """The command that installs ``module``."""
    _, how = EXTRAS.get(module, (module, f"pip install {module}"))
    return how if how.startswith("pip ") else extra_hint(how)


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


_saved_threads: list[int] = []
_fork_hooks_installed = False


def import_cv2(what: str = "dataflow.imgaug") -> Any:
    """``cv2``, with its thread pool stopped around every ``fork``, or an ImportError saying
    that ``what`` needs it and how to install it."""
    global _fork_hooks_installed
    try:
        import cv2
    except ImportError as e:
        raise ImportError(
            f"{what} needs OpenCV (`cv2`), which is not installed; install it with "
            f"{install_hint('cv2')}"
        ) from e
    if not _fork_hooks_installed and hasattr(os, "register_at_fork"):
        _fork_hooks_installed = True
        os.register_at_fork(
            before=lambda: _stop_pool_before_fork(cv2),
            after_in_parent=lambda: _restore_pool_after_fork(cv2),
            after_in_child=lambda: _restore_pool_after_fork(cv2),
        )
    return cv2


def _stop_pool_before_fork(cv2: Any) -> None:
    try:
        n = cv2.getNumThreads()
        if n != 1:
            cv2.setNumThreads(1)
            _saved_threads.append(n)
    except Exception:  # never break a fork
        pass


def _restore_pool_after_fork(cv2: Any) -> None:
    if _saved_threads:
        n = _saved_threads.pop()
        try:
            cv2.setNumThreads(n)
        except Exception:  # never break a fork
            pass
