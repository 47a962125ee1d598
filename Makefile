# Two entry points for a fresh clone; each builds its own virtualenv in .venv.
#   make demo  -- install everything and run the demo pipeline (ends in a TestDataSpeed report)
#   make test  -- install everything (TensorFlow and every extra included) and run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e ".[all]" --group test
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m dataflow demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build src/*.egg-info
