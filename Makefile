# Two entry points for a fresh clone, each with its own virtualenv (so either runs first):
#   make demo  -- a light install in .venv-demo (the core + the lmdb and imgaug extras; no
#                 TensorFlow, PyTorch, Ray or JAX) and the demo pipeline: a TestDataSpeed report
#                 and a per-stage profile
#   make test  -- everything in .venv (every extra, TensorFlow included, and the test group),
#                 then ruff and the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_VENV ?= .venv-demo
DEMO_PY := $(DEMO_VENV)/bin/python
DEMO_STAMP := $(DEMO_VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e ".[all]" --group test
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_PY) -m pip install --quiet --disable-pip-version-check -e ".[lmdb,imgaug]"
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_PY) -m dataflow demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) $(DEMO_VENV) build src/*.egg-info
