"""External wrappers: without the libraries, construction names the missing one."""

from __future__ import annotations

import importlib.util

import pytest

from dataflow import imgaug


@pytest.mark.skipif(importlib.util.find_spec("albumentations") is not None,
                    reason="albumentations is installed")
def test_albumentations_missing_names_the_library():
    with pytest.raises(ImportError, match="pip install albumentations"):
        imgaug.Albumentations(object())


@pytest.mark.skipif(importlib.util.find_spec("imgaug") is not None, reason="imgaug is installed")
def test_imgaug_missing_names_the_library():
    with pytest.raises(ImportError, match="pip install imgaug"):
        imgaug.IAAugmentor(object())
