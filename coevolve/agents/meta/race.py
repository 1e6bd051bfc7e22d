"""The racing search: `coevolve evolve`'s and every co-evolution cycle's harness search (`search="race"`).

It spends the whole rollout budget where it buys the most, and bounds how often a run *releases* (returns)
a harness that does not help (`coevolve.agents.meta.guard`).

**Pairs and the cache.** The search's val pairs are the first `val_n` val instances at `val_seeds`
seeds each; every (harness, pair) outcome is kept (the rollouts themselves are stored by rollout key:
instance, harness, model, seed), so a candidate is compared with its parent on the parent's outcomes
and no pair is paid for twice. A race visits the pairs **contested first**: those where some harness
already evaluated there passed and some failed, then the rest, each part in a permutation drawn from
the run's seed before any rollout. A pair where every harness so far passed (or every one failed) is
most often a tie, which tells a race nothing; the order never looks at the racing children's own
outcomes. The race is the search's heuristic, not its guarantee: admission (below) holds against
every pair left going against the child, and releases are decided by the guard on fresh pairs, whose
order is fixed.

**The pool.** It starts with the starting harness (all its val pairs evaluated). Each step draws a
parent from it: with probability 1/2 the pool's best val mean (the incumbent), otherwise in proportion
to how often each member is best on individual val instances by its posterior mean there ((passes + 1)
/ (runs + 2)), so that members which are best somewhere keep being explored. A member's failure
evidence (a train batch at a seed of its own) is collected the first time it is a parent and reused;
it is refreshed only when the proposer has nothing new for it (every proposal invalid or tried).

**Racing.** Every valid, untried proposal is raced against its parent on the val pairs in the fixed
order, `race_chunk` pairs at a time, all children of a step side by side. With W wins and L losses
so far, P(better) = P(p > 1/2) for p ~ Beta(W + 1, L + 1) (p: the child's win rate among discordant
pairs). A child is admitted to the pool once P(better) >= `ADMIT_AT` even if every pair left that its parent
passed were a loss, and dropped as soon as it is clearly not better: P(better) < `DROP_BELOW`, or it could
not reach `ADMIT_AT` even if every pair left that its parent failed were a win. Dropping is a
futility stop: it can only keep a candidate out, so it never raises the rate of false releases, which
the guard controls whatever the search admits. An admitted child then evaluates any val pair it skipped,
so every pool member has the same pairs.

**Screen** (`screen` N > 0; off by default). Before its race, each child reruns its parent's first N
failed evidence rollouts (same train instance, same seed), all children in one batch; one that passes
none of them is dropped as `screened out` without a val pair (GEPA's minibatch gate). Like dropping, it
can only keep a candidate out.

**Gate** (`admit="gate"`, with a screen of N >= 1; the default `admit="race"` races). A child that passes
the screen joins the pool without a val race: GEPA's minibatch gate, where the child is compared with its
parent on the train failures the proposer read. It then evaluates every val pair like any member. Parents
are drawn as GEPA draws them, from the per-pair fronts of the val pairs (the members with the highest
pass rate on a pair) after dominated members are removed (in the order of val mean, then admission, a
member every one of whose fronts holds another member still in), by how many fronts each survivor is on;
the pool's best val mean breaks ties by the latest admitted, so that a tie on the noisy val pairs keeps a
fix the gate saw, and edits compound. No merges. Admission on a gate is weak evidence; what a run
releases is still the guard's decision on fresh pairs, so the run-level bound is unchanged.

**Chain** (`admit="chain"`, with a screen of N >= 1). Admission as with the gate, but each step's parent
is the chain's head: of the last step that admitted any child, the one that passed the most of its screen
(then the best val mean, then the first proposed). So every edit that passes the gate builds on the ones
before it (one line of edits, GEPA's hill climb without its val selection). The guard tests the line's
head instead of the pool's best val mean (on 4-12 val pairs that mean is mostly noise, and the head
carries every fix so far), and an open attempt runs to its end instead of giving way to a newer head: a
later attempt tests what the line has added by then. Choosing the candidate from the search's pairs never touches the guard's, so the
bound is unchanged.

**Merge.** When a child is admitted next to an admitted sibling (same parent) whose edit touches
other parts of the harness (sections, recipes, tools, hooks, context, decoding, turn limit: no part in
common), the two edits applied together are raced like any child, against the better of the two.

**Guarded release.** When the pool's best val mean is above the last released harness's and that
member has not failed the guard, a guard attempt opens: it races the member against the last released
harness on fresh pairs (val instances after the first `val_n`, new seeds) under the betting e-process of
`coevolve.agents.meta.guard`, and the member is released only when the e-value crosses 1/alpha_j, so
P(the run ever releases a non-improvement) <= alpha. No attempt opens before the search has used
`GUARD_AFTER` of the rollout budget (edits compound first, and an attempt tests what they add up to: a
larger effect needs fewer fresh pairs); from then on the open attempt shares the budget with the search:
after each step it gets guard pairs until the guard has spent `GUARD_SHARE` of the rollouts used, and
the rollouts the search cannot use at the end of the budget all go to it. It closes when it releases,
when it is abandoned (the posterior chance that the member is better falls below `ABANDON_BELOW`; the
member is not tried again), or when a better member tops the pool (that member gets its own attempt).

**Budget.** No plateau stop: steps go on until a budget ends the run. A batch is launched only when it
fits the rollouts left. A proposer that cannot be reached (its call failed after the gateway's retries in
`PROPOSER_PATIENCE` steps in a row) ends the run with `ProposerUnreachable`: a search without proposals
would spend its budget for nothing and look done.

Every decision is journalled (`proposal`, `race` per chunk, `decision` per child: admitted / dropped /
screened out, `merge`, `guard` per guard chunk and its outcome, `release`), and a `checkpoint` closes each step; a
resumed run restores the last checkpoint and redoes the step with the rollouts the store holds, so it
reaches the same released harness as an uninterrupted one (the proposer being deterministic given its
seed, as `synthetic/meta` is).
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from coevolve.agents.meta.evidence import build_evidence
from coevolve.agents.meta.guard import MAX_ATTEMPTS, GuardAttempt, better_posterior, guard_pair, min_pairs
from coevolve.agents.meta.loop import BudgetExhausted, EvolveResult, HarnessEvolution, Spend
from coevolve.agents.meta.proposer import CALL_FAILED, Proposal
from coevolve.edits import apply_edit, edit_from_json, edit_to_json
from coevolve.errors import BadInput
from coevolve.llm.contract import ProposerUnreachable
from coevolve.values import (
    AddHook,
    AddRecipe,
    AddTool,
    AlterTool,
    AppendSection,
    Harness,
    HarnessEdit,
    RemoveHook,
    RemoveSection,
    RemoveTool,
    SetContextPolicy,
    SetDecoding,
    SetMaxTurns,
    SetSection,
    Trajectory,
)

ADMIT_AT = 0.65  # a child is admitted when its posterior P(better than its parent) is at least this on the val pairs
DROP_BELOW = 0.2  # a child whose posterior P(better than its parent) falls below this is dropped
GUARD_SHARE = 0.5  # the share of the rollouts used that the open guard attempt may have spent after a step
GUARD_AFTER = 0.5  # no guard attempt opens before the search has used this share of the rollout budget
INCUMBENT_SHARE = 0.5  # how often the parent is the pool's best val mean
PROPOSER_PATIENCE = 3  # steps in a row whose proposer call failed (after the gateway's retries) end the run


def op_targets(op: Any) -> set[str]:
    """The parts of a harness an edit operation touches (two edits merge only when these do not meet)."""
    match op:
        case SetSection(name=n) | AppendSection(name=n) | RemoveSection(name=n):
            return {f"section:{n}"}
        case AddRecipe(recipe=r):
            return {f"recipe:{r.name}"}
        case AddTool(tool=t):
            return {f"tool:{t.name}"}
        case AlterTool(name=n) | RemoveTool(name=n):
            return {f"tool:{n}"}
        case AddHook(hook=h):
            return {f"hook:{h.kind}"}
        case RemoveHook(kind=k):
            return {f"hook:{k}"}
        case SetContextPolicy():
            return {"context"}
        case SetDecoding():
            return {"decoding"}
        case SetMaxTurns():
            return {"max_turns"}
    return {f"other:{type(op).__name__}"}


def edit_targets(edit: HarnessEdit) -> set[str]:
    return set().union(*(op_targets(op) for op in edit.ops)) if edit.ops else set()


@dataclass
class _Race:
    child: Harness
    parent: str
    edit: HarnessEdit
    kind: str = "child"  # "child" | "merge"
    wins: int = 0
    losses: int = 0
    ties: int = 0
    next: int = 0  # position in `order`
    order: list[int] = field(default_factory=list)  # the val pairs in the order this race visits them
    verdict: str | None = None  # "admitted" | "dropped" | "screened out"
    why: str = ""
    screen: dict[str, int] | None = None  # its screen tally: scored jobs, passed


@dataclass
class _RaceState:
    step: int = 0
    released: list[str] = field(default_factory=list)  # the release chain, the start first
    pool: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> parent, edit, step, evidence
    outcomes: dict[str, dict[int, bool | None]] = field(default_factory=dict)  # pool member -> val pair -> passed
    tallies: list[list[int]] = field(default_factory=list)  # val pair -> [passes, fails] of every harness run there
    history: list[dict[str, Any]] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    merged: list[list[str]] = field(default_factory=list)  # sibling pairs already merged
    guard_failed: list[str] = field(default_factory=list)
    head: str | None = None  # the chain's head (admit "chain"): its latest step's best admitted child; None: the start
    attempts: int = 0
    attempt: dict[str, Any] | None = None  # the open guard attempt
    guard_rollouts: int = 0
    spend: Spend = field(default_factory=Spend)
    accepted: list[dict[str, Any]] = field(default_factory=list)  # the releases
    admitted: int = 0
    rejected: int = 0
    invalid: int = 0
    proposer_calls: int = 0
    proposer_failures: int = 0  # steps in a row whose proposer call failed
    gain_curve: list[tuple[int, float]] = field(default_factory=list)
    batches: int = 0


class RaceEvolution(HarnessEvolution):
    """The racing search with guarded release (module docstring); the evolution's rollouts, budgets and
    journal are `HarnessEvolution`'s."""

    state_type = _RaceState
    cache_field = "outcomes"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        cfg = self.cfg
        validate_search(cfg, self.family.split_sizes["val"])
        self.guard_instances = self.family.generate("val", **cfg.params)[cfg.val_n:]
        order = list(range(len(self.val)))
        random.Random(f"race-order|{cfg.seed}").shuffle(order)
        self.order = order
        self._train_by_id = {i.id: i for i in self.train}

    # ------------------------------------------------------------------ public
    def run(self, resume: bool = False, start: Harness | None = None) -> EvolveResult:
        st = self._restore() if resume else None
        baseline = start or self.family.baseline_harness()
        if st is None:
            self.journal.put_harness(baseline, rationale="family baseline" if start is None else "start", run_id=self.run_id)
            st = _RaceState(released=[baseline.id], pool={baseline.id: {"parent": None, "edit": None, "step": -1,
                                                                        "evidence": None, "refresh": 0}})
            self.journal.append_event(self.run_id, "config", {**self.cfg.to_json(), "start": baseline.id,
                                                              "guard_instances": len(self.guard_instances)})
        else:
            self._seconds_before = st.spend.seconds
            self.log.info("resumed", step=st.step, released=st.released[-1][:12])
        if not st.tallies:  # a new run, or a checkpoint from before the tallies
            st.tallies = [[0, 0] for _ in self.order]
        self._state = st
        reason = "budget:iterations"
        try:
            self._fill(baseline)
            if not st.gain_curve:
                st.gain_curve.append((st.spend.rollouts, self._mean(baseline.id)))
            while st.step < self.cfg.budget.iterations:
                self._check_budget()
                self._step(st.step)
                self._guard(st.step)
                st.step += 1
                st.spend.iterations = st.step
                self._checkpoint()
        except BudgetExhausted as e:
            reason = f"budget:{e}"
        # what the search could not use goes to the open guard attempt
        with contextlib.suppress(BudgetExhausted):
            self._guard(st.step, tail=True)
        self._tick()
        released = st.released[-1]
        result = EvolveResult(
            run_id=self.run_id, harness_id=released, baseline_id=baseline.id,
            baseline_val=self._mean(baseline.id), evolved_val=self._mean(released),
            rollouts_used=st.spend.rollouts, iterations=st.step, accepted=st.accepted, rejected=st.rejected,
            invalid=st.invalid, stop_reason=reason, spend=dataclasses.asdict(st.spend), gain_curve=st.gain_curve,
        )
        self.journal.append_event(self.run_id, "result", {**dataclasses.asdict(result), "admitted": st.admitted,
                                                          "pool": len(st.pool), "guard_attempts": st.attempts,
                                                          "proposer_calls": st.proposer_calls})
        return result

    # ------------------------------------------------------------------ one step
    def _step(self, step: int) -> None:
        st = self._state
        parent_id = self._parent(step)
        parent = self.journal.get_harness(parent_id)
        failures = self._evidence(parent_id, parent, step)
        self._progress(step, "evidence", failures=len(failures), parent=parent_id[:12])
        if not failures:  # passes its whole batch: a fresh batch next time it is drawn
            st.pool[parent_id]["evidence"] = None
            st.pool[parent_id]["refresh"] += 1
            return
        evidence = build_evidence(self.cfg.family, parent, failures, st.history, self.cfg.evidence_failures)
        self._check_budget()
        proposals, comp = self.proposer.propose(evidence, parent, self.cfg.candidates, seed=self.cfg.seed + step)
        st.proposer_calls += 1
        st.spend.proposer_tokens += comp.prompt_tokens + comp.completion_tokens
        st.spend.usd += comp.cost_usd
        failed = [p.error for p in proposals if p.error and p.error.startswith(CALL_FAILED)]
        st.proposer_failures = st.proposer_failures + 1 if failed and len(failed) == len(proposals) else 0
        if st.proposer_failures >= PROPOSER_PATIENCE:
            raise ProposerUnreachable(f"the proposer {self.cfg.proposer} failed {PROPOSER_PATIENCE} steps in a row: "
                                      f"{failed[0][:300]}")
        races = []
        for p in proposals:
            if p.error is None and (p.candidate.id in st.tried or p.candidate.id in st.pool):
                p = dataclasses.replace(p, candidate=None, error="already tried")
            self.journal.append_event(self.run_id, "proposal", {
                "iteration": step, "parent": parent_id, "raw": p.raw, "error": p.error,
                "candidate": p.candidate.id if p.candidate else None, **({"context_cuts": list(p.cuts)} if p.cuts else {})})
            if p.error:
                st.invalid += 1
                self._remember_invalid(p, parent_id, step)
            else:
                st.tried.append(p.candidate.id)
                races.append(_Race(p.candidate, parent_id, p.edit))
        if not races:  # the proposer has nothing new for this parent: refresh its evidence
            st.pool[parent_id]["evidence"] = None
            st.pool[parent_id]["refresh"] += 1
            self._progress(step, "nothing new")
            return
        if self.cfg.screen:
            races = self._screen_races(races, failures, step)
        if self.cfg.admit != "race":
            for r in races:
                r.verdict, r.why = "admitted", "passes the gate"
                self._decide(r, {}, step)
            if self.cfg.admit == "chain" and races:  # the step's best gated child heads the chain
                best = max(races, key=lambda r: (r.screen["passed"], self._mean(r.child.id)))
                st.head = best.child.id
        else:
            self._race(races, step)
        merges = self._merges([r for r in races if r.verdict == "admitted"], step) if self.cfg.admit == "race" else []
        if merges:
            self._race(merges, step)

    def _remember_invalid(self, p: Proposal, parent_id: str, step: int) -> None:
        """An edit that could not be raced (it did not apply, or a filter held it out) enters the history
        as tried, so the proposer does not offer it again for this parent."""
        if isinstance(p.raw, dict) and isinstance(p.raw.get("ops"), list):
            self._state.history.append({"rationale": p.raw.get("rationale", ""), "targets": p.raw.get("targets", ""),
                                        "ops": p.raw["ops"], "iteration": step, "base": parent_id[:12],
                                        "outcome": "invalid", "reason": str(p.error)[:200]})

    # ------------------------------------------------------------------ parents and evidence
    def _parent(self, step: int) -> str:
        st = self._state
        rng = random.Random(f"parent|{self.cfg.seed}|{step}")
        if self.cfg.admit == "chain":
            return self._head()
        members = sorted(st.pool)
        if len(members) == 1 or (self.cfg.admit == "race" and rng.random() < INCUMBENT_SHARE):
            return self._best()
        weights = self._front_weights()
        return rng.choices(members, weights=[weights[m] for m in members])[0]

    def _front_weights(self) -> dict[str, float]:
        """Per member: on how many val instances its posterior mean pass rate is the pool's highest
        (shared among the members that tie there)."""
        st = self._state
        by_instance: dict[str, dict[str, list[int]]] = {}
        for m in st.pool:
            for j, passed in st.outcomes.get(m, {}).items():
                if passed is None:
                    continue
                key = str(j) if self.cfg.admit == "gate" else self.val[j][0].id
                tally = by_instance.setdefault(key, {}).setdefault(m, [0, 0])
                tally[0] += passed
                tally[1] += 1
        fronts = []
        for tallies in by_instance.values():
            means = {m: (a + 1) / (n + 2) for m, (a, n) in tallies.items()}
            top = max(means.values())
            fronts.append({m for m, v in means.items() if v >= top - 1e-12})
        gate = self.cfg.admit == "gate"  # the gate: each undominated front counts whole for each member
        weights = dict.fromkeys(st.pool, 0.0)
        for front in self._undominated(fronts) if gate else fronts:
            for m in front:
                weights[m] += 1 if gate else 1 / len(front)
        return weights

    def _undominated(self, fronts: list[set[str]]) -> list[set[str]]:
        """The fronts without their dominated members: in the order of val mean, then admission, the
        first member each of whose fronts holds another member still in is removed, until none is (as
        GEPA selects: of members tied everywhere, the latest admitted stays)."""
        rank = {m: i for i, m in enumerate(self._state.pool)}
        fronts = [set(f) for f in fronts]
        while True:
            members = sorted(set().union(*fronts), key=lambda m: (self._mean(m), rank[m]))
            out = next((m for m in members if all(len(f) > 1 for f in fronts if m in f)), None)
            if out is None:
                return fronts
            for f in fronts:
                f.discard(out)

    def _evidence(self, member: str, harness: Harness, step: int) -> list[Trajectory]:
        """The member's failed train rollouts: collected once (a batch at a seed of its own), refreshed
        only after the proposer had nothing new for it."""
        st = self._state
        entry = st.pool[member]
        if entry["evidence"] is None:
            rng = random.Random(f"evidence|{self.cfg.seed}|{member}|{entry['refresh']}")
            batch = rng.sample(self.train, min(self.cfg.train_batch, len(self.train)))
            seed = self.cfg.seed + step
            trajs = self._evaluate([(i, harness, seed) for i in batch], f"s{step}-train")
            entry["evidence"] = {"seed": seed, "instances": [i.id for i in batch]}
            return [t for t in trajs if not t.passed and t.error != "infra"]
        ev = entry["evidence"]
        jobs = [(self._train_by_id[i], harness, ev["seed"]) for i in ev["instances"]]
        trajs = self._rollouts(jobs, f"s{step}-evidence")  # stored when collected: read back, not paid again
        return [t for t in trajs if not t.passed and t.error != "infra"]

    def _screen_races(self, races: list[_Race], failures: list[Trajectory], step: int) -> list[_Race]:
        """The children that pass at least one of the first `screen` of their parent's failed evidence
        rollouts (`_screen`); the others are dropped before any val pair, as `screened out`."""
        tallies = self._screen([r.child for r in races], failures[: self.cfg.screen], f"s{step}-screen")
        survivors = []
        for r, (jobs, passed) in zip(races, tallies):
            r.screen = {"jobs": jobs, "passed": passed}
            if passed or (not jobs and self.cfg.admit == "race"):  # only infrastructure failures: it races
                survivors.append(r)
            else:
                r.verdict = "screened out"
                r.why = f"passes none of its parent's {jobs} train failures" if jobs else "no screen rollout scored (infrastructure)"
                self._decide(r, {}, step)
        return survivors

    # ------------------------------------------------------------------ val pairs
    def _mean(self, member: str) -> float:
        scored = [v for v in self._state.outcomes.get(member, {}).values() if v is not None]
        return sum(scored) / len(scored) if scored else 0.0

    def _best(self) -> str:
        """The pool's best val mean; ties go to the earliest admitted (the start first), or with the gate
        to the latest admitted (a gated child fixed a failure of its parent: a tie on val keeps the fix)."""
        st = self._state
        if self.cfg.admit == "gate":
            rank = {m: i for i, m in enumerate(st.pool)}
            return max(st.pool, key=lambda m: (self._mean(m), rank[m]))
        return max(st.pool, key=lambda m: (self._mean(m), -st.pool[m]["step"], m == st.released[-1]))

    def _fill(self, harness: Harness) -> None:
        """Every val pair of a pool member evaluated."""
        have = self._state.outcomes.setdefault(harness.id, {})
        missing = [j for j in self.order if j not in have]
        if missing:
            trajs = self._evaluate([self._val_job(j, harness) for j in missing], f"val-{harness.id[:12]}")
            for j, t in zip(missing, trajs):
                have[j] = self._tally(j, t)

    def _tally(self, j: int, t: Trajectory) -> bool | None:
        """A val pair's outcome (None: an infrastructure failure), counted in the pair's tally."""
        if t.error == "infra":
            return None
        self._state.tallies[j][0 if t.passed else 1] += 1
        return t.passed

    def _race_order(self) -> list[int]:
        """The val pairs in the order a race visits them: the contested pairs first (some harness passed
        there and some failed), then the rest, each part in the run's fixed order. Only harnesses already
        evaluated decide it, never the children about to race on it."""
        tallies = self._state.tallies
        contested = {j for j in self.order if min(tallies[j]) > 0}
        return [j for j in self.order if j in contested] + [j for j in self.order if j not in contested]

    def _race(self, races: list[_Race], step: int) -> None:
        """Race each child against its parent on the val pairs in the race order (`_race_order`), `race_chunk`
        at a time."""
        st = self._state
        n = len(self.order)
        order = self._race_order()
        for r in races:
            r.order = order
        seen: dict[str, dict[int, bool | None]] = {r.child.id: {} for r in races}
        while live := [r for r in races if r.verdict is None]:
            jobs, owners = [], []
            for r in live:
                for j in r.order[r.next : r.next + self.cfg.race_chunk]:
                    jobs.append(self._val_job(j, r.child))
                    owners.append((r, j))
            trajs = self._evaluate(jobs, f"s{step}-race")
            for (r, j), t in zip(owners, trajs):
                passed = self._tally(j, t)
                seen[r.child.id][j] = passed
                base = st.outcomes[r.parent].get(j)
                if passed is None or base is None:
                    continue
                if passed and not base:
                    r.wins += 1
                elif base and not passed:
                    r.losses += 1
                else:
                    r.ties += 1
            for r in live:
                r.next = min(n, r.next + self.cfg.race_chunk)
                rest = [st.outcomes[r.parent].get(j) for j in r.order[r.next :]]
                winnable = sum(1 for b in rest if b is False)
                losable = sum(1 for b in rest if b is True)
                if better_posterior(r.wins + winnable, r.losses) < ADMIT_AT:
                    r.verdict, r.why = "dropped", "cannot be admitted"
                elif better_posterior(r.wins, r.losses) < DROP_BELOW:
                    r.verdict, r.why = "dropped", f"P(better) < {DROP_BELOW}"
                elif better_posterior(r.wins, r.losses + losable) >= ADMIT_AT:
                    r.verdict, r.why = "admitted", f"P(better) >= {ADMIT_AT}"
            self.journal.append_event(self.run_id, "race", {
                "iteration": step, "children": [{"candidate": r.child.id, "parent": r.parent, "kind": r.kind,
                                                 "pairs": r.next, "wins": r.wins, "losses": r.losses, "ties": r.ties,
                                                 "verdict": r.verdict} for r in live]})
        for r in races:
            self._decide(r, seen[r.child.id], step)

    def _decide(self, r: _Race, seen: dict[int, bool | None], step: int) -> None:
        """Journal a child's verdict (with its screen tally when the screen decided it); admit it to the pool."""
        st = self._state
        entry = {**edit_to_json(r.edit), "iteration": step, "base": r.parent[:12], "outcome": r.verdict,
                 "why": r.why, "kind": r.kind, "wins": r.wins, "losses": r.losses, "evaluated": r.wins + r.losses + r.ties}
        st.history.append(entry)
        decided_by_screen = r.verdict == "screened out" or (r.screen and self.cfg.admit != "race")
        tally = {"screen": r.screen} if decided_by_screen else {"p_better": round(better_posterior(r.wins, r.losses), 4)}
        if r.verdict == "admitted":
            st.outcomes[r.child.id] = dict(seen)
            # the pairs an early admission skipped; a member enters the pool with all of them (a budget that
            # ends here ends the run before the child is journalled as admitted)
            self._fill(r.child)
        self.journal.append_event(self.run_id, "decision", {**entry, "candidate": r.child.id, "parent": r.parent,
                                                           **tally})
        if r.verdict != "admitted":
            st.rejected += 1
            return
        st.admitted += 1
        st.pool[r.child.id] = {"parent": r.parent, "edit": edit_to_json(r.edit), "step": step, "evidence": None,
                               "refresh": 0}
        gain = self._mean(r.child.id) - self._mean(r.parent)
        self.journal.put_harness(r.child, parent=r.parent, edit=r.edit, rationale=r.edit.rationale,
                                 run_id=self.run_id, val_gain=gain)
        self._progress(step, "admitted", candidate=r.child.id[:12])

    # ------------------------------------------------------------------ merge
    def _merges(self, admitted: list[_Race], step: int) -> list[_Race]:
        """Each newly admitted child with each admitted sibling whose edit touches other parts."""
        st = self._state
        out = []
        for r in admitted:
            for sib, entry in sorted(st.pool.items()):
                if sib == r.child.id or entry["parent"] != r.parent or entry["edit"] is None:
                    continue
                pair = sorted((sib, r.child.id))
                if pair in st.merged:
                    continue
                other = edit_from_json(entry["edit"])
                if edit_targets(other) & edit_targets(r.edit):
                    continue
                st.merged.append(pair)
                edit = HarnessEdit(other.ops + r.edit.ops, rationale=f"merge: {other.rationale} + {r.edit.rationale}",
                                   targets="merge")
                try:
                    child = apply_edit(self.journal.get_harness(r.parent), edit)
                except ValueError:
                    continue
                if child.id in st.tried or child.id in st.pool:
                    continue
                base = max((sib, r.child.id), key=self._mean)
                st.tried.append(child.id)
                self.journal.append_event(self.run_id, "merge", {"iteration": step, "siblings": pair,
                                                                 "candidate": child.id, "against": base})
                out.append(_Race(child, base, edit, kind="merge"))
        return out

    # ------------------------------------------------------------------ the guard
    def _guard(self, step: int, tail: bool = False) -> None:
        """Open, feed and close guard attempts: the open attempt gets guard pairs until the guard has spent
        `GUARD_SHARE` of the rollouts used (`tail`: until the budget ends the run)."""
        st = self._state
        attempt = GuardAttempt.from_json(st.attempt) if st.attempt else None
        best, released = self._guard_candidate(attempt), st.released[-1]
        if attempt is not None and attempt.candidate != best:  # a better member: its own attempt
            attempt.outcome = "superseded"
            self._guard_event(attempt, step)
            st.attempt, attempt = None, None
        if attempt is None:
            if not tail and st.spend.rollouts < GUARD_AFTER * self.cfg.budget.rollouts:
                return  # the search first: edits compound, and the guard tests what they add up to
            if best == released or best in st.guard_failed or self._mean(best) <= self._mean(released):
                return
            if st.attempts + 1 >= MAX_ATTEMPTS:
                return
            st.attempts += 1
            attempt = GuardAttempt(st.attempts, best, released, self.cfg.alpha)
            st.attempt = attempt.as_json()
        cand, rel = self.journal.get_harness(attempt.candidate), self.journal.get_harness(attempt.released)
        while attempt.outcome is None and (tail or st.guard_rollouts < GUARD_SHARE * st.spend.rollouts):
            size = 1 if tail else self.cfg.race_chunk
            pairs = [guard_pair(len(self.guard_instances), self.cfg.seed, attempt.attempt, attempt.drawn + i)
                     for i in range(size)]
            jobs = [(self.guard_instances[i], h, seed) for i, seed in pairs for h in (cand, rel)]
            trajs = self._evaluate(jobs, f"s{step}-guard{attempt.attempt}")
            attempt.drawn += size
            st.guard_rollouts += len(jobs)
            for c, r in zip(trajs[::2], trajs[1::2]):
                if c.error != "infra" and r.error != "infra" and attempt.add(c.passed, r.passed):
                    break
            st.attempt = attempt.as_json()
            self._guard_event(attempt, step)
        if attempt.outcome is None:
            return
        st.attempt = None
        if attempt.outcome != "release":
            st.guard_failed.append(attempt.candidate)
            self._progress(step, "guard: not released")
            return
        best = attempt.candidate
        st.released.append(best)
        member = st.pool[best]
        gain = self._mean(best) - self._mean(released)
        st.accepted.append({**(member["edit"] or {}), "harness_id": best, "iteration": step, "val_gain": gain,
                            "released_over": released, "guard": attempt.as_json()})
        st.gain_curve.append((st.spend.rollouts, self._mean(best)))
        self.journal.append_event(self.run_id, "release", {"iteration": step, "harness_id": best, "over": released,
                                                           "val_gain": round(gain, 4), "guard": attempt.as_json()})
        self.log.info("released", step=step, harness_id=best[:12], val_gain=round(gain, 3), e_value=attempt.e_value)
        self._progress(step, "released")

    def _guard_candidate(self, attempt: GuardAttempt | None) -> str:
        """The member the guard tests: the pool's best val mean, or with the chain its head (the open
        attempt's candidate while one is open)."""
        if self.cfg.admit != "chain":
            return self._best()
        return attempt.candidate if attempt is not None else self._head()

    def _head(self) -> str:
        """The chain's head; the start (the pool's first member) before any step admitted a child."""
        return self._state.head or next(iter(self._state.pool))

    def _guard_event(self, attempt: GuardAttempt, step: int) -> None:
        self.journal.append_event(self.run_id, "guard", {"iteration": step, **attempt.as_json()})

    def _progress(self, it: int, phase: str, **extra: Any) -> None:
        if not self.on_progress:
            return
        st = self._state
        self.on_progress({"iteration": it, "phase": phase, "best_val": self._mean(st.released[-1]),
                          "accepted": len(st.accepted), "admitted": st.admitted, "pool": len(st.pool),
                          "rejected": st.rejected, "invalid": st.invalid, "rollouts": st.spend.rollouts,
                          "usd": round(st.spend.usd, 4), "proposer_tokens": st.spend.proposer_tokens, **extra})


