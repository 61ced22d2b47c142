# carry — common tasks. `make help` lists them.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
CHROMIUM := /usr/bin/chromium

.PHONY: help install run test bench lint fmt demo reliability browser

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

browser: ## install Debian's chromium for the dashboard's browser tests (needs root + apt)
	@if [ ! -x $(CHROMIUM) ]; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    echo "installing chromium (Debian package) for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing and cannot be installed here: browser tests will be skipped"; fi; \
	fi

test: $(STAMP) browser ## run the test suite (each test session starts its own redis-server)
	@command -v redis-server >/dev/null || redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 || \
	  { echo "tests need redis-server (apt-get install redis-server) or a Redis on 127.0.0.1:6379"; exit 1; }
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP) ## print benchmark ratio tables (engine on both layouts; webhook intake)
	$(PY) bench/engine.py --layout nested
	$(PY) bench/engine.py --layout flat
	$(PY) bench/webhook.py

demo: $(STAMP) ## the whole loop offline: GitHub emulator, upstream PR, carry, runners; dashboard on :8000
	$(PY) -m bot.demo

reliability: $(STAMP) ## fault and load scenarios; prints what was lost, duplicated, recovered
	$(PY) bench/reliability.py

lint: $(STAMP) ## ruff (lint + format check) and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: $(STAMP) ## apply ruff formatting and fixes
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
