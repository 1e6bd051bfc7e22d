# Two entry points (README): `make demo` runs the main job on the embedded default, `make test` runs the tests.
# Both create and use the local virtualenv .venv by themselves.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export LITELLM_LOCAL_MODEL_COST_MAP := True
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export RAY_DEDUP_LOGS := 0

.PHONY: venv demo test test-fast bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/coevolve eval --family iot --split val --n 50 --harness baseline --model synthetic/weak --workers 2
	$(BIN)/coevolve eval --family iot --split val --n 50 --harness baseline --model synthetic/expert --workers 2

test: $(STAMP)
	# Debian's Chromium for the browser family's Playwright backend (idempotent; CI runs as root)
	test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium) || echo "chromium not installed: the Chromium browser tests will be skipped"
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/rollout_overhead.py

clean:
	rm -rf $(VENV) .coevolve .pytest_cache
