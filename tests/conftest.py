"""Shared fixtures: a fixed global seed per test, no process and no temporary file left behind,
and a quiet TensorFlow."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Set before anything imports TensorFlow, here or in a subprocess a test starts (they inherit
# the environment): no C++ start-up logging (oneDNN, CPU features, CUDA probing) at level 3,
# and no oneDNN notice. What TensorFlow still prints while it loads its libraries is silenced by
# tests.helpers.import_tensorflow_quietly.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

# Every temporary file of the session goes into one directory of its own: pytest's tmp_path,
# multiprocessing's pymp-* directories, Ray's session directories (on Linux Ray follows TMPDIR;
# it keeps them after shutdown), TensorFlow's autograph files; in this process (tempfile.tempdir)
# and in subprocesses (TMPDIR). A concurrent session on the same machine has its own. It is
# removed when this process exits: atexit runs the handler registered first last, so this one
# runs after multiprocessing's and TensorFlow's, which remove their own files (their modules are
# imported below this point). _no_stray_temp_files checks it at the end of the session.
_SESSION_PID = os.getpid()
_SESSION_PREFIX = "dataflow-tests-"


def remove_dead_sessions(base: str) -> list[str]:
    """Remove the temporary directories in ``base`` of test sessions whose process is gone (a
    session killed by SIGTERM or SIGKILL runs no atexit handler); the names removed."""
    removed = []
    for name in sorted(os.listdir(base)):
        pid = name[len(_SESSION_PREFIX):].split("-", 1)[0]
        if not (name.startswith(_SESSION_PREFIX) and pid.isdigit()):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            removed.append(name)
        except OSError:  # alive, another user's
            pass
    return removed


remove_dead_sessions(tempfile.gettempdir())
SESSION_TMP = tempfile.mkdtemp(prefix=f"{_SESSION_PREFIX}{_SESSION_PID}-")
os.environ["TMPDIR"] = SESSION_TMP
tempfile.tempdir = SESSION_TMP


def _remove_session_tmp() -> None:
    if os.getpid() == _SESSION_PID:  # not in a forked child that exits through atexit
        shutil.rmtree(SESSION_TMP, ignore_errors=True)


atexit.register(_remove_session_tmp)

import multiprocessing.process  # noqa: E402  (after the handler above, see there)
import sys  # noqa: E402
import time  # noqa: E402

import psutil  # noqa: E402
import pytest  # noqa: E402

import dataflow.rng  # noqa: E402

# What may remain in the session's temporary directory at its end: files that this process
# still owns and removes at exit, and caches that outlive a run by design.
_OWNED_PREFIXES = (
    "pytest-of-",  # pytest's tmp_path directories
    "__autograph_generated_file",  # TensorFlow removes them at exit
    "torchinductor_",  # PyTorch's compile cache
    "torch-shm-dir-",  # PyTorch's shared-memory manager removes them when it exits, after us
    "ray",  # Ray's session logs, kept after ray.shutdown()
)


def stray_temp_files() -> list[str]:
    """Entries of the session's temporary directory that nothing will remove: those left by a
    child process or a test (this process's own multiprocessing directory is removed at exit)."""
    own = multiprocessing.process.current_process()._config.get("tempdir")
    return sorted(
        name for name in os.listdir(SESSION_TMP)
        if not name.startswith(_OWNED_PREFIXES)
        and os.path.join(SESSION_TMP, name) != own
    )


@pytest.fixture(scope="session", autouse=True)
def _no_stray_temp_files():
    """Fail the session if it left files in the temporary directory (e.g. the pymp-* directory
    of a worker process that was killed before it could remove it)."""
    yield
    stray = stray_temp_files()
    if stray:
        pytest.fail(
            f"the test session left these entries in its temporary directory "
            f"{SESSION_TMP}: {stray}; find the test that creates them (they are removed at "
            "exit anyway)."
        )


@pytest.fixture(autouse=True)
def _global_seed():
    """Every test starts from the same global seed state and leaves none behind."""
    dataflow.rng.set_seed(None)
    dataflow.rng.set_worker_info(None)
    yield
    dataflow.rng.set_seed(None)
    dataflow.rng.set_worker_info(None)


def _living_children() -> list[psutil.Process]:
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(autouse=True)
def _no_child_process_left(request):
    """Fail a test that leaves a child process running (after a short grace period)."""
    yield
    if request.node.get_closest_marker("allow_children"):
        return
    deadline = time.monotonic() + 5.0
    children = _living_children()
    while children and time.monotonic() < deadline:
        time.sleep(0.05)
        children = _living_children()
    if children:
        desc = [f"{c.pid}: {' '.join(c.cmdline())[:120]}" for c in children]
        for c in children:
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass
        pytest.fail(f"test left {len(children)} child process(es) running: {desc}")


# ---- the order: tests that load a framework into this process run last ----------------------
# TensorFlow, PyTorch, JAX and Ray make this process large (over 1 GB): once one is loaded,
# every worker process a later test forks starts ~3x slower (the parent's page tables are
# copied), and most tests fork workers. So the tests that load one (those under FRAMEWORK_DIRS,
# which are marked ``loads_frameworks`` here, and the others marked so) run after all the
# others, in their own order. ``make test`` runs them in a second pytest process (collecting the
# modules of FRAMEWORK_DIRS imports the frameworks). A test that is not marked and loads one
# fails, naming the marker.
FRAMEWORKS = ("tensorflow", "torch", "jax", "ray")
FRAMEWORK_DIRS = ("bridges", "input_source", "ray", "ray_cluster")
_TESTS = os.path.dirname(os.path.abspath(__file__))


def _loads_frameworks(item: pytest.Item) -> bool:
    return item.get_closest_marker("loads_frameworks") is not None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.relpath(str(item.path), _TESTS).split(os.sep)[0] in FRAMEWORK_DIRS:
            item.add_marker(pytest.mark.loads_frameworks)
    items.sort(key=_loads_frameworks)  # (stable: each part keeps its order)


@pytest.fixture(autouse=True)
def _frameworks_load_last(request):
    if _loads_frameworks(request.node):
        yield
        return
    before = {m for m in FRAMEWORKS if m in sys.modules}
    yield
    loaded = [m for m in FRAMEWORKS if m in sys.modules and m not in before]
    if loaded:
        pytest.fail(f"this test loaded {loaded} into the test process: mark it "
                    "@pytest.mark.loads_frameworks, so that it runs after the tests that fork "
                    "workers (a process holding a framework forks them ~3x slower)")
