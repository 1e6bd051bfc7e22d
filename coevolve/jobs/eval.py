"""The eval job: check the request (`validate_eval`), then run every (family, model) on the rollout
actors and record each as an eval run.

An eval stores its rollouts as they finish, `EVAL_STORE_BATCH` per store transaction, so a failure late
in an eval (a signal, a full disk: one `error:` line saying how many rollouts were kept) keeps what was
done; running the same eval again continues that unfinished run, reusing its stored rollouts.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from coevolve.analysis.stats import PassRate, cap_note, infra_note, pass_rate
from coevolve.analysis.summary import failure_causes, summarise, testbed_notice
from coevolve.config import SEED_MAX, check_seed
from coevolve.errors import BadInput
from coevolve.jobs.runtime import rollout_pool, use_store
from coevolve.jobs.signals import interruption, mark_interruption
from coevolve.jobs.validate import check_workers, validate_model
from coevolve.tasks import check_params
from coevolve.values import EvalSummary, Harness, TaskInstance


@dataclass(frozen=True)
class EvalRequest:
    family: str
    split: str
    n: int
    harness: str
    models: tuple[str, ...]
    workers: int
    seed: int
    address: str | None
    reference: bool = False  # also score each family's reference solver
    repeats: int = 1  # rollouts per instance, at seeds seed, seed+1, ...
    params: tuple[tuple[str, Any], ...] = ()  # family parameters (size, difficulty), sorted; () = defaults
    max_in_flight: int | None = None  # rollouts at once (None: all), e.g. a small server's batch size
    start: int = 0  # the first instance of the split: the eval runs instances start .. start + n - 1


@dataclass(frozen=True)
class EvalPlan:
    request: EvalRequest
    store_path: Path
    families: tuple[str, ...]
    harnesses: dict[str, Harness]  # family -> harness
    baseline: dict[str, bool]  # family -> harness is the family baseline (alias it on store)
    instances: dict[str, list[TaskInstance]]


@dataclass(frozen=True)
class EvalResult:
    run_id: str
    summary: EvalSummary
    causes: dict[str, int]
    seconds: float
    rate: PassRate
    repeats: int = 1
    tau2: dict[str, Any] | None = None  # tau2 families: `coevolve.analysis.tau2.tau2_report` of the rollouts

    def as_json(self) -> dict[str, Any]:
        """The eval's record. pass^k runs k = 1 .. `pass_hat_k_cap`, the repeats or fewer when infra
        failures left some instance with fewer scored runs (`pass_hat_k_note` says so); never raises."""
        s = self.summary
        rate = self.rate.as_json()
        ks, cap = self.rate.pass_hat_ks(self.repeats)
        out = {
            "run_id": self.run_id,
            **{f: getattr(s, f) for f in ("family", "split", "model", "harness_id", "seed", "n", "passed")},
            "pass_rate": round(s.pass_rate, 4),
            **{f: getattr(s, f) for f in ("errors", "mean_turns", "loop_ended", "total_tokens", "cost_usd")},
            "failure_causes": self.causes,
            "seconds": round(self.seconds, 2),
            "repeats": self.repeats,
            **{k: rate[k] for k in ("pass_at_1", "ci95", "boundary_share", "per_instance")},
            "pass_hat_k": {str(k): round(v, 4) for k, v in ks.items()},
            "pass_hat_k_cap": cap,
        }
        if cap < self.repeats:
            out["pass_hat_k_note"] = cap_note(cap)
        out["infra"] = self.rate.infra
        if note := infra_note(self.rate.infra, self.rate.rollouts):
            out["infra_note"] = note
        if self.tau2 is not None:
            out["tau2"] = self.tau2
        return out | testbed_notice(s.model)


def validate_eval(req: EvalRequest, store_path: Path) -> EvalPlan:
    """Check every input; raise ValueError/StoreError with one clear line. Writes nothing."""
    from coevolve.store.store import HarnessStore, is_fresh_store_dir
    from coevolve.tasks import family_names, get_family

    if req.n <= 0:
        raise BadInput(f"--n must be positive, got {req.n}")
    if req.start < 0:
        raise BadInput(f"the first instance must be >= 0, got {req.start}")
    if req.repeats <= 0:
        raise BadInput(f"--repeats must be positive, got {req.repeats}")
    if req.max_in_flight is not None and req.max_in_flight <= 0:
        raise BadInput(f"--max-in-flight must be positive, got {req.max_in_flight}")
    check_workers(req.workers, req.address)
    check_seed(req.seed)
    if req.seed + req.repeats - 1 > SEED_MAX + 2**20:
        raise BadInput(f"--seed {req.seed} with --repeats {req.repeats} runs past 64 bits")
    families = tuple(family_names()) if req.family == "all" else (req.family,)
    fams = {f: get_family(f) for f in families}  # unknown family -> ValueError
    if not req.models:
        raise BadInput("--model names no model")
    use_store(store_path)
    for m in req.models:
        validate_model(m)
    existing = not is_fresh_store_dir(store_path)  # absent, empty or only models/...: no store yet
    store = HarnessStore(store_path, create=False) if existing else None
    harnesses: dict[str, Harness] = {}
    baseline: dict[str, bool] = {}
    instances: dict[str, list[TaskInstance]] = {}
    params = dict(req.params)
    for name, fam in fams.items():
        check_params(fam, params)
        if req.harness == "baseline":
            harnesses[name], baseline[name] = fam.baseline_harness(), True
        else:
            if store is None:
                raise BadInput(f"unknown harness {req.harness!r}: the store {store_path} does not exist yet")
            harnesses[name], baseline[name] = store.resolve_harness(req.harness, name), False
        size = fam.split_sizes.get(req.split, 0)
        if req.start and req.start + req.n > size:
            raise BadInput(f"instances {req.start}..{req.start + req.n - 1} run past {name}'s {req.split} split ({size})")
        instances[name] = fam.generate(req.split, req.start + req.n, seed=req.seed, **params)[req.start :]
    return EvalPlan(req, store_path, families, harnesses, baseline, instances)


def run_eval(plan: EvalPlan, progress: bool = True, on: Any = None) -> list[EvalResult]:
    """Run the plan's evals on `on` (a `RolloutPool` the caller owns and shuts down), or on a pool of the
    request's workers started for the call."""
    from coevolve.store.store import HarnessStore

    req = plan.request
    store = HarnessStore(plan.store_path, create=True)
    results: list[EvalResult] = []
    try:
        with contextlib.nullcontext(on) if on is not None else rollout_pool(req.address, req.workers, req.max_in_flight) as pool:
            for fam in plan.families:
                h = plan.harnesses[fam]
                store.put_harness(h, rationale="family baseline" if plan.baseline[fam] else "")
                if plan.baseline[fam]:
                    store.set_alias(f"{fam}:baseline", h.id)
                for model in req.models:
                    results.append(_eval_one(store, pool, plan, fam, h, model, progress))
    except KeyboardInterrupt as e:
        mark_interruption(e, "eval", None)
        intr = interruption(e)
        for r in results:
            intr.runs.setdefault(r.run_id, "done")
        raise
    return results


