"""The racing search and its release guard (coevolve.agents.meta.race, coevolve.agents.meta.guard): the
e-value and its thresholds, the run-level false-release bound under a no-op proposer (a seeded simulation
through the real search with a scripted model), power against a real improvement, the whole budget spent,
every decision journalled, resume mid-race, the outcome cache, and bad input on the CLI."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coevolve.agents.meta import (
    Budget,
    EvolveConfig,
    HarnessEvolution,
    LLMProposer,
    RaceEvolution,
    make_evolution,
)
from coevolve.agents.meta.guard import (
    GuardAttempt,
    attempt_alpha,
    better_posterior,
    e_value,
    guard_pair,
    min_pairs,
)
from coevolve.agents.meta.proposer import Proposal
from coevolve.agents.meta.race import _RaceState, edit_targets, min_guard_budget, search_val_n
from coevolve.edits import apply_edit, edit_from_json
from coevolve.llm.contract import Completion
from coevolve.store.store import HarnessStore, rollout_key
from coevolve.tasks import get_family
from coevolve.values import Outcome, Trajectory
from tests.rollouts import FunctionClient, InProcessEvaluator, proposer_complete
from tests.test_meta import Crash

IOT = get_family("iot")


# ------------------------------------------------------------------ the e-value
def test_e_value_is_the_uniform_mixture_over_bets_on_the_half_interval():
    steps = 20_000
    for wins, losses in [(0, 0), (3, 0), (5, 2), (9, 1), (0, 4), (12, 12)]:
        ps = [0.5 + (i + 0.5) / (2 * steps) for i in range(steps)]
        integral = sum(2 * (2 * p) ** wins * (2 * (1 - p)) ** losses for p in ps) / (2 * steps)
        assert e_value(wins, losses) == pytest.approx(integral, rel=1e-4)
    assert e_value(0, 0) == 1.0
    assert all(e_value(n, 0) == pytest.approx((2 ** (n + 1) - 1) / (n + 1)) for n in range(1, 30))


def test_attempt_alphas_sum_to_the_runs_alpha_and_later_attempts_need_more():
    total = sum(attempt_alpha(0.1, j) for j in range(1, 100_000))
    assert 0.0999 < total < 0.1
    assert [min_pairs(0.1, j) for j in (1, 2, 3)] == [6, 9, 10]
    assert e_value(6, 0) >= 1 / attempt_alpha(0.1, 1) > e_value(5, 0)


def test_an_attempt_releases_at_the_crossing_and_is_abandoned_when_clearly_not_better():
    g = GuardAttempt(1, "c", "r", 0.1)
    outcomes = [g.add(True, False) for _ in range(6)]
    assert outcomes == [None] * 5 + ["release"] and g.e_value >= g.threshold
    with pytest.raises(ValueError):
        g.add(True, False)
    bad = GuardAttempt(1, "c", "r", 0.1)
    assert [bad.add(False, True) for _ in range(4)] == [None, None, None, "abandon"]  # P(better) = 1/32
    assert better_posterior(0, 3) == pytest.approx(1 / 16) and better_posterior(4, 0) == pytest.approx(31 / 32)
    ties = GuardAttempt(1, "c", "r", 0.1)
    assert all(ties.add(True, True) is None for _ in range(50))  # ties leave the wealth at 1: no decision


def test_guard_pairs_are_fresh_per_attempt_and_run_and_reproducible():
    seeds = set()
    for run_seed in (0, 1, 7):
        for attempt in (1, 2, 3):
            pairs = [guard_pair(20, run_seed, attempt, t) for t in range(200)]
            assert pairs == [guard_pair(20, run_seed, attempt, t) for t in range(200)]
            assert all(0 <= i < 20 for i, _ in pairs)
            seeds |= {s for _, s in pairs}
    assert len(seeds) == 3 * 3 * 200
    assert len({i for i, _ in (guard_pair(20, 0, 1, t) for t in range(200))}) == 20  # every instance drawn


# ------------------------------------------------------------------ a scripted model and proposer
class MemoryJournal:
    """The `Journal` the search writes, in memory (the store's contract, without sqlite)."""

    root = Path("/nonexistent")

    def __init__(self) -> None:
        self.evts: list[tuple[str, dict[str, Any]]] = []
        self.harnesses: dict[str, Any] = {}
        self.rollouts: dict[str, Trajectory] = {}

    def append_event(self, run_id: str, kind: str, payload: dict[str, Any]) -> int:
        self.evts.append((kind, json.loads(json.dumps(payload))))
        return len(self.evts)

    def events(self, run_id: str, kind: str | None = None) -> list[Any]:
        class E:
            def __init__(self, kind: str, payload: dict[str, Any]):
                self.kind, self.payload = kind, payload

        return [E(k, p) for k, p in self.evts if kind is None or k == kind]

    def put_harness(self, h: Any, **kw: Any) -> str:
        self.harnesses.setdefault(h.id, h)
        return h.id

    def get_harness(self, ref: str) -> Any:
        return self.harnesses[ref]

    def put_trajectories(self, run_id: str, trajectories: Any, batch: str = "main") -> str:
        for t in trajectories:
            self.rollouts[rollout_key(t.instance, t.harness_id, t.model, t.seed)] = t
        return batch

    def stored_rollouts(self, run_ids: Any, keys: Any) -> dict[str, Trajectory]:
        return {k: self.rollouts[k] for k in keys if k in self.rollouts}


def _draw(*parts: Any) -> float:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12], 16) / 16**12


