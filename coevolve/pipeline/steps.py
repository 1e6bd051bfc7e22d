"""The co-evolution's steps (docs/ARCHITECTURE.md §1.5), shared by its two schedules: the meta-agent's
cycles (`coevolve.pipeline.cycle.CoEvolution`, `coevolve run`) and the reference study's grid
(`coevolve.jobs.experiment.Experiment`, `coevolve experiment paper`).

`Steps` runs evolve -> build -> train -> evaluate -> accept on a `Backend`, with the settings of the
configuration tree's sections (`EvolveSection.evolve_config`, `DataSection.build_config`). Every step
is a *cell* recorded in the run's journal with its evidence (key -> payload): a resumed run skips
finished cells and redoes a half-finished one from its own checkpoints (a harness evolution resumes
from its run's checkpoints), so the same seed gives the same harness, datasets and adapters.

RunSpend is journaled with the work it pays for: every rollout the run pays for is stored (the run's own
under its cell's key, its harness evolutions' in their runs), and the store indexes each stored
batch's rollouts in the transaction that stores it. The run's rollout count and rollout dollars are
those of the distinct rollouts stored by the run and its evolutions (`rollout_spend`), and a redone
cell takes the rollouts it stored before a kill from the store instead of running them again, so a
resumed run reports (and pays for) what an uninterrupted one does, but for rollouts in flight at the
kill. Proposer dollars are journaled per finished evolve cell; wall-clock seconds per cell.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from coevolve.agents.backend import Backend, Job
from coevolve.agents.meta.acceptance import PairedResult, SignTest
from coevolve.agents.meta.loop import Journal
from coevolve.analysis.stats import PassRate, infra_note, pass_rate
from coevolve.store.store import rollout_key
from coevolve.values import Harness, TaskInstance, Trajectory, with_adapter

if TYPE_CHECKING:
    from coevolve.config import DataSection, EvolveSection

log = structlog.get_logger(role="meta")

SEED_TEST = 10_000  # a test rollout's seed: the run's seed + SEED_TEST + repeat
SEED_ACCEPT = 20_000  # an adapter check's val rollout: the run's seed + SEED_ACCEPT + repeat
INFRA_MIN = 20  # rollouts a run has seen before its infrastructure share is judged


class InfraFailure(RuntimeError):
    """More than `INFRA_SHARE` of a run's rollouts failed for infrastructure: the run fails with the cause."""


@dataclass
class RunSpend:
    """What a run has used: its rollouts (and their dollars), the proposer's dollars, wall-clock seconds."""

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

    def as_json(self) -> dict[str, Any]:
        return {"rollouts": self.rollouts, "usd": round(self.usd, 6), "seconds": round(self.seconds, 2)}


@dataclass(frozen=True)
class Models:
    """The run's roles: the weak model (whose harness and adapters evolve), the expert, the judge and the
    proposer of harness edits."""

    weak: str
    expert: str
    judge: str
    proposer: str


