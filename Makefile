# Two entry points a fresh machine needs (README): `make campaign` and `make test`.
# Both create .venv from pyproject.toml on first use.
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed-stamp

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

.PHONY: install campaign test lint
install: $(STAMP)

campaign: $(STAMP)
	$(VENV)/bin/harness campaign --scenario all --profile swarm --seeds 1-100 --jobs 2

test: $(STAMP)
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
