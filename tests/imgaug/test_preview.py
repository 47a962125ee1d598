"""preview(), the augmentor spec parser and the preview CLI."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dataflow import imgaug
from dataflow.imgaug.preview import make_test_image, parse_augmentors, preview_main
from dataflow.rng import set_seed


def test_preview_grid_and_points(tmp_path):
    img = np.zeros((20, 30, 3), np.uint8)
    coords = np.array([[5.5, 5.5]], np.float32)
    path = tmp_path / "p.png"
    grid = imgaug.preview(img, [imgaug.Flip(horiz=True, prob=1.0)], n=3, coords=coords,
                          path=str(path))
    assert grid.shape == (4 + 2 * (20 + 4), 4 + 2 * (30 + 4), 3)
    on_disk = cv2.imread(str(path))[:, :, ::-1]
    np.testing.assert_array_equal(on_disk, grid)
    # the point is drawn on the original at (5, 5) and on each flipped tile at (24, 5)
    assert grid[4 + 5, 4 + 5].any()
    assert grid[4 + 5, 4 + 34 + 24].any() and not grid[4 + 5, 4 + 34 + 5].any()


def test_preview_validates(tmp_path):
    with pytest.raises(ValueError, match="`n` must be >= 1"):
        imgaug.preview(np.zeros((4, 4), np.uint8), [imgaug.Identity()], n=0, path=None)
    with pytest.raises(TypeError, match="float or integer dtype, got complex128"):
        imgaug.preview(np.zeros((4, 4), np.uint8), [imgaug.Identity()],
                       coords=np.zeros((1, 2), np.complex128), path=None)
    grid = imgaug.preview(np.zeros((4, 4), np.float32), imgaug.Identity(), n=1, path=None,
                          include_original=False)
    assert grid.shape == (12, 12, 3)


def test_parse_augmentors():
    augs = parse_augmentors(
        "ResizeShortestEdge(256); RandomCrop((224, 200)); Flip(horiz=True);"
        "RandomApplyAug(Rotation(10, interp=cv2.INTER_NEAREST), 0.5)"
    )
    assert [repr(a) for a in augs] == [
        "imgaug.ResizeShortestEdge(size=256)", "imgaug.RandomCrop(crop_shape=(224, 200))",
        "imgaug.Flip(horiz=True)",
        "imgaug.RandomApplyAug(aug=imgaug.Rotation(max_deg=10, interp=0), prob=0.5)",
    ]
    with pytest.raises(ValueError, match=r"^unknown augmentor 'os\.system'; `python -m "
                                         r"dataflow preview --list` lists them all\.$"):
        parse_augmentors("os.system('true')")
    with pytest.raises(ValueError, match=r"^unknown augmentor 'lambda: os'; "):
        parse_augmentors("(lambda: os)()")
    with pytest.raises(ValueError, match=r"^unknown augmentor 'imgaug\.__class__'; "):
        parse_augmentors("imgaug.__class__(3)")
    with pytest.raises(ValueError, match="holds no augmentor"):
        parse_augmentors(" ; ")
    with pytest.raises(ValueError, match="is not an augmentor"):
        parse_augmentors("Transform()")
    with pytest.raises(ValueError, match="cannot parse augmentor"):
        parse_augmentors("Flip(")


def test_test_image_landmarks():
    img, coords = make_test_image()
    assert img.shape == (240, 320, 3) and img.dtype == np.uint8
    assert coords.shape == (5, 2) and coords.dtype == np.float32


def test_cli_with_generated_image_and_file(tmp_path, capsys):
    out = tmp_path / "grid.png"
    assert preview_main(["-a", "Flip(horiz=True); Brightness(20)", "-n", "3", "-o", str(out),
                         "--seed", "1"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    first = cv2.imread(str(out))
    assert first.shape[0] > 240
    set_seed(None)
    assert preview_main(["-a", "Flip(horiz=True); Brightness(20)", "-n", "3", "-o", str(out),
                         "--seed", "1"]) == 0
    np.testing.assert_array_equal(cv2.imread(str(out)), first)  # seeded: same draws
    src = tmp_path / "in.png"
    cv2.imwrite(str(src), np.zeros((10, 12, 3), np.uint8))
    assert preview_main([str(src), "-a", "CenterCrop(8)", "-n", "2", "-o", str(out),
                         "--coords", "1,2;3.5,4"]) == 0
    assert cv2.imread(str(out)).shape == (4 + 2 * 14, 4 + 2 * 16, 3)


def test_cli_errors(tmp_path, capsys):
    assert preview_main(["-a", "Nope()", "-o", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err == (
        "python -m dataflow preview: error: -a/--augs: unknown augmentor 'Nope'; "
        "`python -m dataflow preview --list` lists them all.\n")
    missing = str(tmp_path / "missing.png")
    assert preview_main([missing, "-o", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err == (
        f"python -m dataflow preview: error: cannot read an image from {missing!r}.\n")
    with pytest.raises(SystemExit):
        preview_main(["--coords", "1,2,3", "-o", str(tmp_path / "x.png")])


def test_unknown_name_suggests_the_closest_augmentors():
    with pytest.raises(ValueError, match=(
            r"^unknown augmentor 'RandomCrp'; did you mean RandomCrop, RandomCutout or "
            r"RandomOrderAug\? `python -m dataflow preview --list` lists them all\.$")):
        parse_augmentors("Flip(horiz=True); RandomCrp(224)")
    with pytest.raises(ValueError, match=(
            r"^unknown augmentor 'Flp'; did you mean Flip\? `python -m dataflow preview "
            r"--list` lists them all\.$")):
        parse_augmentors("RandomApplyAug(Flp(horiz=True), 0.5)")  # nested calls too
    # a known name after a module path the spec does not know: the spellings that work
    with pytest.raises(ValueError, match=(
            r"^unknown augmentor 'df\.imgaug\.Flip'; write Flip, imgaug\.Flip or "
            r"dataflow\.imgaug\.Flip\.$")):
        parse_augmentors("df.imgaug.Flip(horiz=True)")


def test_names_may_be_written_as_in_python_code():
    augs = parse_augmentors(
        "imgaug.Flip(horiz=True); dataflow.imgaug.RandomCrop(8);"
        "imgaug.RandomApplyAug(dataflow.imgaug.Rotation(10, interp=cv2.INTER_NEAREST), 0.5)"
    )
    assert [repr(a) for a in augs] == [
        "imgaug.Flip(horiz=True)", "imgaug.RandomCrop(crop_shape=8)",
        "imgaug.RandomApplyAug(aug=imgaug.Rotation(max_deg=10, interp=0), prob=0.5)",
    ]
    with pytest.raises(ValueError, match=r"^unknown augmentor 'imgaug\.imgaug\.Flip'; write "):
        parse_augmentors("imgaug.imgaug.Flip()")


def test_list_prints_the_augmentor_names(capsys):
    assert preview_main(["--list"]) == 0
    names = capsys.readouterr().out.splitlines()
    assert names == sorted(names)
    assert names[:3] == ["Affine", "Albumentations", "AugmentorList"]
    assert {"Flip", "RandomCrop", "ResizeShortestEdge", "Brightness"} <= set(names)
    # the classes augmentors derive from, and what is not an augmentor, are not offered
    assert not {"ImageAugmentor", "Augmentor", "PhotometricAugmentor", "Transform",
                "ConstantBackgroundFiller"} & set(names)
    assert len(names) == 42
