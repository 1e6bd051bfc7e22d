"""Harness evolution side by side with GEPA (issue 20): the same proposer, tasks, seeds and rollout
budget, so that only the search and the acceptance differ.

For each family and each seed of the comparison, two optimisers start from the family's baseline
harness:

- **coevolve**: `coevolve.agents.meta.loop.HarnessEvolution`, the loop `coevolve evolve` runs (train batch ->
  failures -> proposer -> k candidates compared with the current harness on paired val instances and
  seeds, early-stopped, family-wise sign test; plateau stop);
- **GEPA** (`gepa` 0.1.4, `gepa.optimize`): its Pareto-front candidate selection over the val pairs,
  its minibatch gate (a child is evaluated on the parent's train minibatch and enters the pool only on a
  strict improvement of the minibatch sum, then pays a full val evaluation), and merge (`use_merge`).
  It reaches the task through a `GEPAAdapter` (`ProjectAdapter`): `evaluate` runs the project's
  executor, `make_reflective_dataset` builds the failure evidence the project's proposer reads
  (`coevolve.agents.meta.evidence`), and the project's proposer (`synthetic/meta` by default) sits behind
  GEPA's custom proposal hook.

Both sides see the same val pairs (val instances x val seeds), the same train split, the same proposer
and seeds, and spend rollouts through one `RolloutMeter` each with the same budget: every rollout is
counted, train minibatches and validation alike, and the batch that would pass the budget is cut to
the rollouts left (those run and count; their results are not used) and ends the run, on both sides.
The held-out test split (never seen by either optimiser, at seeds neither used) measures the
harnesses: the gain over the baseline of the harness each optimiser would return at every point of its
run, paired on identical test instances and seeds.

Candidates are held to prompt sections and recipes on both sides: GEPA evolves named text components
(here `prompt_sections` and `recipes`, JSON texts that decode back to the harness), so an edit that
adds a hook, a tool, a context policy, decoding or a turn limit cannot be a GEPA candidate; the same
filter (`TextOnlyProposer`) rejects such edits for coevolve as invalid proposals.

Synthetic models are the project's testbed: the figures measure the optimisers' search and acceptance
on it, not real models.

    .venv/bin/python bench/vs_gepa.py --families all --seeds 3 --budget 200 --out bench-out/vs-gepa

`--loop-variants stop,continue` runs the loop once per `on_plateau` setting beside GEPA in the same
invocation (the same seeds, budget, val, train and test instances and the same proposer), as the
optimisers `coevolve` (stop, the default) and `coevolve-continue`, and prints each against GEPA and
continue / stop: a before/after of the loop change measured on one bench run. The variants
`stop+screen` and `continue+screen` run the loop with its screen on (`EvolveConfig.screen` = GEPA's
`--minibatch`, 3 by default: a candidate reaches the paired val comparison only if it passes one of the
first 3 train failures it was proposed from, GEPA's minibatch gate in the loop's terms), as
`coevolve-stop+screen` and `coevolve-continue+screen`; every variant is printed against GEPA and
against plain `coevolve` (stop):

    .venv/bin/python bench/vs_gepa.py --families all --seeds 2 --budget 80 --val-n 6 --val-seeds 2 \
        --train-batch 8 --loop-variants stop,continue,stop+screen,continue+screen --out bench-out/vs-gepa-screen
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from coevolve.agents.meta.acceptance import sign_test_p
from coevolve.agents.meta.evidence import build_evidence, describe_failure
from coevolve.agents.meta.loop import BudgetExhausted
from coevolve.agents.meta.proposer import Proposal
from coevolve.analysis.cells import read_cells, write_cell
from coevolve.edits import edit_to_json, validate_harness
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
Z95 = 1.959964
TEST_SEED_BASE = 900_000  # test seeds: far from every val seed (seed + r) and train seed (seed + iteration)
RETEST_ALPHA = 0.05
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


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
    """The project's proposer with its edits held to prompt sections and recipes: any other edit is an
    invalid proposal (the loop journals it and spends nothing on it)."""

    def __init__(self, proposer: Any):
        self.proposer = proposer
        self.held_out = 0

    def propose(self, evidence: dict[str, Any], harness: Harness, k: int, seed: int):
        proposals, used = self.proposer.propose(evidence, harness, k, seed)
        out = []
        for p in proposals:
            if p.error is None and not text_only(p.edit):
                self.held_out += 1
                p = dataclasses.replace(p, candidate=None, error=HELD_OUT)
            out.append(p)
        return out, used


# ------------------------------------------------------------------ the budget
class RolloutMeter:
    """Every rollout of one optimiser passes here (an `coevolve.agents.meta.loop.Evaluator`). At most `budget`
    rollouts run: the batch that would pass it runs the rollouts left, counts them and raises
    `BudgetExhausted` (the loop ends on it; GEPA's engine skips the iteration and its stopper ends)."""

    def __init__(self, evaluator: Any, budget: int):
        self.evaluator = evaluator
        self.budget = budget
        self.used = 0
        self.by_split: dict[str, int] = {}
        self.cut = 0  # rollouts of the final, cut batch (run and counted, results unused)

    @property
    def exhausted(self) -> bool:
        return self.used >= self.budget

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
        self.stats = {"proposer_calls": 0, "no_proposal": 0, "gate_accepts": 0, "gate_rejects": 0,
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
        parent = self.harness(candidate)
        records = next(iter(reflective_dataset.values()), [])
        evidence = build_evidence(self.family, parent, [], self.history, self.evidence_failures)
        evidence["failures"] = [r["failure"] for r in records[: self.evidence_failures]]
        evidence["failures_total"] = len(records)
        self.stats["proposer_calls"] += 1
        proposals, _ = self.proposer.propose(evidence, parent, self.k, seed=self.seed + self.iteration)
        chosen: Proposal | None = None
        for p in proposals:
            if p.error is None and p.candidate.id not in self.tried:
                chosen = p
                break
        if chosen is None:
            self.stats["no_proposal"] += 1
            raise NoProposal("no untried prompt-section or recipe edit")
        self.tried.add(chosen.candidate.id)
        self.harnesses[chosen.candidate.id] = chosen.candidate
        entry = {**edit_to_json(chosen.edit), "iteration": self.iteration, "base": parent.id[:12], "outcome": "pending"}
        self.history.append(entry)
        self._pending[self.iteration] = entry
        return harness_to_candidate(chosen.candidate)

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
    family: str
    seed: int = 0
    budget: int = 200
    model: str = "synthetic/weak"
    proposer: str = "synthetic/meta"
    val_n: int = 10
    val_seeds: int = 2
    train_batch: int = 10
    candidates: int = 3
    evidence_failures: int = 8
    minibatch: int = 3  # GEPA's reflection_minibatch_size (its default)
    use_merge: bool = True
    plateau: int = 3
    on_plateau: str = "stop"  # the loop's setting for run_coevolve; compare() runs every one of loop_variants
    loop_variants: tuple[str, ...] = ("stop",)  # of LOOP_VARIANTS: on_plateau, "+screen" for the screen at `minibatch`
    test_n: int = 20
    test_repeats: int = 2


@dataclass
class Run:
    """One optimiser's run: what it spent, what it accepted, and the harness it would return after each
    rollout count (`timeline`: (rollouts, harness id, its val score))."""

    optimiser: str
    used: int
    own_count: int  # the optimiser's own count of rollouts (loop spend / GEPA total_metric_calls)
    by_split: dict[str, int]
    cut: int
    stop: str
    timeline: list[tuple[int, str, float]]
    accepted: list[tuple[str, str]]  # (child id, parent id), in order
    stats: dict[str, Any] = field(default_factory=dict)


def _services(cfg: Config):
    from coevolve.agents.local import LocalEvaluator
    from coevolve.agents.meta import LLMProposer
    from coevolve.services.gateway import Gateway
    from coevolve.tasks import get_family

    gateway = Gateway()
    evaluator = LocalEvaluator(client=gateway)
    proposer = LLMProposer(cfg.proposer, lambda m, msgs, tools, s: gateway.complete(m, msgs, tools, seed=s),
                           get_family(cfg.family).handbook, windows=gateway.budget)
    return evaluator, TextOnlyProposer(proposer)


def run_coevolve(cfg: Config, evaluator: Any, proposer: TextOnlyProposer, root: Path,
                 screen: int = 0) -> tuple[Run, dict[str, Harness]]:
    """The loop at `cfg.on_plateau`, with its screen at `screen` train failures (0: off)."""
    from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution
    from coevolve.store.store import HarnessStore

    meter = RolloutMeter(evaluator, cfg.budget)
    # the meter holds the rollout budget (exact cut); the loop's own limits are out of its way
    config = EvolveConfig(
        family=cfg.family, model=cfg.model, proposer=cfg.proposer, seed=cfg.seed, train_batch=cfg.train_batch,
        val_n=cfg.val_n, val_seeds=cfg.val_seeds, candidates=cfg.candidates, evidence_failures=cfg.evidence_failures,
        plateau=cfg.plateau, on_plateau=cfg.on_plateau, screen=screen, budget=Budget(iterations=10_000, rollouts=cfg.budget + 10**9, seconds=10**9, usd=10**9),
    )
    store = HarnessStore(root / f"coevolve-{cfg.family}-{cfg.seed}")
    run_id = store.create_run("evolve", config.to_json())
    held_before = proposer.held_out
    r = HarnessEvolution(config, meter, proposer, store, run_id).run()
    harnesses = {r.baseline_id: store.get_harness(r.baseline_id)}
    timeline = [(r.gain_curve[0][0], r.baseline_id, r.gain_curve[0][1])]
    accepted, parent = [], r.baseline_id
    for (rollouts, val), a in zip(r.gain_curve[1:], r.accepted):
        harnesses[a["harness_id"]] = store.get_harness(a["harness_id"])
        timeline.append((rollouts, a["harness_id"], val))
        accepted.append((a["harness_id"], parent))
        parent = a["harness_id"]
    stats = {"iterations": r.iterations, "accepted": len(r.accepted), "rejected": r.rejected, "invalid": r.invalid,
             "held_out": proposer.held_out - held_before, "plateaus": r.plateaus}
    if screen:  # what the screen did (only for the screened variants: the other cells stay as they were)
        outcomes = [e.payload["outcome"] for e in store.events(run_id, "decision")]
        stats |= {"screen": screen, "screened_out": outcomes.count("screened out"),
                  "reached_val": len(outcomes) - outcomes.count("screened out"),
                  "screen_rollouts": sum(n for name, _, n in store.trajectory_batches(run_id) if "-screen-" in name)}
    return Run(loop_name(cfg.on_plateau, bool(screen)), meter.used, r.rollouts_used, dict(meter.by_split), meter.cut, r.stop_reason, timeline,
               accepted, stats), harnesses


LOOP_VARIANTS = ("stop", "continue", "stop+screen", "continue+screen")


def loop_variant(name: str) -> tuple[str, bool]:
    """A `--loop-variants` name as (on_plateau, screen on)."""
    if name not in LOOP_VARIANTS:
        raise ValueError(f"unknown loop variant {name!r} (variants: {', '.join(LOOP_VARIANTS)})")
    on_plateau, _, screen = name.partition("+")
    return on_plateau, bool(screen)


def loop_name(on_plateau: str, screen: bool = False) -> str:
    """The loop's optimiser name in cells and tables: `coevolve` for the default (stop, no screen), as
    before; `coevolve-continue`, `coevolve-stop+screen`, `coevolve-continue+screen`."""
    if on_plateau == "stop" and not screen:
        return "coevolve"
    return f"coevolve-{on_plateau}{'+screen' if screen else ''}"


def optimisers(cells: list[dict[str, Any]]) -> list[str]:
    """The optimisers the cells hold: the loop's variants (in LOOP_VARIANTS order, stop first), then GEPA."""
    names = [k for k in cells[0] if k == "coevolve" or k.startswith("coevolve-")]
    order = [loop_name(*loop_variant(v)) for v in LOOP_VARIANTS]
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n)) + ["gepa"]


