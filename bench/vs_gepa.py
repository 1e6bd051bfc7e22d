"""The harness search side by side with GEPA (issues 20 and 31): the same proposer, tasks, seeds and
rollout budget, so that only the search and what it returns differ.

For each family, seed and budget of the comparison, these optimisers (their names in cells and tables)
start from the family's baseline harness:

- **race**: the racing search with guarded release that `coevolve evolve` runs by default
  (`coevolve.agents.meta.make_evolution`, `search="race"`), given its real rollout budget
  (`Budget(rollouts=B)`, so it manages the budget itself; it launches a batch only when the batch fits
  what is left). It releases a harness only after the release guard (`coevolve.agents.meta.guard`) has
  found it better than the last released one on fresh pairs (val instances after `--val-n`, new seeds).
- **gepa@6, gepa@12, gepa@25** (`gepa` 0.1.4, `gepa.optimize`) at 6, 12 and 25 val instances x
  `--val-seeds`: its Pareto-front candidate selection over the val pairs, its minibatch gate (a child is
  evaluated on the parent's train minibatch and enters the pool only on a strict improvement of the
  minibatch sum, then pays a full val evaluation) and merge (`use_merge`). It returns the pool's best
  val average, with no test. The tables report **gepa** as the best of the three val sizes by pooled test
  gain at each budget (chosen after the fact, which favours GEPA) and name the one chosen. It reaches the
  task through a `GEPAAdapter` (`ProjectAdapter`): `evaluate` runs the project's executor,
  `make_reflective_dataset` builds the failure evidence the project's proposer reads
  (`coevolve.agents.meta.evidence`), and the project's proposer (`synthetic/meta` by default) sits
  behind GEPA's custom proposal hook.
- **gepa+guard**: GEPA with half the budget (floor(B/2)) at the race's val size; then its answer, if it
  is not the baseline, faces the race's guard with the rest: `GuardAttempt` 1 against the baseline on
  the pairs `guard_pair` draws over the same guard instances the race uses (the val split after
  `--val-n`), 2 rollouts a pair, until the attempt is decided or the budget is out. It returns GEPA's
  answer if the guard released it, else the baseline.
- **loop**: the old sign-test loop (`search="loop"`, `HarnessEvolution`, its defaults: family-wise sign
  test, early stopping, plateau stop), also given its real rollout budget.

Every optimiser spends rollouts through its own `RolloutMeter` with the budget B: every rollout the
executor runs is counted, train batches, minibatches, val and guard pairs alike. For GEPA, the batch that
would pass the budget is cut to the rollouts left (those run and count; their results are not used) and
ends the run. Both sides see the same val pairs (the first val instances x `--val-seeds` seeds), the same
train split, the same proposer and seeds. Each optimiser gets its own counting wrapper around the proposer
(`TextOnlyProposer`): proposer calls and tokens are counted and reported per optimiser.

Candidates are held to prompt sections and recipes on all sides: GEPA evolves named text components
(here `prompt_sections` and `recipes`, JSON texts that decode back to the harness), so an edit that adds
a hook, a tool, a context policy, decoding or a turn limit cannot be a GEPA candidate; the same filter
(`TextOnlyProposer`) turns such edits into invalid proposals for every optimiser. Held-out and invalid
proposals go back to the proposer as tried on both sides (the race and the loop journal them in their
history; `ProjectAdapter.propose_texts` puts them in GEPA's with outcome "invalid"), so the proposer does
not offer them again.

**Test.** Every test instance of the family x `--test-repeats` (2) repeat seeds, at seeds no optimiser
used, paired with the baseline on identical instances and seeds: the test gain of a run is its returned
harness's mean pass rate minus the baseline's. Intervals: a bootstrap stratified by family (the seeds of
each family resampled with replacement, 2000 resamples, a fixed generator seed) of the pooled mean test
gain per optimiser and of the pooled ratios race / gepa (gepa at its best val size, chosen again in each
resample) and race / gepa+guard: the point value and the 95% percentile interval. The old bench's AUC
(test evaluations of every intermediate harness) and re-tests of accepted edits are gone: the null and
harmful arms measure what the re-tests approximated.

**Null and harmful proposers** (`--null-runs N` runs of race, gepa at the race's val size and gepa+guard
per budget and arm, seeds 10,000 + r and 20,000 + r, apart from the reported seeds; families rotate over
the runs, `--arm-families`): in the null arm every proposal is a no-op text edit (the null sections of
`bench/null_edit.py`, each with innocuous sentences appended so that every proposal is a new harness:
they state nothing a task needs — checked against every rule of the family — but resample every
rollout); the share of runs that return a non-baseline harness, with its Wilson 95% interval. In the
harmful arm every proposal is a section that contradicts every rule of the family, facts and constraints
(checked: each rule's stance in the candidate is "contradicted"), so it can only hurt: on 50 test pairs
such a section cost the weak model 0.10 to 0.26 of pass rate on payroll, budget, iot, browser and website,
and about nothing on stock and refactor, where its failures have other causes (run the harmful arm on the
five with `--harmful-families`); P(test gain < 0) with its Wilson interval, the test gain measured on the
first `--arm-test-n` (20) test instances x `--test-repeats` repeats.

Synthetic models are the project's testbed: the figures measure the optimisers' search and release on
it, not real models. The output directory gets `cells.jsonl` (one line per finished cell, resumable: a
rerun with the same settings skips the cells already there), `summary.md` (the tables), `summary.json`.

    .venv/bin/python bench/vs_gepa.py --families all --seeds 5 --budgets 80,300,1000 --null-runs 200 \
        --jobs 2 --out bench-out/vs-gepa
    # a smoke run: one family, one seed, two small budgets, a few null and harmful runs
    .venv/bin/python bench/vs_gepa.py --families iot --seeds 0, --budgets 40,60 --val-n 6 --null-runs 4 \
        --out bench-out/vs-gepa-smoke
    # re-summarise: .venv/bin/python bench/vs_gepa.py --from-cells bench-out/vs-gepa/cells.jsonl --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from bench.null_edit import NULL_EDITS, wilson_interval
from coevolve.agents.meta.evidence import build_evidence, describe_failure
from coevolve.agents.meta.guard import GuardAttempt, guard_pair
from coevolve.agents.meta.loop import BudgetExhausted
from coevolve.agents.meta.proposer import Proposal
from coevolve.analysis.cells import read_cells, write_cell
from coevolve.edits import apply_edit, edit_to_json, validate_harness
from coevolve.llm.contract import Completion
from coevolve.values import (
    AddRecipe,
    AppendSection,
    Harness,
    HarnessEdit,
    PromptSection,
    Recipe,
    RemoveSection,
    SetSection,
    TaskInstance,
    Trajectory,
)

TEXT_OPS = (SetSection, AppendSection, RemoveSection, AddRecipe)
HELD_OUT = "not a prompt-section or recipe edit (held out of the GEPA comparison on both sides)"
COMPONENTS = ("prompt_sections", "recipes")
# test seeds: far from every val seed (seed + r), train seed (seed + step) and guard seed
# (guard.GUARD_SEED_BASE + seed * 10**7 + ...) of the seeds a bench uses
TEST_SEED_BASE = 3_000_000_000
NULL_SEED_BASE, HARMFUL_SEED_BASE = 10_000, 20_000  # the null and harmful arms' seeds, apart from the reported ones
BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED = 2000, 20_310
ARMS = ("race", "gepa", "gepa+guard", "loop")
ARM_OPTIMISERS = ("race", "gepa", "gepa+guard")  # what the null and harmful arms run (gepa at the race's val size)
KINDS = ("main", "null", "harmful")


# ------------------------------------------------------------------ harness <-> GEPA candidate
def harness_to_candidate(h: Harness) -> dict[str, str]:
    """The harness's prompt sections and recipes as GEPA's named text components (exact JSON texts)."""
    return {
        "prompt_sections": json.dumps([{"name": s.name, "text": s.text} for s in h.system_prompt], indent=1),
        "recipes": json.dumps([{"name": r.name, "text": r.text} for r in h.recipes], indent=1),
    }


def candidate_to_harness(base: Harness, candidate: dict[str, str]) -> Harness:
    """`base` with the candidate's sections and recipes (everything else is `base`'s)."""
    sections = tuple(PromptSection(d["name"], d["text"]) for d in json.loads(candidate["prompt_sections"]))
    recipes = tuple(Recipe(d["name"], d["text"]) for d in json.loads(candidate["recipes"]))
    h = dataclasses.replace(base, system_prompt=sections, recipes=recipes)
    validate_harness(h)
    return h


def text_only(edit: HarnessEdit) -> bool:
    return all(isinstance(op, TEXT_OPS) for op in edit.ops)


class TextOnlyProposer:
    """One optimiser's proposer: the project's (or a scripted) proposer with its edits held to prompt
    sections and recipes (any other edit becomes an invalid proposal), and its calls and tokens counted."""

    def __init__(self, proposer: Any):
        self.proposer = proposer
        self.held_out = 0
        self.calls = 0
        self.tokens = 0

    def propose(self, evidence: dict[str, Any], harness: Harness, k: int, seed: int):
        proposals, used = self.proposer.propose(evidence, harness, k, seed)
        self.calls += 1
        self.tokens += used.prompt_tokens + used.completion_tokens
        out = []
        for p in proposals:
            if p.error is None and not text_only(p.edit):
                self.held_out += 1
                p = dataclasses.replace(p, candidate=None, error=HELD_OUT)
            out.append(p)
        return out, used

    def counts(self) -> dict[str, int]:
        return {"proposer_calls": self.calls, "proposer_tokens": self.tokens, "held_out": self.held_out}


# ------------------------------------------------------------------ the null and harmful proposers
NULL_SECTIONS = [(e["ops"][0]["name"], e["ops"][0]["text"]) for e in NULL_EDITS if e["ops"][0]["op"] == "set_section"]
# appended to a null section so that every proposal is a new harness (stating nothing a task needs)
FILLERS = ("Thank you.", "Keep a friendly tone.", "Be courteous.", "Stay professional.", "Use plain words.",
           "Be kind.", "Keep a positive attitude.", "Write in full sentences.", "Remain respectful.",
           "Stay cheerful.", "Be gracious.", "Keep it pleasant.")
HARM_NAMES = ("caution", "house_rules", "reminders", "policy_notes", "guidance")
HARM_PREFIXES = ("Remember:", "Note:", "Keep in mind:", "Important:")


def _stances(family: Any, h: Harness) -> tuple[Any, ...]:
    from coevolve.testbed.policy import STEPWISE

    text = h.render_system()
    return (*(r.stance(text) for r in (*family.facts, *family.constraints)), STEPWISE.stated_in(text))


def contradictions(family: Any) -> list[tuple[str, str]]:
    """Per rule of the family (fact or constraint): (rule id, a sentence that contradicts it), checked on
    the family's baseline (the rule's stance in the harness with the sentence is "contradicted")."""
    base = family.baseline_harness()
    out = []
    for rule in (*family.facts, *family.constraints):
        tries = []
        for rev in rule.reversals:
            groups = [[t for t in g if not any(u in t for u in rev.unless)][:3] or list(g[:1]) for g in rev.groups]
            tries += [" ".join(t.strip() for t in combo) + "." for combo in itertools.islice(itertools.product(*groups), 30)]
        tries += ["never " + " ".join(t.strip() for t in combo) + "."
                  for combo in itertools.islice(itertools.product(*[g[:3] for g in rule.concept.groups]), 30)]
        for s in tries:
            child = apply_edit(base, HarnessEdit((SetSection(HARM_NAMES[0], f"{HARM_PREFIXES[0]} {s}"),)))
            if rule.stance(child.render_system()) is False:
                out.append((rule.id, s))
                break
    return out


class ScriptedProposer:
    """A proposer whose every edit is a no-op (`mode="null"`: a null section that leaves every rule of the
    family and the step-by-step request as they were in the parent, so it changes nothing the agent knows or
    does but resamples its rollouts) or harmful (`mode="harmful"`: a section that contradicts every rule of
    the family, facts and constraints, in the candidate). Each proposal is new (a counter walks the texts);
    no tokens."""

    def __init__(self, family: str, mode: str):
        from coevolve.tasks import get_family

        if mode not in ("null", "harmful"):
            raise ValueError(f"mode is null or harmful, got {mode!r}")
        self.family = get_family(family)
        self.mode = mode
        self.n = 0
        self.rules = {r.id: r for r in (*self.family.facts, *self.family.constraints)}
        self.harms = contradictions(self.family) if mode == "harmful" else []
        if mode == "harmful" and not self.harms:
            raise ValueError(f"no rule of {family} could be contradicted")

    def _edit(self, n: int) -> HarnessEdit:
        rest, fillers = n // len(NULL_SECTIONS), []
        if self.mode == "null":
            name, text = NULL_SECTIONS[n % len(NULL_SECTIONS)]
            for _ in range(3):
                fillers.append(FILLERS[rest % len(FILLERS)])
                rest //= len(FILLERS)
            return HarnessEdit((SetSection(name, " ".join([text, *fillers])),), rationale="null", targets="other")
        # every rule contradicted, the sentences rotated, under a section name and a prefix of their own
        k = n % len(self.harms)
        rest = n // len(self.harms)
        name, rest = HARM_NAMES[rest % len(HARM_NAMES)], rest // len(HARM_NAMES)
        prefix, rest = HARM_PREFIXES[rest % len(HARM_PREFIXES)], rest // len(HARM_PREFIXES)
        for _ in range(2):
            fillers.append(FILLERS[rest % len(FILLERS)])
            rest //= len(FILLERS)
        sentences = [s for _, s in self.harms[k:] + self.harms[:k]]
        text = " ".join([*(f"{prefix} {s}" for s in sentences), *fillers])
        return HarnessEdit((SetSection(name, text),), rationale="harmful: every rule contradicted", targets="other")

    def propose(self, evidence: dict[str, Any], harness: Harness, k: int, seed: int) -> tuple[list[Proposal], Completion]:
        out: list[Proposal] = []
        parent = _stances(self.family, harness) if self.mode == "null" else None
        for _ in range(50 * k):
            if len(out) == k:
                break
            edit = self._edit(self.n)
            self.n += 1
            child = apply_edit(harness, edit)
            if child.id == harness.id:
                continue
            if self.mode == "null" and _stances(self.family, child) != parent:
                continue
            if self.mode == "harmful" and any(r.stance(child.render_system()) is not False for r in self.rules.values()):
                continue
            out.append(Proposal(edit, child, None, edit_to_json(edit)))
        return out, Completion({"role": "assistant", "content": ""}, 0, 0, 0.0)


# ------------------------------------------------------------------ the budget
class RolloutMeter:
    """Every rollout of one optimiser passes here (an `coevolve.agents.meta.loop.Evaluator`). At most `budget`
    rollouts run: the batch that would pass it runs the rollouts left, counts them and raises
    `BudgetExhausted` (GEPA's engine skips the iteration and its stopper ends; the race and the loop hold
    the same budget themselves and never send such a batch)."""

    def __init__(self, evaluator: Any, budget: int):
        self.evaluator = evaluator
        self.budget = budget
        self.used = 0
        self.by_split: dict[str, int] = {}
        self.cut = 0  # rollouts of the final, cut batch (run and counted, results unused)

    @property
    def exhausted(self) -> bool:
        return self.used >= self.budget

    @property
    def left(self) -> int:
        return self.budget - self.used

    def evaluate(self, jobs: Sequence[tuple[TaskInstance, Harness, int]], model: str) -> list[Trajectory]:
        left = self.budget - self.used
        run = list(jobs[: max(0, left)])
        trajs = self.evaluator.evaluate(run, model) if run else []
        self.used += len(run)
        for inst, _, _ in run:
            self.by_split[inst.split] = self.by_split.get(inst.split, 0) + 1
        if len(jobs) > left:
            self.cut = len(run)
            raise BudgetExhausted("rollouts")
        return trajs

    def __call__(self, gepa_state: Any) -> bool:  # GEPA's StopperProtocol
        return self.exhausted


# ------------------------------------------------------------------ GEPA's side
@dataclass(frozen=True)
class Case:
    """GEPA's data instance: a task instance and, on val, its seed (train seeds follow the iteration,
    as in the loop: parent and child of one iteration meet the same seed)."""

    instance: TaskInstance
    seed: int | None = None


class _Quiet:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(str(message)[:300])


class NoProposal(Exception):
    """The proposer gave no usable, untried text edit: GEPA skips the iteration."""


class ProjectAdapter:
    """GEPA's adapter protocol over the project's executor, evidence and proposer; also a GEPA callback
    (iteration numbers for seeds, gate outcomes for the proposer's edit history)."""

    propose_new_texts = None  # the proposer goes in through gepa.optimize(custom_candidate_proposer=...)

    def __init__(self, family: str, baseline: Harness, meter: RolloutMeter, proposer: Any, model: str, seed: int,
                 candidates: int, evidence_failures: int):
        self.family = family
        self.baseline = baseline
        self.meter = meter
        self.proposer = proposer
        self.model = model
        self.seed = seed
        self.k = candidates
        self.evidence_failures = evidence_failures
        self.iteration = 0
        self.history: list[dict[str, Any]] = []
        self.tried: set[str] = {baseline.id}
        self.harnesses: dict[str, Harness] = {baseline.id: baseline}
        self.stats = {"no_proposal": 0, "invalid": 0, "gate_accepts": 0, "gate_rejects": 0,
                      "merges_attempted": 0, "merges_accepted": 0, "merges_rejected": 0, "skipped_perfect": 0}
        self._pending: dict[int, dict[str, Any]] = {}

    def harness(self, candidate: dict[str, str]) -> Harness:
        h = candidate_to_harness(self.baseline, candidate)
        self.harnesses.setdefault(h.id, h)
        return h

    # -- GEPAAdapter
    def evaluate(self, batch: list[Case], candidate: dict[str, str], capture_traces: bool = False):
        from gepa import EvaluationBatch

        h = self.harness(candidate)
        jobs = [(c.instance, h, c.seed if c.seed is not None else self.seed + self.iteration) for c in batch]
        trajs = self.meter.evaluate(jobs, self.model)
        scores = [1.0 if t.passed else 0.0 for t in trajs]
        return EvaluationBatch(outputs=[t.passed for t in trajs], scores=scores,
                               trajectories=trajs if capture_traces else None)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: Any, components_to_update: list[str]):
        """The failures of the minibatch as the project's proposer reads them (`describe_failure`, the
        public view only), one record each, for every component asked."""
        failures = [t for t in eval_batch.trajectories or () if not t.passed and t.error != "infra"]
        records = []
        for t in failures:
            d = describe_failure(t)
            records.append({
                "Inputs": {"instance": d["instance"], "instruction": d["instruction"]},
                "Generated Outputs": d["transcript_tail"],
                "Feedback": "; ".join(f"{r['id']}: {r['reason']}" for r in d["failed_requirements"]) or d["ended"],
                "failure": d,
            })
        return {name: records for name in components_to_update}

    # -- the proposal hook (GEPA's ProposalFn)
    def propose_texts(self, candidate: dict[str, str], reflective_dataset: dict[str, Any],
                      components_to_update: list[str]) -> dict[str, str]:
        """The first valid, untried proposal of the proposer's answer; every held-out or invalid one goes
        into the history as tried (outcome "invalid"), as the race and the loop keep it, so the proposer
        does not offer it again."""
        parent = self.harness(candidate)
        records = next(iter(reflective_dataset.values()), [])
        evidence = build_evidence(self.family, parent, [], self.history, self.evidence_failures)
        evidence["failures"] = [r["failure"] for r in records[: self.evidence_failures]]
        evidence["failures_total"] = len(records)
        proposals, _ = self.proposer.propose(evidence, parent, self.k, seed=self.seed + self.iteration)
        chosen: Proposal | None = None
        for p in proposals:
            if p.error is not None:
                self._remember_invalid(p, parent)
            elif chosen is None and p.candidate.id not in self.tried:
                chosen = p
        if chosen is None:
            self.stats["no_proposal"] += 1
            raise NoProposal("no untried prompt-section or recipe edit")
        self.tried.add(chosen.candidate.id)
        self.harnesses[chosen.candidate.id] = chosen.candidate
        entry = {**edit_to_json(chosen.edit), "iteration": self.iteration, "base": parent.id[:12], "outcome": "pending"}
        self.history.append(entry)
        self._pending[self.iteration] = entry
        return harness_to_candidate(chosen.candidate)

    def _remember_invalid(self, p: Proposal, parent: Harness) -> None:
        self.stats["invalid"] += 1
        if isinstance(p.raw, dict) and isinstance(p.raw.get("ops"), list):
            self.history.append({"rationale": p.raw.get("rationale", ""), "targets": p.raw.get("targets", ""),
                                 "ops": p.raw["ops"], "iteration": self.iteration, "base": parent.id[:12],
                                 "outcome": "invalid", "reason": str(p.error)[:200]})

    # -- GEPA callbacks
    def on_iteration_start(self, event: dict[str, Any]) -> None:
        self.iteration = int(event["iteration"])

    def on_candidate_accepted(self, event: dict[str, Any]) -> None:
        entry = self._pending.pop(int(event["iteration"]), None)
        if entry is not None:
            entry["outcome"] = "accept"
            self.stats["gate_accepts"] += 1

    def on_candidate_rejected(self, event: dict[str, Any]) -> None:
        entry = self._pending.pop(int(event["iteration"]), None)
        if entry is not None:
            entry["outcome"] = "reject"
            entry["minibatch"] = [event.get("old_score"), event.get("new_score")]
            self.stats["gate_rejects"] += 1

    def on_evaluation_skipped(self, event: dict[str, Any]) -> None:
        if event.get("reason") == "all_scores_perfect":
            self.stats["skipped_perfect"] += 1

    def on_merge_attempted(self, event: dict[str, Any]) -> None:
        self.stats["merges_attempted"] += 1

    def on_merge_accepted(self, event: dict[str, Any]) -> None:
        self.stats["merges_accepted"] += 1

    def on_merge_rejected(self, event: dict[str, Any]) -> None:
        self.stats["merges_rejected"] += 1


