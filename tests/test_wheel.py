"""The binary wheel that ``make wheel`` builds: installed into a fresh virtualenv on a PATH
without any C compiler, the JPEG fast path is on, and its extension runs on the libjpeg-turbo
that the wheel carries (dataflow_reloaded.libs/), not on the system's.

Runs where ``DATAFLOW_WHEEL`` names the wheel or the folder holding it (``.ci/run`` sets it to
dist/ after ``make wheel``); skipped otherwise, since building one takes a compiler, the
registry and a minute. The virtualenv is made without pip and without network: the wheel is
installed with ``--no-deps --no-index`` by the running interpreter's pip, and its dependencies
(NumPy, OpenCV, ...) are read from the running interpreter's site-packages through a path
entry, which adds the folder but none of the ``.pth`` hooks in it (so an editable install of
``src/`` there stays out).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

WHEEL_ENV = "DATAFLOW_WHEEL"

PROBE = r"""
import importlib.util, json, shutil
import numpy as np
import cv2
import dataflow
from dataflow import jpeg, imgaug

img = (np.arange(60 * 80 * 3) % 251).astype(np.uint8).reshape(60, 80, 3)
data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
full = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
augs = imgaug.AugmentorList([imgaug.CenterCrop(40), imgaug.Resize(24),
                             imgaug.Flip(horiz=True, prob=1.0)])
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libjpeg" in line})
print(json.dumps({
    "status": jpeg.fast_path_status(),
    "dataflow": dataflow.__file__,
    "extension": jpeg._jpeg.__file__,
    "stack": importlib.util.find_spec("dataflow.wrappers._stack") is not None,
    "libjpeg_mapped": maps,
    "cc": [shutil.which(c) for c in ("cc", "gcc", "clang")],
    "decode_equal": bool(np.array_equal(jpeg.decode_jpeg(data, backend="turbo"), full)),
    "fused_equal": bool(np.array_equal(augs.augment_jpeg(data, backend="turbo"),
                                       augs.augment(full))),
}))
"""


def _wheel() -> Path:
    where = os.environ.get(WHEEL_ENV)
    if not where:
        pytest.skip(f"{WHEEL_ENV} is not set (make wheel, then {WHEEL_ENV}=dist)")
    path = Path(where)
    if path.is_dir():
        found = sorted(path.glob("dataflow_reloaded-*-manylinux*.whl"))
        assert len(found) == 1, f"expected one repaired wheel in {path}, found {found}"
        path = found[0]
    return path.resolve()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    wheel = _wheel()
    root = tmp_path_factory.mktemp("wheelvenv")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False, symlinks=True)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--disable-pip-version-check", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "_deps_from_the_test_interpreter.pth").write_text(
        "".join(f"{d}\n" for d in sorted(deps)))
    # no compiler on PATH: only the venv's own bin (python) and the folders of ldd
    env = {"PATH": f"{env_dir / 'bin'}", "HOME": str(root), "LANG": "C.UTF-8"}
    probe = subprocess.run([str(python), "-c", PROBE], cwd=root, env=env, check=True,
                           capture_output=True, text=True, timeout=300)
    out = json.loads(probe.stdout.strip().splitlines()[-1])
    out["site"] = purelib
    ldd = subprocess.run(["ldd", out["extension"]], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    out["ldd_libjpeg"] = [os.path.realpath(line.split("=>")[1].split("(")[0].strip())
                          for line in ldd.stdout.splitlines() if "libjpeg" in line]
    return out


def test_the_installed_wheel_has_the_fast_path_without_a_compiler(installed):
    assert installed["cc"] == [None, None, None]
    assert installed["status"] is None
    site = installed["site"]
    assert installed["dataflow"] == f"{site}/dataflow/__init__.py"  # not src/
    assert installed["extension"].startswith(f"{site}/dataflow/jpeg/_jpeg.")
    assert installed["stack"] is True
    assert installed["decode_equal"] is True
    assert installed["fused_equal"] is True


def test_the_extension_runs_on_the_libjpeg_inside_the_wheel(installed):
    libs = f"{installed['site']}/dataflow_reloaded.libs/"
    (mapped,) = installed["libjpeg_mapped"]  # one libjpeg in the process, the wheel's
    assert mapped.startswith(libs) and Path(mapped).name.startswith("libjpeg-")
    (linked,) = installed["ldd_libjpeg"]
    assert linked == mapped