EVAL_STORE_BATCH = 50  # an eval stores its rollouts as they finish, this many per batch (one transaction each)


class _Streamed:
    """Stores an eval's rollouts as they come back, `size` per batch, each batch one store transaction
    (which also indexes them): a failure late in an eval loses at most one unstored batch."""

    def __init__(self, store: Any, run_id: str, size: int) -> None:
        self.store, self.run_id, self.size = store, run_id, size
        self.pending: list[Any] = []
        self.batches = len(store.trajectory_batches(run_id))  # a continued run's parts come after its own

    def add(self, traj: Any) -> None:
        self.pending.append(traj)
        if len(self.pending) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.store.put_trajectories(self.run_id, self.pending, batch=f"{self.batches + 1:05d}")
            self.batches += 1
            self.pending = []


def _eval_config(config: dict[str, Any]) -> dict[str, Any]:
    """What makes two evals the same eval (the rollout actors do not)."""
    return {k: v for k, v in config.items() if k != "workers"}


def _eval_run(store: Any, config: dict[str, Any], keys: list[str]) -> tuple[str, Any, dict[str, Any]]:
    """The run an eval records into: the newest unfinished eval of the same request (failed,
    interrupted, or left `running` by a killed process) that stored some of its rollouts, claimed and
    continued so that they are reused; else a new run. (run id, lease or None, stored rollouts by key)."""
    from coevolve.store.store import StoreError

    same = [r for r in store.list_runs("eval") if r.status != "done" and _eval_config(r.config) == _eval_config(config)]
    for run in reversed(same):
        have = store.stored_rollouts([run.run_id], keys)
        if not have:
            continue
        try:
            return run.run_id, store.claim_run(run.run_id, heartbeat_s=None), have
        except StoreError:  # another live process is at work on it: this eval is a run of its own
            break
    return store.create_run("eval", config), None, {}