# ------------------------------------------------------------------ one run of each optimiser
@dataclass
class Config:
    """One cell: one family, seed and budget; `kind` "main" (the project's proposer, every arm), "null" or
    "harmful" (the scripted proposers; race, gepa at `val_n`, gepa+guard; harmful measured on `test_n`
    test instances, null not on the test split)."""

    family: str
    seed: int = 0
    budget: int = 80
    kind: str = "main"
    model: str = "synthetic/weak"
    proposer: str = "synthetic/meta"
    val_n: int = 12  # the race's, the loop's and gepa+guard's val instances (the guard draws from the rest)
    val_seeds: int = 2
    gepa_val_sizes: tuple[int, ...] = (6, 12, 25)
    train_batch: int = 10
    candidates: int = 3
    evidence_failures: int = 8
    minibatch: int = 3  # GEPA's reflection_minibatch_size (its default)
    use_merge: bool = True
    alpha: float = 0.1
    race_chunk: int = 2
    screen: int = 0
    admit: str = "race"
    arms: tuple[str, ...] = ARMS
    test_n: int | None = None  # None: every test instance
    test_repeats: int = 2


@dataclass
class Run:
    """One optimiser's run: what it spent and the harness it returns."""

    optimiser: str
    used: int
    own_count: int  # the optimiser's own count of rollouts (its spend / GEPA's total_metric_calls)
    by_split: dict[str, int]
    cut: int
    stop: str
    final: Harness
    stats: dict[str, Any] = field(default_factory=dict)


