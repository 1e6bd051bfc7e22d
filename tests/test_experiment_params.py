"""`ExperimentConfig.params` (issue 22, the experiment's level): the family parameters every part of
`coevolve experiment paper` draws its instances with (evolution's train and val, the datasets' train
split, the test evaluations), set in the YAML or by `params.size=0`, checked against each family's
parameters in one `error:` line, and part of the run's config only when set.

The end-to-end test runs the whole matrix for one family at `size=0` with synthetic models, in this
process: the rollout and role pools are replaced by in-process ones running the same executor, judge
and expert (`coevolve.agents.local`, `coevolve.services.pools.roles.RoleWorker`), so no Ray is needed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevolve.jobs.experiment import ExperimentConfig, load_config

EXPERIMENT = Path(__file__).resolve().parent.parent / "deploy" / "experiments" / "synthetic.yaml"


def test_params_are_read_from_the_yaml_and_from_overrides(tmp_path):
    assert load_config(EXPERIMENT).params == {}
    cfg = load_config(EXPERIMENT, ["families=[iot, budget]", "params.size=0", "params.difficulty=1"])
    assert cfg.params == {"difficulty": 1, "size": 0}
    path = tmp_path / "small.yaml"
    path.write_text("families: [payroll]\nparams: {size: 0}\n")
    assert load_config(path).params == {"size": 0}
    assert load_config(path, ["params.size=1"]).params == {"size": 1}  # an override wins


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["families=[iot]", "params.sizes=0"], "params: iot has no parameter 'sizes' (it has: difficulty, size)"),
        (["families=[iot]", "params.size=true"], "params.size: Input should be a valid integer"),
        (["families=[iot]", "params.size='0'"], "params.size: Input should be a valid integer"),
        (["families=[iot]", "params.size=65"], "params: parameter size=65 is out of range 0..64"),
        (["families=[iot]", "params.difficulty=-1"], "params: parameter difficulty=-1 is out of range 0..64"),
        (["families=[iot]", "params=[0]"], "params: Input should be a valid dictionary"),
    ],
)
def test_a_bad_parameter_is_one_line_naming_it(overrides, message):
    with pytest.raises(ValueError) as e:
        load_config(EXPERIMENT, overrides)
    assert str(e.value) == f"experiment config: {message}"
    assert "\n" not in str(e.value)


def test_every_family_of_the_experiment_must_have_the_parameter():
    from coevolve.tasks import external_family_names

    external = external_family_names()
    if not external:
        pytest.skip("no external family is installed")
    with pytest.raises(ValueError, match=rf"{external[0]} has no parameter 'size' \(it has: "):
        load_config(EXPERIMENT, [f"families=[iot, {external[0]}]", "params.size=0"])


def test_the_command_refuses_a_bad_parameter_in_one_error_line_and_writes_nothing(tmp_path):
    from coevolve.cli.app import app

    store = tmp_path / "store"
    res = CliRunner().invoke(app, ["experiment", "paper", "--config", str(EXPERIMENT), "--store", str(store),
                                   "families=[iot]", "params.level=0"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines == ["error: experiment config: params: iot has no parameter 'level' (it has: difficulty, size)"]
    assert not store.exists()


def test_params_enter_the_run_config_only_when_set():
    from coevolve.agents.meta.loop import Budget, EvolveConfig

    plain = ExperimentConfig()
    assert "params" not in plain.to_json()  # a config at the defaults is recorded as before the field
    assert plain.to_json() == {k: v for k, v in plain.model_dump().items() if k != "params"}
    assert ExperimentConfig.model_validate(plain.to_json()) == plain  # and resumes as itself
    small = ExperimentConfig(params={"size": 0})
    assert small.to_json()["params"] == {"size": 0}
    assert ExperimentConfig.model_validate(small.to_json()) == small

    ec = EvolveConfig(family="iot", model="synthetic/weak", budget=Budget(iterations=1))
    assert "params" not in ec.to_json()
    at_defaults = ("params", "on_plateau", "screen", "admit")  # fields left out at their defaults: journalled as before them
    assert json.dumps(ec.to_json(), sort_keys=True) == json.dumps(
        {k: v for k, v in dataclasses.asdict(ec).items() if k not in at_defaults}, sort_keys=True)
    at0 = dataclasses.replace(ec, params={"size": 0})
    assert at0.to_json()["params"] == {"size": 0}
    assert EvolveConfig.from_json(at0.to_json()) == at0
    assert EvolveConfig.from_json(ec.to_json()) == ec


def test_the_evolution_draws_its_train_and_val_instances_at_the_params():
    from coevolve.agents.meta.loop import Budget, EvolveConfig, HarnessEvolution

    class Journal:
        def __getattr__(self, name):
            raise AssertionError(f"the constructor touched the journal ({name})")

    def evolution(params):
        cfg = EvolveConfig(family="iot", model="synthetic/weak", val_n=5, val_seeds=1, budget=Budget(iterations=1),
                           params=params)
        return HarnessEvolution(cfg, None, None, Journal(), "run")

    small, default = evolution({"size": 0}), evolution({})
    assert [i.id for i, _ in small.val] == [f"iot/val/{k}:size=0" for k in range(5)]
    assert all(i.id.endswith(":size=0") for i in small.train) and len(small.train) == len(default.train)
    assert [i.id for i, _ in default.val] == [f"iot/val/{k}" for k in range(5)]
    assert all(i.params["size"] == 0 for i, _ in small.val) and default.val[0][0].params["size"] == 1


# ------------------------------------------------------------------------ the matrix at size=0
class InProcessPool:
    """`coevolve.services.pools.rollouts.RolloutPool` without Ray: the same executor in this process."""

    def __init__(self, workers: int = 2, **_: object) -> None:
        from tests.rollouts import InProcessEvaluator

        self.evaluator = InProcessEvaluator()
        self.instances: list[str] = []

    def run(self, jobs, on_result=None, progress=False, description="", max_in_flight=None):
        self.instances += [j.instance.id for j in jobs]
        by_model: dict[str, list[int]] = {}
        for k, j in enumerate(jobs):
            by_model.setdefault(j.model, []).append(k)
        out: list = [None] * len(jobs)
        for model, ks in by_model.items():
            for k, t in zip(ks, self.evaluator.evaluate([(jobs[k].instance, jobs[k].harness, jobs[k].seed) for k in ks],
                                                        model), strict=True):
                out[k] = t
        for k, t in enumerate(out):
            if on_result:
                on_result(k, t)
        return out

    @staticmethod
    def put(value):
        return value  # the object store's part: the value stands for its reference

    def replay(self, traj, harness, turn, forced):
        self.instances.append(traj.instance.id)
        return self.evaluator.replay(traj, harness, turn, forced)

    def shutdown(self) -> None:
        pass


class InProcessRoles:
    """`coevolve.services.pools.roles.RolePool` without Ray: one `RoleWorker` (the plain class the pool's actors run)."""

    def __init__(self, role: str, model: str, workers: int = 2, **_: object) -> None:
        from coevolve.services.pools.roles import RoleWorker

        self.worker = RoleWorker(role, model)

    def call(self, method: str, *args):
        return getattr(self.worker, method)(*args)

    def shutdown(self) -> None:
        pass


def test_the_whole_matrix_runs_at_size_0_with_synthetic_models(tmp_path, monkeypatch):
    from coevolve.cluster import runtime
    from coevolve.jobs import experiment
    from coevolve.services.pools import roles
    from coevolve.services.pools import rollouts as pool
    from coevolve.store.datasets import read_manifest, read_rows
    from coevolve.store.store import HarnessStore

    pools: list[InProcessPool] = []

    def make_pool(*a, **kw):
        pools.append(InProcessPool(*a, **kw))
        return pools[-1]

    monkeypatch.setattr(runtime, "start_ray", lambda *a, **kw: None)
    monkeypatch.setattr(pool, "RolloutPool", make_pool)
    monkeypatch.setattr(roles, "RolePool", InProcessRoles)
    cfg = load_config(EXPERIMENT, ["families=[iot]", "params.size=0", "repeats=1", "evolve.iterations=1",
                                   "evolve.rollouts=120", "evolve.val_n=8", "evolve.val_seeds=1", "data.rows=8",
                                   "data.samples=1", "data.k=2"])
    out = experiment.run_experiment(cfg, tmp_path / "store")
    assert out["cells_done"] == out["cells_total"]
    assert out["config"]["params"] == {"size": 0}

    ran = [i for p in pools for i in p.instances]
    assert ran and all(i.endswith(":size=0") for i in ran), sorted({i for i in ran if not i.endswith(":size=0")})[:5]
    store = HarnessStore(tmp_path / "store")
    (run,) = store.list_runs("experiment")
    assert run.config["params"] == {"size": 0}  # resumed with the same instances
    cells = {e.payload["cell"]: e.payload for e in store.events(run.run_id, "cell")}
    (evolve_run,) = store.list_runs("evolve")
    assert evolve_run.config["params"] == {"size": 0}
    evolved = store.events(evolve_run.run_id, "config")[0].payload
    assert evolved["params"] == {"size": 0}
    datasets = [c["dataset"] for k, c in cells.items() if k.startswith("data:") and c["dataset"]]
    assert datasets, "no arm produced rows"
    for ds in datasets:
        assert read_manifest(tmp_path / "store", ds).manifest["params"] == {"size": 0}
        assert all(r.provenance["instance"].endswith(":size=0") for r in read_rows(tmp_path / "store", ds))
    evals = [k for k in cells if k.startswith("eval:")]
    assert len(evals) == 8
    for key in evals:
        trajs = store.get_trajectories(run.run_id, batch=key)
        assert len(trajs) == 50  # the whole test split, once
        assert all(t.instance.id.endswith(":size=0") for t in trajs)


# ------------------------------------------------------------------------ one configuration tree
def test_the_run_profile_and_the_experiment_share_their_sections():
    from coevolve.config import DataSection, EvolveSection, RunProfile, TrainSection

    for name, section in (("evolve", EvolveSection), ("data", DataSection), ("train", TrainSection)):
        assert RunProfile.model_fields[name].annotation is section
        assert ExperimentConfig.model_fields[name].annotation is section
    assert load_config(EXPERIMENT).evolve.iterations == 100  # the shipped experiment writes its own


def test_every_field_of_the_tree_is_described():
    from pydantic import BaseModel

    from coevolve.config import RunProfile

    def undescribed(model: type[BaseModel]) -> list[str]:
        out = []
        for name, field in model.model_fields.items():
            if not field.description:
                out.append(f"{model.__name__}.{name}")
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                out += undescribed(field.annotation)
        return out

    assert undescribed(RunProfile) + undescribed(ExperimentConfig) == []


@pytest.mark.parametrize("overrides", [[], ["params.size=0", "evolve.val_n=500"]])
def test_the_experiments_evolve_and_dataset_configs_are_journalled_as_before(overrides):
    """What the experiment built by hand before the tree built them: equal, so its runs' configs are too
    (but for the search's val instances, which leave the release guard a third of the val split)."""
    from coevolve.agents.correction import BuildConfig
    from coevolve.agents.meta.loop import Budget, EvolveConfig
    from coevolve.agents.meta.race import search_val_n
    from coevolve.tasks import get_family

    cfg = load_config(EXPERIMENT, ["families=[iot]", *overrides])
    family = get_family("iot")
    by_hand = EvolveConfig(family=family.name, model=cfg.weak, proposer=cfg.proposer, seed=cfg.seed,
                           val_n=search_val_n(cfg.evolve.val_n, family.split_sizes["val"]), val_seeds=cfg.evolve.val_seeds,
                           budget=Budget(iterations=cfg.evolve.iterations, rollouts=cfg.evolve.rollouts), params=dict(cfg.params))
    built = cfg.evolve.evolve_config(family, model=cfg.weak, proposer=cfg.proposer, seed=cfg.seed, params=cfg.params,
                                     alpha=EvolveConfig.alpha)
    assert json.dumps(built.to_json(), sort_keys=True) == json.dumps(by_hand.to_json(), sort_keys=True)
    for arm in ("imitation", "correction"):
        bc = BuildConfig(arm, "iot", cfg.weak, cfg.expert, cfg.judge, rows=cfg.data.rows, samples=cfg.data.samples,
                         k=cfg.data.k, seed=cfg.seed)
        assert cfg.data.build_config(arm, "iot", model=cfg.weak, expert=cfg.expert, judge=cfg.judge, seed=cfg.seed) == bc


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("a..b=1", "override 'a..b=1' is not key=value"),
        ("=1", "override '=1' is not key=value"),
        (".seed=1", "override '.seed=1' is not key=value"),
        ("seed", "override 'seed' is not key=value"),
        ("families=[iot", "override 'families=[iot': the value is not valid YAML"),
        ("seed.x=1", "override 'seed.x=1': seed is not a mapping"),
        ("nosuch=1", "{what}: nosuch: no such field (fields: name, families, "),
        ("evolve.nosuch=1", "{what}: evolve.nosuch: no such field (fields: iterations, rollouts, val_n, val_seeds, train_batch)"),
        ("train.backend=torch", "{what}: train.backend: String should match pattern"),
    ],
)
def test_profiles_and_experiments_refuse_a_bad_override_in_the_same_line(override, message):
    from coevolve.config import load_profile

    for what, load in (("profile", lambda o: load_profile("local", o)), ("experiment config", lambda o: load_config(EXPERIMENT, o))):
        with pytest.raises(ValueError) as e:
            load([override])
        assert str(e.value).startswith(message.format(what=what)), str(e.value)
        assert "\n" not in str(e.value)
