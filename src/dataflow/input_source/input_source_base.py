"""tensorpack's ``input_source.input_source_base`` path (old imports); the code is in
:mod:`dataflow.input_source.base`."""
# ruff: noqa: F403, F405
from dataflow.input_source.base import *

__all__ = ["FeedfreeInput", "InputSource", "ProxyInputSource", "build_or_reuse_placeholder",
           "remap_input_source"]
