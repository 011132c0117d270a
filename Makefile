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

.PHONY: install campaign test lint mutation mutation-sample
install: $(STAMP)

campaign: $(STAMP)
	$(VENV)/bin/harness campaign --scenario all --profile swarm --seeds 1-200 --jobs 2

# -n 2: two pytest-xdist workers, one per core of the 2-core CI machine (about
# 30 min serial under load, 6-10 min split); each test still gets its own database.
test: $(STAMP)
	$(VENV)/bin/pytest -q -n 2

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Mutation testing of runtime/ core, killed by focused simulator campaigns
# (README "Mutation testing"): long, never part of `make test`.
mutation: $(STAMP)
	$(VENV)/bin/python -m harness.mutation

# The CI step: a deterministic, seeded sample of mutants; fails below the
# kill-rate threshold of ci/mutation.toml.
mutation-sample: $(STAMP)
	$(VENV)/bin/python -m harness.mutation --sample
