"""Bad input to the `coevolve` command line, tried as a hostile new user would (issue 24.7).

A table of bad invocations of every command and subcommand `coevolve --help` lists (`CASES`). Each case
runs in a fresh temporary directory (its working directory too), with a small pre-made store where it
needs one (a finished eval run for `stop`, a coevolve run that already has a stop request, a store whose
database is garbage, ...) and the input files it names (binary, empty, huge, deeply nested, ...), under
a timeout. A case is clean when:

- the exit status is 2;
- stderr's last non-empty line starts with `error:`, exactly one stderr line does, and neither stream
  holds a `Traceback` (nor a usage box);
- nothing was written: every file and folder of the case's directory (the store, the input files, the
  working directory) is byte-identical afterwards — no store.db or objects/ where there was no store;
- it ended within the case's bound: 10 s on a quiet machine, where `coevolve --help` takes 1.5 s; on a
  loaded one the bound stretches by the factor `--help` is slower (`bound_scale`, measured at the start
  and again beside a case that went over; `--absolute` keeps 10 s);
- the error line says what the case expects (`expect`, where the table gives one).

Prints one line per case (ok/FAIL, wall and the process's own CPU seconds, the error line), then `N clean
of M` with the median and slowest case, wall and CPU, against `coevolve --help` measured in the same run
(the start-up every case pays); `--json` prints one JSON object instead. tests/test_bad_inputs.py imports
this table and runs the cases in-process; this script runs each as its own `coevolve` process, as a user
would.

    .venv/bin/python bench/bad_inputs.py [--jobs 2] [--only '^eval-|stop'] [--absolute] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import re
import signal
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BOUND_S = 10.0  # every bad input is refused within this, before any work
EXPERIMENT = REPO / "deploy" / "experiments" / "synthetic.yaml"
SERVE_TINY = REPO / "deploy" / "serve" / "cpu-tiny.yaml"


@dataclass(frozen=True)
class Case:
    """One bad invocation. `argv` may name `{store}` (the case's store path), `{run}` (the run the
    `setup` made), `{tmp}` (the case's folder), `{exp}`/`{serve}` (the shipped experiment and serve
    configs) and `{<input>}` for any input file of `INPUTS` (made in the case's folder when named)."""

    name: str
    argv: tuple[str, ...]
    setup: str = "absent"  # a key of SETUPS: what the case's store is before the command
    expect: str = ""  # a substring of the error line
    env: tuple[tuple[str, str], ...] = ()  # extra environment (`{tmp}` is expanded)
    bound_s: float = BOUND_S
    probe: bool = False  # connects to an address (seconds, not milliseconds): the fast test skips it


def _alias_bomb(levels: int = 9, width: int = 10) -> str:
    """A flow sequence of nested YAML aliases: a few hundred characters that expand to width**levels values."""
    items = [f"&l0 [{', '.join(['x'] * width)}]"]
    items += [f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def C(name: str, *argv: str, **kw: Any) -> Case:
    return Case(name, tuple(argv), **kw)


UNREACHABLE = "cannot reach Ray at"
S = ("--store", "{store}")

CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------------------------------ eval
    C("eval-n-abc", "eval", "--n", "abc", *S, expect="Invalid value for '--n'"),
    C("eval-n-zero", "eval", "--n", "0", *S, expect="--n must be positive"),
    C("eval-n-negative", "eval", "--n", "-5", *S, expect="--n must be positive"),
    C("eval-n-over-split", "eval", "--n", "51", *S, expect="n must be in 1..50"),
    C("eval-n-huge", "eval", "--n", "99999999999999999999999999", *S, expect="n must be in 1..50"),
    C("eval-n-1e400", "eval", "--n", "1e400", *S, expect="Invalid value for '--n'"),
    C("eval-family-unknown", "eval", "--family", "nope", *S, expect="unknown task family"),
    C("eval-family-empty", "eval", "--family", "", *S, expect="unknown task family"),
    C("eval-split-unknown", "eval", "--split", "holdout", *S, expect="unknown split"),
    C("eval-model-unknown-synthetic", "eval", "--model", "synthetic/genius", *S, expect="unknown synthetic model"),
    C("eval-model-no-provider", "eval", "--model", "weak", *S, expect="provider/model"),
    C("eval-model-unknown-provider", "eval", "--model", "nosuchprovider/x", *S, expect="unknown model provider"),
    C("eval-model-empty", "eval", "--model", "", *S, expect="names no model"),
    C("eval-model-commas", "eval", "--model", ",,", *S, expect="names no model"),
    C("eval-model-unknown-adapter", "eval", "--model", "synthetic/weak@nosuch", *S),
    C("eval-model-adapter-path", "eval", "--model", "synthetic/weak@../../x", *S, expect="adapter id '../../x' must be"),
    C("eval-harness-no-store", "eval", "--harness", "deadbeef00", *S, expect="does not exist yet"),
    C("eval-harness-unknown", "eval", "--harness", "deadbeef00", *S, setup="store", expect="unknown harness"),
    C("eval-repeats-zero", "eval", "--repeats", "0", *S, expect="--repeats must be positive"),
    C("eval-repeats-huge", "eval", "--repeats", "99999999999999999999", *S),
    C("eval-workers-zero", "eval", "--workers", "0", *S, expect="--workers must be positive"),
    C("eval-workers-huge", "eval", "--workers", "100000", *S, expect="--workers 100000 asks for"),
    C("eval-seed-huge", "eval", "--seed", "-99999999999999999999999", *S, expect="--seed must be an integer"),
    C("eval-seed-abc", "eval", "--seed", "abc", *S, expect="Invalid value for '--seed'"),
    C("eval-seed-past-64-bits", "eval", "--seed", "9223372036854775807", "--repeats", "2", *S, expect="--seed"),
    C("eval-params-not-int", "eval", "--params", "size=abc", *S, expect="not an integer"),
    C("eval-params-unknown", "eval", "--params", "nosuch=1", *S, expect="has no parameter"),
    C("eval-params-out-of-range", "eval", "--params", "size=99", *S, expect="out of range"),
    C("eval-params-no-key", "eval", "--params", "=1", *S, expect="is not key=value"),
    C("eval-params-twice", "eval", "--params", "size=1,size=2", *S, expect="twice"),
    C("eval-address-unreachable", "eval", "--address", "127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    C("eval-address-ray-client-unreachable", "eval", "--address", "ray://127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    C("eval-address-not-host-port", "eval", "--address", "nohost:port", *S, expect="is not HOST:PORT"),
    C("eval-address-no-token", "eval", "--address", "127.0.0.1:1", *S, expect="needs the cluster's token",
      env=(("RAY_AUTH_TOKEN_PATH", "{tmp}/no-token"),)),
    C("eval-store-is-a-file", "eval", "--harness", "abcdef123", *S, setup="file"),
    C("eval-store-garbage-db", "eval", "--harness", "abcdef123", *S, setup="garbage_db"),
    C("eval-store-dev-null", "eval", "--harness", "abcdef123", "--store", "/dev/null", expect="not a directory"),
    C("eval-store-unwritable", "eval", "--n", "1", *S, setup="unwritable"),
    C("eval-unknown-option", "eval", "--nosuch", "1", *S, expect="No such option"),
    C("eval-extra-argument", "eval", "extra", *S, expect="unexpected extra argument"),
    # ---------------------------------------------------------------------------------- evolve
    C("evolve-resume-empty", "evolve", "--resume", "", *S, expect="--resume needs a run id"),
    C("evolve-resume-no-store", "evolve", "--resume", "evolve-x", *S, expect="does not exist"),
    C("evolve-resume-unknown", "evolve", "--resume", "evolve-x", *S, setup="store", expect="evolve-x"),
    C("evolve-resume-an-eval-run", "evolve", "--resume", "{run}", *S, setup="eval_done", expect="not an evolve run"),
    C("evolve-resume-a-done-coevolve-run", "evolve", "--resume", "{run}", *S, setup="coevolve_done", expect="not an evolve run"),
    C("evolve-family-unknown", "evolve", "--family", "nope", *S, expect="unknown task family"),
    C("evolve-val-n-zero", "evolve", "--val-n", "0", *S, expect="--val-n must be in"),
    C("evolve-val-n-over", "evolve", "--val-n", "51", *S, expect="--val-n must be in"),
    C("evolve-budget-rollouts-zero", "evolve", "--budget-rollouts", "0", *S, expect="must be positive"),
    C("evolve-budget-rollouts-1e26", "evolve", "--budget-rollouts", "100000000000000000000000000", *S,
      expect="--budget-rollouts must be at most"),
    C("evolve-budget-iterations-huge", "evolve", "--budget-iterations", "99999999999999999999", *S,
      expect="--budget-iterations must be at most"),
    C("evolve-budget-tokens-huge", "evolve", "--budget-tokens", "99999999999999999999999999", *S,
      expect="--budget-tokens must be at most"),
    C("evolve-budget-usd-inf", "evolve", "--budget-usd", "inf", *S, expect="finite"),
    C("evolve-budget-usd-nan", "evolve", "--budget-usd", "nan", *S, expect="finite"),
    C("evolve-budget-seconds-1e400", "evolve", "--budget-seconds", "1e400", *S, expect="finite"),
    C("evolve-budget-seconds-negative", "evolve", "--budget-seconds", "-1", *S, expect="positive"),
    C("evolve-candidates-zero", "evolve", "--candidates", "0", *S),
    C("evolve-candidates-huge", "evolve", "--candidates", "1000000000", *S, expect="--candidates must be at most"),
    C("evolve-train-batch-zero", "evolve", "--train-batch", "0", *S),
    C("evolve-rule-unknown", "evolve", "--rule", "nosuch", *S),
    C("evolve-alpha-over-one", "evolve", "--alpha", "2", *S),
    C("evolve-alpha-nan", "evolve", "--alpha", "nan", *S),
    C("evolve-plateau-zero", "evolve", "--plateau", "0", *S),
    C("evolve-plateau-huge", "evolve", "--plateau", "99999999999999999999", *S, expect="--plateau must be at most"),
    C("evolve-val-seeds-zero", "evolve", "--val-seeds", "0", *S, expect="--val-seeds"),
    C("evolve-model-unknown", "evolve", "--model", "synthetic/genius", *S, expect="unknown synthetic model"),
    C("evolve-proposer-unknown-provider", "evolve", "--proposer", "nosuch/x", *S, expect="unknown model provider"),
    C("evolve-workers-zero", "evolve", "--workers", "0", *S, expect="must be positive"),
    C("evolve-seed-huge", "evolve", "--seed", "99999999999999999999999", *S, expect="--seed must be an integer"),
    C("evolve-address-unreachable", "evolve", "--address", "127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    C("evolve-store-garbage-db", "evolve", *S, setup="garbage_db"),
    # -------------------------------------------------------------------------------- transfer
    C("transfer-family-unknown", "transfer", "--family", "nope", *S, expect="unknown task family"),
    C("transfer-n-zero", "transfer", "--n", "0", *S),
    C("transfer-split-unknown", "transfer", "--split", "nope", *S, expect="unknown split"),
    C("transfer-no-store", "transfer", *S, expect="no harness store at"),
    C("transfer-harness-unknown", "transfer", "--harness", "deadbeef00", *S, setup="store", expect="unknown harness"),
    C("transfer-model-unknown", "transfer", "--models", "synthetic/genius", *S, setup="store"),
    C("transfer-models-empty", "transfer", "--models", ",", *S, setup="store"),
    C("transfer-workers-zero", "transfer", "--workers", "0", *S, expect="--workers must be positive"),
    C("transfer-address-unreachable", "transfer", "--address", "127.0.0.1:1", *S, setup="store", expect=UNREACHABLE, probe=True),
    # --------------------------------------------------------------------------------- harness
    C("harness-list-no-store", "harness", "list", *S, expect="no harness store at"),
    C("harness-list-store-is-a-file", "harness", "list", *S, setup="file"),
    C("harness-show-no-store", "harness", "show", "abc", *S),
    C("harness-show-unknown", "harness", "show", "deadbeef00", *S, setup="store", expect="unknown harness"),
    C("harness-show-empty-ref", "harness", "show", "", *S, setup="store"),
    C("harness-diff-unknown", "harness", "diff", "deadbeef00", "iot:baseline", *S, setup="store", expect="unknown harness"),
    C("harness-diff-missing-argument", "harness", "diff", "abc", *S, expect="Missing argument"),
    C("harness-lineage-unknown", "harness", "lineage", "deadbeef00", *S, setup="store", expect="unknown harness"),
    C("harness-apply-missing-file", "harness", "apply", "iot:baseline", "{tmp}/nosuch.json", *S, expect="cannot read"),
    C("harness-apply-empty-file", "harness", "apply", "iot:baseline", "{empty}", *S, expect="not a JSON edit"),
    C("harness-apply-binary-file", "harness", "apply", "iot:baseline", "{binary}", *S, expect="not a JSON edit"),
    C("harness-apply-huge-file", "harness", "apply", "iot:baseline", "{huge}", *S),
    C("harness-apply-a-folder", "harness", "apply", "iot:baseline", "{tmp}", *S, expect="not a regular file"),
    C("harness-apply-a-fifo", "harness", "apply", "iot:baseline", "{fifo}", *S, expect="not a regular file"),
    C("harness-apply-dev-zero", "harness", "apply", "iot:baseline", "/dev/zero", *S, expect="not a regular file"),
    C("harness-apply-nested", "harness", "apply", "iot:baseline", "{nested_json}", *S, expect="nested too deeply"),
    C("harness-apply-not-an-object", "harness", "apply", "iot:baseline", "{json_list}", *S),
    C("harness-apply-token-budget-1e400", "harness", "apply", "iot:baseline", "{edit_1e400}", *S,
      expect="field 'token_budget' must be an integer"),
    C("harness-apply-nan", "harness", "apply", "iot:baseline", "{edit_nan}", *S),
    C("harness-apply-million-ops", "harness", "apply", "iot:baseline", "{edit_million_ops}", *S, expect="bytes, over the"),
    C("harness-apply-100k-ops", "harness", "apply", "iot:baseline", "{edit_100k_ops}", *S, expect="over the 64 limit"),
    C("harness-apply-huge-section", "harness", "apply", "iot:baseline", "{edit_huge_section}", *S),
    C("harness-apply-unknown-op", "harness", "apply", "iot:baseline", "{edit_unknown_op}", *S, expect="op 0"),
    C("harness-apply-unknown-family", "harness", "apply", "nosuch:baseline", "{edit_ok}", *S, expect="unknown task family"),
    C("harness-apply-unknown-base", "harness", "apply", "deadbeef00", "{edit_ok}", *S, setup="store", expect="unknown harness"),
    C("harness-apply-store-is-a-file", "harness", "apply", "iot:baseline", "{edit_ok}", *S, setup="file"),
    C("harness-apply-store-unwritable", "harness", "apply", "iot:baseline", "{edit_ok}", *S, setup="unwritable"),
    # ----------------------------------------------------------------------------------- tasks
    C("tasks-show-unknown-family", "tasks", "show", "nope", "3", expect="unknown task family"),
    C("tasks-show-index-out-of-range", "tasks", "show", "iot", "999"),
    C("tasks-show-bad-split", "tasks", "show", "iot", "iot/nosuch/3"),
    C("tasks-show-not-an-index", "tasks", "show", "iot", "abc"),
    C("tasks-show-other-family", "tasks", "show", "iot", "payroll/val/1"),
    C("tasks-list-extra-argument", "tasks", "list", "extra", expect="unexpected extra argument"),
    # ------------------------------------------------------------------------------------- run
    C("run-seed-option", "run", "--seed", "3", *S, expect="seed is a profile field"),
    C("run-profile-unknown", "run", "nosuch", *S, expect="no profile 'nosuch'"),
    C("run-override-no-key", "run", "local", "=x", *S, expect="override '=x' is not key=value"),
    C("run-cycles-1e26", "run", "local", "budget.cycles=99999999999999999999999999", *S, expect="budget.cycles"),
    C("run-cycles-float", "run", "local", "budget.cycles=1e26", *S, expect="budget.cycles"),
    C("run-usd-1e400", "run", "local", "budget.usd=1e400", *S, expect="budget.usd"),
    C("run-usd-nan", "run", "local", "budget.usd=.nan", *S, expect="budget.usd"),
    C("run-num-cpus-inf", "run", "local", "weak.num_cpus=.inf", *S, expect="weak.num_cpus"),
    C("run-resources-ray-cpu", "run", "local", "weak.resources={{CPU: 2}}", *S, expect="one of Ray's own"),
    C("run-cpu-no-server", "run", "cpu", *S, expect="needs a vLLM server"),
    C("run-evolve-budget-below-one-guard-decision", "run", "local", "evolve.rollouts=20", *S, expect="too small for one release-guard decision"),
    C("evolve-budget-below-one-guard-decision", "evolve", "--budget-rollouts", "10", *S, expect="too small for one guard decision"),
    C("evolve-val-n-whole-split", "evolve", "--val-n", "50", *S, expect="leaves no instance of the val split"),
    C("run-iterations-huge", "run", "evolve.iterations=10000", *S, expect="evolve.iterations"),
    C("run-params-date", "run", "local", "params.x=2024-01-01", *S, expect="params.x: Input should be a valid integer"),
    C("run-resume-empty", "run", "--resume", "", *S, expect="--resume needs a run id"),
    C("run-resume-no-store", "run", "--resume", "coevolve-x", *S, expect="does not exist"),
    C("run-resume-unknown", "run", "--resume", "coevolve-x", *S, setup="store", expect="coevolve-x"),
    C("run-resume-an-eval-run", "run", "--resume", "{run}", *S, setup="eval_done", expect="not a coevolve run"),
    C("run-resume-a-done-run", "run", "--resume", "{run}", *S, setup="coevolve_done", expect="is done"),
    C("run-resume-with-a-profile", "run", "local", "--resume", "{run}", *S, setup="coevolve_failed",
      expect="--resume continues a run with its own profile"),
    C("run-address-unreachable", "run", "local", "address=127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    C("run-address-ray-client-unreachable", "run", "local", "address=ray://127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    C("run-families-bad-yaml", "run", "local", "families=[iot", *S, expect="not valid YAML"),
    C("run-families-unknown", "run", "local", "families=[nosuch]", *S, expect="unknown families"),
    C("run-families-empty", "run", "local", "families=[]", *S, expect="unknown families"),
    C("run-unknown-key", "run", "local", "nosuch_key=1", *S, expect="nosuch_key"),
    C("run-unknown-nested-key", "run", "local", "weak.nosuch=1", *S, expect="weak.nosuch"),
    C("run-override-through-a-value", "run", "local", "seed.x=1", *S, expect="seed is not a mapping"),
    C("run-role-not-a-mapping", "run", "local", "weak=3", *S, expect="weak"),
    C("run-weak-model-unknown", "run", "local", "weak.model=synthetic/genius", *S, expect="unknown synthetic model"),
    C("run-proposer-unknown-provider", "run", "local", "proposer=nosuch/x", *S, expect="unknown model provider"),
    C("run-weak-model-adapter-path", "run", "local", "weak.model=vllm/m@../../x", *S, expect="adapter id '../../x' must be"),
    C("run-seed-negative", "run", "local", "seed=-1", *S, expect="seed"),
    C("run-alpha-over-one", "run", "local", "alpha=2", *S, expect="alpha"),
    C("run-profile-missing-file", "run", "{tmp}/nosuch.yaml", *S, expect="no profile"),
    C("run-profile-binary", "run", "{binary_yaml}", *S, expect="cannot read profile"),
    C("run-profile-a-list", "run", "{yaml_list}", *S, expect="must be a YAML mapping"),
    C("run-profile-unknown-key", "run", "{yaml_unknown_key}", *S, expect="nosuch"),
    C("run-profile-nested", "run", "{yaml_nested}", *S),
    C("run-profile-fifo", "run", "{fifo}", *S, expect="not a regular file"),
    C("run-profile-dev-zero", "run", "/dev/zero", *S, expect="not a regular file"),
    C("run-profile-a-folder", "run", "{non_empty_dir}", *S, expect="not a regular file"),
    C("run-profile-huge", "run", "{yaml_huge}", *S, expect="over the 1,048,576 it may be"),
    C("run-profile-alias-bomb", "run", "{yaml_alias_bomb}", *S, expect="aliases"),
    C("run-profile-duplicate-key", "run", "{yaml_duplicate_key}", *S, expect="duplicate key 'seed'"),
    C("run-train-rank-999", "run", "local", "train.config.rank=999", *S, expect="train.config: rank"),
    C("run-train-lr-1e30", "run", "local", "train.config.lr=1e30", *S, expect="train.config: lr"),
    C("run-train-epochs-1e9", "run", "local", "train.config.epochs=1000000000", *S, expect="epochs must be at most"),
    C("run-train-unknown-key", "run", "local", "train.config.nosuch=1", *S, expect="train.config: nosuch: no such field"),
    C("run-override-alias-bomb", "run", "local", f"params.x={_alias_bomb()}", *S, expect="not valid YAML"),
    C("run-store-is-a-file", "run", "local", *S, setup="file"),
    C("run-store-garbage-db", "run", "local", *S, setup="garbage_db"),
    C("run-store-unwritable", "run", "local", *S, setup="unwritable"),
    # ------------------------------------------------------------------- status, stop, monitor
    C("stop-a-finished-eval-run", "stop", "{run}", *S, setup="eval_done", expect="has no safe point"),
    C("stop-a-done-run", "stop", "{run}", *S, setup="coevolve_done", expect="has already ended (done)"),
    C("stop-a-failed-run", "stop", "{run}", *S, setup="coevolve_failed", expect="has already ended (failed)"),
    C("stop-twice", "stop", "{run}", *S, setup="coevolve_stopping", expect="a stop was already requested"),
    C("stop-unknown-run", "stop", "coevolve-x", *S, setup="store", expect="coevolve-x"),
    C("stop-no-store", "stop", "coevolve-x", *S, expect="no harness store at"),
    C("stop-missing-argument", "stop", *S, expect="Missing argument"),
    C("stop-address", "stop", "{run}", "--address", "127.0.0.1:1", *S, setup="coevolve_stopping", expect="No such option: --address"),
    C("status-no-store", "status", *S, expect="no harness store at"),
    C("status-no-run", "status", *S, setup="store", expect="no coevolve run"),
    C("status-unknown-run", "status", "coevolve-x", *S, setup="store", expect="coevolve-x"),
    C("status-address-unreachable", "status", "{run}", "--address", "127.0.0.1:1", *S, setup="coevolve_done",
      expect=UNREACHABLE, probe=True),
    C("monitor-ray-client-unreachable", "monitor", "--once", "--address", "ray://127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    C("monitor-unreachable", "monitor", "--once", "--address", "127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    C("monitor-no-head", "monitor", "--once", *S, expect="no local Ray head"),
    C("monitor-interval-abc", "monitor", "--interval", "abc", *S, expect="Invalid value for '--interval'"),
    # ------------------------------------------------------------------------------ runs, store
    C("runs-show-unknown", "runs", "show", "coevolve-x", *S, setup="store", expect="coevolve-x"),
    C("runs-show-no-store", "runs", "show", "coevolve-x", *S, expect="no harness store at"),
    C("runs-list-store-is-a-file", "runs", "list", *S, setup="file"),
    C("runs-list-garbage-db", "runs", "list", *S, setup="garbage_db"),
    C("store-check-no-store", "store", "check", *S, expect="no harness store at"),
    C("store-check-repair-no-store", "store", "check", "--repair", *S, expect="no harness store at"),
    C("store-check-store-is-a-file", "store", "check", *S, setup="file"),
    C("store-check-garbage-db", "store", "check", *S, setup="garbage_db"),
    # ------------------------------------------------------------------------------------ data
    C("data-build-arm-unknown", "data", "build", "--arm", "nosuch", *S, expect="nosuch"),
    C("data-build-rows-zero", "data", "build", "--rows", "0", *S, expect="rows"),
    C("data-build-rows-huge", "data", "build", "--rows", "99999999999999999999", *S, expect="rows"),
    C("data-build-k-zero", "data", "build", "--k", "0", *S, expect="k"),
    C("data-build-samples-zero", "data", "build", "--samples", "0", *S, expect="samples"),
    C("data-build-family-unknown", "data", "build", "--family", "nope", *S, expect="unknown task family"),
    C("data-build-expert-unknown", "data", "build", "--expert", "synthetic/genius", *S, expect="unknown synthetic model"),
    C("data-build-judge-unknown-provider", "data", "build", "--judge", "nosuch/x", *S, expect="unknown model provider"),
    C("data-build-resume-blank", "data", "build", "--resume", " ", *S, expect="--resume needs a run id"),
    C("data-build-resume-no-store", "data", "build", "--resume", "data-x", *S, expect="does not exist"),
    C("data-build-resume-an-eval-run", "data", "build", "--resume", "{run}", *S, setup="eval_done", expect="not a data build"),
    C("data-build-address-unreachable", "data", "build", "--address", "127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    C("data-build-in-flight-zero", "data", "build", "--in-flight", "0", *S, expect="--in-flight must be positive"),
    C("data-build-harness-unknown", "data", "build", "--harness", "deadbeef00", *S, setup="store", expect="unknown harness"),
    C("data-build-workers-zero", "data", "build", "--workers", "0", *S, expect="--workers"),
    C("data-show-no-store", "data", "show", "ds-x", *S),
    C("data-show-unknown", "data", "show", "ds-x", *S, setup="store", expect="ds-x"),
    C("data-list-store-is-a-file", "data", "list", *S, setup="file", expect="not a directory"),
    # ----------------------------------------------------------------------------------- adapt
    C("adapt-backend-unknown", "adapt", "--backend", "nosuch", *S, expect="unknown --backend 'nosuch'"),
    C("adapt-lr-abc", "adapt", "lr=abc", *S, expect="train config: lr"),
    C("adapt-lr-nan", "adapt", "lr=.nan", *S, expect="train config: lr"),
    C("adapt-override-no-key", "adapt", "=x", *S, expect="override '=x' is not key=value"),
    C("adapt-unknown-train-field", "adapt", "no_such_field=1", *S, expect="train config: no_such_field"),
    C("adapt-epochs-huge", "adapt", "epochs=99999999999999999999", *S, expect="epochs must be at most"),
    C("adapt-lr-1e30", "adapt", "lr=1e30", *S, expect="train config: lr"),
    C("adapt-seed-in-train-config-huge", "adapt", "seed=99999999999999999999", *S, expect="seed"),
    C("adapt-peft-without-base", "adapt", "--backend", "peft", *S, expect="--backend peft needs --base"),
    C("adapt-repeats-zero", "adapt", "--repeats", "0", *S, expect="--repeats must be positive"),
    C("adapt-test-n-over", "adapt", "--test-n", "51", *S, expect="n must be in 1..50"),
    C("adapt-test-n-zero", "adapt", "--test-n", "0", *S),
    C("adapt-resume-empty", "adapt", "--resume", "", *S, expect="--resume needs a run id"),
    C("adapt-resume-unknown", "adapt", "--resume", "data-x", *S, setup="store", expect="data-x"),
    C("adapt-in-flight-zero", "adapt", "--in-flight", "0", *S, expect="--in-flight must be positive"),
    C("adapt-rows-negative", "adapt", "--rows", "-1", *S, expect="rows"),
    C("adapt-address-unreachable", "adapt", "--address", "127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    # ----------------------------------------------------------------------------------- judge
    C("judge-accuracy-model-not-synthetic", "judge", "accuracy", "--model", "vllm/x", *S, expect="synthetic models only"),
    C("judge-accuracy-family-unknown", "judge", "accuracy", "--family", "nope", *S, expect="nope"),
    C("judge-accuracy-n-zero", "judge", "accuracy", "--n", "0", *S),
    C("judge-accuracy-split-unknown", "judge", "accuracy", "--split", "nope", *S, expect="unknown split"),
    C("judge-accuracy-judge-unknown", "judge", "accuracy", "--judge", "nosuch/x", *S, expect="nosuch"),
    C("judge-accuracy-judge-unknown-synthetic", "judge", "accuracy", "--judge", "synthetic/genius", *S, expect="genius"),
    C("judge-accuracy-repeats-zero", "judge", "accuracy", "--repeats", "0", *S, expect="--repeats"),
    C("judge-accuracy-repeats-huge", "judge", "accuracy", "--repeats", "99999999999", *S, expect="--repeats"),
    C("judge-accuracy-workers-zero", "judge", "accuracy", "--workers", "0", *S, expect="--workers"),
    C("judge-accuracy-seed-huge", "judge", "accuracy", "--seed", "99999999999999999999999", *S, expect="--seed"),
    C("judge-accuracy-address-unreachable", "judge", "accuracy", "--address", "127.0.0.1:1", *S, expect=UNREACHABLE, probe=True),
    # ------------------------------------------------------------------------------ experiment
    C("experiment-no-config", "experiment", "paper", *S, expect="--config FILE"),
    C("experiment-config-missing", "experiment", "paper", "--config", "{tmp}/nosuch.yaml", *S),
    C("experiment-config-binary", "experiment", "paper", "--config", "{binary_yaml}", *S),
    C("experiment-config-dev-zero", "experiment", "paper", "--config", "/dev/zero", *S, expect="not a regular file"),
    C("experiment-config-huge", "experiment", "paper", "--config", "{yaml_huge}", *S, expect="over the"),
    C("experiment-config-alias-bomb", "experiment", "paper", "--config", "{yaml_alias_bomb}", *S, expect="aliases"),
    C("experiment-config-duplicate-key", "experiment", "paper", "--config", "{yaml_duplicate_key}", *S, expect="duplicate key"),
    C("experiment-train-rank-999", "experiment", "paper", "--config", "{exp}", "train.config.rank=999", *S,
      expect="train.config: rank"),
    C("experiment-config-a-list", "experiment", "paper", "--config", "{yaml_list}", *S),
    C("experiment-repeats-huge", "experiment", "paper", "--config", "{exp}", "repeats=99999999999", *S, expect="repeats"),
    C("experiment-override-bad-key", "experiment", "paper", "--config", "{exp}", "a..b=1", *S, expect="not key=value"),
    C("experiment-families-bad-yaml", "experiment", "paper", "--config", "{exp}", "families=[iot", *S, expect="not valid YAML"),
    C("experiment-unknown-key", "experiment", "paper", "--config", "{exp}", "nosuch=1", *S, expect="nosuch"),
    C("experiment-resume-empty", "experiment", "paper", "--resume", "", *S, expect="--resume needs a run id"),
    C("experiment-resume-no-store", "experiment", "paper", "--resume", "experiment-x", *S, expect="does not exist"),
    C("experiment-resume-unknown", "experiment", "paper", "--resume", "experiment-x", *S, setup="store", expect="experiment-x"),
    C("experiment-resume-a-coevolve-run", "experiment", "paper", "--resume", "{run}", *S, setup="coevolve_failed",
      expect="not an experiment"),
    C("experiment-address-unreachable", "experiment", "paper", "--config", "{exp}", "--address", "127.0.0.1:1", *S,
      expect=UNREACHABLE, probe=True),
    # ---------------------------------------------------------------------------------- report
    C("report-no-store", "report", "experiment-x", *S),
    C("report-unknown-run", "report", "experiment-x", *S, setup="store", expect="experiment-x"),
    C("report-an-eval-run", "report", "{run}", *S, setup="eval_done"),
    # ----------------------------------------------------------------------------------- serve
    C("serve-no-config", "serve", *S, expect="serve needs --config"),
    C("serve-config-missing", "serve", "--config", "{tmp}/nosuch.yaml", *S),
    C("serve-config-binary", "serve", "--config", "{binary_yaml}", *S),
    C("serve-config-fifo", "serve", "--config", "{fifo}", *S, expect="not a regular file"),
    C("serve-config-huge", "serve", "--config", "{yaml_huge}", *S, expect="over the"),
    C("serve-override-bad", "serve", "--config", "{serve}", "-s", "port=abc", "--check", *S, expect="port"),
    C("serve-override-no-key", "serve", "--config", "{serve}", "-s", "=x", "--check", *S),
    C("serve-detach-without-address", "serve", "--config", "{serve}", "--detach", *S, expect="--detach needs --address"),
    C("serve-stop-no-server", "serve", "stop", *S, expect="no server to stop"),
    C("serve-status-unknown-option", "serve", "status", "--nosuch", *S, expect="No such option"),
    # ----------------------------------------------------------------------------------- train
    C("train-missing-options", "train", *S, expect="Missing option"),
    C("train-rows-missing-file", "train", "--rows", "{tmp}/nosuch.jsonl", "--base", "weak", "--out", "a1", "--backend", "synthetic", *S),
    C("train-rows-binary", "train", "--rows", "{binary}", "--base", "weak", "--out", "a1", "--backend", "synthetic", *S),
    C("train-rows-dev-zero", "train", "--rows", "/dev/zero", "--base", "weak", "--out", "a1", "--backend", "synthetic", *S,
      expect="not a regular file"),
    C("train-rows-fifo", "train", "--rows", "{fifo}", "--base", "weak", "--out", "a1", "--backend", "synthetic", *S,
      expect="not a regular file"),
    C("train-config-fifo", "train", "--rows", "{empty}", "--base", "weak", "--out", "a1", "--backend", "synthetic",
      "--config", "{fifo}", *S, expect="not a regular file"),
    C("train-rows-empty", "train", "--rows", "{empty}", "--base", "weak", "--out", "a1", "--backend", "synthetic", *S),
    C("train-backend-unknown", "train", "--rows", "{empty}", "--base", "weak", "--out", "a1", "--backend", "nosuch", *S,
      expect="unknown backend"),
    C("train-lr-abc", "train", "--rows", "{empty}", "--base", "weak", "--out", "a1", "--backend", "synthetic", "lr=abc", *S,
      expect="lr"),
    C("train-config-alias-bomb", "train", "--rows", "{empty}", "--base", "weak", "--out", "a1", "--backend", "synthetic",
      "--config", "{yaml_alias_bomb}", *S, expect="aliases"),
    C("train-epochs-huge", "train", "--rows", "{empty}", "--base", "weak", "--out", "a1", "--backend", "synthetic",
      "epochs=99999999999999999999", *S, expect="epochs must be at most"),
    C("train-seed-huge", "train", "--rows", "{empty}", "--base", "weak", "--out", "a1", "--backend", "synthetic",
      "--seed", "99999999999999999999999", *S, expect="--seed"),
    C("train-config-binary", "train", "--rows", "{empty}", "--base", "weak", "--out", "a1", "--backend", "synthetic",
      "--config", "{binary_yaml}", *S, expect="train config"),
    # ---------------------------------------------------------------------------------- models
    C("models-make-tiny-non-empty", "models", "make-tiny", "{non_empty_dir}", expect="exists and is not empty"),
    C("models-import-smollm2-non-empty", "models", "import-smollm2", "{non_empty_dir}", expect="exists and is not empty"),
    C("models-register-not-an-adapter", "models", "register", "{non_empty_dir}", "--id", "a1", "--base", "x", *S,
      expect="not a peft adapter folder"),
    C("models-register-bad-id", "models", "register", "{adapter_dir}", "--id", "../escape", "--base", "x", *S),
    C("models-register-a-symlink-inside", "models", "register", "{adapter_with_link}", "--id", "a1", "--base", "x", *S,
      expect="is a symbolic link"),
    C("models-register-a-fifo-inside", "models", "register", "{adapter_with_fifo}", "--id", "a1", "--base", "x", *S,
      expect="is not a regular file"),
    C("models-register-missing-id", "models", "register", "{adapter_dir}", "--base", "x", *S, expect="Missing option"),
    C("models-list-store-is-a-file", "models", "list", *S, setup="file"),
    C("models-list-no-store", "models", "list", *S, expect="no harness store at"),
    # ------------------------------------------------------------------------------ top level
    C("unknown-command", "nosuch", expect="No such command"),
    C("unknown-subcommand", "harness", "nosuch", expect="No such command"),
)


@functools.cache
def _click_app() -> Any:
    import typer

    from coevolve.cli.app import app

    return typer.main.get_command(app)


def command_path(argv: tuple[str, ...] | list[str]) -> str:
    """The command an argv runs, as `coevolve --help` names it (`harness apply`, `serve stop`, `eval`);
    an unknown command is its first word."""
    cmd: Any = _click_app()
    words: list[str] = []
    for a in argv:
        if a not in getattr(cmd, "commands", {}):  # a group has commands (typer may vendor its own click)
            break
        cmd = cmd.commands[a]
        words.append(a)
    return " ".join(words) or (argv[0] if argv else "")


def all_commands() -> list[str]:
    """Every command and subcommand of `coevolve` (groups that run on their own, like `serve`, too)."""
    out: list[str] = []

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            if path and cmd.invoke_without_command:
                out.append(" ".join(path))
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            out.append(" ".join(path))

    walk(_click_app(), [])
    return sorted(out)


# ------------------------------------------------------------------------------ case folders
def _big_json_ops(n: int) -> str:
    return '{"ops": [' + ",".join(['{"op": "set_max_turns", "max_turns": 30}'] * n) + "]}"


INPUTS: dict[str, Callable[[], bytes]] = {
    "empty": lambda: b"",
    "binary": lambda: bytes(range(256)) * 64,
    "huge": lambda: b"[" + b"1," * (16 * 2**20) + b"1]",  # 32 MiB of JSON that is not an edit
    "nested_json": lambda: b"[" * 100_000,
    "json_list": lambda: b"[1, 2, 3]",
    "edit_ok": lambda: b'{"rationale": "r", "ops": [{"op": "set_max_turns", "max_turns": 12}]}',
    "edit_1e400": lambda: b'{"ops": [{"op": "set_context_policy", "strategy": "keep-all", "token_budget": 1e400}]}',
    "edit_nan": lambda: b'{"ops": [{"op": "set_max_turns", "max_turns": NaN}]}',
    "edit_million_ops": lambda: _big_json_ops(10**6).encode(),  # 42 MB
    "edit_100k_ops": lambda: _big_json_ops(10**5).encode(),  # 4.2 MB
    "edit_huge_section": lambda: json.dumps({"ops": [{"op": "add_section", "name": "x", "text": "y" * 2_000_000}]}).encode(),
    "edit_unknown_op": lambda: b'{"ops": [{"op": "nosuch"}]}',
    "binary_yaml": lambda: b"\xff\xfe\x00" + bytes(range(256)) * 16,
    "yaml_list": lambda: b"- a\n- b\n",
    "yaml_unknown_key": lambda: b"nosuch: 1\n",
    "yaml_nested": lambda: b"[" * 100_000,
    "yaml_alias_bomb": lambda: f"params:\n  x: {_alias_bomb()}\n".encode(),
    "yaml_duplicate_key": lambda: b"seed: 1\nfamilies: [iot]\nseed: 2\n",
    "yaml_huge": lambda: b"families: [" + b"iot, " * (4 * 2**20) + b"iot]\n",  # 20 MiB
}
FOLDERS = ("non_empty_dir", "adapter_dir", "adapter_with_link", "adapter_with_fifo")
SPECIAL = ("fifo",)  # a named pipe: reading it blocks until a writer comes


def _make_folder(path: Path, name: str) -> None:
    path.mkdir()
    if name == "non_empty_dir":
        (path / "keep.txt").write_text("the user's file")
        return
    (path / "adapter_config.json").write_text('{"r": 8}')
    if name == "adapter_with_link":
        (path / "weights").symlink_to("/usr")  # copying it would copy /usr into the store
    elif name == "adapter_with_fifo":
        os.mkfifo(path / "adapter_model.safetensors")


class _Inputs(dict):
    """`str.format_map` target: an input file or folder is made the first time the argv names it."""

    def __init__(self, tmp: Path, base: dict[str, str]):
        super().__init__(base)
        self.tmp = tmp

    def __missing__(self, key: str) -> str:
        path = self.tmp / "inputs" / key
        path.parent.mkdir(exist_ok=True)
        if key in FOLDERS:
            _make_folder(path, key)
        elif key in SPECIAL:
            os.mkfifo(path)
        elif key in INPUTS:
            path.write_bytes(INPUTS[key]())
        else:
            raise KeyError(f"no input {key!r} (inputs: {', '.join([*INPUTS, *FOLDERS, *SPECIAL])})")
        self[key] = str(path)
        return str(path)


def _store_with_run(store: Path, kind: str, status: str, stop: bool = False) -> str:
    from coevolve.store.store import HarnessStore

    st = HarnessStore(store, create=True)
    try:
        run_id = st.create_run(kind, {})
        if status in ("done", "failed"):
            st.finish_run(run_id, status, {})
        else:
            st.update_run(run_id, status=status)
        if stop:
            st.append_event(run_id, "stop", {"by": "bench"})
        return run_id
    finally:
        st.close()


def _unwritable(store: Path) -> Path:
    """A folder no store can be created in: read-only for a user; for root (who writes anyway), a
    path under /sys, where mkdir fails."""
    store.mkdir()
    store.chmod(0o555)
    probe = store / ".probe"
    try:
        probe.mkdir()
    except OSError:
        return store
    probe.rmdir()
    return Path("/sys/coevolve-bad-inputs/store")


def _setup(kind: str, store: Path) -> tuple[Path, str]:
    """Make the case's store; (the store path to pass, the run id the case may name)."""
    from coevolve.store.store import HarnessStore

    if kind == "absent":
        return store, ""
    if kind == "store":
        HarnessStore(store, create=True).close()
        return store, ""
    if kind == "file":
        store.write_text("not a store")
        return store, ""
    if kind == "garbage_db":
        store.mkdir()
        (store / "store.db").write_bytes(b"SQLite format 2\x00" + bytes(range(256)) * 8)
        return store, ""
    if kind == "unwritable":
        return _unwritable(store), ""
    kinds = {"eval_done": ("eval", "done", False), "coevolve_done": ("coevolve", "done", False),
             "coevolve_failed": ("coevolve", "failed", False), "coevolve_stopping": ("coevolve", "running", True)}
    if kind not in kinds:
        raise KeyError(f"no setup {kind!r} (setups: absent, store, file, garbage_db, unwritable, {', '.join(kinds)})")
    return store, _store_with_run(store, *kinds[kind])


SETUPS = ("absent", "store", "file", "garbage_db", "unwritable", "eval_done", "coevolve_done", "coevolve_failed",
          "coevolve_stopping")


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root` (and `root` itself): a folder as `dir`, a file as its sha256."""
    out: dict[str, str] = {}
    if not (root.exists() or root.is_symlink()):
        return out

    def walk(p: Path) -> Iterator[Path]:
        yield p
        if p.is_dir() and not p.is_symlink():
            for child in sorted(p.iterdir()):
                yield from walk(child)

    for p in walk(root):
        rel = str(p.relative_to(root)) or "."
        if p.is_symlink():
            out[rel] = f"link:{os.readlink(p)}"
        elif p.is_dir():
            out[rel] = "dir"
        elif not p.is_file():  # a FIFO or device: its kind, never its content (reading a FIFO blocks)
            out[rel] = f"special:{stat.S_IFMT(p.lstat().st_mode)}"
        else:
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[rel] = h.hexdigest()
    return out


@dataclass
class Prepared:
    """A case's folder, ready to run: the argv with every placeholder filled, and what was there."""

    case: Case
    tmp: Path
    store: Path
    argv: list[str]
    env: dict[str, str]
    before: dict[str, str] = field(default_factory=dict)
    outside: dict[str, str] | None = None  # a store path outside the folder (unwritable): what was there


def prepare(case: Case, tmp: Path) -> Prepared:
    store, run_id = _setup(case.setup, tmp / "store")
    values = _Inputs(tmp, {"store": str(store), "run": run_id, "tmp": str(tmp), "exp": str(EXPERIMENT),
                           "serve": str(SERVE_TINY)})
    argv = [a.format_map(values) for a in case.argv]
    env = {k: v.format_map(values) for k, v in case.env}
    p = Prepared(case, tmp, store, argv, env)
    p.before = snapshot(tmp)
    p.outside = None if store.is_relative_to(tmp) else snapshot(store)
    return p


@dataclass
class Outcome:
    name: str
    argv: list[str]
    clean: bool
    seconds: float
    exit_code: int | None
    error_line: str
    problems: list[str]
    cpu_s: float | None = None  # the process's own CPU seconds (as a process only)
    bound_scale: float = 1.0  # the stretch its time bound was judged with (`bound_scale`)

    def line(self) -> str:
        mark = "ok  " if self.clean else "FAIL"
        why = "" if self.clean else f"  [{'; '.join(self.problems)}]"
        cpu = "" if self.cpu_s is None else f" cpu {self.cpu_s:5.2f}s"
        cpu += f" (bound x{self.bound_scale:.1f})" if self.bound_scale > 1 else ""
        return f"{mark} {self.seconds:6.2f}s{cpu}  {self.name:42s} {self.error_line[:160]}{why}"


def judge(p: Prepared, exit_code: int | None, stdout: str, stderr: str, seconds: float, scale: float = 1.0) -> Outcome:
    """The checks of the module docstring, on one finished case (its time bound times `scale`)."""
    problems = []
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    last = lines[-1] if lines else ""
    if exit_code != 2:
        problems.append(f"exit status {exit_code}")
    if not last.startswith("error:"):
        problems.append(f"last stderr line is not an error: line ({last[:120]!r})")
    if len(errors) != 1:
        problems.append(f"{len(errors)} error: lines")
    if "Traceback" in stdout + stderr:
        problems.append("a traceback")
    if "Usage:" in stdout + stderr or "╭" in stdout + stderr:
        problems.append("a usage box")
    if seconds > p.case.bound_s * scale:
        problems.append(f"took {seconds:.1f}s (bound {p.case.bound_s * scale:.3g}s)")
    if p.case.expect and p.case.expect not in (errors[0] if errors else ""):
        problems.append(f"error line lacks {p.case.expect!r}")
    after = snapshot(p.tmp)
    if after != p.before:
        changed = sorted(k for k in set(after) | set(p.before) if after.get(k) != p.before.get(k))
        problems.append(f"wrote {', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''}")
    if p.outside is not None and snapshot(p.store) != p.outside:
        problems.append(f"wrote under {p.store}")
    return Outcome(p.case.name, p.argv, not problems, round(seconds, 3), exit_code,
                   errors[0] if errors else last, problems)


def run_measured(argv: list[str], timeout: float, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> tuple[int | None, str, str, float, float]:
    """(exit status or None if it timed out, stdout, stderr, wall seconds, CPU seconds of the process
    itself: user + system, which a loaded machine does not stretch the way it stretches wall time)."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    streams: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k, f: streams.__setitem__(k, f.read()), args=(k, f), daemon=True)
               for k, f in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > timeout:  # a case that went to work: end it and all it started
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            timed_out = True
            break
        time.sleep(0.01)
    seconds = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here (wait4 has the usage), not by Popen
    for r in readers:
        r.join(timeout=5)
    out, err = (streams.get(k, b"").decode(errors="replace") for k in ("out", "err"))
    code = None if timed_out else proc.returncode
    return code, out, err + ("\n(timed out)" if timed_out else ""), seconds, usage.ru_utime + usage.ru_stime


def _coevolve() -> list[str]:
    exe = Path(sys.executable).parent / "coevolve"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "coevolve.cli.app"]


def run_subprocess(case: Case, token: Path, scale: float = 1.0) -> Outcome:
    """One case as its own `coevolve` process, in its own folder (also its working directory); its
    time bound times `scale` (`bound_scale`)."""
    with tempfile.TemporaryDirectory(prefix="bad-input-") as d:
        tmp = Path(d)
        p = prepare(case, tmp)
        env = {**os.environ, "RAY_AUTH_TOKEN_PATH": str(token), "COEVOLVE_LOG_LEVEL": "warning", **p.env}
        env.pop("COEVOLVE_STORE", None)
        code, out, err, seconds, cpu = run_measured([*_coevolve(), *p.argv], max(30.0, 3 * case.bound_s * scale), tmp, env)
        outcome = judge(p, code, out, err, seconds, scale)
        if not outcome.clean and all(q.startswith("took ") for q in outcome.problems):
            # over its bound and clean otherwise: was the machine slower just now? `coevolve --help` at once
            # after it says by how much (the run's first baseline can be minutes old on a shared machine)
            now = bound_scale(run_measured([*_coevolve(), "--help"], 120.0)[3])
            if now > scale:
                outcome = judge(p, code, out, err, seconds, now)
                scale = now
        outcome.cpu_s = round(cpu, 3)
        outcome.bound_scale = round(scale, 2)
        with contextlib.suppress(OSError):  # the unwritable setup's folder, so that it can be removed
            (tmp / "store").chmod(0o755)
        return outcome


QUIET_HELP_S = 1.5  # `coevolve --help` on a quiet 2-core machine (measured 1.46 s): the bounds are set there


def baseline(runs: int = 3) -> tuple[float, float]:
    """The start-up every case pays: `coevolve --help`, (wall, CPU) seconds, medians of `runs`."""
    runs_ = [run_measured([*_coevolve(), "--help"], 120.0) for _ in range(runs)]
    return statistics.median(r[3] for r in runs_), statistics.median(r[4] for r in runs_)


def baseline_s(runs: int = 3) -> float:
    """`coevolve --help`'s wall seconds (median of `runs`)."""
    return baseline(runs)[0]


def bound_scale(baseline: float) -> float:
    """How much slower than a quiet machine this one is now (at least 1): a loaded machine stretches
    every case's start-up, and its bound with it, by the factor it stretches `coevolve --help`."""
    return max(1.0, baseline / QUIET_HELP_S)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once")
    ap.add_argument("--only", default="", help="only cases whose name this regular expression finds")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    ap.add_argument("--absolute", action="store_true",
                    help="bounds as stated, not stretched by how loaded the machine is (bound_scale)")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if re.search(args.only, c.name)]
    if not cases:
        ap.error(f"no case matches {args.only!r}")
    with tempfile.TemporaryDirectory(prefix="bad-inputs-token-") as d:
        token = Path(d) / "ray-token"
        token.write_text("t" * 64)
        base_wall, base_cpu = baseline()
        scale = 1.0 if args.absolute else bound_scale(base_wall)
        started = time.monotonic()
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda c: run_subprocess(c, token, scale), cases))
        restretched = sum(o.bound_scale > scale for o in outcomes)
        over_absolute = sum(o.seconds > next(c for c in cases if c.name == o.name).bound_s for o in outcomes)
        wall = time.monotonic() - started
    clean = sum(o.clean for o in outcomes)
    times = sorted(o.seconds for o in outcomes)
    cpus = sorted(o.cpu_s or 0.0 for o in outcomes)
    slowest = max(outcomes, key=lambda o: o.cpu_s or 0.0)
    summary = {
        "baseline_help_cpu_s": round(base_cpu, 3), "median_cpu_s": round(statistics.median(cpus), 3),
        "max_cpu_s": cpus[-1], "max_cpu_case": slowest.name,
        "median_cpu_over_baseline": round(statistics.median(cpus) / base_cpu, 2),
        "max_cpu_over_baseline": round(cpus[-1] / base_cpu, 2),
        "clean": clean, "cases": len(outcomes), "bound_s": BOUND_S, "bound_scale": round(scale, 2),
        "rejudged_at_a_later_load": restretched,
        "over_absolute_bound": over_absolute, "jobs": args.jobs, "wall_s": round(wall, 1),
        "baseline_help_s": round(base_wall, 3), "median_s": round(statistics.median(times), 3), "max_s": times[-1],
        "median_over_baseline": round(statistics.median(times) / base_wall, 2),
        "max_over_baseline": round(times[-1] / base_wall, 2),
        "commands": sorted({command_path(c.argv) for c in cases}),
    }
    if args.json:
        print(json.dumps({**summary, "outcomes": [vars(o) for o in outcomes]}, sort_keys=True))
    else:
        for o in outcomes:
            print(o.line())
        print(f"{clean} clean of {len(outcomes)} (bound {BOUND_S:g}s each x {scale:.2f} for this machine's load, "
              f"{restretched} judged again at a later load, "
              f"{over_absolute} over {BOUND_S:g}s itself; {len(summary['commands'])} commands; "
              f"wall: median {summary['median_s']:.2f}s = {summary['median_over_baseline']:.2f}x and slowest "
              f"{summary['max_s']:.2f}s = {summary['max_over_baseline']:.2f}x `coevolve --help` ({base_wall:.2f}s); "
              f"CPU: median {summary['median_cpu_s']:.2f}s = {summary['median_cpu_over_baseline']:.2f}x and most "
              f"{summary['max_cpu_s']:.2f}s = {summary['max_cpu_over_baseline']:.2f}x ({slowest.name}) `coevolve --help` "
              f"({base_cpu:.2f}s); {args.jobs} at once, {wall:.0f}s in all)")
    return 0 if clean == len(outcomes) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    sys.exit(main())