def _services(cfg: Config):
    """(evaluator, proposer): the executor, and the project's proposer or a scripted one (`cfg.kind`)."""
    from coevolve.agents.local import LocalEvaluator
    from coevolve.agents.meta import LLMProposer
    from coevolve.services.gateway import Gateway
    from coevolve.tasks import get_family

    gateway = Gateway()
    evaluator = LocalEvaluator(client=gateway)
    if cfg.kind != "main":
        return evaluator, ScriptedProposer(cfg.family, cfg.kind)
    proposer = LLMProposer(cfg.proposer, gateway,
                           get_family(cfg.family).handbook)
    return evaluator, proposer


def evolve_config(cfg: Config, search: str) -> Any:
    """The `EvolveConfig` of the race (`search="race"`) or the loop (`"loop"`) at the cell's settings, with
    its real rollout budget (its other limits out of the way)."""
    from coevolve.agents.meta import Budget, EvolveConfig

    return EvolveConfig(
        family=cfg.family, model=cfg.model, proposer=cfg.proposer if cfg.kind == "main" else cfg.kind, seed=cfg.seed,
        train_batch=cfg.train_batch, val_n=cfg.val_n, val_seeds=cfg.val_seeds, candidates=cfg.candidates,
        evidence_failures=cfg.evidence_failures, alpha=cfg.alpha, search=search, race_chunk=cfg.race_chunk,
        screen=cfg.screen if search == "race" else 0, admit=cfg.admit if search == "race" else "race",
        budget=Budget(iterations=10_000, rollouts=cfg.budget, seconds=10**9, usd=10**9, proposer_tokens=10**12),
    )


