"""Weight-adaptation jobs: build a dataset (either arm), train an adapter on it, evaluate the adapted
model, and measure a judge's failure-locus accuracy. Everything is validated before the first write;
every stage is recorded in the store; a build journals each finished correction, so `--resume` after a
crash redoes none of them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from coevolve.agents.correction import ARMS, BuildConfig, DatasetBuilder
from coevolve.analysis.stats import comparison, pass_rate
from coevolve.analysis.summary import SYNTHETIC_ADAPTER_RULES, synthetic_adapters, testbed_notice
from coevolve.errors import BadInput
from coevolve.jobs.runtime import use_store
from coevolve.jobs.validate import resumed_run, validate_model
from coevolve.values import with_adapter

log = structlog.get_logger(role="adapt")
Progress = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class BuildRequest:
    config: BuildConfig
    harness: str  # harness ref: "baseline", an id, a prefix or an alias (e.g. iot:evolved)
    workers: int = 2
    address: str | None = None
    in_flight: int | None = None  # most rollouts at once (None: all)


def _harness(store_path: Path, ref: str, family: str):
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family

    if ref == "baseline":
        return get_family(family).baseline_harness()
    if not store_path.exists():
        raise BadInput(f"unknown harness {ref!r}: the store {store_path} does not exist yet")
    return HarnessStore(store_path, create=False).resolve_harness(ref, family)


def validate_build(req: BuildRequest, store_path: Path) -> Any:
    """Check every input (raises ValueError with one line); returns the harness. Writes nothing."""
    from coevolve.tasks import get_family

    cfg = req.config
    get_family(cfg.family)
    use_store(store_path)
    for m in (cfg.model, cfg.expert, cfg.judge):
        validate_model(m)
    if req.workers < 1:
        raise BadInput(f"--workers must be positive, got {req.workers}")
    if req.in_flight is not None and req.in_flight < 1:
        raise BadInput(f"--in-flight must be positive, got {req.in_flight}")
    if req.address is not None:
        from coevolve.cluster.runtime import check_reachable, check_token

        check_token(req.address)
        check_reachable(req.address)
    return _harness(store_path, req.harness, cfg.family)


def build_dataset(req: BuildRequest, store_path: Path, *, resume: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Run a dataset build on the cluster; returns the dataset's manifest (with its id and path). Resuming
    a build that finished returns its dataset: a finished step is not redone."""
    from coevolve.cluster.runtime import start_ray
    from coevolve.services.pools.backend import RayBackend
    from coevolve.services.pools.base import start_pools
    from coevolve.services.pools.roles import RolePool
    from coevolve.services.pools.rollouts import RolloutPool
    from coevolve.store.datasets import write_dataset
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family

    cfg = req.config
    harness = validate_build(req, store_path)  # before the first write: bad input leaves no store behind
    store = HarnessStore(store_path, create=True)
    if resume:
        run = resumed_run(store, resume, "data", "a data build")
        if run.status == "done" and run.result.get("id"):
            return run.result  # finished before: its dataset, not a second build
        run_id = resume
    else:
        run_id = store.create_run("data", {**cfg.to_json(), "harness": harness.id})
    lease = store.claim_run(run_id)
    store.put_harness(harness, rationale="dataset build harness")
    done = {e.payload["trajectory"]: e.payload["row"] for e in store.events(run_id, "correction")}
    start_ray(req.address)
    correction = cfg.arm == "correction"
    pool, judges, experts = start_pools(lambda: RolloutPool(req.workers, max_in_flight=req.in_flight),
                                        lambda: RolePool("judge", cfg.judge, req.workers) if correction else None,
                                        lambda: RolePool("expert", cfg.expert, req.workers) if correction else None)
    try:
        builder = DatasetBuilder(
            cfg, harness, get_family(cfg.family).generate("train"), RayBackend(pool, judges, experts),
            journal=lambda kind, payload: store.append_event(run_id, kind, payload), done=done, on_progress=progress,
        )
        batches = {name for name, _, _ in store.trajectory_batches(run_id)}

        def sampled(name: str, model: str):
            if name in batches:  # a resumed build reuses what it sampled before
                return store.get_trajectories(run_id, name)
            if progress:
                progress({"stage": f"rollouts: {model}"})
            trajs = builder.sample(model)
            store.put_trajectories(run_id, trajs, batch=name)
            return trajs

        student = sampled("student", cfg.model)
        expert_runs = sampled("expert", cfg.expert) if cfg.arm == "imitation" else []
        rows, stats = builder.build(student, expert_runs)
        if not rows:
            infra = sum(t.error == "infra" for t in student)
            why = (f"{infra} of {len(student)} student rollouts lost to model-service errors (infra)" if infra
                   else f"student pass rate {stats['student_pass_rate']}")
            from coevolve.agents.fit import build_cut_note

            note = build_cut_note(stats)  # what the roles' prompts lost to their context windows
            raise BadInput(f"the {cfg.arm} arm produced no rows ({why})" + (f"; {note}" if note else ""))
        manifest = builder.manifest(run_id, stats) | {"created": time.time()} | testbed_notice(cfg.model)
        rec = write_dataset(store.root, rows, manifest)
        out = {**rec.manifest, "path": str(rec.path)}
        store.finish_run(run_id, "done", out)
        return out
    finally:
        for p in (pool, judges, experts):
            if p is not None:
                p.shutdown()
        lease.release()