def make_evolution(config: Any, evaluator: Any, proposer: Any, journal: Any, run_id: str,
                   on_progress: Any = None) -> HarnessEvolution:
    """The harness search `config.search` names: the racing search ("race", the default) or the sign-test
    loop ("loop")."""
    cls = RaceEvolution if config.search == "race" else HarnessEvolution
    return cls(config, evaluator, proposer, journal, run_id, on_progress=on_progress)


def guard_tallies(journal: Any, run_id: str) -> list[dict[str, Any]]:
    """A racing search's guard attempts, each one's last journalled tally, in attempt order."""
    last = {e.payload["attempt"]: e.payload for e in journal.events(run_id, "guard")}
    return [last[a] for a in sorted(last)]


def guard_summary(journal: Any, run_id: str) -> str:
    """Why a racing search's run released what it did: its guard attempts, each one's last tally."""
    tallies = guard_tallies(journal, run_id)
    if not tallies:
        return "release guard: no candidate beat the start on the val pairs"
    parts = [f"attempt {p['attempt']}: {p['outcome'] or 'open'} at wins {p['wins']}, losses {p['losses']}, ties {p['ties']}, "
             f"e-value {p['e_value']} of {p['threshold']}" for p in tallies]
    return "release guard: " + "; ".join(parts)


