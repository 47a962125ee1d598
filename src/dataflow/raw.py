"""tensorpack's ``dataflow.raw`` module path, for old code that imports from it
(``from tensorpack.dataflow.raw import DataFromList``); the sources live in
:mod:`dataflow.sources`."""

from dataflow.sources import (
    DataFromGenerator,
    DataFromIterable,
    DataFromList,
    DataFromQueue,
    FakeData,
)

__all__ = ["DataFromGenerator", "DataFromIterable", "DataFromList", "DataFromQueue", "FakeData"]
