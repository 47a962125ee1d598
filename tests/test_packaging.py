"""Packaging follows the tree: the C extensions build from their folders, the wheel holds no C
source or header, the sdist holds them, and ``make clean`` removes the built objects."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"src/dataflow/jpeg/_jpegmodule.c", "src/dataflow/jpeg/_jpegresize.c",
           "src/dataflow/jpeg/_jpeg.h", "src/dataflow/wrappers/_stackmodule.c"}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The project's tracked files, copied as a fresh clone would have them."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    dest = tmp_path_factory.mktemp("checkout")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.mark.slow
def test_the_wheel_holds_no_c_source_and_the_sdist_holds_them(checkout, tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(tmp_path)], cwd=checkout,
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)],
                   cwd=checkout, check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.endswith((".c", ".h"))] == []
    built = sorted(n.split(".cpython")[0] for n in names if n.endswith(".so"))
    assert built == ["dataflow/jpeg/_jpeg", "dataflow/wrappers/_stack"]
    assert "dataflow/_legacy.py" in names and "dataflow/py.typed" in names
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        inside = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert inside >= SOURCES


def test_make_clean_removes_the_built_extensions(checkout):
    built = [checkout / "src/dataflow/jpeg/_jpeg.cpython-311-x86_64-linux-gnu.so",
             checkout / "src/dataflow/wrappers/_stack.cpython-311-x86_64-linux-gnu.so"]
    for path in built:
        path.write_bytes(b"")
    subprocess.run(["make", "clean", "VENV=.venv-none", "DEMO_VENV=.venv-demo-none"],
                   cwd=checkout, check=True, capture_output=True)
    assert [p.exists() for p in built] == [False, False]
    assert all((checkout / s).exists() for s in SOURCES)


def _extras() -> dict[str, list[str]]:
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def test_the_install_hints_name_the_packages_of_each_extra():
    """A missing optional package's hint installs the packages themselves (dataflow-reloaded
    is on no package index, so `pip install 'dataflow-reloaded[lmdb]'` would find nothing),
    then names the extra as a clone installs it; the table agrees with pyproject.toml."""
    from dataflow._optional import EXTRA_PACKAGES, EXTRAS, extra_hint, install_hint

    extras = _extras()
    assert {k: list(v) for k, v in EXTRA_PACKAGES.items()} == {
        k: v for k, v in extras.items() if k != "all"}
    assert sorted(extras["all"]) == sorted(
        {p for k, v in extras.items() if k not in ("all", "gcs", "azure") for p in v})
    assert install_hint("lmdb") == (
        "pip install 'lmdb>=1.4' (the extra [lmdb] of dataflow-reloaded; in a clone: "
        "pip install -e '.[lmdb]')")
    assert install_hint("zmq") == "pip install pyzmq"
    assert extra_hint("imgaug", "lmdb") == (
        "pip install 'opencv-python-headless>=4.8' 'simplejpeg>=1.7.6' 'lmdb>=1.4' (the "
        "extras [imgaug,lmdb] of dataflow-reloaded; in a clone: pip install -e "
        "'.[imgaug,lmdb]')")
    for module, (_, how) in EXTRAS.items():
        hint = install_hint(module)
        assert hint.startswith("pip install ") and "dataflow-reloaded[" not in hint, module
        assert how.startswith("pip ") or how in EXTRA_PACKAGES, module


def test_no_install_command_asks_an_index_for_dataflow_reloaded():
    """README, docs and sources give commands that work with the clone or a built wheel."""
    import re

    pattern = re.compile(
        r"pip install (--only-binary \S+ )?['\"]?dataflow(-reloaded)?(?=[\[\s'\";)`]|$)")
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "src" / "dataflow").rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in paths
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line) and "finds" not in line and "would find" not in line]
    assert found == []