# ------------------------------------------------------------------------------- train and evaluate
def train_on(store_path: Path, dataset: str, base: str, backend: str, adapter_id: str | None = None,
             config: dict[str, Any] | None = None, progress: Progress | None = None) -> Any:
    """Train an adapter on a stored dataset through the one training interface."""
    from coevolve.services.training import train_adapter
    from coevolve.store.datasets import read_manifest
    from coevolve.store.store import HarnessStore

    rec = read_manifest(store_path, dataset)
    adapter_id = adapter_id or f"{rec.manifest.get('arm', 'rows')}-{rec.id[3:13]}"
    return train_adapter(rec, base, adapter_id, config, HarnessStore(store_path), backend, progress=progress)


def evaluate_adapter(store_path: Path, family: str, harness: Any, model: str, adapter_id: str, *, split: str = "test",
                     n: int | None = None, repeats: int = 3, seed: int = 0, workers: int = 2,
                     in_flight: int | None = None, address: str | None = None) -> dict[str, Any]:
    """The model with and without the adapter, same instances (the split's first `n`, default all) and
    seeds, pass@1 with 95% intervals."""
    from coevolve.cluster.runtime import start_ray
    from coevolve.services.pools.rollouts import RolloutJob, RolloutPool
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family

    store = HarnessStore(store_path, create=True)
    run_id = store.create_run("adapt-eval", {"family": family, "harness_id": harness.id, "model": model,
                                             "adapter": adapter_id, "split": split, "n": n, "repeats": repeats})
    instances = get_family(family).generate(split, n)
    start_ray(address)
    pool = RolloutPool(workers, max_in_flight=in_flight)
    try:
        rates = {}
        for label, m in (("base", model), ("adapted", with_adapter(model, adapter_id))):
            trajs = pool.run([RolloutJob(i, harness, m, seed + 10_000 + r) for r in range(repeats) for i in instances])
            store.put_trajectories(run_id, trajs, batch=label)
            rates[label] = pass_rate(trajs)
    finally:
        pool.shutdown()
    out = {
        "run_id": run_id, "family": family, "split": split, "instances": len(instances), "repeats": repeats,
        "harness_id": harness.id,
        "model": model, "adapter": adapter_id,
        **comparison(rates, "base", "adapted"),
    }
    out |= testbed_notice(model)
    if synthetic_adapters(model):
        out["adapter_rules"] = SYNTHETIC_ADAPTER_RULES
    store.finish_run(run_id, "done", out)
    return out


# ------------------------------------------------------------------------------- judge accuracy
def judge_families(family: str) -> list[str]:
    """`--family` of `coevolve judge accuracy`: one family, several comma-separated, or `all` (the
    seven testbed families). Unknown names raise ValueError."""
    from coevolve.tasks import family_names, get_family

    names = family_names() if family.strip() == "all" else [f.strip() for f in family.split(",") if f.strip()]
    if not names:
        raise BadInput("--family names no family")
    for f in names:
        get_family(f)
    return list(dict.fromkeys(names))


