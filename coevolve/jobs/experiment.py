"""The reference study's protocol end to end (`coevolve experiment paper --config FILE`).

For each family: evolve a harness around the weak model (train/val splits); under the baseline and
the evolved harness build both arms' datasets from the train split and train an adapter on each;
then evaluate on the test split, with repeats, every cell of
{weak, expert} x {baseline, evolved harness} x {base weights, imitation adapter, correction adapter}.
Adapters are LoRA (or synthetic) adapters of the weak model, so the expert's adapter cells do not
exist: the expert is measured with its base weights under both harnesses (upward transfer).

Every finished cell (evolution, dataset, adapter, evaluation) is an event of the experiment's run in
the store, keyed by the cell; a resumed experiment never redoes a finished cell. Evaluations keep
their trajectories in the store (batch = the cell key), so the report can derive failure composition
and planning drift from them.

`params` (e.g. `{size: 0, difficulty: 1}`, or `params.size=0` on the command line) are the family
parameters of every instance the experiment draws: evolution's train and val, the datasets' train
split, the test evaluations. They must be parameters of every family of the experiment. Left empty
(each family's defaults) they are not part of the run's config, so an experiment recorded before they
existed resumes as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator, model_validator

from coevolve.analysis.stats import pass_rate
from coevolve.analysis.summary import SYNTHETIC_ADAPTER_RULES, synthetic_adapters, testbed_notice
from coevolve.config import (
    MAX_SIZE,
    DataSection,
    EvolveSection,
    Families,
    Seed,
    TrainSection,
    load_config_file,
)
from coevolve.errors import BadInput

log = structlog.get_logger(role="experiment")
HARNESSES = ("baseline", "evolved")
WEIGHTS = ("base", "imitation", "correction")


class ExperimentConfig(BaseModel):
    """One YAML file (`deploy/experiments/*.yaml`); `key=value` overrides on the command line. Its
    `evolve`, `data` and `train` sections are those of a run profile (`coevolve.config`)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field("paper", description="the experiment's name")
    families: Families = Field(default_factory=lambda: ["iot"], description="the families, one after another")
    weak: str = Field("synthetic/weak", description="the weak model, whose adapters are trained")
    expert: str = Field("synthetic/expert", description="the expert: imitation rollouts and correction rewrites")
    proposer: str = Field("synthetic/meta", description="the model proposing harness edits")
    judge: str = Field("synthetic/judge", description="the judge: locates and scores failures")
    repeats: int = Field(3, ge=1, le=MAX_SIZE, description="test-split rollouts per instance")
    seed: Seed = Field(0, description="seed of the instances' sampling and the synthetic models")
    workers: int = Field(2, ge=1, le=MAX_SIZE, description="actors of the rollout pool and of each role pool")
    evolve: EvolveSection = Field(EvolveSection(), description="each family's harness evolution")
    data: DataSection = Field(DataSection(), description="each arm's dataset")
    train: TrainSection = Field(TrainSection(), description="each arm's adapter training")

    params: dict[str, StrictInt] = Field(
        default_factory=dict,
        description="family parameters of every instance the experiment draws (evolution's train and val, the"
        " datasets' train split, the test evaluations), e.g. {size: 0, difficulty: 1}; {} = each family's"
        " defaults. Part of the run's config (hence its identity on resume) only when set",
    )

    @field_validator("params")
    @classmethod
    def _family_params(cls, v: dict[str, int], info: ValidationInfo) -> dict[str, int]:
        """Every family of the experiment has each parameter, each in range (`coevolve eval --params`'s
        check, `coevolve.jobs.check_params`)."""
        from coevolve.jobs import check_params
        from coevolve.tasks import get_family

        for name in info.data.get("families") or ():  # absent when the families were refused
            check_params(get_family(name), v)
        return dict(sorted(v.items()))

    @model_validator(mode="after")
    def _evolution_fits(self) -> ExperimentConfig:
        from coevolve.agents.meta.loop import EvolveConfig

        self.evolve.check_fits(list(self.families), EvolveConfig.alpha)
        return self

    def to_json(self) -> dict[str, Any]:
        """The run's config: `params` only when set, so an experiment at the defaults is recorded (and
        resumed) exactly as before the field existed."""
        out = self.model_dump()
        if not self.params:
            del out["params"]
        return out


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """The experiment config in the YAML file `path`, with `key=value` overrides (`coevolve.config.load_config_file`)."""
    return load_config_file(ExperimentConfig, path, overrides, "experiment config")