class ScriptedModel:
    """An Evaluator whose rollouts pass with a probability set by the harness text: 0.35 (+0.5 when the
    system prompt says GOOD), drawn per (instance, harness, seed) as any text change resamples. Records
    every job it runs."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, str, int]] = []

    def evaluate(self, jobs: Any, model: str) -> list[Trajectory]:
        out = []
        for inst, h, seed in jobs:
            self.jobs.append((inst.id, h.id, seed))
            p = 0.35 + (0.5 if "GOOD" in h.render_system() else 0.0)
            passed = _draw(inst.id, h.id, seed) < p
            out.append(Trajectory(inst, h.id, model, seed, (), (), Outcome(passed, float(passed),
                                                                          {"requirements": [] if passed else [{"id": "x", "reason": "missed", "passed": False}]})))
        return out


class ScriptedProposer:
    """Proposes `k` recipe edits a step: no-ops (text that changes nothing but resamples) or, with
    `good`, one edit that says GOOD first."""

    def __init__(self, good: bool = False):
        self.good = good
        self.calls = 0

    def propose(self, evidence: dict[str, Any], harness: Any, k: int, seed: int):
        self.calls += 1
        out = []
        for i in range(k):
            word = "GOOD" if self.good and i == 0 else "neutral"
            raw = {"rationale": f"r{self.calls}-{i}", "ops": [{"op": "add_recipe", "name": f"note_{self.calls}_{i}",
                                                              "text": f"A {word} note {self.calls}.{i}."}]}
            edit = edit_from_json(raw)
            out.append(Proposal(edit, apply_edit(harness, edit), None, raw))
        return out, Completion({}, 0, 0, 0.0)


def scripted_run(seed: int, good: bool, rollouts: int = 100, model: ScriptedModel | None = None,
                 **kw: Any) -> tuple[Any, MemoryJournal]:
    cfg = EvolveConfig(family="iot", model="synthetic/weak", seed=seed, train_batch=4, val_n=6, val_seeds=2,
                       budget=Budget(iterations=1000, rollouts=rollouts), **kw)
    journal = MemoryJournal()
    return RaceEvolution(cfg, model or ScriptedModel(), ScriptedProposer(good), journal, "run").run(), journal


def test_no_op_proposer_runs_release_a_non_baseline_harness_at_most_alpha_of_the_time():
    runs = [scripted_run(seed, good=False) for seed in range(200)]
    released = sum(r.harness_id != r.baseline_id for r, _ in runs)
    assert all(r.rollouts_used >= 94 for r, _ in runs)  # every run spent its budget (less than one batch left)
    assert released / len(runs) <= 0.1  # alpha; the bound is Ville's inequality and the attempts' alpha_j
    attempts = sum(len({e.payload["attempt"] for e in j.events("run", "guard")}) for _, j in runs)
    assert attempts >= 40  # lucky no-op members did reach the guard: the rate above is the guard's
    dropped = [e.payload["evaluated"] for _, j in runs for e in j.events("run", "decision") if e.payload["outcome"] == "dropped"]
    assert sum(dropped) / len(dropped) < 8  # a child that does not help costs a few val pairs, not all 12


def test_gated_no_op_children_enter_the_pool_but_runs_release_one_at_most_alpha_of_the_time():
    """`admit` "gate": a child that passes one of its parent's failures joins the pool without a val race,
    so no-op children pile up in the pool; the guard still bounds what a run releases."""
    runs = [scripted_run(seed, good=False, screen=3, admit="gate") for seed in range(200)]
    assert sum(r.harness_id != r.baseline_id for r, _ in runs) / len(runs) <= 0.1
    decisions = [e.payload for _, j in runs for e in j.events("run", "decision")]
    admitted = [d for d in decisions if d["outcome"] == "admitted"]
    assert len(admitted) >= 200 and all(d["screen"]["passed"] >= 1 and d["evaluated"] == 0 for d in admitted)
    assert not any(j.events("run", "race") for _, j in runs)  # no child raced, no merge either
    assert sum(len({e.payload["attempt"] for e in j.events("run", "guard")}) for _, j in runs) >= 40


def test_the_chain_is_one_line_of_edits_and_its_guard_tests_the_head_to_the_end():
    """`admit` "chain": every step's parent is the chain's head, a child of the head before it, so the parents
    form one line from the start; a guard attempt opens on the head and runs to its end however many
    members join meanwhile; under a no-op proposer a run still releases at most alpha of the time."""
    runs = [scripted_run(seed, good=False, screen=3, admit="chain") for seed in range(200)]
    assert sum(r.harness_id != r.baseline_id for r, _ in runs) / len(runs) <= 0.1
    opened = longest = 0
    for r, journal in runs:
        parent_of = {e.payload["candidate"]: e.payload["parent"] for e in journal.events("run", "decision")
                     if e.payload["outcome"] == "admitted"}
        line = [r.baseline_id]
        for e in journal.events("run", "proposal"):
            if e.payload["parent"] != line[-1]:
                assert parent_of[e.payload["parent"]] == line[-1]  # the new head is a child of the last
                line.append(e.payload["parent"])
        longest = max(longest, len(line))
        attempts = {}
        for e in journal.events("run", "guard"):
            candidate = attempts.setdefault(e.payload["attempt"], e.payload["candidate"])
            assert candidate == e.payload["candidate"] and e.payload["outcome"] != "superseded"
            assert candidate in line[1:] or parent_of.get(candidate) == line[-1]  # a head: on the line, or the last
        opened += len(attempts)
    assert longest >= 4  # edits compound
    assert opened >= 40  # no-op heads did reach the guard: the rate above is the guard's


@pytest.mark.parametrize("admit", ["gate", "chain"])
def test_a_gated_search_releases_a_real_improvement(admit):
    runs = [scripted_run(seed, good=True, rollouts=200, screen=3, admit=admit) for seed in range(20)]
    released = [j.get_harness(r.harness_id) for r, j in runs if r.harness_id != r.baseline_id]
    assert len(released) >= 16 and all("GOOD" in h.render_system() for h in released)


def test_the_gated_pools_parents_are_its_undominated_members_and_ties_keep_the_latest():
    cfg = EvolveConfig(family="iot", model="synthetic/weak", seed=3, train_batch=4, val_n=6, val_seeds=2, screen=3,
                       admit="gate", budget=Budget(iterations=1000, rollouts=100))
    race = RaceEvolution(cfg, ScriptedModel(), ScriptedProposer(), MemoryJournal(), "run")
    pool = {m: {"step": i} for i, m in enumerate("abc")}
    race._state = _RaceState(pool=pool, outcomes={"a": {0: True, 1: False}, "b": {0: True, 1: False}, "c": {0: False, 1: True}})
    assert race._undominated([{"a", "b"}, {"c"}]) == [{"b"}, {"c"}]  # a and b tie everywhere: the later stays
    assert race._undominated([{"a", "b"}, {"a", "c"}]) == [{"b"}, {"c"}]  # the lowest, earliest goes first
    race._state.outcomes["a"] = {0: True, 1: True}
    assert race._undominated([{"a", "b"}, {"a", "c"}]) == [{"a"}, {"a"}]  # a, the best, covers both fronts
    race._state.outcomes["a"] = {0: True, 1: False}
    race._state.outcomes["c"] = {0: True, 1: True}
    assert race._best() == "c" and race._front_weights() == {"a": 0.0, "b": 0.0, "c": 2.0}


def test_a_real_improvement_is_released_with_the_guards_evidence_in_the_journal():
    runs = [scripted_run(seed, good=True, rollouts=200) for seed in range(20)]
    released = [(r, j) for r, j in runs if r.harness_id != r.baseline_id]
    assert len(released) >= 16
    r, journal = released[0]
    assert "GOOD" in journal.get_harness(r.harness_id).render_system()
    release = journal.events("run", "release")[0].payload
    assert release["guard"]["e_value"] >= release["guard"]["threshold"] and release["over"] == r.baseline_id
    assert r.accepted[0]["harness_id"] == r.harness_id


def test_the_screen_drops_a_child_that_fixes_none_of_its_parents_failures_before_any_val_pair():
    """`screen` 3: a child first runs its parent's first 3 failed evidence rollouts (same instance and
    seed); one that passes none is journalled `screened out` and never runs a val pair; the one good
    edit still gets through and is released."""
    released = screened = 0
    for seed in range(20):
        model = ScriptedModel()
        r, journal = scripted_run(seed, good=True, rollouts=200, model=model, screen=3)
        released += "GOOD" in journal.get_harness(r.harness_id).render_system()
        val = {inst.id for inst in get_family("iot").generate("val")}
        for d in (e.payload for e in journal.events("run", "decision")):
            jobs = [(i, s) for i, h, s in model.jobs if h == d["candidate"]]
            if d["outcome"] != "screened out":
                assert any(i in val for i, _ in jobs)
                continue
            screened += 1
            assert d["evaluated"] == 0 and jobs and len(jobs) <= 3 and not any(i in val for i, _ in jobs)
            assert d["screen"] == {"jobs": len(jobs), "passed": 0} and "p_better" not in d
            for i, s in jobs:  # the parent failed there, and so did the child
                assert _draw(i, d["parent"], s) >= 0.35 and _draw(i, d["candidate"], s) >= 0.35
    assert screened >= 20 and released >= 16


def test_a_race_visits_the_contested_pairs_first_in_the_runs_fixed_order():
    """Pairs where some harness passed and some failed come first; nothing evaluated yet, the fixed order."""
    cfg = EvolveConfig(family="iot", model="synthetic/weak", seed=3, train_batch=4, val_n=6, val_seeds=2,
                       budget=Budget(iterations=1000, rollouts=100))
    race = RaceEvolution(cfg, ScriptedModel(), ScriptedProposer(), MemoryJournal(), "run")
    race._state = _RaceState(tallies=[[0, 0] for _ in race.order])
    assert race._race_order() == race.order
    contested = {race.order[5], race.order[9]}
    race._state.tallies = [[1, 2] if j in contested else [3, 0] for j in range(len(race.order))]
    assert race._race_order() == [j for j in race.order if j in contested] + [j for j in race.order if j not in contested]


def test_every_search_pair_outcome_is_tallied_and_guard_pairs_are_not():
    search = {inst.id for inst in get_family("iot").generate("val")[:6]}
    outcomes: list[bool] = []

    class Counting(ScriptedModel):
        def evaluate(self, jobs: Any, model: str) -> list[Trajectory]:
            out = super().evaluate(jobs, model)
            outcomes.extend(t.passed for t in out if t.instance.id in search)
            return out

    model = Counting()
    cfg = EvolveConfig(family="iot", model="synthetic/weak", seed=4, train_batch=4, val_n=6, val_seeds=2,
                       budget=Budget(iterations=1000, rollouts=200))
    race = RaceEvolution(cfg, model, ScriptedProposer(good=True), MemoryJournal(), "run")
    race.run()
    assert len(outcomes) > 24 and len(model.jobs) > len(outcomes)  # races ran, and so did train and guard rollouts
    tallies = race._state.tallies
    assert [sum(t[0] for t in tallies), sum(t[1] for t in tallies)] == [sum(outcomes), len(outcomes) - sum(outcomes)]


class InfraOnTrain(ScriptedModel):
    """Every train rollout of a harness other than the start is an infrastructure failure."""

    def __init__(self, start: str) -> None:
        super().__init__()
        self.start = start

    def evaluate(self, jobs: Any, model: str) -> list[Trajectory]:
        out = super().evaluate(jobs, model)
        return [dataclasses.replace(t, error="infra") if "/train/" in t.instance.id and t.harness_id != self.start
                else t for t in out]


def test_a_child_whose_screen_rollouts_all_failed_on_infrastructure_races():
    start = get_family("iot").baseline_harness().id
    _, journal = scripted_run(0, good=False, model=InfraOnTrain(start), screen=3)
    outcomes = [e.payload["outcome"] for e in journal.events("run", "decision")]
    assert outcomes and "screened out" not in outcomes and journal.events("run", "race")


# ------------------------------------------------------------------ the search on the synthetic testbed
def race_config(**kw: Any) -> EvolveConfig:
    return EvolveConfig(**{"family": "iot", "model": "synthetic/weak", "train_batch": 8, "val_n": 6, "val_seeds": 2,
                           "budget": Budget(iterations=1000, rollouts=160), **kw})


def make_race(path: Path, cfg: EvolveConfig, evaluator: Any = None) -> tuple[Any, HarnessStore]:
    store = HarnessStore(path / "store")
    run_id = store.create_run("evolve", cfg.to_json())
    proposer = LLMProposer(cfg.proposer, FunctionClient(proposer_complete), IOT.handbook)
    return make_evolution(cfg, evaluator or InProcessEvaluator(), proposer, store, run_id), store


class Recording(InProcessEvaluator):
    def __init__(self, crash_at: int | None = None):
        super().__init__()
        self.crash_at = crash_at
        self.jobs: list[tuple[str, str, int]] = []

    def evaluate(self, jobs, model):
        if self.crash_at is not None and self.calls + 1 == self.crash_at:
            raise Crash()
        self.jobs += [(i.id, h.id, s) for i, h, s in jobs]
        return super().evaluate(jobs, model)


def test_the_race_spends_its_budget_journals_every_decision_and_never_pays_a_rollout_twice(tmp_path):
    cfg = race_config()
    evaluator = Recording()
    race, store = make_race(tmp_path, cfg, evaluator)
    assert isinstance(race, RaceEvolution)
    r = race.run()
    assert r.stop_reason == "budget:rollouts" and 156 <= r.rollouts_used <= 160  # no plateau stop
    assert len(evaluator.jobs) == len(set(evaluator.jobs)) == r.rollouts_used  # the cache: no job run twice
    kinds = {e.kind for e in store.events(race.run_id)}
    assert {"config", "proposal", "race", "decision", "checkpoint", "result"} <= kinds
    decisions = [e.payload for e in store.events(race.run_id, "decision")]
    assert decisions and {d["outcome"] for d in decisions} <= {"admitted", "dropped"}
    # every cached outcome is the stored rollout of that harness, instance and seed
    state = store.events(race.run_id, "checkpoint")[-1].payload
    for harness_id, outcomes in state["outcomes"].items():
        assert set(outcomes) == {str(j) for j in range(len(race.val))}  # a pool member has every val pair
        h = store.get_harness(harness_id)
        keys = {j: rollout_key(race.val[int(j)][0], h.id, cfg.model, race.val[int(j)][1]) for j in outcomes}
        stored = store.stored_rollouts([race.run_id], list(keys.values()))
        assert {j: stored[k].passed for j, k in keys.items()} == outcomes


@pytest.mark.parametrize("crash_at, admit", [(5, "race"), (6, "gate"), (6, "chain")])
def test_a_run_killed_mid_race_resumes_to_the_same_released_harness(tmp_path, crash_at, admit):
    cfg = race_config(admit=admit, screen=0 if admit == "race" else 3)
    expected = make_race(tmp_path / "ref", cfg)[0].run()
    race, _ = make_race(tmp_path / "crash", cfg, Recording(crash_at))
    with pytest.raises(Crash):
        race.run()
    proposer = LLMProposer(cfg.proposer, FunctionClient(proposer_complete), IOT.handbook)
    resumed = make_evolution(cfg, InProcessEvaluator(), proposer, HarnessStore(tmp_path / "crash" / "store", create=False),
                             race.run_id).run(resume=True)
    assert (resumed.harness_id, resumed.rollouts_used, resumed.accepted) == (expected.harness_id, expected.rollouts_used, expected.accepted)


def test_the_search_is_chosen_by_the_config_and_old_journals_resume_the_loop():
    assert type(make_evolution(race_config(), None, None, MemoryJournal(), "r")) is RaceEvolution
    assert type(make_evolution(race_config(search="loop"), None, None, MemoryJournal(), "r")) is HarnessEvolution
    old = {k: v for k, v in race_config().to_json().items() if k not in ("search", "race_chunk")}
    assert EvolveConfig.from_json(old).search == "loop"
    loop = HarnessEvolution(race_config(), None, None, MemoryJournal(), "r")
    assert loop.cfg.search == "loop" and "search" not in loop.cfg.to_json()  # journalled as the loop it runs


def test_merges_only_edits_that_touch_different_parts():
    a = edit_from_json({"ops": [{"op": "add_recipe", "name": "x", "text": "t"}]})
    b = edit_from_json({"ops": [{"op": "set_section", "name": "role", "text": "t"}]})
    c = edit_from_json({"ops": [{"op": "append_section", "name": "role", "text": "u"}]})
    assert not edit_targets(a) & edit_targets(b) and edit_targets(b) & edit_targets(c)


def test_search_val_n_leaves_the_guard_a_third_of_the_split():
    assert search_val_n(30, 50) == 30 and search_val_n(50, 50) == 34 and search_val_n(12, 10) == 7
    assert search_val_n(5, 2) == 1


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("args, message", [
    (["--budget-rollouts", "10"], "too small for one guard decision"),
    (["--val-n", "50"], "leaves no instance of the val split"),
    (["--alpha", "1.5"], "alpha must be in (0, 1)"),
    (["--alpha", "0"], "alpha must be in (0, 1)"),
    (["--admit", "gate"], "admit 'gate' needs a screen of at least 1"),
    (["--admit", "chain"], "admit 'chain' needs a screen of at least 1"),
])
def test_bad_search_input_is_one_error_line_exit_2_and_nothing_written(tmp_path, args, message):
    from coevolve.cli.app import app

    store = tmp_path / "store"
    result = CliRunner().invoke(app, ["evolve", "--family", "iot", "--store", str(store), *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert not store.exists() or not any(store.iterdir())
    assert min_guard_budget(race_config()) == 6 * 2 + 2 * 6


class UnreachableProposer(ScriptedProposer):
    def propose(self, evidence, harness, k, seed):
        self.calls += 1
        return [Proposal(None, None, "proposer call failed: no API key for gemini/x", "")], Completion({}, 0, 0, 0.0)


def test_a_proposer_that_cannot_be_reached_fails_the_run_with_its_reason():
    from coevolve.agents.meta.race import PROPOSER_PATIENCE
    from coevolve.llm.contract import ProposerUnreachable

    cfg = EvolveConfig(family="iot", model="synthetic/weak", proposer="gemini/x", train_batch=4, val_n=6, val_seeds=2,
                       budget=Budget(iterations=1000, rollouts=200))
    proposer = UnreachableProposer()
    with pytest.raises(ProposerUnreachable, match="gemini/x failed 3 steps in a row: proposer call failed: no API key"):
        RaceEvolution(cfg, ScriptedModel(), proposer, MemoryJournal(), "run").run()
    assert proposer.calls == PROPOSER_PATIENCE