TALLY_KEYS = ("attempt", "wins", "losses", "ties", "outcome", "e_value", "threshold")  # a guard tally, as a cell keeps it


def run_search(cfg: Config, evaluator: Any, proposer: Any, root: Path, search: str = "race") -> Run:
    """The race (`search="race"`) or the old loop (`"loop"`) through `make_evolution`."""
    from coevolve.agents.meta import make_evolution
    from coevolve.agents.meta.race import guard_tallies
    from coevolve.store.store import HarnessStore

    meter = RolloutMeter(evaluator, cfg.budget)
    wrapped = TextOnlyProposer(proposer)
    config = evolve_config(cfg, search)
    store = HarnessStore(root / f"{search}-{cfg.family}-{cfg.seed}-{cfg.budget}")
    run_id = store.create_run("evolve", config.to_json())
    r = make_evolution(config, meter, wrapped, store, run_id).run()
    event = store.events(run_id, "result")[-1].payload
    stats = {"iterations": r.iterations, "released": len(r.accepted), "rejected": r.rejected, "invalid": r.invalid,
             **{k: event[k] for k in ("admitted", "pool", "guard_attempts") if k in event},
             "own_proposer_calls": event.get("proposer_calls"), "plateaus": r.plateaus, **wrapped.counts(),
             "guard_tallies": [{k: t[k] for k in TALLY_KEYS} for t in guard_tallies(store, run_id)]}
    return Run(search, meter.used, r.rollouts_used, dict(meter.by_split), meter.cut, r.stop_reason,
               store.get_harness(r.harness_id), stats)


def run_gepa(cfg: Config, evaluator: Any, proposer: Any, val_n: int, meter: RolloutMeter | None = None,
             name: str | None = None) -> Run:
    """GEPA at `val_n` val instances x `cfg.val_seeds`, spending through `meter` (default: one of the
    cell's budget); it returns its pool's best val average."""
    import gepa

    from coevolve.tasks import get_family

    family = get_family(cfg.family)
    baseline = family.baseline_harness()
    meter = meter or RolloutMeter(evaluator, cfg.budget)
    wrapped = TextOnlyProposer(proposer)
    adapter = ProjectAdapter(cfg.family, baseline, meter, wrapped, cfg.model, cfg.seed, cfg.candidates,
                             cfg.evidence_failures)
    instances = family.generate("val", val_n)
    valset = [Case(inst, cfg.seed + r) for inst in instances for r in range(cfg.val_seeds)]  # the race's val pairs
    trainset = [Case(inst) for inst in family.generate("train")]
    try:
        result = gepa.optimize(
            seed_candidate=harness_to_candidate(baseline), trainset=trainset, valset=valset, adapter=adapter,
            custom_candidate_proposer=adapter.propose_texts, candidate_selection_strategy="pareto",
            module_selector="all", reflection_minibatch_size=cfg.minibatch, use_merge=cfg.use_merge,
            max_metric_calls=meter.budget, stop_callbacks=[meter], logger=_Quiet(), callbacks=[adapter],
            seed=cfg.seed, raise_on_exception=False, skip_perfect_score=True, perfect_score=1.0,
            track_best_outputs=False, display_progress_bar=False,
        )
    except BudgetExhausted:  # the budget ran out in the seed's own val evaluation
        result = None
    stats = {**adapter.stats, "iterations": adapter.iteration, "val_n": val_n, **wrapped.counts()}
    if result is None:
        final, own, stop = baseline, meter.used, "budget:rollouts (in the baseline's val evaluation)"
        stats |= {"pool": 1, "pareto_front": 1}
    else:
        final = adapter.harness(result.best_candidate)
        front = set().union(*result.per_val_instance_best_candidates.values())
        stats |= {"pool": len(result.candidates), "pareto_front": len(front),
                  "best_val": result.val_aggregate_scores[result.best_idx], "baseline_val": result.val_aggregate_scores[0]}
        own = result.total_metric_calls or 0
        stop = "budget:rollouts" if meter.exhausted else "stopped"
    return Run(name or f"gepa@{val_n}", meter.used, own, dict(meter.by_split), meter.cut, stop, final, stats)