class Steps:
    """One run's steps and their journal cells. `before_cell(key)` runs before a cell's work starts
    (a schedule's budget check, its status); it may raise to stop the run between cells."""

    def __init__(self, journal: Journal, run_id: str, backend: Backend, models: Models, *, evolve: EvolveSection,
                 data: DataSection, seed: int, params: dict[str, int], alpha: float,
                 before_cell: Callable[[str], None] = lambda key: None):
        self.journal = journal
        self.run_id = run_id
        self.backend = backend
        self.models = models
        self.evolve_section = evolve
        self.data_section = data
        self.seed = seed
        self.params = dict(params)
        self.alpha = alpha
        self.before_cell = before_cell
        self.done: dict[str, dict[str, Any]] = {e.payload["cell"]: e.payload for e in journal.events(run_id, "cell")}
        self._lock = threading.Lock()  # the spend and the infrastructure count: a schedule may run cells at once
        spent = [e.payload for e in journal.events(run_id, "spend")]
        self.spend = RunSpend(seconds_before=spent[-1]["seconds"] if spent else 0.0)
        self.spend.proposer_usd = sum(self._proposer_usd(c) for k, c in self.done.items() if k.startswith("evolve:"))
        self._sync_spend()
        self.rollouts_seen = 0
        self.infra_causes: Counter[str] = Counter()

    # ------------------------------------------------------------------ cells and spend
    def cell(self, key: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The payload of the cell `key`: the journaled one, or `work()`'s, journaled with its seconds."""
        if key in self.done:
            return self.done[key]
        self.before_cell(key)
        started = time.monotonic()
        payload = {"cell": key, **work(), "seconds": round(time.monotonic() - started, 2)}
        with self._lock:
            self._sync_spend()
            self.journal.append_event(self.run_id, "cell", payload)
            self.journal.append_event(self.run_id, "spend", self.spend.as_json())
        self.done[key] = payload
        return payload

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

    def evaluate(self, jobs: Sequence[Job], model: str) -> list[Trajectory]:
        """Rollouts run on the backend, counted in the run's spend as they come back (an evolution's
        `Evaluator`: it stores them in its own run; the cell's end re-reads the spend from the store)."""
        out = self.backend.evaluate(jobs, model)
        with self._lock:
            self._count_infra(out)
            self.spend.rollouts += len(out)
            self.spend.rollout_usd += sum(t.cost_usd for t in out)
        return out

    def rollouts(self, jobs: Sequence[Job], model: str, batch: str) -> list[Trajectory]:
        """Rollouts of this run, in job order: what it stored before under their keys (a redone cell
        after a kill), the rest run and stored as the batch `batch` (`batch+N` after N stored before)
        — the store transaction that records them is their spend."""
        keys = [rollout_key(inst, h.id, model, seed) for inst, h, seed in jobs]
        have = self.journal.stored_rollouts([self.run_id], keys)
        todo = {k: job for k, job in zip(keys, jobs) if k not in have}
        if todo:
            fresh = self.evaluate(list(todo.values()), model)
            self.journal.put_trajectories(self.run_id, fresh, batch=f"{batch}+{len(have)}" if have else batch)
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

    # ------------------------------------------------------------------ the steps
    def evolve(self, family: Any, start: Harness, model: str, key: str, seed: int) -> dict[str, Any]:
        """The harness evolution around `model` from `start`, in its own run (resumed when a killed cell
        started it)."""
        from coevolve.agents.meta.race import guard_summary, make_evolution

        cfg = self.evolve_section.evolve_config(family, model=model, proposer=self.models.proposer, seed=seed,
                                                params=self.params, alpha=self.alpha)
        started = [e.payload for e in self.journal.events(self.run_id, "started") if e.payload["cell"] == key]
        rid = started[-1]["run_id"] if started else self.journal.create_run("evolve", cfg.to_json())
        if not started:
            self.journal.append_event(self.run_id, "started", {"cell": key, "run_id": rid})
        proposer = self.backend.proposer(family.name)
        r = make_evolution(cfg, self, proposer, self.journal, rid).run(resume=bool(started), start=start)
        self.journal.finish_run(rid, "done", {"harness_id": r.harness_id})
        # the evolution stored (and so journaled) its rollouts in its run; its dollars beyond them are the proposer's
        proposer_usd = round(max(0.0, r.spend.get("usd", 0.0) - self.journal.rollout_spend([rid])[1]), 6)
        with self._lock:
            self.spend.proposer_usd += proposer_usd
        out = {"harness_id": r.harness_id, "run_id": rid, "model": model, "val": [r.baseline_val, r.evolved_val],
               "accepted": [{k: a[k] for k in ("rationale", "val_gain", "iteration")} for a in r.accepted],
               "rejected": r.rejected, "rollouts": r.rollouts_used, "proposer_usd": proposer_usd, "spend": r.spend}
        if cfg.search == "race":
            out["guard"] = guard_summary(self.journal, rid)
        return out

    def build(self, family: Any, arm: str, harness: Harness, model: str, key: str,
              earlier: Sequence[Any] = ()) -> dict[str, Any]:
        """The `arm` dataset of the student `model` (the weak model, or it with its current adapter) under
        `harness`, from its own rollouts on the train split (and, for imitation, the expert's), with the
        rows of `earlier` first (a cumulative set)."""
        from coevolve.agents.correction import DatasetBuilder
        from coevolve.store.datasets import write_dataset

        m = self.models
        cfg = self.data_section.build_config(arm, family.name, model=model, expert=m.expert, judge=m.judge, seed=self.seed)
        builder = DatasetBuilder(cfg, harness, family.generate("train", **self.params), self.backend)
        student = self.rollouts(builder.jobs(), cfg.model, f"{key}:student")
        expert_runs = self.rollouts(builder.jobs(), m.expert, f"{key}:expert") if arm == "imitation" else []
        new_rows, stats = builder.build(student, expert_runs)
        rows = _dedup([*earlier, *new_rows])
        keep = {k: stats[k] for k in ("by_kind", "verified_share", "expert_tokens", "expert_tokens_per_row", "usage",
                                      "student_pass_rate")}
        if not rows:  # e.g. the model no longer fails under this harness: nothing to learn from
            return {"dataset": None, "rows": 0, "new_rows": 0, **keep,
                    "note": "the arm produced no rows: the model keeps its current weights"}
        manifest = builder.manifest(self.run_id, stats) | ({"params": self.params} if self.params else {})
        if earlier:
            manifest["cumulative"] = True
        return {"dataset": write_dataset(self.journal.root, rows, manifest).id, "rows": len(rows),
                "new_rows": len(new_rows), **keep}

    def train(self, dataset: str, adapter_id: str) -> dict[str, Any]:
        """An adapter of the weak model trained on a stored dataset."""
        return {"adapter": adapter_id, **self.backend.train(dataset, adapter_id)}

    def measure(self, instances: Sequence[TaskInstance], harness: Harness, model: str, repeats: int, seed: int,
                batch: str) -> PassRate:
        """`model` under `harness` on every instance at seeds seed..seed+repeats-1: pass@1 with its interval."""
        return pass_rate(self.rollouts([(i, harness, seed + r) for r in range(repeats) for i in instances], model, batch))

    def accept(self, family: Any, harness: Harness, current: str | None, candidate: str, key: str, *, val_n: int,
               val_seeds: int) -> dict[str, Any]:
        """The candidate adapter against the current model (the weak model with adapter `current`): every
        val instance at every val seed, paired, kept when the sign test at the run's alpha accepts."""
        instances = family.generate("val", min(val_n, family.split_sizes["val"]), **self.params)
        jobs = [(i, harness, self.seed + SEED_ACCEPT + r) for r in range(val_seeds) for i in instances]
        base = self.rollouts(jobs, with_adapter(self.models.weak, current), f"{key}:current")
        cand = self.rollouts(jobs, with_adapter(self.models.weak, candidate), f"{key}:candidate")
        scored = [(a.passed, b.passed) for a, b in zip(base, cand) if a.error != "infra" and b.error != "infra"]
        r = PairedResult(sum(b and not a for a, b in scored), sum(a and not b for a, b in scored),
                         sum(a == b for a, b in scored))
        rule = SignTest(self.alpha)
        accepted = rule.accepts(r)
        log.info("adapter decision", family=family.name, candidate=candidate, accepted=accepted, wins=r.wins, losses=r.losses)
        return {"candidate": candidate, "current": current, "accepted": accepted, "wins": r.wins, "losses": r.losses,
                "ties": r.ties, "p_value": round(rule.p_value(r), 4), "val_current": pass_rate(base).pass_at_1,
                "val_candidate": pass_rate(cand).pass_at_1}


def cell_rollouts(store: Any, run_id: str, batch: str) -> list[Trajectory]:
    """Every rollout `Steps.rollouts` stored in `store` (a HarnessStore) under `batch` (a redone cell's
    remainder is `batch+N`), in the order stored."""
    names = [name for name, _, _ in store.trajectory_batches(run_id) if name == batch or name.startswith(f"{batch}+")]
    return [t for name in names for t in store.get_trajectories(run_id, name)]


def _dedup(rows: Sequence[Any]) -> list[Any]:
    """`rows` without repeats of the same messages and tools, first kept."""
    from coevolve.agents.correction import row_key

    seen, out = set(), []
    for r in rows:
        if (k := row_key(r)) not in seen:
            seen.add(k)
            out.append(r)
    return out