def judge_accuracy(store_path: Path, families: str | list[str], judge: str, *, model: str = "synthetic/weak",
                   split: str = "test", n: int | None = None, repeats: int = 2, seed: int = 0,
                   workers: int = 2, address: str | None = None,
                   progress: Progress | None = None) -> dict[str, Any]:
    """A judge's failure-locus accuracy against the testbed's decisive turns (the answer key, read here
    by analysis code only), per family: exact and within one turn, beside two baselines measured on
    the same failures — a uniformly random turn and the rule-based first guess (the first error
    observation) — on all keyed failures and on the subset where the first-error rule is wrong (no
    error observation, or its first error is not the decisive turn) and on the one where the rule's
    guess (the first error, else the last action before finishing) misses, where a judge has to do
    better than the rule (`coevolve.analysis.rollouts.locus_accuracy`). Decisive turns come through the lazy, cached
    counterfactual (`coevolve.testbed.counterfactual.with_counterfactuals`, cached in the store)."""
    from concurrent.futures import ThreadPoolExecutor

    from coevolve.agents.judge import rule_based_guess
    from coevolve.agents.transcript import first_error_turn
    from coevolve.analysis.rollouts import (
        answer_key_category,
        cohen_kappa,
        confusion,
        locus_accuracy,
        locus_row,
    )
    from coevolve.cluster.runtime import start_ray
    from coevolve.codec import decode, encode
    from coevolve.services.gateway import Gateway
    from coevolve.services.pools.base import start_pools
    from coevolve.services.pools.roles import RolePool
    from coevolve.services.pools.rollouts import RolloutJob, RolloutPool
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family
    from coevolve.testbed.counterfactual import with_counterfactuals

    names = judge_families(families) if isinstance(families, str) else list(families)
    validate_model(judge)
    harnesses = {f: get_family(f).baseline_harness() for f in names}
    instances = {f: get_family(f).generate(split, n) for f in names}
    store = HarnessStore(store_path, create=True)
    run_id = store.create_run("judge-accuracy", {"families": names, "judge": judge, "model": model,
                                                  "split": split, "n": n, "repeats": repeats, "seed": seed})
    for h in harnesses.values():
        store.put_harness(h, rationale="judge accuracy harness")
    start_ray(address)
    pool, judges = start_pools(lambda: RolloutPool(workers), lambda: RolePool("judge", judge, workers))
    per_family: dict[str, dict[str, Any]] = {}
    try:
        jobs = [RolloutJob(i, harnesses[f], model, seed + r)
                for f in names for r in range(repeats) for i in instances[f]]
        if progress:
            progress({"stage": f"rollouts: {len(jobs)} of {model} on {', '.join(names)}"})
        trajs = pool.run(jobs)
        keyed: dict[str, list[Any]] = {}
        failures: dict[str, int] = {}
        for f in names:
            mine = [t for t in trajs if t.instance.family == f]
            store.put_trajectories(run_id, mine, batch=f"rollouts:{f}")
            failed = [t for t in mine if not t.passed and t.error != "infra"]
            failures[f] = len(failed)
            if progress:
                progress({"stage": f"counterfactuals: {f} ({len(failed)} failures)"})
            done = with_counterfactuals(failed, harnesses[f], store=store, client=Gateway())
            keyed[f] = [t for t in done if t.ground_truth.get("decisive_turn") is not None]
            lost = sum("counterfactual_error" in t.ground_truth for t in done)
            per_family[f] = {"counterfactual_errors": lost}
        everything = [t for f in names for t in keyed[f]]
        if not everything:
            raise BadInput(
                f"no failed {model} rollout with a decisive turn on {', '.join(names)} {split}:"
                " nothing to score"
            )
        if progress:
            progress({"stage": "judging", "failures": len(everything)})

        def judged(t: Any) -> tuple[Any, Any]:
            view = encode(t.public_view())
            locus = judges.call("locate", view)[0]
            return decode(locus), decode(judges.call("classify", view, locus)[0])

        with ThreadPoolExecutor(workers * 4) as ex:
            verdicts = dict(zip((id(t) for t in everything), ex.map(judged, everything), strict=True))
    finally:
        pool.shutdown()
        judges.shutdown()
    for f in names:
        rows, pairs = [], []
        for t in keyed[f]:
            locus, label = verdicts[id(t)]
            rows.append(locus_row(t, locus.turn_index, first_error_turn(t), rule_based_guess(t)[0],
                                  unknown=locus.reason.startswith("unknown")))
            truth_category = answer_key_category(t)
            if truth_category is not None:
                pairs.append((truth_category, label.category))
        per_family[f] = {
            "family": f, "instances": len(instances[f]), "rollouts": len(instances[f]) * repeats,
            "failures": failures[f], "with_decisive_turn": len(rows), **per_family[f],
            "loci": locus_accuracy(rows) if rows else None,
            "unparseable": sum(r["unknown"] for r in rows),
            "category_accuracy": round(sum(a == b for a, b in pairs) / len(pairs), 4) if pairs else None,
            "category_kappa": round(cohen_kappa(pairs), 4), "confusion": confusion(pairs),
        }
    out = {"run_id": run_id, "families": per_family, "judge": judge, "model": model, "split": split, "n": n,
           "repeats": repeats, "seed": seed, **testbed_notice(model)}
    store.finish_run(run_id, "done", out)
    return out


def build_config(**kw: Any) -> BuildConfig:
    if kw.get("arm") not in ARMS:
        raise BadInput(f"--arm must be one of {', '.join(ARMS)}, got {kw.get('arm')!r}")
    return BuildConfig(**kw)



