# The README's two commands. Both create .venv on first use and reuse it after.
# `make docs` builds the documentation site (mkdocs.yml) into site/; `make serve-docs` previews it.
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# The whole environment byte-compiled, for `make install`.
COMPILED := $(VENV)/.compiled
# The docs extra (mkdocs and its theme), installed into the same .venv on top of the rest.
DOCS_STAMP := $(VENV)/.installed-docs
# mkdocs-material and a plugin print a notice about MkDocs 2.0 on every build; it is not a warning
# of this site's.
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
# The CPU build of torch: on these machines pip takes it from local disk; elsewhere
# `make TORCH_SPEC=torch` lets pip choose.
TORCH_SPEC ?= torch==2.13.0
# The extras installed with the project: `dev` here (tests, lint); the images install `gpu`
# (deployments/gpu.Dockerfile) or none (deployments/cpu.Dockerfile).
EXTRAS ?= dev
# pytest's arguments, e.g. ARGS=tests/test_cli.py; ARGS="-n 0" runs the tests in one process.
ARGS ?=
# Debian's Chromium, for the test that opens the Prefect UI's run form (headless).
CHROMIUM := /usr/bin/chromium

.PHONY: install pipeline smoke test docs serve-docs lint format clean

# pip byte-compiles all it installs, on one core (about 50 s of a fresh install here), and a run
# imports a quarter of it. The targets' own commands let Python write the bytecode of what they
# import, once, on first import: an environment that says PYTHONDONTWRITEBYTECODE would have
# every process compile its imports again in memory (about 12 s of CPU for one that trains).
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml deployments/requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet --no-compile -e ".$(if $(EXTRAS),[$(EXTRAS)])"
	touch $(STAMP)

# The environment alone: what a worker machine or an image needs (the other targets do it
# first). Its processes are started by a worker, not by make, so all of it is byte-compiled
# here, on every core. Like pip, compileall leaves a file written for a newer Python as it is
# (torch ships one), so its exit status is not the install's.
install: $(COMPILED)

$(COMPILED): $(STAMP)
	$(PY) -m compileall -qq -j 0 $(VENV)/lib || true
	touch $(COMPILED)

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

$(CHROMIUM):
	$$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium'

pipeline: $(STAMP)
	$(VENV)/bin/tucano pipeline $(ARGS)

# The machinery on the tiny random-weight model, in minutes: every stage runs, nothing is learned.
smoke: $(STAMP)
	$(VENV)/bin/tucano pipeline --recipe configs/cpu_tiny.yaml --artifacts artifacts/smoke $(ARGS)

test: $(STAMP) $(CHROMIUM)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest $(ARGS)

# Strict: a broken link or anchor, or a page missing from the nav, fails the build.
docs: $(DOCS_STAMP)
	$(DOCS_ENV) $(VENV)/bin/mkdocs build --strict

serve-docs: $(DOCS_STAMP)
	$(DOCS_ENV) $(VENV)/bin/mkdocs serve

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf artifacts .pytest_cache site
