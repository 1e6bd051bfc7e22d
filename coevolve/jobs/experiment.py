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

from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator, model_validator

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
from coevolve.jobs.validate import resumed_run
from coevolve.values import with_adapter

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
        """The run's config: `params` only when set, so an experiment at the defaults has the identity
        (and resumes) as an experiment config without the field."""
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
    """Runs (or resumes) one experiment in a store on a Ray cluster: the grid schedule of the pipeline's
    steps (`coevolve.pipeline.Steps`)."""

    def __init__(self, cfg: ExperimentConfig, store: Any, run_id: str, progress: Callable[[dict[str, Any]], None] | None = None):
        self.cfg = cfg
        self.store = store
        self.run_id = run_id
        self.progress = progress or (lambda d: None)
        self.done: dict[str, dict[str, Any]] = {e.payload["cell"]: e.payload for e in store.events(run_id, "cell")}

    def run(self, address: str | None = None) -> dict[str, Any]:
        from coevolve.agents.meta.loop import EvolveConfig
        from coevolve.cluster.runtime import start_ray
        from coevolve.pipeline import Models, Steps
        from coevolve.services.pools.backend import RayBackend, StoreTrainer
        from coevolve.services.pools.base import start_pools
        from coevolve.services.pools.roles import RolePool
        from coevolve.services.pools.rollouts import RolloutPool

        cfg = self.cfg
        start_ray(address)
        pools = start_pools(lambda: RolloutPool(cfg.workers), lambda: RolePool("judge", cfg.judge, cfg.workers),
                            lambda: RolePool("expert", cfg.expert, cfg.workers))
        try:
            trainer = StoreTrainer(self.store, cfg.train.base or cfg.weak, cfg.train.backend, cfg.train.train_config())
            backend = RayBackend(*pools, proposer=cfg.proposer, trainer=trainer)
            steps = Steps(self.store, self.run_id, backend, Models(cfg.weak, cfg.expert, cfg.judge, cfg.proposer),
                          evolve=cfg.evolve, data=cfg.data, seed=cfg.seed, params=cfg.params, alpha=EvolveConfig.alpha,
                          before_cell=lambda key: self.progress({"cell": key, "done": len(steps.done)}))
            self.done = steps.done
            for family in cfg.families:
                self._family(steps, family)
        finally:
            for pool in pools:
                pool.shutdown()
        return self.summary()

    def _family(self, steps: Any, name: str) -> None:
        from coevolve.pipeline import SEED_TEST
        from coevolve.tasks import get_family

        cfg = self.cfg
        family = get_family(name)
        baseline = family.baseline_harness()
        self.store.put_harness(baseline, rationale="family baseline")
        key = f"evolve:{name}"
        evolved = steps.cell(key, lambda: steps.evolve(family, baseline, cfg.weak, key, cfg.seed))
        harnesses = {"baseline": baseline, "evolved": self.store.get_harness(evolved["harness_id"])}
        adapters: dict[tuple[str, str], str | None] = {}
        for label, h in harnesses.items():
            for arm in ("imitation", "correction"):
                key = f"data:{name}:{arm}:{label}"
                data = steps.cell(key, lambda arm=arm, h=h, k=key: steps.build(family, arm, h, cfg.weak, k))
                adapters[(arm, label)] = None
                if data["dataset"] is not None:
                    adapter_id = f"{arm}-{name}-{label}-{data['dataset'][3:11]}"
                    steps.cell(f"adapter:{name}:{arm}:{label}", lambda d=data["dataset"], a=adapter_id: steps.train(d, a))
                    adapters[(arm, label)] = adapter_id
        instances = family.generate("test", **cfg.params)
        for key in [c for c in cells(cfg) if c.split(":")[1] == name]:
            _, _, who, label, weights = key.split(":")
            model = cfg.weak if who == "weak" else cfg.expert
            if weights != "base":
                model = with_adapter(model, adapters[(weights, label)])
            steps.cell(key, lambda m=model, h=harnesses[label], k=key: {
                "model": m, "harness_id": h.id, **steps.measure(instances, h, m, cfg.repeats, cfg.seed + SEED_TEST, k).as_json()})

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
        run = resumed_run(store, resume, "experiment", "an experiment")
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