def min_guard_budget(cfg: Any) -> int:
    """The fewest rollouts with which a racing search can take one guard decision: the start's val
    pairs and the guard's fewest pairs (two rollouts each)."""
    return cfg.val_n * cfg.val_seeds + 2 * min_pairs(cfg.alpha)


def search_val_n(val_n: int, split: int) -> int:
    """The search's val instances for a wish of `val_n` in a val split of `split`: at most the split
    less a third of it (at least one instance), which the release guard draws from."""
    return max(1, min(val_n, split - max(1, split // 3)))


def validate_search(cfg: Any, split: int) -> None:
    """Why a racing search cannot run with `cfg` on a val split of `split` instances (ValueError)."""
    if cfg.search != "race":
        return
    if split - cfg.val_n < 1:
        raise BadInput(f"val_n {cfg.val_n} leaves no instance of the val split ({split}) of {cfg.family} for the "
                       f"release guard: at most {split - 1}")
    need = min_guard_budget(cfg)
    if cfg.budget.rollouts < need:
        raise BadInput(f"a rollout budget of {cfg.budget.rollouts} is too small for one guard decision: the start's "
                       f"{cfg.val_n * cfg.val_seeds} val pairs and {min_pairs(cfg.alpha)} guard pairs (2 rollouts "
                       f"each) need {need}")
