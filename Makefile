# The README's two commands. Both create .venv on first use and reuse it after.
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# The CPU build of torch: on these machines pip takes it from local disk; elsewhere
# `make TORCH_SPEC=torch` lets pip choose.
TORCH_SPEC ?= torch==2.13.0
# pytest's arguments, e.g. ARGS=tests/test_cli.py; ARGS="-n 0" runs the tests in one process.
ARGS ?=
# Debian's Chromium, for the test that opens the Prefect UI's run form (headless).
CHROMIUM := /usr/bin/chromium

.PHONY: pipeline test lint format clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

$(CHROMIUM):
	$$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium'

pipeline: $(STAMP)
	$(VENV)/bin/tucano pipeline $(ARGS)

test: $(STAMP) $(CHROMIUM)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf artifacts .pytest_cache
