"""Co-evolution (docs/ARCHITECTURE.md §1.5): the meta-agent's cycles, per family, as pure logic.

Each cycle: evolve the harness around the current model (the weak model with the current adapter)
-> build the on-policy correction set from that model's own rollouts under the current harness ->
train a candidate adapter (on the base weights, with every correction row gathered so far) -> make it
servable -> evaluate it on validation, paired with the current model on identical instances and seeds
-> keep it only if the sign test accepts -> evolve the harness again around the adapted model. The
family stops at the cycle budget, after `plateau` cycles without any accepted change, or at the run's
budgets (rollouts, dollars, seconds) or a stop request; then the final harness and adapter are
measured against the baseline on the test split.

Every step is a *cell* recorded in the journal with its evidence (key -> payload); a resumed run skips
finished cells and redoes a half-finished one from its own checkpoints (a harness evolution resumes
from its run's checkpoints), so the same seed gives the same final harness and adapter.

Spend is journaled with the work it pays for: every rollout the run pays for is stored (the run's own
for data, acceptance and final cells, its harness evolutions' in their runs), and the store indexes
each stored batch's rollouts in the transaction that stores it. The run's rollout count and rollout
dollars are those of the distinct rollouts stored by the run and its evolutions (`rollout_spend`), and
a redone cell takes the rollouts it stored before a kill from the store instead of running them again,
so a resumed run reports (and pays for) what an uninterrupted one does, but for rollouts in flight at
the kill. Proposer dollars are journaled per finished evolve cell; wall-clock seconds per cell.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from coevolve.agents.backend import Backend
from coevolve.agents.meta.acceptance import PairedResult, SignTest
from coevolve.agents.meta.loop import Journal
from coevolve.analysis.stats import infra_note, paired_difference, pass_rate
from coevolve.store.store import rollout_key
from coevolve.values import Harness, TaskInstance, Trajectory

log = structlog.get_logger(role="meta")


INFRA_MIN = 20  # rollouts a run has seen before its infrastructure share is judged


class InfraFailure(RuntimeError):
    """More than `INFRA_SHARE` of a run's rollouts failed for infrastructure: the run fails with the cause."""


@dataclass
class CycleSettings:
    families: list[str]
    weak: str
    expert: str
    judge: str
    proposer: str
    cycles: int = 3
    plateau: int = 1
    rollouts: int = 20_000
    usd: float = 50.0
    seconds: float = 4 * 3600.0
    evolve_iterations: int = 200
    evolve_rollouts: int = 1500
    val_n: int = 30
    val_seeds: int = 2
    train_batch: int = 20
    rows: int = 200
    samples: int = 2
    k: int = 3
    repeats: int = 2
    alpha: float = 0.1
    seed: int = 0
    params: dict[str, int] = field(default_factory=dict)  # family knobs of every instance the run draws


@dataclass
class Spend:
    rollouts: int = 0  # distinct rollouts the run (and its evolutions) stored, plus those in flight
    rollout_usd: float = 0.0
    proposer_usd: float = 0.0  # of the finished evolve cells, plus the one at work
    seconds_before: float = 0.0
    started: float = field(default_factory=time.monotonic)

    @property
    def usd(self) -> float:
        return self.rollout_usd + self.proposer_usd

    @property
    def seconds(self) -> float:
        return self.seconds_before + time.monotonic() - self.started


class Stopped(Exception):
    pass


