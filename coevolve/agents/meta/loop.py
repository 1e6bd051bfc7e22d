"""The evolution loop for one task family.

Each iteration: evaluate the current harness on a train batch -> take the failures -> the proposer
reads condensed evidence and returns candidate edits -> candidates are evaluated on the validation
split, all in parallel, paired with the current harness on identical instances and seeds, in chunks
that stop as soon as no remaining outcome could change the decision -> the best candidate the
acceptance rule accepts becomes the current harness -> everything is journalled in the store ->
repeat until a budget or a plateau.

**The plateau.** After `plateau` iterations in a row accept nothing, `on_plateau="stop"` (the default)
ends the run (`plateau`); `on_plateau="continue"` journals a `plateau` event, counts it and goes on
with fresh train batches (each iteration's batch and seed follow (seed, iteration), so the next
iteration meets new failures) while the budgets last: the run then ends on a budget. The val pairs stay
the same, so every candidate is still compared on the pairs its parent was measured on.

**A val set too small for the rule.** The family-wise sign test at alpha / k accepts only with at least
m wins among the discordant pairs (2^-m < alpha / k: m = 5 for alpha 0.1 and k = 3), and only pairs
the current harness failed can be wins. Before any rollout the loop journals a `warning` event (and
logs it) when val_n x val_seeds pairs cannot reach m at all, and again after the starting harness's
val evaluation when the pairs it failed are fewer than m: no edit can then be accepted from it.

**The screen** (`screen` N > 0; 0, the default, is off). GEPA's
minibatch gate, in the loop's terms: after the proposals, each valid candidate first runs the first N
jobs of this iteration's train batch that the current harness failed (the failures the proposer's
evidence came from, in batch order; same instance, same seed `seed + iteration`), and goes on to the
paired val comparison only if it passes strictly more of them than the current harness did there —
which failed them all, so: at least one pass (infrastructure failures are not scored; a candidate with
no scored screen job goes on). The screen's rollouts are counted and budget-checked like
every other batch (one batch, `it<i>-screen`), and stored by key, so a resumed run replays them. A
candidate that fails the screen is journalled as a `decision` with outcome `screened out` and its screen
tally, and counts as rejected; when none survives, the iteration counts toward the plateau as one that
accepted nothing. The family-wise rule's k is then the number of candidates that reach val: the screen
uses train instances only, independent of the val pairs, so which candidates survive says nothing about
their val outcomes, and the Holm/Bonferroni step at alpha / k over the survivors keeps its family-wise
rate (an iteration of edits that change nothing accepts one with probability at most alpha).

The k candidates of an iteration are accepted under a family-wise rule (`FamilyRule`: each at
alpha / k, k the candidates actually compared), so that an iteration of edits that change nothing
accepts one with probability at most alpha, not k x alpha; `family_wise=False` tests each candidate
at alpha on its own (the per-candidate rule, the baseline of `bench/null_edit.py`). Every `decision`
event records the threshold it was taken under (alpha, k, alpha_effective).

Budgets are enforced before work is launched: a rollout batch larger than the rollouts left is not
launched and the run ends there (`budget:rollouts`), so the rollout budget is never exceeded (a batch cut
short would compare a candidate on other instances than its parent); up to one batch of the budget may
stay unspent. Tokens, dollars and seconds are checked before each batch and proposer call,
so they overshoot by at most one in-flight batch. A checkpoint closes every iteration; `resume`
continues from the last one and — all randomness being seeded by (seed, iteration) — reaches the same
final harness as an uninterrupted run.

Every batch of rollouts is stored in the run as it comes back, indexed by rollout key (instance,
harness, model, seed) in the same store transaction. A resumed run redoes the iteration it was killed
in, and takes the rollouts that iteration had stored from the store instead of paying for them again:
its spend (restored from the checkpoint, then counted job by job as the iteration is redone) equals an
uninterrupted run's, and so does the work paid for, but for the rollouts in flight at the kill.
"""

from __future__ import annotations

