"""tensorpack's ``input_source.input_source_base`` module path, for old code that imports
from it; the code lives in :mod:`dataflow.input_source.base`."""

from dataflow.input_source.base import (
    FeedfreeInput,
    InputSource,
    ProxyInputSource,
    build_or_reuse_placeholder,
    remap_input_source,
)

__all__ = ["FeedfreeInput", "InputSource", "ProxyInputSource", "build_or_reuse_placeholder",
           "remap_input_source"]