class CoEvolution:
    def __init__(self, settings: CycleSettings, journal: Journal, run_id: str, backend: Backend,
                 stop_requested: Callable[[], bool] = lambda: False,
                 on_status: Callable[[dict[str, Any]], None] | None = None):
        self.s = settings
        self.journal = journal
        self.run_id = run_id
        self.backend = backend
        self.stop_requested = stop_requested
        self.on_status = on_status or (lambda d: None)
        self.done: dict[str, dict[str, Any]] = {e.payload["cell"]: e.payload for e in journal.events(run_id, "cell")}
        spent = [e.payload for e in journal.events(run_id, "spend")]
        self.spend = Spend(seconds_before=spent[-1]["seconds"] if spent else 0.0)
        self.spend.proposer_usd = sum(self._proposer_usd(c) for k, c in self.done.items() if k.startswith("evolve:"))
        self._sync_spend()
        self.status: dict[str, Any] = {"stage": "starting"}
        self.rollouts_seen = 0
        self.infra_causes: Counter[str] = Counter()

    # ------------------------------------------------------------------ bookkeeping
    def _runs(self) -> list[str]:
        """This run and the runs of its harness evolutions: where its rollouts are stored."""
        return [self.run_id, *dict.fromkeys(e.payload["run_id"] for e in self.journal.events(self.run_id, "started"))]

    def _sync_spend(self) -> None:
        """Rollout spend as the store holds it (the journal of the work): distinct stored rollouts."""
        self.spend.rollouts, self.spend.rollout_usd = self.journal.rollout_spend(self._runs())

    def _proposer_usd(self, cell: dict[str, Any]) -> float:
        """A finished evolve cell's proposer dollars (a cell journaled before they were: the evolution's
        dollars less its stored rollouts')."""
        if "proposer_usd" in cell:
            return float(cell["proposer_usd"])
        results = self.journal.events(cell["run_id"], "result")
        if not results:
            return 0.0
        return max(0.0, results[-1].payload["spend"]["usd"] - self.journal.rollout_spend([cell["run_id"]])[1])

    def _evaluate(self, jobs: Sequence[tuple[TaskInstance, Harness, int]], model: str, label: str) -> list[Trajectory]:
        """Rollouts of this run, in job order: what it stored before under their keys (a redone cell
        after a kill), the rest run and stored as one batch — the store transaction that records them
        is their spend."""
        keys = [rollout_key(inst, h.id, model, seed) for inst, h, seed in jobs]
        have = self.journal.stored_rollouts([self.run_id], keys)
        todo = {k: job for k, job in zip(keys, jobs) if k not in have}
        if todo:
            fresh = self.backend.evaluate(list(todo.values()), model)
            self._count_infra(fresh)
            self.journal.put_trajectories(self.run_id, fresh, batch=f"{label}-{secrets.token_hex(3)}")
            self.spend.rollouts += len(fresh)
            self.spend.rollout_usd += sum(t.cost_usd for t in fresh)
            have.update(zip(todo, fresh))
        return [have[k] for k in keys]

    def _count_infra(self, trajs: Sequence[Trajectory]) -> None:
        """Fail the run once more than `INFRA_SHARE` of its rollouts (at least `INFRA_MIN` seen) failed for
        infrastructure: what it would go on to measure is the infrastructure, not the model."""
        self.rollouts_seen += len(trajs)
        for t in trajs:
            if t.error == "infra":
                self.infra_causes[(t.error_detail or "unknown")[:160]] += 1
        infra = sum(self.infra_causes.values())
        if self.rollouts_seen >= INFRA_MIN and (note := infra_note(infra, self.rollouts_seen)):
            cause, n = self.infra_causes.most_common(1)[0]
            raise InfraFailure(f"{note}; most often ({n}): {cause}")

    def _check(self) -> None:
        """A safe point: budgets and stop requests are honoured between cells."""
        s = self.s
        if self.stop_requested():
            raise Stopped("stop requested")
        for name, used, limit in (("rollouts", self.spend.rollouts, s.rollouts), ("usd", self.spend.usd, s.usd),
                                  ("seconds", self.spend.seconds, s.seconds)):
            if used >= limit:
                raise Stopped(f"budget:{name}")

    def _cell(self, key: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if key in self.done:
            return self.done[key]
        self._check()
        self._set_status(stage=key)
        started = time.monotonic()
        payload = {"cell": key, **work(), "seconds": round(time.monotonic() - started, 2)}
        self._sync_spend()
        self.journal.append_event(self.run_id, "cell", payload)
        self.journal.append_event(self.run_id, "spend", {"rollouts": self.spend.rollouts, "usd": round(self.spend.usd, 6),
                                                          "seconds": round(self.spend.seconds, 2)})
        self.done[key] = payload
        return payload

    def _set_status(self, **kw: Any) -> None:
        self.status.update(kw)
        self.status["spend"] = {"rollouts": self.spend.rollouts, "usd": round(self.spend.usd, 4),
                                "seconds": round(self.spend.seconds, 1)}
        self.status["budget"] = {"rollouts": self.s.rollouts, "usd": self.s.usd, "seconds": self.s.seconds,
                                 "cycles": self.s.cycles}
        self.on_status(dict(self.status))

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        reason = "done"
        results = {}
        try:
            for family in self.s.families:
                results[family] = self._family(family)
        except Stopped as e:
            reason = str(e)
        self._set_status(stage="finished", stop_reason=reason)
        return {"run_id": self.run_id, "stop_reason": reason, "families": results,
                "spend": self.status["spend"], "cells": len(self.done)}

    def _family(self, name: str) -> dict[str, Any]:
        from coevolve.tasks import get_family

        family = get_family(name)
        harness = family.baseline_harness()
        self.journal.put_harness(harness, rationale="family baseline")
        adapter: str | None = None
        quiet = 0
        for cycle in range(self.s.cycles):
            self._set_status(family=name, cycle=cycle, harness_id=harness.id, adapter=adapter)
            model = self._model(adapter)
            ev = self._cell(f"evolve:{name}:{cycle}", lambda h=harness, m=model, c=cycle: self._evolve(family, h, m, c))
            changed_harness = ev["harness_id"] != harness.id
            harness = self.journal.get_harness(ev["harness_id"])
            self._set_status(harness_id=harness.id)
            data = self._cell(f"data:{name}:{cycle}", lambda h=harness, m=model: self._build(family, h, m))
            accepted = False
            if data["dataset"] is not None:
                adapter_id = f"coevolve-{name}-c{cycle}-{data['dataset'][3:11]}"
                self._cell(f"adapter:{name}:{cycle}", lambda d=data, a=adapter_id: self._train(d, a))
                verdict = self._cell(f"accept:{name}:{cycle}", lambda h=harness, a=adapter_id, c=adapter: self._accept(family, h, c, a))
                if verdict["accepted"]:
                    adapter, accepted = adapter_id, True
                    self._set_status(adapter=adapter)
            quiet = 0 if changed_harness or accepted else quiet + 1
            if quiet >= self.s.plateau:
                break
        final = self._cell(f"final:{name}", lambda h=harness, a=adapter: self._final(family, h, a))
        guards = [f"cycle {k.split(':')[2]}: {c['guard']}" for k, c in sorted(self.done.items(), key=lambda kv: _cycle_order(kv[0]))
                  if k.startswith(f"evolve:{name}:") and c.get("guard")]
        return {**final, **({"release_guard": guards} if guards else {})}

    def _model(self, adapter: str | None) -> str:
        return f"{self.s.weak}@{adapter}" if adapter else self.s.weak

    # ------------------------------------------------------------------ the steps
    def _evolve(self, family: Any, start: Harness, model: str, cycle: int) -> dict[str, Any]:
        from coevolve.agents.meta.loop import Budget, EvolveConfig
        from coevolve.agents.meta.race import guard_summary, make_evolution, search_val_n

        s = self.s
        cfg = EvolveConfig(family=family.name, model=model, proposer=s.proposer, seed=s.seed + cycle,
                           train_batch=s.train_batch, val_n=search_val_n(s.val_n, family.split_sizes["val"]), val_seeds=s.val_seeds,
                           alpha=s.alpha, budget=Budget(iterations=s.evolve_iterations, rollouts=s.evolve_rollouts),
                           params=dict(s.params))
        key = f"evolve:{family.name}:{cycle}"
        started = [e.payload for e in self.journal.events(self.run_id, "started") if e.payload["cell"] == key]
        resume = bool(started)
        rid = started[-1]["run_id"] if started else self.journal.create_run("evolve", cfg.to_json())
        if not started:
            self.journal.append_event(self.run_id, "started", {"cell": key, "run_id": rid})
        r = make_evolution(cfg, _Counting(self), self.backend.proposer(family.name), self.journal, rid).run(resume=resume, start=start)
        self.journal.finish_run(rid, "done", {"harness_id": r.harness_id})
        # the evolution stored (and so journaled) its rollouts in its run; its dollars beyond them are the proposer's
        proposer_usd = round(max(0.0, r.spend.get("usd", 0.0) - self.journal.rollout_spend([rid])[1]), 6)
        self.spend.proposer_usd += proposer_usd
        out = {"harness_id": r.harness_id, "run_id": rid, "model": model, "val": [r.baseline_val, r.evolved_val],
               "accepted": [{k: a[k] for k in ("rationale", "val_gain", "iteration")} for a in r.accepted],
               "rejected": r.rejected, "rollouts": r.rollouts_used, "proposer_usd": proposer_usd}
        if cfg.search == "race":
            out["guard"] = guard_summary(self.journal, rid)
        return out

    def _build(self, family: Any, harness: Harness, model: str) -> dict[str, Any]:
        from coevolve.agents.correction import BuildConfig, DatasetBuilder
        from coevolve.store.datasets import write_dataset

        s = self.s
        cfg = BuildConfig("correction", family.name, model, s.expert, s.judge, rows=s.rows, samples=s.samples, k=s.k, seed=s.seed)
        builder = DatasetBuilder(cfg, harness, family.generate("train", **s.params), self.backend)
        new_rows, stats = builder.build(self._evaluate(builder.jobs(), model, f"data:{family.name}"))
        rows = self._dedup(self._rows_so_far(family.name) + new_rows)
        if not rows:
            return {"dataset": None, "rows": 0, "new_rows": 0, "student_pass_rate": stats["student_pass_rate"], "usage": stats["usage"]}
        dataset = write_dataset(self.journal.root, rows, {"arm": "correction", "config": cfg.to_json(),
                                                          "harness_id": harness.id, "run_id": self.run_id, **stats,
                                                          "cumulative": True}).id
        return {"dataset": dataset, "rows": len(rows), "new_rows": len(new_rows), "by_kind": stats["by_kind"],
                "verified_share": stats["verified_share"], "student_pass_rate": stats["student_pass_rate"],
                "usage": stats["usage"]}

    def _rows_so_far(self, family: str) -> list[Any]:
        """Every correction row of this family's earlier cycles: each cycle's dataset is cumulative, so
        the latest one holds them all."""
        from coevolve.store.datasets import read_rows

        cells = [self.done[k] for k in sorted(self.done, key=_cycle_order) if k.startswith(f"data:{family}:")]
        with_rows = [c for c in cells if c.get("dataset")]
        return read_rows(self.journal.root, with_rows[-1]["dataset"]) if with_rows else []

    @staticmethod
    def _dedup(rows: list[Any]) -> list[Any]:
        from coevolve.agents.correction import row_key

        seen, out = set(), []
        for r in rows:
            if row_key(r) not in seen:
                seen.add(row_key(r))
                out.append(r)
        return out

    def _train(self, data: dict[str, Any], adapter_id: str) -> dict[str, Any]:
        record = self.backend.train(data["dataset"], adapter_id)
        return {"adapter": adapter_id, **record}

    def _accept(self, family: Any, harness: Harness, current: str | None, candidate: str) -> dict[str, Any]:
        """The candidate adapter against the current model: every val instance at every val seed, paired."""
        s = self.s
        instances = family.generate("val", min(s.val_n, family.split_sizes["val"]), **s.params)
        jobs = [(i, harness, s.seed + 20_000 + r) for r in range(s.val_seeds) for i in instances]
        base = self._evaluate(jobs, self._model(current), f"accept:{family.name}:current")
        cand = self._evaluate(jobs, self._model(candidate), f"accept:{family.name}:candidate")
        scored = [(a.passed, b.passed) for a, b in zip(base, cand) if a.error != "infra" and b.error != "infra"]
        r = PairedResult(sum(b and not a for a, b in scored), sum(a and not b for a, b in scored),
                         sum(a == b for a, b in scored))
        rule = SignTest(s.alpha)
        accepted = rule.accepts(r)
        log.info("adapter decision", family=family.name, candidate=candidate, accepted=accepted, wins=r.wins, losses=r.losses)
        return {"candidate": candidate, "current": current, "accepted": accepted, "wins": r.wins, "losses": r.losses,
                "ties": r.ties, "p_value": round(rule.p_value(r), 4), "val_current": pass_rate(base).pass_at_1,
                "val_candidate": pass_rate(cand).pass_at_1}

    def _final(self, family: Any, harness: Harness, adapter: str | None) -> dict[str, Any]:
        s = self.s
        instances = family.generate("test", **s.params)
        baseline = family.baseline_harness()
        arms = {"baseline": (baseline, s.weak), "evolved": (harness, s.weak), "evolved+adapter": (harness, self._model(adapter))}
        rates = {}
        for label, (h, model) in arms.items():
            if label == "evolved+adapter" and adapter is None:
                continue
            trajs = self._evaluate([(i, h, s.seed + 10_000 + r) for r in range(s.repeats) for i in instances], model,
                                   f"final:{family.name}:{label}")
            rates[label] = pass_rate(trajs)
        last = "evolved+adapter" if "evolved+adapter" in rates else "evolved"
        gain, ci = paired_difference(rates["baseline"], rates[last])
        return {"harness_id": harness.id, "adapter": adapter,
                "test": {k: {x: y for x, y in v.as_json().items() if x != "per_instance"} for k, v in rates.items()},
                "gain": round(gain, 4), "gain_ci95": [round(ci[0], 4), round(ci[1], 4)]}


class _Counting:
    """A harness evolution's Evaluator: its rollouts count in the run's spend as they come back (the
    evolution stores them in its run; the cell's end re-reads the spend from the store)."""

    def __init__(self, owner: CoEvolution):
        self.owner = owner

    def evaluate(self, jobs: Sequence[tuple[TaskInstance, Harness, int]], model: str) -> list[Trajectory]:
        out = self.owner.backend.evaluate(jobs, model)
        self.owner._count_infra(out)
        self.owner.spend.rollouts += len(out)
        self.owner.spend.rollout_usd += sum(t.cost_usd for t in out)
        return out


def _cycle_order(key: str) -> tuple[str, int]:
    parts = key.split(":")
    return (parts[1], int(parts[2])) if len(parts) > 2 and parts[2].isdigit() else (parts[-1], -1)
