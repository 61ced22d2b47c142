# carry — common tasks. `make help` lists them.
#   PORT=N        dashboard port of `make run` (default 8000) and `make demo` (default: 8000,
#                 or a free port when 8000 is taken)
#   REDIS_URL=URL the Redis of `make run` (default: one answering on 127.0.0.1:6379, else a
#                 private redis-server; it says which) and of `make demo` (default: its own)
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := requirements.lock
PORT   ?= 8000

.DEFAULT_GOAL := help
CHROMIUM := /usr/bin/chromium

.PHONY: help install lock run test bench lint fmt demo reliability browser

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
	@echo "  variables: PORT=N (run, demo), REDIS_URL=URL (run, demo)"

$(STAMP): pyproject.toml $(LOCK)
	@command -v $(PYTHON) >/dev/null || { echo "carry needs $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c $(LOCK) --upgrade pip
	$(PY) -m pip install --quiet -c $(LOCK) -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## create .venv and install carry with its dev tools, at the versions in requirements.lock

lock: ## regenerate requirements.lock: the newest versions pyproject.toml allows, in a fresh venv
	@command -v $(PYTHON) >/dev/null || { echo "carry needs $(PYTHON) on PATH"; exit 1; }
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  $(PYTHON) -m venv "$$tmp/venv" && \
	  "$$tmp/venv/bin/pip" install --quiet --upgrade pip && \
	  "$$tmp/venv/bin/pip" install --quiet -e '.[dev]' && \
	  { sed -n '/^#/p' $(LOCK); "$$tmp/venv/bin/pip" freeze --all --exclude-editable | grep -v '^setuptools=='; } > "$$tmp/lock" && \
	  mv "$$tmp/lock" $(LOCK) && echo "requirements.lock regenerated: run make test, then commit it"

run: $(STAMP) ## run carry on config/carry.yaml (honours PORT and REDIS_URL; says which Redis it uses)
	$(VENV)/bin/carry run --port $(PORT)

browser: ## chromium for the dashboard's browser tests: installed as root or in CI, else skipped
	@if [ ! -x $(CHROMIUM) ]; then \
	  if ! command -v apt-get >/dev/null; then \
	    echo "make: $(CHROMIUM) is missing and there is no apt-get here: the browser tests will be skipped"; \
	  elif [ "$$(id -u)" = 0 ]; then \
	    echo "make: installing the Debian package chromium (apt-get install chromium, as root) for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif [ -n "$$CI" ] && sudo -n true 2>/dev/null; then \
	    echo "make: installing the Debian package chromium (sudo apt-get install chromium, CI) for the browser tests"; \
	    sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "make: $(CHROMIUM) is missing: the browser tests will be skipped (sudo make browser installs Debian's chromium)"; \
	  fi; \
	fi

test: $(STAMP) ## lint, then the test suite (each test session starts its own redis-server)
	$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory browser
	@command -v redis-server >/dev/null || redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 || \
	  { echo "tests need redis-server (apt-get install redis-server) or a Redis on 127.0.0.1:6379"; exit 1; }
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP) ## print benchmark ratio tables (engine on both layouts; webhook intake)
	$(PY) bench/engine.py --layout nested
	$(PY) bench/engine.py --layout flat
	$(PY) bench/webhook.py

# PORT and REDIS_URL reach the demo through the environment: it reads them itself, and treats
# a PORT it was given as a must (no fallback to a free port).
demo: $(STAMP) ## the whole loop offline: GitHub emulator, upstream PR, carry, runners; its own Redis
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