def run_gepa(cfg: Config, evaluator: Any, proposer: TextOnlyProposer) -> tuple[Run, dict[str, Harness]]:
    import gepa

    from coevolve.tasks import get_family

    family = get_family(cfg.family)
    baseline = family.baseline_harness()
    meter = RolloutMeter(evaluator, cfg.budget)
    adapter = ProjectAdapter(cfg.family, baseline, meter, proposer, cfg.model, cfg.seed, cfg.candidates,
                             cfg.evidence_failures)
    instances = family.generate("val", cfg.val_n)
    valset = [Case(inst, cfg.seed + r) for inst in instances for r in range(cfg.val_seeds)]  # the loop's val pairs
    trainset = [Case(inst) for inst in family.generate("train")]
    logger = _Quiet()
    try:
        result = gepa.optimize(
            seed_candidate=harness_to_candidate(baseline), trainset=trainset, valset=valset, adapter=adapter,
            custom_candidate_proposer=adapter.propose_texts, candidate_selection_strategy="pareto",
            module_selector="all", reflection_minibatch_size=cfg.minibatch, use_merge=cfg.use_merge,
            max_metric_calls=cfg.budget, stop_callbacks=[meter], logger=logger, callbacks=[adapter],
            seed=cfg.seed, raise_on_exception=False, skip_perfect_score=True, perfect_score=1.0,
            track_best_outputs=False, display_progress_bar=False,
        )
    except BudgetExhausted:  # the budget ran out in the seed's own val evaluation
        result = None
    if result is None:
        timeline = []
        own, accepted, stats = meter.used, [], {"pool": 1, "pareto_front": 1}
        stop = "budget:rollouts (in the baseline's val evaluation)"
    else:
        ids = [adapter.harness(c).id for c in result.candidates]
        n_val = len(valset)
        # a candidate becomes the optimiser's answer once its val evaluation is in, if it is the best so far
        best, timeline = 0, []
        for i, (found, score) in enumerate(zip(result.discovery_eval_counts, result.val_aggregate_scores)):
            if i == 0:
                timeline.append((n_val, ids[0], score))
            elif score > result.val_aggregate_scores[best]:
                best = i
                timeline.append((found + n_val, ids[i], score))
        accepted = []
        for i in range(1, len(ids)):
            parents = [p for p in result.parents[i] if p is not None]
            parent = max(parents, key=lambda p: result.val_aggregate_scores[p]) if parents else 0
            accepted.append((ids[i], ids[parent]))
        front = set().union(*result.per_val_instance_best_candidates.values())
        stats = {**adapter.stats, "pool": len(ids), "pareto_front": len(front),
                 "front_candidates": sorted(front), "iterations": adapter.iteration}
        own = result.total_metric_calls or 0
        stop = "budget:rollouts" if meter.exhausted else "stopped"
    return Run("gepa", meter.used, own, dict(meter.by_split), meter.cut, stop, timeline, accepted,
               stats), adapter.harnesses


