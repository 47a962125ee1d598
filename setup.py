"""Builds the optional C extensions ``dataflow.jpeg._jpeg`` (region-of-interest JPEG decoding on
libjpeg-turbo) and ``dataflow.wrappers._stack`` (BatchData's stacking of equal arrays, plain C); everything
else is declared in pyproject.toml.

The extension needs a C compiler and libjpeg-turbo's headers (Debian/Ubuntu:
``apt-get install libjpeg62-turbo-dev`` or ``libjpeg-turbo8-dev``; Fedora:
``libjpeg-turbo-devel``). Where either is missing the build goes on without it and prints why;
``dataflow.jpeg`` then decodes whole images with OpenCV and logs once that the fast path is off.
Without ``dataflow.wrappers._stack`` (no compiler), BatchData stacks with NumPy alone.
``DATAFLOW_REQUIRE_JPEG_EXT=1`` turns a failed build of either into an error (``make test`` and
``make wheel`` set it); ``DATAFLOW_JPEG_PREFIX`` names a libjpeg-turbo installed outside the
compiler's default paths (its include/ and lib/).

Binary wheels (``make wheel``, or cibuildwheel with the matrix in pyproject.toml) carry
libjpeg-turbo inside them, so that ``pip install`` on a machine without a compiler has the fast
path.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

REQUIRE = os.environ.get("DATAFLOW_REQUIRE_JPEG_EXT") == "1"
# where libjpeg-turbo lives when it is not in the compiler's default paths (Homebrew's
# jpeg-turbo on macOS: the release matrix in pyproject.toml sets it)
PREFIX = os.environ.get("DATAFLOW_JPEG_PREFIX")
JPEG_DIRS = ({"include_dirs": [os.path.join(PREFIX, "include")],
              "library_dirs": [os.path.join(PREFIX, "lib")]} if PREFIX else {})


class OptionalBuildExt(build_ext):
    """``build_ext`` that reports a failure to build an extension instead of failing."""

    def run(self) -> None:
        self._failed: set[str] = set()
        try:
            super().run()
        except Exception as e:  # a missing compiler fails here, before any extension
            if not self._failed:
                self._skip(e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # missing jpeglib.h or libjpeg: a compile or link error
            self._failed.add(ext.name)
            self._skip(e, ext.name)

    def copy_extensions_to_source(self) -> None:  # in-place (editable) builds
        self.extensions = [e for e in self.extensions if e.name not in self._failed]
        super().copy_extensions_to_source()

    @staticmethod
    def _skip(e: Exception, name: str = "dataflow.jpeg._jpeg") -> None:
        if REQUIRE:
            raise e
        if name == "dataflow.wrappers._stack":
            print(f"WARNING: dataflow.wrappers._stack was not built ({type(e).__name__}: {e}); "
                  "BatchData stacks with NumPy alone.", file=sys.stderr)
            return
        print(
            "WARNING: dataflow.jpeg._jpeg (the libjpeg-turbo region decoder) was not built "
            f"({type(e).__name__}: {e}); dataflow.jpeg falls back to decoding whole images with "
            "OpenCV. Install a C compiler and libjpeg-turbo's headers (e.g. apt-get install "
            "libjpeg62-turbo-dev) and reinstall to build it.",
            file=sys.stderr,
        )


setup(
    ext_modules=[
        Extension(
            "dataflow.jpeg._jpeg",
            sources=["src/dataflow/jpeg/_jpegmodule.c", "src/dataflow/jpeg/_jpegresize.c"],
            depends=["src/dataflow/jpeg/_jpeg.h"],
            libraries=["jpeg", "m", "pthread"],
            extra_compile_args=["-O3"],
            **JPEG_DIRS,
        ),
        Extension("dataflow.wrappers._stack", sources=["src/dataflow/wrappers/_stackmodule.c"],
                  extra_compile_args=["-O3"]),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