import dataclasses
import random
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from coevolve import defaults
from coevolve.agents.meta.acceptance import FamilyRule, PairedResult, make_rule
from coevolve.agents.meta.evidence import build_evidence
from coevolve.agents.meta.proposer import LLMProposer, Proposal
from coevolve.edits import edit_to_json
from coevolve.errors import BadInput
from coevolve.store.store import rollout_key
from coevolve.tasks import get_family
from coevolve.values import Harness, TaskInstance, Trajectory


@dataclass(frozen=True)
class Budget:
    iterations: int = defaults.ITERATIONS
    rollouts: int = defaults.ROLLOUTS
    proposer_tokens: int = 2_000_000
    usd: float = 25.0
    seconds: float = 4 * 3600.0


@dataclass
class Spend:
    """What one harness evolution has used (its checkpoint and result carry it)."""

    iterations: int = 0
    rollouts: int = 0
    proposer_tokens: int = 0
    usd: float = 0.0
    seconds: float = 0.0


ON_PLATEAU = ("stop", "continue")
SEARCHES = ("race", "loop")
ADMISSIONS = ("race", "gate", "chain")


@dataclass(frozen=True)
class EvolveConfig:
    family: str
    model: str
    proposer: str = "synthetic/meta"
    seed: int = 0
    train_batch: int = defaults.TRAIN_BATCH
    val_n: int = defaults.VAL_N
    candidates: int = defaults.CANDIDATES
    evidence_failures: int = 8
    rule: str = "sign"
    alpha: float = defaults.ALPHA
    chunk: int = 10
    plateau: int = 3
    early_stop: bool = True
    val_seeds: int = defaults.VAL_SEEDS  # each val instance is evaluated at this many seeds (pairs = instances x seeds)
    handbook: bool = True  # the proposer may consult the family's handbook
    family_wise: bool = True  # the iteration's k candidates share alpha (False: each at alpha)
    on_plateau: str = "stop"  # after `plateau` iterations without an accept: "stop", or "continue" to the budget
    screen: int = 0  # > 0: a candidate reaches val only if it passes one of the first N train failures (0: off)
    search: str = "race"  # "race": the racing search with guarded release (agents.meta.race); "loop": this loop
    race_chunk: int = 2  # val pairs a child is raced on between two decisions (race), and guard pairs per batch
    # how a child enters the race's pool: "race" (won on val pairs), "gate" (passed the screen) or "chain"
    # (passed the screen, and becomes the next parent)
    admit: str = "race"
    budget: Budget = Budget()
    # family parameters of the train and val instances (e.g. {"size": 0, "difficulty": 1}); {} = the
    # family's defaults, and then left out of `to_json`, so a config journalled before it existed reads
    # back the same
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("train_batch", "val_n", "candidates", "chunk", "race_chunk", "plateau", "evidence_failures", "val_seeds"):
            if getattr(self, name) < 1:
                raise BadInput(f"{name} must be >= 1")
        if not 0 < self.alpha < 1:
            raise BadInput("alpha must be in (0, 1)")
        if self.screen < 0:
            raise BadInput(f"screen must be >= 0 (0: off), got {self.screen}")
        for name, choices in (("search", SEARCHES), ("admit", ADMISSIONS), ("on_plateau", ON_PLATEAU)):
            if getattr(self, name) not in choices:
                raise BadInput(f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        if self.admit != "race" and self.screen < 1:
            raise BadInput(f"admit {self.admit!r} needs a screen of at least 1 (the gate is the screen)")
        make_rule(self.rule, self.alpha)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if not self.params:
            del out["params"]
        # a setting at its neutral value is left out, so configs journalled without it read back the same
        for name, neutral in (("on_plateau", "stop"), ("screen", 0), ("admit", "race")):
            if out[name] == neutral:
                del out[name]
        if self.search == "loop":
            del out["search"], out["race_chunk"]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EvolveConfig:
        """A config journalled before `family_wise` existed was decided per candidate, and one journalled
        before the racing search by this loop: it resumes so."""
        return cls(**{"family_wise": False, "search": "loop", **d, "budget": Budget(**d["budget"])})


class Evaluator(Protocol):
    """Runs rollouts: one per (instance, harness, seed) job, results in job order."""

    def evaluate(self, jobs: Sequence[tuple[TaskInstance, Harness, int]], model: str) -> list[Trajectory]: ...


class Journal(Protocol):
    """What the meta-agent's loops read and write in the store (coevolve.store.store.HarnessStore provides
    it): a harness evolution its events, harnesses and rollouts; a co-evolution also its evolutions' runs,
    the spend of their stored rollouts and, under `root`, its datasets."""

    root: Path

    def append_event(self, run_id: str, kind: str, payload: dict[str, Any]) -> int: ...
    def events(self, run_id: str, kind: str | None = None) -> list[Any]: ...
    def put_harness(self, h: Harness, **kw: Any) -> str: ...
    def get_harness(self, ref: str) -> Harness: ...
    def put_trajectories(self, run_id: str, trajectories: Sequence[Trajectory], batch: str = "main") -> str: ...
    def stored_rollouts(self, run_ids: Sequence[str], keys: Sequence[str]) -> dict[str, Trajectory]: ...
    def rollout_spend(self, run_ids: Sequence[str]) -> tuple[int, float]: ...
    def create_run(self, kind: str, config: dict[str, Any], run_id: str | None = None) -> str: ...
    def finish_run(self, run_id: str, status: str, result: dict[str, Any]) -> None: ...


@dataclass
class EvolveResult:
    run_id: str
    harness_id: str
    baseline_id: str
    baseline_val: float
    evolved_val: float
    rollouts_used: int
    iterations: int
    accepted: list[dict[str, Any]]
    rejected: int
    invalid: int
    stop_reason: str
    spend: dict[str, Any]
    gain_curve: list[tuple[int, float]] = field(default_factory=list)  # (rollouts used, val pass rate)
    plateaus: int = 0  # plateaus the run went on past (on_plateau="continue")


class BudgetExhausted(Exception):
    pass


@dataclass
class _State:
    current_id: str
    val_cache: dict[str, dict[int, bool]]  # harness id -> val pair index -> passed
    history: list[dict[str, Any]]
    spend: Spend
    streak: int = 0
    accepted: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0
    invalid: int = 0
    tried: list[str] = field(default_factory=list)
    gain_curve: list[tuple[int, float]] = field(default_factory=list)
    batches: int = 0
    plateaus: int = 0


class HarnessEvolution:
    """The paired sign-test loop (`search="loop"`; module docstring). Its state is checkpointed as a
    `state_type` whose `cache_field` maps harness id -> val pair index -> outcome."""

    state_type: type = _State
    cache_field = "val_cache"

    def __init__(
        self,
        config: EvolveConfig,
        evaluator: Evaluator,
        proposer: LLMProposer,
        journal: Journal,
        run_id: str,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ):
        # this class runs the sign-test loop whatever `search` says, and journals so (make_evolution chooses)
        self.cfg = config if type(self) is not HarnessEvolution else dataclasses.replace(config, search="loop")
        self.evaluator = evaluator
        self.proposer = proposer
        self.journal = journal
        self.run_id = run_id
        self.on_progress = on_progress
        self.family = get_family(config.family)
        self.rule = make_rule(config.rule, config.alpha)
        if config.val_n > self.family.split_sizes["val"]:
            raise BadInput(f"val_n {config.val_n} exceeds the val split of {config.family} ({self.family.split_sizes['val']})")
        instances = self.family.generate("val", config.val_n, **config.params)
        # the paired comparison's units: every val instance at every val seed
        self.val = [(inst, config.seed + r) for inst in instances for r in range(config.val_seeds)]
        self.train = self.family.generate("train", **config.params)
        self.log = structlog.get_logger(role="meta", run_id=run_id)
        self._t0 = time.monotonic()
        self._seconds_before = 0.0

    # ------------------------------------------------------------------ public
    def run(self, resume: bool = False, start: Harness | None = None) -> EvolveResult:
        """Evolve from `start` (default: the family baseline; co-evolution continues from the harness of
        its previous cycle). The result's baseline is the starting harness."""
        st = self._restore() if resume else None
        baseline = start or self.family.baseline_harness()
        if st is None:
            self.journal.put_harness(baseline, rationale="family baseline" if start is None else "start", run_id=self.run_id)
            st = _State(current_id=baseline.id, val_cache={}, history=[], spend=Spend())
            self.journal.append_event(self.run_id, "config", {**self.cfg.to_json(), "start": baseline.id})
        else:
            self._seconds_before = st.spend.seconds
            self.log.info("resumed", iteration=st.spend.iterations, harness_id=st.current_id[:12])
        self._state = st
        fresh = not st.gain_curve  # nothing of this run evaluated yet
        if fresh:
            self._warn(self.acceptance_reach())
        reason = "budget:iterations"
        try:
            self._ensure_val(baseline, range(len(self.val)))
            if fresh:
                self._warn(self.acceptance_reach(baseline.id))
                st.gain_curve.append((st.spend.rollouts, self._val_rate(st.current_id)))
            while st.spend.iterations < self.cfg.budget.iterations:
                self._check_budget()
                self._iteration(st.spend.iterations)
                st.spend.iterations += 1
                if st.streak >= self.cfg.plateau and self.cfg.on_plateau == "continue":
                    st.streak = 0  # a new plateau counts from here
                    st.plateaus += 1
                    self.journal.append_event(self.run_id, "plateau", {"iteration": st.spend.iterations - 1,
                                                                       "plateaus": st.plateaus, "action": "continue"})
                    self._progress(st.spend.iterations - 1, "plateau, continuing")
                self._checkpoint()
                if st.streak >= self.cfg.plateau:
                    reason = "plateau"
                    break
        except BudgetExhausted as e:
            reason = f"budget:{e}"
        self._tick()
        current = self.journal.get_harness(st.current_id)
        result = EvolveResult(
            run_id=self.run_id,
            harness_id=current.id,
            baseline_id=baseline.id,
            baseline_val=self._val_rate(baseline.id),
            evolved_val=self._val_rate(current.id),
            rollouts_used=st.spend.rollouts,
            iterations=st.spend.iterations,
            accepted=st.accepted,
            rejected=st.rejected,
            invalid=st.invalid,
            stop_reason=reason,
            spend=dataclasses.asdict(st.spend),
            gain_curve=st.gain_curve,
            plateaus=st.plateaus,
        )
        self.journal.append_event(self.run_id, "result", dataclasses.asdict(result))
        return result

    # ------------------------------------------------------------------ can the rule accept at all
    def acceptance_reach(self, harness_id: str | None = None) -> dict[str, Any] | None:
        """Why no edit can be accepted, or None when one can: the val pairs (or, given a harness whose
        val outcomes are in, the pairs it failed — the only possible wins) are fewer than the wins the
        family-wise threshold needs with `candidates` compared."""
        from coevolve.agents.meta.acceptance import min_wins

        family = FamilyRule(self.rule, self.cfg.candidates, self.cfg.family_wise)
        pairs = len(self.val)
        needed = min_wins(family, pairs)
        base = {**family.as_json(), "pairs": pairs, "val_n": self.cfg.val_n, "val_seeds": self.cfg.val_seeds,
                "wins_needed": needed}
        if harness_id is None:
            if needed is not None:
                return None
            return {**base, "check": "val pairs", "message": (
                f"val_n x val_seeds = {pairs} pairs cannot reach the acceptance threshold: the {family.test.name} "
                f"test at alpha / k = {family.threshold:.4g} (k = {family.k}) cannot accept even with every "
                f"pair a win; no edit can be accepted (raise --val-n or --val-seeds, or lower --candidates)")}
        winnable = sum(1 for passed in self._state.val_cache[harness_id].values() if not passed)
        if needed is None or winnable >= needed:
            return None
        return {**base, "check": "winnable pairs", "winnable": winnable, "harness_id": harness_id, "message": (
            f"the starting harness fails {winnable} of {pairs} val pairs, and only those can be wins: the "
            f"{family.test.name} test at alpha / k = {family.threshold:.4g} (k = {family.k}) needs {needed} "
            f"wins, so no edit can be accepted from it (raise --val-n or --val-seeds, or lower --candidates)")}

    def _warn(self, warning: dict[str, Any] | None) -> None:
        if warning is None:
            return
        self.journal.append_event(self.run_id, "warning", warning)
        self.log.warning("acceptance out of reach", detail=warning["message"])

    # ------------------------------------------------------------------ one iteration
    def _iteration(self, it: int) -> None:
        st = self._state
        current = self.journal.get_harness(st.current_id)
        rng = random.Random(self.cfg.seed * 1_000_003 + it)
        batch = rng.sample(self.train, min(self.cfg.train_batch, len(self.train)))
        trajs = self._evaluate([(i, current, self.cfg.seed + it) for i in batch], f"it{it}-train")
        failures = [t for t in trajs if not t.passed and t.error != "infra"]
        self._progress(it, "train", failures=len(failures))
        if not failures:
            st.streak += 1
            return
        evidence = build_evidence(self.cfg.family, current, failures, st.history, self.cfg.evidence_failures)
        self._check_budget()
        proposals, comp = self.proposer.propose(evidence, current, self.cfg.candidates, seed=self.cfg.seed + it)
        st.spend.proposer_tokens += comp.prompt_tokens + comp.completion_tokens
        st.spend.usd += comp.cost_usd
        candidates: list[Proposal] = []
        for p in proposals:
            if p.error is None and (p.candidate.id in st.tried or p.candidate.id == current.id):
                p = dataclasses.replace(p, candidate=None, error="already tried")
            self.journal.append_event(
                self.run_id,
                "proposal",
                {"iteration": it, "raw": p.raw, "error": p.error, "candidate": p.candidate.id if p.candidate else None,
                 **({"context_cuts": list(p.cuts)} if p.cuts else {})},  # what the evidence lost to the window
            )
            if p.error:
                st.invalid += 1
            else:
                st.tried.append(p.candidate.id)
                candidates.append(p)
        screened = None
        if self.cfg.screen and candidates:
            failed = [t for t in trajs if not t.passed and t.error != "infra"][: self.cfg.screen]
            screened = self._screen([p.candidate for p in candidates], failed, f"it{it}-screen")
        survivors = [p for p, (jobs, passed) in zip(candidates, screened) if passed or not jobs] if screened else candidates
        # k: the candidates that reach val (the screen saw train instances only; see the module docstring)
        family = FamilyRule(self.rule, max(1, len(survivors)), self.cfg.family_wise)
        if screened:
            self._progress(it, "screen", screened_out=len(candidates) - len(survivors))
        decisions = self._compare(current, survivors, it, family) if survivors else []
        compared = dict(zip((p.candidate.id for p in survivors), decisions))
        winner = None
        for n, p in enumerate(candidates):
            tally = {"screen": {"jobs": screened[n][0], "passed": screened[n][1], "current_passed": 0}} if screened else {}
            if p.candidate.id not in compared:  # screened out: never compared on val
                entry = {**edit_to_json(p.edit), "iteration": it, "base": current.id[:12], "outcome": "screened out", **tally}
                st.history.append(entry)
                self.journal.append_event(self.run_id, "decision", {**entry, "candidate": p.candidate.id})
                st.rejected += 1
                continue
            verdict, r = compared[p.candidate.id]
            entry = {
                **edit_to_json(p.edit),
                "iteration": it,
                "base": current.id[:12],
                "outcome": verdict,
                "wins": r.wins,
                "losses": r.losses,
                "evaluated": r.n,
                "p_value": round(family.p_value(r), 4),
                **tally,
            }
            st.history.append(entry)
            decision = {**entry, **family.as_json(), "candidate": p.candidate.id}  # with the threshold used
            self.journal.append_event(self.run_id, "decision", decision)
            if verdict == "accept" and (winner is None or r.gain > winner[1].gain):
                winner = (p, r)
            elif verdict != "accept":
                st.rejected += 1
        if winner is None:
            st.streak += 1
            self._progress(it, "rejected all")
            return
        p, r = winner
        st.rejected += sum(1 for v, _ in decisions if v == "accept") - 1  # accepted but not the best
        self._ensure_val(p.candidate, range(len(self.val)))  # exact val gain for the lineage
        gain = self._val_rate(p.candidate.id) - self._val_rate(current.id)
        self.journal.put_harness(
            p.candidate, parent=current.id, edit=p.edit, rationale=p.edit.rationale, run_id=self.run_id, val_gain=gain
        )
        st.accepted.append({**edit_to_json(p.edit), "harness_id": p.candidate.id, "iteration": it, "val_gain": gain})
        st.current_id = p.candidate.id
        st.streak = 0
        st.gain_curve.append((st.spend.rollouts, self._val_rate(p.candidate.id)))
        self.log.info("accepted edit", iteration=it, harness_id=p.candidate.id[:12], val_gain=round(gain, 3))
        self._progress(it, "accepted")

    # ------------------------------------------------------------------ the screen
    def _screen(self, harnesses: list[Harness], failed: list[Trajectory], label: str) -> list[tuple[int, int]]:
        """(scored jobs, passed) per harness: each reruns the failed rollouts `failed` (same train instance,
        same seed), all in one batch counted against the budget; an infrastructure failure is not scored,
        so a harness left with no scored job is not screened out."""
        out = self._evaluate([(t.instance, h, t.seed) for h in harnesses for t in failed], label)
        n = len(failed)
        scored = [[t.passed for t in out[c * n : (c + 1) * n] if t.error != "infra"] for c in range(len(harnesses))]
        return [(len(s), sum(s)) for s in scored]

    # ------------------------------------------------------------------ paired comparison
    def _compare(
        self, current: Harness, candidates: list[Proposal], it: int, family: FamilyRule
    ) -> list[tuple[str, PairedResult]]:
        """Paired evaluation on val, each candidate decided under `family` (the iteration's threshold).
        With early stopping, instances where the current harness failed come first (only there can a
        candidate win) and each candidate stops as soon as its decision is settled (exactly: the full
        evaluation would decide the same), or — the futility cut, the one stop that is a heuristic and
        can only reject — when it has won none of the first `chunk` of them."""
        n = len(self.val)
        self._ensure_val(current, range(n))
        base = self._state.val_cache[current.id]
        order = sorted(range(n), key=lambda j: base[j]) if self.cfg.early_stop else list(range(n))
        tallies = [[0, 0, 0] for _ in candidates]
        decided: dict[int, str] = {}
        chunk = self.cfg.chunk if self.cfg.early_stop else n
        for start in range(0, n, chunk):
            idx = order[start : start + chunk]
            live = [c for c in range(len(candidates)) if c not in decided]
            if not live:
                break
            jobs = [self._val_job(j, candidates[c].candidate) for c in live for j in idx]
            trajs = self._evaluate(jobs, f"it{it}-val{start}")
            for k, t in enumerate(trajs):
                c, j = live[k // len(idx)], idx[k % len(idx)]
                self._state.val_cache.setdefault(candidates[c].candidate.id, {})[j] = t.passed
                tally = tallies[c]
                tally[0 if t.passed and not base[j] else 1 if base[j] and not t.passed else 2] += 1
            rest = order[start + chunk :]
            winnable = sum(1 for j in rest if not base[j])
            for c in live:
                r = PairedResult(*tallies[c], winnable=winnable, losable=len(rest) - winnable)
                verdict = family.decide(r) if rest else ("accept" if family.accepts(r) else "reject")
                if self.cfg.early_stop and verdict is None and start == 0 and r.wins == 0 and not base[idx[-1]]:
                    verdict = "reject"  # futility: no win where a win was possible
                if verdict:
                    decided[c] = verdict
        return [(decided.get(c, "reject"), PairedResult(*tallies[c])) for c in range(len(candidates))]

    # ------------------------------------------------------------------ rollouts and budgets
    def _ensure_val(self, harness: Harness, idx: range) -> None:
        cache = self._state.val_cache.setdefault(harness.id, {})
        missing = [j for j in idx if j not in cache]
        if missing:
            trajs = self._evaluate([self._val_job(j, harness) for j in missing], f"val-{harness.id[:12]}-{missing[0]}")
            for j, t in zip(missing, trajs):
                cache[j] = t.passed

    def _val_job(self, j: int, harness: Harness) -> tuple[TaskInstance, Harness, int]:
        instance, seed = self.val[j]
        return instance, harness, seed

    def _evaluate(self, jobs: list[tuple[TaskInstance, Harness, int]], name: str) -> list[Trajectory]:
        st = self._state
        self._check_budget()
        left = self.cfg.budget.rollouts - st.spend.rollouts
        if len(jobs) > left:
            raise BudgetExhausted("rollouts")
        trajs = self._rollouts(jobs, name)
        st.spend.rollouts += len(jobs)
        st.spend.usd += sum(t.cost_usd for t in trajs)
        return trajs

    def _rollouts(self, jobs: list[tuple[TaskInstance, Harness, int]], name: str) -> list[Trajectory]:
        """The jobs' rollouts, in job order: those this run stored before (after a resume, what the
        redone iteration had stored before the kill), the rest from the evaluator, stored as one batch."""
        st, model = self._state, self.cfg.model
        keys = [rollout_key(inst, h.id, model, seed) for inst, h, seed in jobs]
        have = self.journal.stored_rollouts([self.run_id], keys)
        todo = {k: job for k, job in zip(keys, jobs) if k not in have}
        if todo:
            fresh = self.evaluator.evaluate(list(todo.values()), model)
            st.batches += 1
            # batch numbers restart at the checkpoint's after a resume: the suffix keeps names unique
            self.journal.put_trajectories(self.run_id, fresh, batch=f"{st.batches:05d}-{name}-{secrets.token_hex(3)}")
            have.update(zip(todo, fresh))
        return [have[k] for k in keys]

    def _tick(self) -> None:
        self._state.spend.seconds = self._seconds_before + (time.monotonic() - self._t0)

    def _check_budget(self) -> None:
        self._tick()
        b, s = self.cfg.budget, self._state.spend
        for name, used, limit in (
            ("rollouts", s.rollouts, b.rollouts),
            ("proposer_tokens", s.proposer_tokens, b.proposer_tokens),
            ("usd", s.usd, b.usd),
            ("seconds", s.seconds, b.seconds),
        ):
            if used >= limit:
                raise BudgetExhausted(name)

    def _val_rate(self, harness_id: str) -> float:
        cache = self._state.val_cache.get(harness_id, {})
        return sum(cache.values()) / len(cache) if cache else 0.0

    # ------------------------------------------------------------------ journal
    def _checkpoint(self) -> None:
        st = self._state
        self._tick()
        payload = dataclasses.asdict(st)
        payload[self.cache_field] = {h: {str(k): v for k, v in c.items()} for h, c in getattr(st, self.cache_field).items()}
        self.journal.append_event(self.run_id, "checkpoint", payload)

    def _restore(self) -> Any:
        """The state the last checkpoint holds (a `state_type`), or None before the first."""
        cps = self.journal.events(self.run_id, "checkpoint")
        if not cps:
            return None
        d = dict(cps[-1].payload)
        d["spend"] = Spend(**d["spend"])
        d[self.cache_field] = {h: {int(k): v for k, v in c.items()} for h, c in d[self.cache_field].items()}
        d["gain_curve"] = [tuple(x) for x in d["gain_curve"]]
        return self.state_type(**d)

    def _progress(self, it: int, phase: str, **extra: Any) -> None:
        if not self.on_progress:
            return
        st = self._state
        self.on_progress(
            {
                "iteration": it,
                "phase": phase,
                "best_val": self._val_rate(st.current_id),
                "accepted": len(st.accepted),
                "rejected": st.rejected,
                "invalid": st.invalid,
                "rollouts": st.spend.rollouts,
                "usd": round(st.spend.usd, 4),
                "proposer_tokens": st.spend.proposer_tokens,
                **extra,
            }
        )
