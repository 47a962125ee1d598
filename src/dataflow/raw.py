"""tensorpack's ``dataflow.raw`` path (old imports): the sources of :mod:`dataflow.sources`."""
# ruff: noqa: F403, F405
from dataflow.sources import *

__all__ = ["DataFromGenerator", "DataFromIterable", "DataFromList", "DataFromQueue", "FakeData"]