# ------------------------------------------------------------------ measuring on the test split
class TestSplit:
    """Each harness once on the held-out test pairs (test instances x repeat seeds), cached by id."""

    def __init__(self, cfg: Config, evaluator: Any):
        from coevolve.tasks import get_family

        instances = get_family(cfg.family).generate("test", cfg.test_n)
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


def paired_gain(a: list[bool], b: list[bool]) -> tuple[float, float, float, int, int]:
    """Mean of b - a over the pairs, its 95% normal interval, wins (b only) and losses (a only)."""
    diffs = [int(y) - int(x) for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = statistics.pstdev(diffs) if n > 1 else 0.0
    half = Z95 * sd / math.sqrt(n) if n > 1 else 0.0
    return mean, mean - half, mean + half, diffs.count(1), diffs.count(-1)


def rollouts_to_90pct(curve: list[tuple[int, float]]) -> tuple[int, float]:
    """(rollouts when the val score first reached baseline + 90% of the final gain, the final gain)."""
    base, final = curve[0][1], curve[-1][1]
    target = base + 0.9 * (final - base)
    return next(r for r, v in curve if v >= target - 1e-9), final - base


def measure(run: Run, harnesses: dict[str, Harness], test: TestSplit, baseline: Harness, budget: int) -> dict[str, Any]:
    base = test.outcomes(baseline)
    out: dict[str, Any] = {
        "optimiser": run.optimiser, "rollouts_used": run.used, "own_count": run.own_count, "by_split": run.by_split,
        "cut_batch": run.cut, "stop": run.stop, "stats": run.stats,
    }
    if not run.timeline:
        run.timeline = [(0, baseline.id, float("nan"))]
    curve = []  # (rollouts, test gain of the harness it would return from then on)
    for rollouts, hid, _ in run.timeline:
        gain = paired_gain(base, test.outcomes(harnesses[hid]))[0]
        curve.append((rollouts, gain))
    final = test.outcomes(harnesses[run.timeline[-1][1]])
    mean, low, high, wins, losses = paired_gain(base, final)
    # area under the step curve of test gain over [0, budget], per rollout (the mean gain over the budget)
    area = 0.0
    for (r0, g), (r1, _) in zip(curve, curve[1:] + [(budget, 0.0)]):
        area += g * (min(r1, budget) - min(r0, budget))
    val_curve = [(r, v) for r, _, v in run.timeline]
    to90, val_gain = rollouts_to_90pct(val_curve) if not math.isnan(val_curve[0][1]) else (0, 0.0)
    false_accepts, retests = 0, []
    for child, parent in run.accepted:
        g, _, _, w, lo_n = paired_gain(test.outcomes(harnesses[parent]), test.outcomes(harnesses[child]))
        p = sign_test_p(w, lo_n)
        null = not (w > lo_n and p < RETEST_ALPHA)
        false_accepts += null
        retests.append({"child": child[:12], "parent": parent[:12], "gain": round(g, 4), "wins": w, "losses": lo_n,
                        "p": round(p, 4), "null": null})
    out.update({
        "baseline_test": sum(base) / len(base), "final_test": sum(final) / len(final),
        "final_gain": mean, "final_gain_ci95": [low, high], "final_wins": wins, "final_losses": losses,
        "final_harness": run.timeline[-1][1][:12],
        "val_gain": val_gain, "rollouts_to_90pct_val": to90 if val_gain > 0 else None,  # None: no val gain
        "auc_test_gain": area / budget,
        "test_curve": [(r, round(g, 4)) for r, g in curve], "val_curve": [(r, round(v, 4)) for r, v in val_curve],
        "accepted": len(run.accepted), "false_accepts": false_accepts, "retests": retests,
    })
    return out


def compare(cfg: Config, workdir: Path | None = None) -> dict[str, Any]:
    """One seed of the comparison on one family: both optimisers, then the test split."""
    from coevolve.services.logs import configure_logging
    from coevolve.tasks import get_family

    configure_logging(json_lines=False, level="error")
    root = Path(tempfile.mkdtemp(prefix="vs-gepa-", dir=workdir))
    t0 = time.monotonic()
    try:
        evaluator, proposer = _services(cfg)
        loops = []
        for v in cfg.loop_variants:
            on_plateau, screened = loop_variant(v)
            loops.append(run_coevolve(dataclasses.replace(cfg, on_plateau=on_plateau), evaluator, proposer, root,
                                      screen=cfg.minibatch if screened else 0))
        ge, ge_h = run_gepa(cfg, evaluator, proposer)
        t_runs = time.monotonic() - t0
        test = TestSplit(cfg, evaluator)  # one test split: every optimiser measured on the same pairs
        baseline = get_family(cfg.family).baseline_harness()
        results = {run.optimiser: measure(run, hs, test, baseline, cfg.budget) for run, hs in loops}
        results["gepa"] = measure(ge, ge_h, test, baseline, cfg.budget)
        return {"family": cfg.family, "seed": cfg.seed, "config": dataclasses.asdict(cfg), **results,
                "test_rollouts": test.rollouts, "seconds_runs": round(t_runs, 1),
                "seconds": round(time.monotonic() - t0, 1)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ the report
def mean_ci(xs: list[float]) -> tuple[float, float, float]:
    """Mean over the comparison's seeds with a 95% t interval (the run-to-run spread)."""
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, m, m
    half = T95.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def ratio(a: float, b: float) -> str:
    if math.isnan(a) or math.isnan(b):
        return "n/a"
    if b == 0:
        return "n/a" if a == 0 else ("inf" if a > 0 else "-inf")
    return f"{a / b:.2f}"


def summarise(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for fam in dict.fromkeys(c["family"] for c in cells):
        fc = [c for c in cells if c["family"] == fam]
        row: dict[str, Any] = {"family": fam, "seeds": len(fc)}
        opts = optimisers(fc)
        for opt in opts:
            rs = [c[opt] for c in fc]
            row[opt] = {
                "final_gain": mean_ci([r["final_gain"] for r in rs]),
                "final_gain_sd": statistics.stdev([r["final_gain"] for r in rs]) if len(rs) > 1 else 0.0,
                "final_gain_per_seed": [round(r["final_gain"], 3) for r in rs],
                "rollouts_to_90pct_val": mean_ci([float(r["rollouts_to_90pct_val"]) for r in rs
                                                  if r["val_gain"] > 0] or [math.nan]),
                "runs_with_val_gain": sum(r["val_gain"] > 0 for r in rs),
                "val_gain": mean_ci([r["val_gain"] for r in rs]),
                "auc_test_gain": mean_ci([r["auc_test_gain"] for r in rs]),
                "accepted": sum(r["accepted"] for r in rs),
                "false_accepts": sum(r["false_accepts"] for r in rs),
                "retest_not_positive": sum(sum(t["gain"] <= 0 for t in r["retests"]) for r in rs),
                "rollouts_used": sum(r["rollouts_used"] for r in rs) / len(rs),
            }
        row["ratio_pairs"] = {f"{a} / {b}": _ratios(row[a], row[b]) for a, b in _pairs(opts)}
        row["ratios"] = next(iter(row["ratio_pairs"].values()))  # coevolve / gepa, as before the variants
        rows.append(row)
    return rows


def _pairs(opts: list[str]) -> list[tuple[str, str]]:
    """Every loop variant against GEPA, then every other variant against plain `coevolve` (stop)."""
    loops = opts[:-1]
    return [(opt, "gepa") for opt in loops] + [(opt, "coevolve") for opt in loops if "coevolve" in loops and opt != "coevolve"]


def _ratios(c: dict[str, Any], g: dict[str, Any]) -> dict[str, str]:
    return {
        "final_gain": ratio(c["final_gain"][0], g["final_gain"][0]),
        "rollouts_to_90pct_val": ratio(c["rollouts_to_90pct_val"][0], g["rollouts_to_90pct_val"][0]),
        "auc_test_gain": ratio(c["auc_test_gain"][0], g["auc_test_gain"][0]),
        "false_accepts": ratio(c["false_accepts"], g["false_accepts"]),
        "retest_not_positive": ratio(c["retest_not_positive"], g["retest_not_positive"]),
    }


def pooled(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every (family, seed) cell: each optimiser's mean test gain and AUC, the runs with a test gain
    above and below zero, and the ratios of the loop's variants to GEPA and to the loop's default."""
    out: dict[str, Any] = {}
    for opt in optimisers(cells):
        rs = [c[opt] for c in cells]
        out[opt] = {"runs": len(rs), "final_gain": sum(r["final_gain"] for r in rs) / len(rs),
                    "auc_test_gain": sum(r["auc_test_gain"] for r in rs) / len(rs),
                    "gain_above_0": sum(r["final_gain"] > 0 for r in rs), "gain_below_0": sum(r["final_gain"] < 0 for r in rs),
                    "accepted": sum(r["accepted"] for r in rs), "false_accepts": sum(r["false_accepts"] for r in rs),
                    "rollouts_used": sum(r["rollouts_used"] for r in rs) / len(rs),
                    "stops": dict(Counter(r["stop"] for r in rs))}
    out["ratios"] = {f"{a} / {b}": {k: ratio(out[a][k], out[b][k]) for k in ("final_gain", "auc_test_gain")}
                     for a, b in _pairs(optimisers(cells))}
    return out


def mechanics(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """What each optimiser's machinery did, summed over the cells: GEPA's gate, merge and front, the
    loop's decisions and stops, and where the rollouts went."""
    def total(opt: str, key: str) -> int:
        return sum(int(c[opt]["stats"].get(key, 0)) for c in cells)

    def split(opt: str, name: str) -> int:
        return sum(c[opt]["by_split"].get(name, 0) for c in cells)

    return {
        "gepa": {k: total("gepa", k) for k in ("proposer_calls", "no_proposal", "gate_accepts", "gate_rejects",
                                                 "skipped_perfect", "merges_attempted", "merges_accepted",
                                                 "merges_rejected", "iterations")}
        | {"pool_mean": sum(c["gepa"]["stats"].get("pool", 1) for c in cells) / len(cells),
           "pareto_front_mean": sum(c["gepa"]["stats"].get("pareto_front", 1) for c in cells) / len(cells),
           "train_rollouts": split("gepa", "train"), "val_rollouts": split("gepa", "val")},
    } | {
        opt: {k: total(opt, k) for k in ("iterations", "accepted", "rejected", "invalid", "held_out", "plateaus")}
        | {"stops": dict(Counter(c[opt]["stop"] for c in cells)),
           "train_rollouts": split(opt, "train"), "val_rollouts": split(opt, "val")}
        | ({k: total(opt, k) for k in ("screened_out", "reached_val", "screen_rollouts")}
           if any("screen" in c[opt]["stats"] for c in cells) else {})
        for opt in optimisers(cells)[:-1]
    }


def table(rows: list[dict[str, Any]]) -> str:
    def ci(t: tuple[float, float, float], fmt: str = "+.3f") -> str:
        return f"{t[0]:{fmt}} [{t[1]:{fmt}}, {t[2]:{fmt}}]"

    head = ("| family | optimiser | test gain, mean [95% CI over seeds] | per seed | val gain | rollouts to 90% "
            "of val gain | AUC of test gain | false accepts / accepted | re-test gain <= 0 | rollouts used |")
    lines = [head, "|" + "---|" * 10]
    for row in rows:
        for opt in [k for k in row if k == "coevolve" or k.startswith("coevolve-")] + ["gepa"]:
            s = row[opt]
            lines.append(
                f"| {row['family']} | {opt} | {ci(s['final_gain'])} | {', '.join(f'{x:+.2f}' for x in s['final_gain_per_seed'])} "
                f"| {s['val_gain'][0]:+.3f} | {_to90(s)} | {ci(s['auc_test_gain'])} "
                f"| {s['false_accepts']} / {s['accepted']} | {s['retest_not_positive']} | {s['rollouts_used']:.0f} |"
            )
        for name, r in row.get("ratio_pairs", {"coevolve / gepa": row["ratios"]}).items():
            lines.append(f"| {row['family']} | **{name.replace('gepa', 'GEPA')}** | {r['final_gain']} | | | "
                         f"{r['rollouts_to_90pct_val']} | {r['auc_test_gain']} | {r['false_accepts']} "
                         f"| {r['retest_not_positive']} | |")
    return "\n".join(lines)


def _to90(s: dict[str, Any]) -> str:
    if not s["runs_with_val_gain"]:
        return "- (no val gain)"
    return f"{s['rollouts_to_90pct_val'][0]:.0f} ({s['runs_with_val_gain']} runs with a gain)"


COLOURS = {"coevolve": "tab:blue", "gepa": "tab:orange", "coevolve-continue": "tab:green",
           "coevolve-stop+screen": "tab:red", "coevolve-continue+screen": "tab:purple"}


def plot(cells: list[dict[str, Any]], budget: int, path: Path) -> Path:
    """Rollouts on x, test pass rate on y (mean over seeds of each optimiser's step curve), per family."""
    fams = list(dict.fromkeys(c["family"] for c in cells))
    xs = list(range(0, budget + 1, max(1, budget // 100)))

    def step(cell: dict[str, Any], opt: str) -> list[float]:
        base, curve = cell[opt]["baseline_test"], cell[opt]["test_curve"]
        ys = []
        for x in xs:
            g = next((g for r, g in reversed(curve) if r <= x), None)
            ys.append(base + g if g is not None else base)
        return ys

    opts = optimisers(cells)
    series = {fam: {opt: [sum(v) / len(v) for v in zip(*(step(c, opt) for c in cells if c["family"] == fam))]
                    for opt in opts} for fam in fams}
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _svg(series, xs, path.with_suffix(".svg"))
    cols = min(4, len(fams))
    rows_n = math.ceil(len(fams) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.6 * cols, 2.8 * rows_n), squeeze=False)
    for ax, fam in zip(axes.flat, fams):
        for opt in opts:
            ax.step(xs, series[fam][opt], where="post", label=opt, color=COLOURS.get(opt, "tab:green"))
        ax.set_title(fam)
        ax.set_xlabel("rollouts")
        ax.set_ylabel("test pass rate")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(fams):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("coevolve vs GEPA, synthetic testbed (mean over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=110)
    plt.close(fig)
    return path.with_suffix(".png")


def _svg(series: dict[str, dict[str, list[float]]], xs: list[int], path: Path) -> Path:
    w, h, pad = 300, 200, 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(series)}" height="{h}">']
    for k, (fam, opts) in enumerate(series.items()):
        ox = k * w
        parts.append(f'<text x="{ox + w / 2}" y="15" text-anchor="middle" font-size="12">{fam}</text>')
        for opt in opts:
            colour = {"coevolve": "#1f77b4", "gepa": "#ff7f0e", "coevolve-continue": "#2ca02c",
                      "coevolve-stop+screen": "#d62728", "coevolve-continue+screen": "#9467bd"}.get(opt, "#7f7f7f")
            pts = " ".join(f"{ox + pad + (w - 2 * pad) * x / xs[-1]:.1f},{h - pad - (h - 2 * pad) * y:.1f}"
                           for x, y in zip(xs, opts[opt]))
            parts.append(f'<polyline fill="none" stroke="{colour}" points="{pts}"/>')
    parts.append("</svg>")
    path.write_text("\n".join(parts))
    return path


def main() -> None:
    from coevolve.tasks import family_names

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="all", help="comma-separated, or all")
    ap.add_argument("--seeds", type=int, default=3, help="seeds of the whole comparison (0..N-1)")
    ap.add_argument("--budget", type=int, default=200, help="rollouts per optimiser run, every rollout counted")
    ap.add_argument("--val-n", type=int, default=10)
    ap.add_argument("--val-seeds", type=int, default=2)
    ap.add_argument("--train-batch", type=int, default=10)
    ap.add_argument("--minibatch", type=int, default=3)
    ap.add_argument("--test-n", type=int, default=20)
    ap.add_argument("--test-repeats", type=int, default=2)
    ap.add_argument("--no-merge", action="store_true")
    ap.add_argument("--loop-variants", default="stop",
                    help=f"the loop's variants to run beside GEPA, comma-separated, of {', '.join(LOOP_VARIANTS)} "
                         "(on_plateau; +screen: the loop's screen at --minibatch train failures)")
    ap.add_argument("--proposer", default="synthetic/meta")
    ap.add_argument("--jobs", type=int, default=1, help="(family, seed) cells run in this many processes")
    ap.add_argument("--out", default="bench-out/vs-gepa")
    ap.add_argument("--from-cells", help="summarise the cells of an earlier run (its cells.jsonl) without running")
    args = ap.parse_args()
    fams = family_names() if args.families == "all" else [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in fams if f not in family_names()]
    if unknown:
        ap.error(f"unknown families: {', '.join(unknown)} (families: {', '.join(family_names())})")
    variants = tuple(dict.fromkeys(v.strip() for v in args.loop_variants.split(",") if v.strip()))
    if not variants or any(v not in LOOP_VARIANTS for v in variants):
        ap.error(f"--loop-variants takes {', '.join(LOOP_VARIANTS)}, comma-separated; got {args.loop_variants!r}")
    if any(loop_variant(v)[1] for v in variants) and not 1 <= args.minibatch <= 64:
        ap.error(f"--minibatch (the screen's size) must be in 1..64, got {args.minibatch}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = [
        Config(family=f, seed=s, budget=args.budget, proposer=args.proposer, val_n=args.val_n, val_seeds=args.val_seeds,
               train_batch=args.train_batch, minibatch=args.minibatch, use_merge=not args.no_merge,
               test_n=args.test_n, test_repeats=args.test_repeats, loop_variants=variants)
        for f in fams for s in range(args.seeds)
    ]
    started = time.monotonic()
    cells: list[dict[str, Any]] = []
    if args.from_cells:
        cells = [json.loads(line) for line in Path(args.from_cells).read_text().splitlines() if line.strip()]
        args.budget = cells[0]["config"]["budget"]
        configs = []
    cells_path = out / ("cells-summarised.jsonl" if args.from_cells else "cells.jsonl")
    if not args.from_cells:  # a run that was stopped goes on: cells of the same config are kept, not re-run
        cells = finished_cells(cells_path, configs)
        if cells:
            print(f"resuming: {len(cells)} of {len(configs)} cells already in {cells_path}", file=sys.stderr, flush=True)
        done = {(c["family"], c["seed"]) for c in cells}
        configs = [c for c in configs if (c.family, c.seed) not in done]
    with cells_path.open("w") as fh:
        for c in cells:
            write_cell(fh, c)
        if args.jobs > 1 and len(configs) > 1:
            with ProcessPoolExecutor(args.jobs) as pool:
                for cell in pool.map(compare, configs):
                    cells.append(cell)
                    write_cell(fh, cell)
                    _progress(cell, started)
        else:
            for cfg in configs:
                cell = compare(cfg)
                cells.append(cell)
                write_cell(fh, cell)
                _progress(cell, started)
    rows = summarise(cells)
    figure = plot(cells, args.budget, out / "vs-gepa")
    from coevolve.analysis.summary import TESTBED_NOTICE

    summary = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "rows": rows,
               "wall_seconds": round(time.monotonic() - started, 1), "figure": str(figure), "notice": TESTBED_NOTICE,
               "held_to": "prompt sections and recipes on both sides (hooks, tools, context policies, decoding and "
                          "turn limits are not GEPA text components)"}
    summary["mechanics"] = mechanics(cells)
    summary["pooled"] = pooled(cells)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    c0 = cells[0]["config"]
    seeds = sorted({c["seed"] for c in cells})
    print(f"budget {c0['budget']} rollouts per optimiser run, every rollout counted (minibatch, train and val); "
          f"val {c0['val_n']} x {c0['val_seeds']} seeds; coevolve train batch {c0['train_batch']}, GEPA minibatch "
          f"{c0['minibatch']}, merge {'on' if c0['use_merge'] else 'off'}; test {c0['test_n']} x "
          f"{c0['test_repeats']} repeats; seeds {seeds}; proposer {c0['proposer']}")
    print(f"candidates held to {summary['held_to']}")
    print(table(rows))
    print(f"pooled over {len(cells)} runs: {json.dumps(summary['pooled'])}")
    print(f"mechanics: {json.dumps(summary['mechanics'])}")
    print(f"figure: {figure}")
    print(f"note: {TESTBED_NOTICE}")


def finished_cells(path: Path, configs: list[Config]) -> list[dict[str, Any]]:
    """The cells of `path` (an earlier, possibly interrupted run) whose config is one of `configs`
    exactly, in the order of `configs`; cells of other settings and a torn last line are dropped."""
    wanted = {(c.family, c.seed): dataclasses.asdict(c) for c in configs}
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for cell in read_cells(path):
        key = (cell.get("family"), cell.get("seed"))
        if key in wanted and json.loads(json.dumps(wanted[key])) == cell.get("config"):
            found[key] = cell
    return [found[k] for k in wanted if k in found]


def _progress(cell: dict[str, Any], started: float) -> None:
    loops = " | ".join(f"{opt} {c['final_gain']:+.3f} ({c['rollouts_used']} rollouts, {c['accepted']} accepted, "
                       f"{c['false_accepts']} null)" for opt in optimisers([cell])[:-1] for c in [cell[opt]])
    g = cell["gepa"]
    print(f"  {cell['family']} seed {cell['seed']}: test gain {loops} | gepa {g['final_gain']:+.3f} "
          f"({g['rollouts_used']} rollouts, {g['accepted']} in pool, {g['false_accepts']} null); {cell['seconds']:.0f} s "
          f"[{time.monotonic() - started:.0f} s]", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
