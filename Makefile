# fairseq-smallvocab: set-up, demo and tests.
#   make demo    set up .venv, then run the demo on data the project generates
#   make test    set up .venv, then run the test suite (every test: what CI runs)
#   make test-fast  the tests that run no subprocess (not marked slow): the inner loop
# Variables: PYTHON (the interpreter that creates .venv), VENV,
#   SYSTEM_SITE_PACKAGES=1 (a new .venv sees the system's packages, e.g. its torch),
#   TORCH_REQUIREMENT (what to install when there is no torch; default torch==2.13.0),
#   PYTEST_ARGS (extra pytest arguments), TEST_WORKERS (pytest-xdist processes; default: one per CPU core).

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.smallvocab-setup
PYTEST_ARGS ?=
TEST_WORKERS ?= auto
SETUP_FLAGS := $(if $(filter 1 yes true,$(SYSTEM_SITE_PACKAGES)),--system-site-packages,)

.PHONY: setup test test-fast demo lint check-python clean-demo

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)' 2>/dev/null || { \
	  echo "error: Python >= 3.8 is required (3.11 recommended); '$(PYTHON)' is" \
	    "$$($(PYTHON) --version 2>&1 || echo 'not runnable'). Run make with PYTHON=/path/to/python3.11." >&2; \
	  exit 1; }

# The stamp makes a second run start within seconds; it is redone when the
# installer or setup.py changes, or when .venv is removed.
$(STAMP): scripts/setup_venv.py setup.py
	@$(MAKE) --no-print-directory check-python
	$(PYTHON) scripts/setup_venv.py --venv $(VENV) $(SETUP_FLAGS)
	@touch $@

setup: $(STAMP)

test: $(STAMP)
	$(VPY) -m pytest tests -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(VPY) -m pytest tests -m "not slow" -n $(TEST_WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	@if [ -x $(VENV)/bin/mypy ]; then $(VENV)/bin/mypy; \
	else echo "make lint: mypy (Python >= 3.10) is not in $(VENV): the type check did not run" >&2; fi

demo: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/demo.sh

clean-demo:
	rm -rf demo