def _eval_one(store: Any, pool: Any, plan: EvalPlan, fam: str, h: Harness, model: str, progress: bool) -> EvalResult:
    """One (family, model) eval. Rollouts are stored as they finish (`EVAL_STORE_BATCH` per batch), so
    a failure late in the eval (a full disk) keeps what was done, and running the same eval again
    continues that run: the rollouts it stored are reused, only the missing ones are run."""
    from coevolve.services.pools.rollouts import RolloutJob
    from coevolve.store.store import StoreError, rollout_key

    req = plan.request
    config = {
        "family": fam, "split": req.split, "n": req.n, "harness_id": h.id, "model": model,
        "seed": req.seed, "workers": req.workers, "repeats": req.repeats,
    }
    if req.params:  # only when set: an eval at the defaults keeps the config (and continuation) it had
        config["params"] = dict(req.params)
    if req.start:
        config["start"] = req.start
    jobs = [RolloutJob(i, h, model, req.seed + r) for r in range(req.repeats) for i in plan.instances[fam]]
    keys = [rollout_key(j.instance, j.harness.id, j.model, j.seed) for j in jobs]
    run_id, lease, have = _eval_run(store, config, keys)
    log = structlog.get_logger(role="eval", run_id=run_id, harness_id=h.id[:12])
    started = time.perf_counter()
    try:
        todo = {k: j for k, j in zip(keys, jobs) if k not in have}
        log.info("eval started", family=fam, model=model, n=req.n, rollouts=len(jobs), reused=len(jobs) - len(todo))
        sink = _Streamed(store, run_id, EVAL_STORE_BATCH)
        fresh = pool.run(list(todo.values()), on_result=lambda _i, t: sink.add(t), progress=progress,
                         description=f"{fam} {model}")
        sink.flush()
        have.update(zip(todo, fresh))
        trajs = [have[k] for k in keys]
        summary = summarise(trajs, split=req.split, seed=req.seed)
        res = EvalResult(
            run_id, summary, failure_causes(trajs), time.perf_counter() - started, pass_rate(trajs), req.repeats,
            tau2_block(fam, trajs, req.split, req.repeats),
        )
        store.finish_run(run_id, "done", res.as_json())
    except BaseException as e:
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        mark_interruption(e, "eval", run_id, status)
        with contextlib.suppress(StoreError):  # a full disk may refuse this too: the run stays for a re-run
            store.finish_run(run_id, status, {"error": f"{type(e).__name__}: {e}"})
        if isinstance(e, StoreError):
            kept = _kept(store, run_id)
            raise StoreError(
                f"{e}; eval run {run_id} keeps {kept} of its {len(jobs)} rollouts in the store: free the cause"
                " and run the same command again to finish it (the stored rollouts are reused)"
            ) from None
        raise
    finally:
        if lease is not None:
            with contextlib.suppress(StoreError):
                lease.release()
    log.info("eval done", pass_rate=summary.pass_rate, reused=len(jobs) - len(todo))
    return res


def tau2_block(family: str, trajs: list[Any], split: str, repeats: int) -> dict[str, Any] | None:
    """tau2's metrics and leaderboard comparability for a tau2 family's eval (None for other families)."""
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2 import Tau2Family

    fam = get_family(family)
    if not isinstance(fam, Tau2Family):
        return None
    from coevolve.analysis.tau2 import tau2_report

    return tau2_report(trajs, domain=fam.domain, split=split, repeats=repeats, split_size=fam.split_sizes.get(split))


def _kept(store: Any, run_id: str) -> int | str:
    from coevolve.store.store import StoreError

    try:
        return store.rollout_spend([run_id])[0]
    except StoreError:
        return "an unknown number"


