"""Image augmentation: augmentors sample, transforms apply.

``aug.get_transform(img)`` draws every random parameter and returns a deterministic
:class:`Transform` with ``apply_image``, ``apply_coords`` (float ``Nx2`` of ``(x, y)``),
``apply_boxes`` and ``apply_mask``; apply one transform to an image and its keypoints to keep
them consistent. The names and constructor signatures are tensorpack's
(``tensorpack.dataflow.imgaug``). Needs OpenCV: ``pip install 'opencv-python-headless>=4.8'``
(or the extra ``[imgaug]``).

Differences from tensorpack, on purpose:

* nothing writes into its input: not the transforms (tensorpack's coordinate transforms and
  ``SaltPepperNoise``/``RandomCutout`` worked in place), not the kernels; crops return views;
* uint8 results are rounded, not truncated, before saturation (``ToUint8`` truncates like
  tensorpack unless ``round=True``);
* random streams are derived from :mod:`dataflow.rng` (seed, augmentor ordinal, worker id),
  never from time, pid or ``id()``; see :mod:`dataflow.imgaug.base`;
* affine warps map coordinates in the same continuous frame as flips and resizes (tensorpack
  was off by up to a pixel or more); paste augmentors support coordinates;
* random offsets include the last position (``RandomCropRandomShape``), ``RandomPaste`` works
  without ``reset_state()`` and with a background of the image's size, ``JpegNoise`` keeps gray
  images gray, ``MinMaxNormalize`` maps a flat image to ``min``, ``Gamma`` keeps float
  precision, and bad images, coordinates and sizes raise errors that say what to change.
"""

from dataflow.imgaug._cv2 import cv2 as _cv2  # noqa: F401  (fails early, naming the extra)
from dataflow.imgaug.base import Augmentor, AugmentorList, ImageAugmentor, PhotometricAugmentor
from dataflow.imgaug.boxes import BoxFormat
from dataflow.imgaug.convert import ColorSpace, Grayscale, ToFloat32, ToUint8
from dataflow.imgaug.crop import (
    CenterCrop,
    GoogleNetRandomCropAndResize,
    RandomCrop,
    RandomCropRandomShape,
    RandomCutout,
)
from dataflow.imgaug.external import Albumentations, IAAugmentor
from dataflow.imgaug.geometry import Affine, Rotation, RotationAndCropValid, Shift
from dataflow.imgaug.imgproc import (
    Brightness,
    BrightnessScale,
    Clip,
    Contrast,
    Gamma,
    GaussianBlur,
    Hue,
    Lighting,
    MeanVarianceNormalize,
    MinMaxNormalize,
    Saturation,
)
from dataflow.imgaug.meta import Identity, MapImage, RandomApplyAug, RandomChooseAug, RandomOrderAug
from dataflow.imgaug.misc import Flip, RandomResize, Resize, ResizeShortestEdge, Transpose
from dataflow.imgaug.noise import GaussianNoise, JpegNoise, SaltPepperNoise
from dataflow.imgaug.paste import (
    BackgroundFiller,
    CenterPaste,
    ConstantBackgroundFiller,
    RandomPaste,
)
from dataflow.imgaug.preview import preview
from dataflow.imgaug.transform import (
    CropTransform,
    CutoutTransform,
    FlipTransform,
    NoOpTransform,
    PasteTransform,
    PhotometricTransform,
    ResizeTransform,
    Transform,
    TransformFactory,
    TransformList,
    TransposeTransform,
    WarpAffineTransform,
)
from dataflow.imgaug.viz import dump_dataflow_images, stack_patches

__all__ = [
    "Affine",
    "Albumentations",
    "Augmentor",
    "AugmentorList",
    "BackgroundFiller",
    "BoxFormat",
    "Brightness",
    "BrightnessScale",
    "CenterCrop",
    "CenterPaste",
    "Clip",
    "ColorSpace",
    "ConstantBackgroundFiller",
    "Contrast",
    "CropTransform",
    "CutoutTransform",
    "Flip",
    "FlipTransform",
    "Gamma",
    "GaussianBlur",
    "GaussianNoise",
    "GoogleNetRandomCropAndResize",
    "Grayscale",
    "Hue",
    "IAAugmentor",
    "Identity",
    "ImageAugmentor",
    "JpegNoise",
    "Lighting",
    "MapImage",
    "MeanVarianceNormalize",
    "MinMaxNormalize",
    "NoOpTransform",
    "PasteTransform",
    "PhotometricAugmentor",
    "PhotometricTransform",
    "RandomApplyAug",
    "RandomChooseAug",
    "RandomCrop",
    "RandomCropRandomShape",
    "RandomCutout",
    "RandomOrderAug",
    "RandomPaste",
    "RandomResize",
    "Resize",
    "ResizeShortestEdge",
    "ResizeTransform",
    "Rotation",
    "RotationAndCropValid",
    "SaltPepperNoise",
    "Saturation",
    "Shift",
    "ToFloat32",
    "ToUint8",
    "Transform",
    "TransformFactory",
    "TransformList",
    "Transpose",
    "TransposeTransform",
    "WarpAffineTransform",
    "dump_dataflow_images",
    "preview",
    "stack_patches",
]
