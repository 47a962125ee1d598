"""The code blocks of README.md and docs/*.md that use Ray, run as written on the package's
local Ray (see ``tests/docs_blocks.py`` for the names they rely on and the substitutions)."""

from __future__ import annotations

import pytest

from tests import docs_blocks

BLOCKS = [b for b in docs_blocks.all_blocks() if docs_blocks.uses_ray(b[2])]

# (the local Ray's processes live until the package's last test: see conftest.py)
pytestmark = [
    pytest.mark.usefixtures("local_ray"), pytest.mark.allow_children,
    # (Ray Data's own use of its deprecated settings, as in test_data.py)
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data"),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return docs_blocks.make_workdir(tmp_path_factory.mktemp("docs"))


def test_the_readme_has_ray_blocks():
    assert [f for f, _, _ in BLOCKS].count("README.md") == 2


@pytest.mark.parametrize(("path", "line", "source"), BLOCKS,
                         ids=[f"{f}:{line}" for f, line, _ in BLOCKS])
def test_ray_code_block_runs(path, line, source, workdir, tmp_path, local_ray):
    (tmp_path / "train.lmdb").symlink_to(workdir / "train.lmdb")
    address = local_ray.get_runtime_context().gcs_address
    ns = docs_blocks.run_block(path, source, tmp_path, values={"RAY_ADDRESS": repr(address)})
    assert ns["ds"] is not None