def cells(cfg: ExperimentConfig) -> list[str]:
    """Every evaluation cell key, in report order."""
    out = []
    for f in cfg.families:
        for h in HARNESSES:
            out += [f"eval:{f}:weak:{h}:{w}" for w in WEIGHTS]
            out.append(f"eval:{f}:expert:{h}:base")
    return out


class Experiment:
    """Runs (or resumes) one experiment in a store on a Ray cluster."""

    def __init__(self, cfg: ExperimentConfig, store: Any, run_id: str, progress: Callable[[dict[str, Any]], None] | None = None):
        self.cfg = cfg
        self.store = store
        self.run_id = run_id
        self.progress = progress or (lambda d: None)
        self.done: dict[str, dict[str, Any]] = {e.payload["cell"]: e.payload for e in store.events(run_id, "cell")}

    def _cell(self, key: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if key in self.done:
            return self.done[key]
        self.progress({"cell": key, "done": len(self.done)})
        started = time.monotonic()
        payload = {"cell": key, **work(), "seconds": round(time.monotonic() - started, 2)}
        self.store.append_event(self.run_id, "cell", payload)
        self.done[key] = payload
        return payload

    def run(self, address: str | None = None) -> dict[str, Any]:
        from coevolve.cluster.runtime import start_ray
        from coevolve.services.gateway import Gateway
        from coevolve.services.pools.roles import RolePool
        from coevolve.services.pools.rollouts import RolloutPool

        start_ray(address)
        self.pool = RolloutPool(self.cfg.workers)
        self.judges = RolePool("judge", self.cfg.judge, self.cfg.workers)
        self.gateway = Gateway()
        try:
            for family in self.cfg.families:
                self._family(family)
        finally:
            self.pool.shutdown()
            self.judges.shutdown()
        return self.summary()

    def _family(self, name: str) -> None:
        from coevolve.services.pools.roles import RolePool
        from coevolve.tasks import get_family

        family = get_family(name)
        evolved = self._cell(f"evolve:{name}", lambda: self._evolve(family))
        harnesses = {"baseline": family.baseline_harness(), "evolved": self.store.get_harness(evolved["harness_id"])}
        self.store.put_harness(harnesses["baseline"], rationale="family baseline")
        experts = RolePool("expert", self.cfg.expert, self.cfg.workers)
        adapters: dict[tuple[str, str], str | None] = {}
        try:
            for label, h in harnesses.items():
                for arm in ("imitation", "correction"):
                    data = self._cell(f"data:{name}:{arm}:{label}", lambda arm=arm, h=h: self._build(family, arm, h, experts))
                    if data["dataset"] is None:
                        adapters[(arm, label)] = None
                        continue
                    adapter_id = f"{arm}-{name}-{label}-{data['dataset'][3:11]}"
                    self._cell(f"adapter:{name}:{arm}:{label}", lambda d=data, a=adapter_id: self._train(d, a))
                    adapters[(arm, label)] = adapter_id
        finally:
            experts.shutdown()
        instances = family.generate("test", **self.cfg.params)
        for key in [c for c in cells(self.cfg) if c.split(":")[1] == name]:
            _, _, who, label, weights = key.split(":")
            model = self.cfg.weak if who == "weak" else self.cfg.expert
            if weights != "base" and adapters[(weights, label)]:
                model = f"{model}@{adapters[(weights, label)]}"
            self._cell(key, lambda m=model, h=harnesses[label], k=key: self._evaluate(instances, h, m, k))

    def _evolve(self, family: Any) -> dict[str, Any]:
        from coevolve.agents.meta import LLMProposer, make_evolution
        from coevolve.services.pools.rollouts import PoolEvaluator

        cfg = self.cfg
        ec = cfg.evolve.evolve_config(family, model=cfg.weak, proposer=cfg.proposer, seed=cfg.seed, params=cfg.params)
        rid = self.store.create_run("evolve", ec.to_json())
        gateway = self.gateway
        proposer = LLMProposer(cfg.proposer, gateway.complete, family.handbook,
                                 windows=gateway.budget)
        r = make_evolution(ec, PoolEvaluator(self.pool), proposer, self.store, rid).run()
        self.store.finish_run(rid, "done", {"harness_id": r.harness_id})
        return {"harness_id": r.harness_id, "run_id": rid, "val": [r.baseline_val, r.evolved_val],
                "accepted": r.accepted, "rollouts": r.rollouts_used, "spend": r.spend}

    def _build(self, family: Any, arm: str, harness: Any, experts: Any) -> dict[str, Any]:
        from coevolve.agents.correction import DatasetBuilder
        from coevolve.services.pools.backend import RayBackend
        from coevolve.store.datasets import write_dataset

        cfg = self.cfg
        bc = cfg.data.build_config(arm, family.name, model=cfg.weak, expert=cfg.expert, judge=cfg.judge, seed=cfg.seed)
        train = family.generate("train", **cfg.params)
        builder = DatasetBuilder(bc, harness, train, RayBackend(self.pool, self.judges, experts))
        student = builder.sample(cfg.weak)
        expert_runs = builder.sample(cfg.expert) if arm == "imitation" else []
        rows, stats = builder.build(student, expert_runs)
        tokens = (sum(t.tokens for t in expert_runs) if arm == "imitation"
                  else int(stats["usage"].get("expert", {}).get("tokens", 0)))
        if not rows:  # e.g. the weak model no longer fails under this harness: nothing to learn from
            return {"dataset": None, "rows": 0, "student_pass_rate": stats["student_pass_rate"], "expert_tokens": tokens,
                    "usage": stats["usage"], "note": "the arm produced no rows: its adapter cell uses the base weights"}
        rec = write_dataset(self.store.root, rows, {
            "arm": arm, "config": bc.to_json(), "harness_id": harness.id, "run_id": self.run_id, **stats,
            **({"params": dict(cfg.params)} if cfg.params else {}),
            "expert_tokens": tokens, "expert_tokens_per_row": round(tokens / max(1, len(rows)), 1)})
        keep = ("rows", "by_kind", "verified_share", "expert_tokens", "expert_tokens_per_row", "usage", "student_pass_rate")
        return {"dataset": rec.id, **{k: rec.manifest.get(k) for k in keep}}

    def _train(self, data: dict[str, Any], adapter_id: str) -> dict[str, Any]:
        from coevolve.jobs.adapt import train_on

        if any(a.id == adapter_id for a in self.store.list_adapters()):
            return {"adapter": adapter_id}  # trained before a crash that came before its record
        cfg = self.cfg
        ref = train_on(self.store.root, data["dataset"], cfg.train.base or cfg.weak, cfg.train.backend, adapter_id,
                       cfg.train.train_config())
        return {"adapter": ref.id, "metrics": ref.metrics}

    def _evaluate(self, instances: list[Any], harness: Any, model: str, key: str) -> dict[str, Any]:
        from coevolve.services.pools.rollouts import RolloutJob

        jobs = [RolloutJob(i, harness, model, self.cfg.seed + 10_000 + r) for r in range(self.cfg.repeats) for i in instances]
        trajs = self.pool.run(jobs)
        self.store.put_trajectories(self.run_id, trajs, batch=key)
        return {"model": model, "harness_id": harness.id, **pass_rate(trajs).as_json()}

    def summary(self) -> dict[str, Any]:
        rows = []
        for f in self.cfg.families:
            for who in ("weak", "expert"):
                for label in HARNESSES:
                    row = {"family": f, "model": who, "harness": label}
                    for w in WEIGHTS:
                        cell = self.done.get(f"eval:{f}:{who}:{label}:{w}")
                        row[w] = None if cell is None else {"pass_at_1": cell["pass_at_1"], "ci95": cell["ci95"]}
                    rows.append(row)
        out = {"run_id": self.run_id, "config": self.cfg.to_json(), "rows": rows,
               "cells_done": len(self.done), "cells_total": len(cells(self.cfg)) + 9 * len(self.cfg.families)}
        out |= testbed_notice(self.cfg.weak, self.cfg.expert)
        if synthetic_adapters(self.cfg.weak, self.cfg.train.backend):
            out["adapter_rules"] = SYNTHETIC_ADAPTER_RULES
        return out


def run_experiment(cfg: ExperimentConfig, store_path: Path, *, resume: str | None = None, address: str | None = None,
                   progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    from coevolve.jobs import use_store, validate_model
    from coevolve.store.store import HarnessStore

    for m in (cfg.weak, cfg.expert, cfg.proposer, cfg.judge):
        validate_model(m)
    use_store(store_path)
    store = HarnessStore(store_path, create=True)
    if resume:
        run = store.get_run(resume)
        if run.kind != "experiment":
            raise BadInput(f"run {resume!r} is a {run.kind} run, not an experiment")
        cfg = ExperimentConfig.model_validate(run.config)
        run_id = resume
    else:
        run_id = store.create_run("experiment", cfg.to_json())
    lease = store.claim_run(run_id)
    try:
        out = Experiment(cfg, store, run_id, progress).run(address)
        store.finish_run(run_id, "done", out)
        return out
    finally:
        lease.release()
