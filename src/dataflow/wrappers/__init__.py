"""Wrappers that transform and compose dataflows, the image flows among them."""

from dataflow.wrappers.batch import BatchData, BatchDataByShape
from dataflow.wrappers.cache import CacheData
from dataflow.wrappers.combine import ConcatData, JoinData, RandomChooseData, RandomMixData
from dataflow.wrappers.debug import PrintData, SpeedResult, TestDataSpeed
from dataflow.wrappers.image import (
    AugmentImageComponent,
    AugmentImageComponents,
    AugmentImageCoordinates,
    ImageFromFile,
)
from dataflow.wrappers.map import FilterData, MapData, MapDataComponent, SelectComponent
from dataflow.wrappers.repeat import FixedSizeData, RepeatedData, RepeatedDataPoint
from dataflow.wrappers.shuffle import LocallyShuffleData

__all__ = [
    "AugmentImageComponent", "AugmentImageComponents", "AugmentImageCoordinates", "BatchData",
    "BatchDataByShape", "CacheData", "ConcatData", "FilterData", "FixedSizeData",
    "ImageFromFile", "JoinData", "LocallyShuffleData", "MapData", "MapDataComponent",
    "PrintData", "RandomChooseData", "RandomMixData", "RepeatedData", "RepeatedDataPoint",
    "SelectComponent", "SpeedResult", "TestDataSpeed",
]