def run_gepa_guard(cfg: Config, evaluator: Any, proposer: Any) -> Run:
    """GEPA with floor(B/2) rollouts at the race's val size, then its answer (if not the baseline) against
    the baseline under the race's guard (attempt 1, the race's guard instances and pairs) with the rest,
    2 rollouts a pair; the answer if released, else the baseline."""
    from coevolve.tasks import get_family

    family = get_family(cfg.family)
    baseline = family.baseline_harness()
    total = RolloutMeter(evaluator, cfg.budget)
    run = run_gepa(cfg, evaluator, proposer, cfg.val_n, meter=RolloutMeter(total, cfg.budget // 2), name="gepa+guard")
    found = run.final
    attempt = GuardAttempt(1, found.id, baseline.id, cfg.alpha)
    guard_rollouts = 0
    if found.id != baseline.id:
        instances = family.generate("val")[cfg.val_n:]  # the race's guard instances
        t = 0
        while attempt.outcome is None and total.left >= 2:
            index, seed = guard_pair(len(instances), cfg.seed, attempt.attempt, t)
            t += 1
            c, r = total.evaluate([(instances[index], found, seed), (instances[index], baseline, seed)], cfg.model)
            guard_rollouts += 2
            attempt.drawn = t
            if c.error != "infra" and r.error != "infra":
                attempt.add(c.passed, r.passed)
    released = attempt.outcome == "release"
    stats = {**run.stats, "gepa_rollouts": run.used, "gepa_answer": found.id[:12], "guard_rollouts": guard_rollouts,
             "guard": attempt.as_json() if found.id != baseline.id else None, "released": int(released)}
    stop = f"{run.stop}; guard: {attempt.outcome or ('out of budget' if found.id != baseline.id else 'not needed')}"
    return Run("gepa+guard", total.used, run.own_count + guard_rollouts, dict(total.by_split), total.cut, stop,
               found if released else baseline, stats)


# ------------------------------------------------------------------ measuring on the test split
class TestSplit:
    """Each harness once on the held-out test pairs (test instances x repeat seeds), cached by id."""

    def __init__(self, cfg: Config, evaluator: Any):
        from coevolve.tasks import get_family

        instances = get_family(cfg.family).generate("test")[: cfg.test_n]
        self.pairs = [(inst, TEST_SEED_BASE + 1000 * cfg.seed + r) for inst in instances for r in range(cfg.test_repeats)]
        self.evaluator = evaluator
        self.model = cfg.model
        self.cache: dict[str, list[bool]] = {}
        self.rollouts = 0

    def outcomes(self, h: Harness) -> list[bool]:
        if h.id not in self.cache:
            trajs = self.evaluator.evaluate([(inst, h, seed) for inst, seed in self.pairs], self.model)
            self.rollouts += len(trajs)
            self.cache[h.id] = [t.passed for t in trajs]
        return self.cache[h.id]

    def gain(self, h: Harness, baseline: Harness) -> tuple[float, int, int]:
        """(mean of h - baseline over the pairs, wins, losses); the baseline itself gains exactly 0 (the
        synthetic rollouts are a function of instance, harness, model and seed) and costs nothing."""
        if h.id == baseline.id:
            return 0.0, 0, 0
        diffs = [int(y) - int(x) for x, y in zip(self.outcomes(baseline), self.outcomes(h))]
        return sum(diffs) / len(diffs), diffs.count(1), diffs.count(-1)


def measure(run: Run, baseline: Harness, test: TestSplit | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "optimiser": run.optimiser, "rollouts_used": run.used, "own_count": run.own_count, "by_split": run.by_split,
        "cut_batch": run.cut, "stop": run.stop, "stats": run.stats, "final_harness": run.final.id[:12],
        "non_baseline": run.final.id != baseline.id,
        "proposer_calls": run.stats.get("proposer_calls", 0), "proposer_tokens": run.stats.get("proposer_tokens", 0),
    }
    if test is not None:
        gain, wins, losses = test.gain(run.final, baseline)
        out.update({"final_gain": gain, "final_wins": wins, "final_losses": losses})
    return out


def arm_runs(cfg: Config, evaluator: Any, proposer: Any, root: Path) -> list[Run]:
    runs = []
    for arm in cfg.arms:
        if arm == "race":
            runs.append(run_search(cfg, evaluator, proposer, root, "race"))
        elif arm == "loop":
            runs.append(run_search(cfg, evaluator, proposer, root, "loop"))
        elif arm == "gepa":
            runs += [run_gepa(cfg, evaluator, proposer, v) for v in cfg.gepa_val_sizes]
        elif arm == "gepa+guard":
            runs.append(run_gepa_guard(cfg, evaluator, proposer))
        else:
            raise ValueError(f"unknown arm {arm!r} (arms: {', '.join(ARMS)})")
    return runs


def compare(cfg: Config, workdir: Path | None = None) -> dict[str, Any]:
    """One cell: every arm of `cfg` on one family, seed and budget, then the test split (one for all)."""
    from coevolve.services.logs import configure_logging
    from coevolve.tasks import get_family

    configure_logging(json_lines=False, level="error")
    root = Path(tempfile.mkdtemp(prefix="vs-gepa-", dir=workdir))
    t0 = time.monotonic()
    try:
        evaluator, proposer = _services(cfg)
        runs = arm_runs(cfg, evaluator, proposer, root)
        t_runs = time.monotonic() - t0
        test = TestSplit(cfg, evaluator) if cfg.kind != "null" else None
        baseline = get_family(cfg.family).baseline_harness()
        arms = {run.optimiser: measure(run, baseline, test) for run in runs}
        return {"kind": cfg.kind, "family": cfg.family, "seed": cfg.seed, "budget": cfg.budget,
                "config": dataclasses.asdict(cfg), "arms": arms, "test_rollouts": test.rollouts if test else 0,
                "seconds_runs": round(t_runs, 1), "seconds": round(time.monotonic() - t0, 1)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ intervals
def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, linear between order statistics (numpy's default)."""
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def stratified_bootstrap(groups: dict[str, Sequence[Any]], stat: Callable[[list[Any]], float | None],
                         resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """The statistic `stat` of the pooled cells and its 95% percentile interval under a bootstrap stratified
    by group (family): each resample draws, within every group, as many cells as it has, with replacement,
    and pools them. Resamples where `stat` is undefined (None: e.g. a ratio over a pooled gain <= 0) are
    left out and counted."""
    rng = random.Random(seed)
    keys = sorted(groups)
    point = stat([c for k in keys for c in groups[k]])
    values, undefined = [], 0
    for _ in range(resamples):
        pooled = [c for k in keys for c in (rng.choice(groups[k]) for _ in groups[k])]
        v = stat(pooled)
        if v is None:
            undefined += 1
        else:
            values.append(v)
    values.sort()
    low, high = (quantile(values, 0.025), quantile(values, 0.975)) if values else (math.nan, math.nan)
    return {"point": point, "low": low, "high": high, "resamples": resamples, "undefined": undefined}


def pooled_gain(arm: str) -> Callable[[list[dict[str, Any]]], float]:
    def stat(cells: list[dict[str, Any]]) -> float:
        return sum(c["arms"][arm]["final_gain"] for c in cells) / len(cells)
    return stat


def best_gepa_gain(arms: Sequence[str]) -> Callable[[list[dict[str, Any]]], float]:
    """The pooled gain of GEPA at its best val size (among `arms`) on the given cells."""
    def stat(cells: list[dict[str, Any]]) -> float:
        return max(pooled_gain(a)(cells) for a in arms)
    return stat


def ratio_stat(num: Callable[[list[Any]], float], den: Callable[[list[Any]], float]) -> Callable[[list[Any]], float | None]:
    def stat(cells: list[Any]) -> float | None:
        d = den(cells)
        return num(cells) / d if d > 0 else None
    return stat


def by_family(cells: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        out.setdefault(c["family"], []).append(c)
    return out


# ------------------------------------------------------------------ the report
def arm_names(cells: list[dict[str, Any]]) -> list[str]:
    """The optimisers every one of the cells holds, in report order."""
    common = set.intersection(*(set(c["arms"]) for c in cells)) if cells else set()
    order = {"race": 0, "gepa+guard": 2, "loop": 3}
    return sorted(common, key=lambda a: (order.get(a, 1), int(a.split("@")[1]) if "@" in a else 0, a))


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


MECHANICS = ("iterations", "invalid", "held_out", "released", "admitted", "pool", "guard_attempts", "gate_accepts",
             "no_proposal", "merges_accepted", "guard_rollouts")


def summarise(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per budget: each optimiser's pooled test gain with its stratified bootstrap interval, the ratios
    race / gepa (at its best val size) and race / gepa+guard (and race / loop), proposer calls, tokens and
    rollouts; the null arm's non-baseline rate and the harmful arm's P(test gain < 0), with Wilson bounds."""
    out: dict[str, Any] = {"main": {}, "null": {}, "harmful": {}}
    main = [c for c in cells if c["kind"] == "main"]
    for budget in sorted({c["budget"] for c in main}):
        bc = [c for c in main if c["budget"] == budget]
        groups = by_family(bc)
        arms = arm_names(bc)
        per_arm = {}
        for a in arms:
            rs = [c["arms"][a] for c in bc]
            per_arm[a] = {
                "runs": len(rs), "gain": stratified_bootstrap(groups, pooled_gain(a)),
                "gain_above_0": sum(r["final_gain"] > 0 for r in rs), "gain_below_0": sum(r["final_gain"] < 0 for r in rs),
                "non_baseline": sum(r["non_baseline"] for r in rs),
                "rollouts_used": _mean([r["rollouts_used"] for r in rs]),
                "proposer_calls": _mean([r["proposer_calls"] for r in rs]),
                "proposer_tokens": _mean([r["proposer_tokens"] for r in rs]),
                "by_family": {f: _mean([c["arms"][a]["final_gain"] for c in fc]) for f, fc in groups.items()},
                "mechanics": {k: _mean([r["stats"][k] for r in rs if isinstance(r["stats"].get(k), (int, float))])
                              for k in MECHANICS if any(isinstance(r["stats"].get(k), (int, float)) for r in rs)},
            }
        gepas = [a for a in arms if a.startswith("gepa@")]
        best = max(gepas, key=lambda a: per_arm[a]["gain"]["point"]) if gepas else None
        ratios = {}
        if "race" in arms and gepas:
            ratios["race / gepa"] = stratified_bootstrap(groups, ratio_stat(pooled_gain("race"), best_gepa_gain(gepas)))
        for other in ("gepa+guard", "loop"):
            if "race" in arms and other in arms:
                ratios[f"race / {other}"] = stratified_bootstrap(groups, ratio_stat(pooled_gain("race"), pooled_gain(other)))
        out["main"][budget] = {"cells": len(bc), "families": sorted(groups), "seeds": sorted({c["seed"] for c in bc}),
                               "arms": per_arm, "gepa_best": best, "ratios": ratios}
    for kind in ("null", "harmful"):
        kc = [c for c in cells if c["kind"] == kind]
        for budget in sorted({c["budget"] for c in kc}):
            bc = [c for c in kc if c["budget"] == budget]
            rows = {}
            for a in arm_names(bc):
                rs = [c["arms"][a] for c in bc]
                hits = sum(r["non_baseline"] for r in rs) if kind == "null" else sum(r["final_gain"] < 0 for r in rs)
                low, high = wilson_interval(hits, len(rs))
                rows[a] = {"runs": len(rs), "count": hits, "rate": hits / len(rs), "wilson95": [low, high],
                           "non_baseline": sum(r["non_baseline"] for r in rs),
                           "rollouts_used": _mean([r["rollouts_used"] for r in rs]),
                           "proposer_calls": _mean([r["proposer_calls"] for r in rs])}
                if kind == "harmful":
                    rows[a]["mean_gain"] = _mean([r["final_gain"] for r in rs])
            out[kind][budget] = {"runs": len(bc), "families": sorted({c["family"] for c in bc}), "arms": rows,
                                 "test_pairs": (bc[0]["config"]["test_n"], bc[0]["config"]["test_repeats"])}
    return out


def _ci(b: dict[str, Any], fmt: str = "+.3f") -> str:
    if b["point"] is None or math.isnan(b["low"]):
        return "n/a"
    return f"{b['point']:{fmt}} [{b['low']:{fmt}}, {b['high']:{fmt}}]"


def _name(arm: str, best: str | None) -> str:
    return f"{arm} (gepa: best val size)" if arm == best else arm


def markdown(summary: dict[str, Any], header: list[str]) -> str:
    """The tables of `summary` as Markdown (summary.md)."""
    lines = ["# race vs GEPA on the synthetic testbed (bench/vs_gepa.py)", "", *header, ""]
    if summary["main"]:
        lines += [("## Pooled test gain per optimiser (95% interval: bootstrap stratified by family, "
                  f"{BOOTSTRAP_RESAMPLES} resamples)"), "",
                  ("| budget | optimiser | pooled test gain [95% CI] | runs gain > 0 / < 0 | non-baseline returns "
                  "| rollouts used (mean) | proposer calls (mean) | proposer tokens (mean) |"), "|" + "---|" * 8]
        for budget, s in summary["main"].items():
            for a, r in s["arms"].items():
                lines.append(f"| {budget} | {_name(a, s['gepa_best'])} | {_ci(r['gain'])} | {r['gain_above_0']} / "
                             f"{r['gain_below_0']} of {r['runs']} | {r['non_baseline']} | {r['rollouts_used']:.1f} "
                             f"| {r['proposer_calls']:.1f} | {r['proposer_tokens']:.0f} |")
        lines += ["", "gepa: the best of its val sizes by pooled test gain at each budget: "
                  + ", ".join(f"{b}: {s['gepa_best']}" for b, s in summary["main"].items()), "",
                  "## Ratios of pooled test gain (race / gepa: gepa at its best val size, chosen again in each resample)",
                  "", "| budget | ratio | point | 95% interval | resamples with the denominator <= 0 |", "|---|---|---|---|---|"]
        for budget, s in summary["main"].items():
            for name, b in s["ratios"].items():
                point = "n/a" if b["point"] is None else f"{b['point']:.2f}"
                interval = "n/a" if math.isnan(b["low"]) else f"[{b['low']:.2f}, {b['high']:.2f}]"
                lines.append(f"| {budget} | {name} | {point} | {interval} | {b['undefined']} of {b['resamples']} |")
        lines += ["", "## Mean test gain per family", ""]
        for budget, s in summary["main"].items():
            arms = list(s["arms"])
            lines += [f"Budget {budget} ({len(s['seeds'])} seeds: {', '.join(map(str, s['seeds']))}):", "",
                      "| family | " + " | ".join(arms) + " |", "|" + "---|" * (len(arms) + 1)]
            for fam in s["families"]:
                lines.append(f"| {fam} | " + " | ".join(f"{s['arms'][a]['by_family'][fam]:+.3f}" for a in arms) + " |")
            lines.append("")
        lines += ["## What each optimiser's machinery did (means per run)", "",
                  "| budget | optimiser | " + " | ".join(MECHANICS) + " |", "|" + "---|" * (len(MECHANICS) + 2)]
        for budget, s in summary["main"].items():
            for a, r in s["arms"].items():
                m = r["mechanics"]
                lines.append(f"| {budget} | {a} | " + " | ".join(f"{m[k]:.1f}" if k in m else "" for k in MECHANICS) + " |")
        lines.append("")
    for kind, title, what in (("null", "Null proposer: every proposal a no-op text edit",
                               "runs returning a non-baseline harness"),
                              ("harmful", "Harmful proposer: every proposal contradicts a rule of the family",
                               "runs with test gain < 0")):
        if not summary[kind]:
            continue
        lines += [f"## {title}", "", (f"| budget | optimiser | runs | {what} | rate [Wilson 95%] | non-baseline "
                  f"| rollouts used (mean) |"), "|" + "---|" * 7]
        for budget, s in summary[kind].items():
            for a, r in s["arms"].items():
                lo, hi = r["wilson95"]
                lines.append(f"| {budget} | {a} | {r['runs']} | {r['count']} | {r['rate']:.3f} [{lo:.3f}, {hi:.3f}] "
                             f"| {r['non_baseline']} | {r['rollouts_used']:.1f} |")
        any_budget = next(iter(summary[kind].values()))
        note = (f"Families (rotated over the runs): {', '.join(any_budget['families'])}.")
        if kind == "harmful":
            n, reps = any_budget["test_pairs"]
            note += (f" Test gain on the first {n if n is not None else 'all'} test instances x {reps} repeats "
                     "(a run returning the baseline gains exactly 0).")
        lines += ["", note, ""]
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> Path | None:
    """Pooled test gain against the budget, per optimiser, with its interval (needs matplotlib)."""
    if len(summary["main"]) < 1:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    budgets = list(summary["main"])
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for a in next(iter(summary["main"].values()))["arms"]:
        pts = [(b, summary["main"][b]["arms"][a]["gain"]) for b in budgets if a in summary["main"][b]["arms"]]
        ax.errorbar([b for b, _ in pts], [g["point"] for _, g in pts],
                    yerr=[[g["point"] - g["low"] for _, g in pts], [g["high"] - g["point"] for _, g in pts]],
                    label=a, marker="o", capsize=3)
    ax.set_xscale("log")
    ax.set_xlabel("rollout budget")
    ax.set_ylabel("pooled test gain")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=110)
    plt.close(fig)
    return path.with_suffix(".png")


# ------------------------------------------------------------------ the command
def parse_seeds(text: str) -> list[int]:
    """`--seeds`: a count N (seeds 0..N-1) or a comma-separated list of seeds ("3," is the one seed 3)."""
    text = text.strip()
    if "," in text:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    else:
        seeds = list(range(int(text)))
    if not seeds or any(s < 0 for s in seeds):
        raise ValueError(f"--seeds takes a count >= 1 or a list of seeds >= 0, got {text!r}")
    return list(dict.fromkeys(seeds))


def parse_ints(text: str, what: str) -> list[int]:
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{what} takes positive integers, comma-separated, got {text!r}")
    return list(dict.fromkeys(values))


def cell_key(c: Config | dict[str, Any]) -> tuple[str, str, int, int]:
    if isinstance(c, Config):
        return c.kind, c.family, c.seed, c.budget
    return c.get("kind", "main"), c.get("family"), c.get("seed"), c.get("budget")


def build_configs(families: list[str], seeds: list[int], budgets: list[int], null_runs: int, harmful_runs: int,
                  arm_families: list[str], arm_test_n: int, harmful_families: list[str] | None = None,
                  **settings: Any) -> list[Config]:
    """The cells of one invocation: every (family, seed) of the comparison at every budget, then the null
    and harmful runs at every budget (families rotating over the runs)."""
    configs = [Config(family=f, seed=s, budget=b, **settings) for b in budgets for f in families for s in seeds]
    arm = {**settings, "arms": ARM_OPTIMISERS, "gepa_val_sizes": (settings.get("val_n", Config.val_n),)}
    for kind, runs, base, fams in (("null", null_runs, NULL_SEED_BASE, arm_families),
                                   ("harmful", harmful_runs, HARMFUL_SEED_BASE, harmful_families or arm_families)):
        configs += [Config(family=fams[r % len(fams)], seed=base + r, budget=b, kind=kind,
                           **{**arm, "test_n": arm_test_n if kind == "harmful" else 0})
                    for b in budgets for r in range(runs)]
    return configs


def finished_cells(path: Path, configs: list[Config]) -> list[dict[str, Any]]:
    """The cells of `path` (an earlier, possibly interrupted run) whose config is one of `configs`
    exactly, in the order of `configs`; cells of other settings and a torn last line are dropped."""
    wanted = {cell_key(c): json.loads(json.dumps(dataclasses.asdict(c))) for c in configs}
    found: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for cell in read_cells(path):
        key = cell_key(cell)
        if key in wanted and wanted[key] == {"screen": 0, **cell.get("config", {})}:  # cells from before `screen`
            found[key] = cell
    return [found[k] for k in wanted if k in found]


def check(configs: list[Config]) -> None:
    """Why the cells cannot run (ValueError): a val size the split cannot hold, or a budget too small for one
    guard decision of the race."""
    from coevolve.agents.meta.race import validate_search
    from coevolve.tasks import get_family

    for cfg in {(c.family, c.budget, c.val_n, c.gepa_val_sizes, c.arms): c for c in configs}.values():
        split = get_family(cfg.family).split_sizes["val"]
        too_big = [v for v in cfg.gepa_val_sizes if v > split] if "gepa" in cfg.arms else []
        if too_big:
            raise ValueError(f"gepa val sizes {too_big} exceed the val split of {cfg.family} ({split})")
        if "race" in cfg.arms or "gepa+guard" in cfg.arms:
            validate_search(evolve_config(cfg, "race"), split)


def main(argv: list[str] | None = None) -> None:
    from coevolve.tasks import family_names

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="all", help="comma-separated, or all")
    ap.add_argument("--seeds", default="3", help="a count N (seeds 0..N-1) or a comma-separated list of seeds")
    ap.add_argument("--budgets", default="80", help="rollouts per optimiser run, comma-separated (a budget curve)")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--val-n", type=int, default=12, help="the race's, the loop's and gepa+guard's val instances")
    ap.add_argument("--val-seeds", type=int, default=2)
    ap.add_argument("--gepa-val-sizes", default="6,12,25", help="GEPA's val instances, one run each")
    ap.add_argument("--train-batch", type=int, default=10)
    ap.add_argument("--minibatch", type=int, default=3)
    ap.add_argument("--screen", type=int, default=0, help="the race's screen N (0: off): a child races only if it passes one of its parent's first N train failures")
    ap.add_argument("--admit", default="race", choices=("race", "gate", "chain"),
                    help="how the race admits a child: won on val pairs, passed the screen, or passed the screen and is the next parent")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--test-repeats", type=int, default=2)
    ap.add_argument("--no-merge", action="store_true")
    ap.add_argument("--no-main", action="store_true", help="only the null and harmful runs (the comparison's cells run elsewhere)")
    ap.add_argument("--null-runs", type=int, default=200, help="null-proposer runs per budget (0: none)")
    ap.add_argument("--harmful-runs", type=int, default=None, help="harmful-proposer runs per budget (default: --null-runs)")
    ap.add_argument("--arm-families", default="all", help="families the null and harmful runs rotate over")
    ap.add_argument("--harmful-families", default=None, help="families the harmful runs rotate over (default: --arm-families)")
    ap.add_argument("--arm-test-n", type=int, default=20, help="test instances of the harmful arm's test gain")
    ap.add_argument("--proposer", default="synthetic/meta")
    ap.add_argument("--jobs", type=int, default=1, help="cells run in this many processes")
    ap.add_argument("--out", default="bench-out/vs-gepa")
    ap.add_argument("--from-cells", help="summarise the cells of an earlier run (its cells.jsonl) without running")
    args = ap.parse_args(argv)

    def families(text: str) -> list[str]:
        fams = family_names() if text == "all" else [f.strip() for f in text.split(",") if f.strip()]
        unknown = [f for f in fams if f not in family_names()]
        if unknown or not fams:
            ap.error(f"unknown families: {', '.join(unknown) or text!r} (families: {', '.join(family_names())})")
        return fams

    out = Path(args.out)
    started = time.monotonic()
    if args.from_cells:
        cells = read_cells(Path(args.from_cells))
        if not cells:
            ap.error(f"no cells in {args.from_cells}")
    else:
        try:
            arms = tuple(dict.fromkeys(a.strip() for a in args.arms.split(",") if a.strip()))
            if not arms or any(a not in ARMS for a in arms):
                raise ValueError(f"--arms takes {', '.join(ARMS)}, comma-separated; got {args.arms!r}")
            if args.null_runs < 0 or (args.harmful_runs or 0) < 0 or args.jobs < 1 or args.arm_test_n < 1:
                raise ValueError("--null-runs and --harmful-runs must be >= 0, --jobs and --arm-test-n >= 1")
            configs = build_configs(
                families(args.families), parse_seeds(args.seeds), parse_ints(args.budgets, "--budgets"),
                args.null_runs, args.null_runs if args.harmful_runs is None else args.harmful_runs,
                families(args.arm_families), args.arm_test_n,
                families(args.harmful_families) if args.harmful_families else None, proposer=args.proposer, val_n=args.val_n,
                val_seeds=args.val_seeds, gepa_val_sizes=tuple(parse_ints(args.gepa_val_sizes, "--gepa-val-sizes")),
                train_batch=args.train_batch, minibatch=args.minibatch, use_merge=not args.no_merge, alpha=args.alpha,
                arms=arms, test_repeats=args.test_repeats, screen=args.screen, admit=args.admit)
            if args.no_main:
                configs = [c for c in configs if c.kind != "main"]
            check(configs)
        except ValueError as e:
            ap.error(str(e))
        out.mkdir(parents=True, exist_ok=True)
        cells = run_cells(configs, out / "cells.jsonl", args.jobs, started)
    summary = summarise(cells)
    from coevolve.analysis.summary import TESTBED_NOTICE

    c0 = next((c for c in cells if c["kind"] == "main"), cells[0])["config"]
    tested = "every test instance" if c0["test_n"] is None else f"{c0['test_n']} test instances"
    header = [
        f"Command: `{' '.join([Path(sys.executable).name, *(argv if argv is not None else sys.argv)])}`",
        "",
        (f"Settings: val {c0['val_n']} instances x {c0['val_seeds']} seeds for race, loop and gepa+guard (the guard "
        f"draws from the val split after them), gepa at {', '.join(map(str, c0['gepa_val_sizes']))} val instances; "
        f"train batch {c0['train_batch']}, GEPA minibatch {c0['minibatch']}, merge {'on' if c0['use_merge'] else 'off'}, "
        f"alpha {c0['alpha']}; test: {tested} x "
        f"{c0['test_repeats']} repeats, paired with the baseline; proposer {c0['proposer']}; candidates held to "
        "prompt sections and recipes on all sides."),
        "",
        f"Note: {TESTBED_NOTICE}.",
    ]
    out.mkdir(parents=True, exist_ok=True)
    figure = plot(summary, out / "vs-gepa")
    text = markdown(summary, header + (["", f"Figure: {figure.name}"] if figure else []))
    (out / "summary.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps({"summary": summary, "cells": len(cells), "notice": TESTBED_NOTICE,
                                                  "wall_seconds": round(time.monotonic() - started, 1)}, indent=1))
    print(text)


def run_cells(configs: list[Config], path: Path, jobs: int, started: float) -> list[dict[str, Any]]:
    """Run the cells of `configs` not already in `path` (a rerun goes on where a stopped run ended), each
    written as it finishes; all of them, in config order."""
    cells = finished_cells(path, configs)
    if cells:
        print(f"resuming: {len(cells)} of {len(configs)} cells already in {path}", file=sys.stderr, flush=True)
    done = {cell_key(c) for c in cells}
    todo = [c for c in configs if cell_key(c) not in done]
    with path.open("w") as fh:
        for c in cells:
            write_cell(fh, c)
        if jobs > 1 and len(todo) > 1:
            with ProcessPoolExecutor(jobs) as pool:
                for fut in as_completed([pool.submit(compare, c) for c in todo]):
                    cell = fut.result()
                    cells.append(cell)
                    write_cell(fh, cell)
                    _progress(cell, started)
        else:
            for cfg in todo:
                cell = compare(cfg)
                cells.append(cell)
                write_cell(fh, cell)
                _progress(cell, started)
    order = {cell_key(c): i for i, c in enumerate(configs)}
    return sorted(cells, key=lambda c: order[cell_key(c)])


def _progress(cell: dict[str, Any], started: float) -> None:
    parts = []
    for name, a in cell["arms"].items():
        gain = f"{a['final_gain']:+.3f}" if "final_gain" in a else ("non-baseline" if a["non_baseline"] else "baseline")
        parts.append(f"{name} {gain} ({a['rollouts_used']} rollouts)")
    print(f"  {cell['kind']} {cell['family']} seed {cell['seed']} budget {cell['budget']}: {' | '.join(parts)}; "
          f"{cell['seconds']:.0f} s [{time.monotonic() - started:.0f} s]", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
