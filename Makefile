# carry — common tasks. `make help` lists them.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install run test bench lint fmt check

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "carry needs $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## create .venv and install carry with its dev tools

run: $(STAMP) ## run carry on config/carry.yaml
	$(VENV)/bin/carry run

test: $(STAMP) ## run the test suite (starts a private Redis when none answers)
	$(PY) -m pytest -q

bench: $(STAMP) ## print benchmark ratio tables
	$(PY) bench/engine.py

lint: $(STAMP) ## ruff (lint + format check) and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: $(STAMP) ## apply ruff formatting and fixes
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
