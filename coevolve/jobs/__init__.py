"""Jobs the CLI runs: validate everything first, then start Ray, run, and record in the store.

Stopping a job: inside `stop_on_signals()` (the CLI's eval, evolve and transfer use it) SIGINT (Ctrl-C)
and SIGTERM raise `Interrupted` in the main thread, also after Ray has started (Ray's core worker
installs a C++ handler for SIGTERM that prints a stack dump and aborts: `_start_ray` puts ours back).
The job's `finally` blocks run: actors are shut down, an evolve run's lease is released (the run is
marked `interrupted` and `coevolve evolve --resume RUN_ID` continues it), an eval run is recorded as
`interrupted`. The exception carries the run id, and the CLI prints one line and exits 128 + signal
(130 for SIGINT, 143 for SIGTERM). A second signal while stopping exits at once.

An eval stores its rollouts as they finish, `EVAL_STORE_BATCH` per store transaction, so a failure late
in an eval (a signal, a full disk: one `error:` line saying how many rollouts were kept) keeps what was
done; running the same eval again continues that unfinished run, reusing its stored rollouts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from coevolve.analysis.stats import PassRate, cap_note, pass_rate
from coevolve.analysis.summary import TESTBED_NOTICE, failure_causes, summarise
from coevolve.config import SEED_MAX, check_seed
from coevolve.values import EvalSummary, Harness, ModelRef, TaskInstance


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
            "family": s.family,
            "split": s.split,
            "model": s.model,
            "harness_id": s.harness_id,
            "seed": s.seed,
            "n": s.n,
            "passed": s.passed,
            "pass_rate": round(s.pass_rate, 4),
            "errors": s.errors,
            "mean_turns": s.mean_turns,
            "total_tokens": s.total_tokens,
            "cost_usd": s.cost_usd,
            "failure_causes": self.causes,
            "seconds": round(self.seconds, 2),
            "repeats": self.repeats,
            "pass_at_1": rate["pass_at_1"],
            "ci95": rate["ci95"],
            "boundary_share": rate["boundary_share"],
            "per_instance": rate["per_instance"],
            "pass_hat_k": {str(k): round(v, 4) for k, v in ks.items()},
            "pass_hat_k_cap": cap,
        }
        if cap < self.repeats:
            out["pass_hat_k_note"] = cap_note(cap)
        if self.tau2 is not None:
            out["tau2"] = self.tau2
        if s.model.startswith("synthetic/"):
            out["notice"] = TESTBED_NOTICE
        return out


# ------------------------------------------------------------------------------------- stopping
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a job ran. The job that was running fills in `kind`, `run_id`
    and `runs` (run id -> status it was left in) on its way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.kind: str | None = None
        self.run_id: str | None = None
        self.runs: dict[str, str] = {}

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass
class _SignalState:
    active: bool = False
    raised: Interrupted | None = None
    previous: dict[int, Any] = field(default_factory=dict)


_signals = _SignalState()


def _on_signal(signum: int, frame: Any) -> None:
    if _signals.raised is not None:  # a second signal while the job stops: stop now
        os._exit(128 + signum)
    _signals.raised = Interrupted(signum)
    raise _signals.raised


def _install_signal_handlers() -> None:
    if _signals.active and threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _on_signal)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` while the block runs (main thread only; elsewhere a no-op);
    the previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread() or _signals.active:
        yield
        return
    _signals.previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    _signals.active, _signals.raised = True, None
    _install_signal_handlers()
    try:
        yield
    finally:
        _signals.active = False
        for sig, handler in _signals.previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _start_ray(address: str | None) -> None:
    """Start or attach to Ray; then our stop handlers again (Ray replaces SIGTERM's) and, when logs are
    JSON lines, worker lines re-emitted as JSON (coevolve.services.logs), or kept in Ray's log files if that
    hook is missing."""
    from coevolve.cluster.runtime import start_ray
    from coevolve.services.logs import forward_worker_logs_as_json

    json_logs = os.environ.get("COEVOLVE_LOG_JSON") == "1"
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher  # noqa: F401
        can_forward = True
    except ImportError:
        can_forward = False
    start_ray(address, log_to_driver=can_forward or not json_logs)
    _install_signal_handlers()
    if json_logs and can_forward:
        forward_worker_logs_as_json()


def interruption(e: BaseException) -> Interrupted | None:
    """The `Interrupted` behind `e`: itself, or, for a plain KeyboardInterrupt (Ray's `ray.get` turns a
    signal handler's exception into a new one), the one the handler raised (a SIGINT if none did)."""
    if isinstance(e, Interrupted):
        return e
    if not isinstance(e, KeyboardInterrupt):
        return None
    if _signals.raised is None:
        _signals.raised = Interrupted(signal.SIGINT)
    return _signals.raised


def _mark(e: BaseException, kind: str, run_id: str | None, status: str | None = None) -> None:
    """Tell the interruption on its way to the CLI which run it stopped (the first mark wins)."""
    intr = interruption(e)
    if intr is not None:
        intr.kind = intr.kind or kind
        if run_id is not None:
            intr.run_id = intr.run_id or run_id
            if status is not None:
                intr.runs.setdefault(run_id, status)


def use_store(store_path: Path) -> None:
    """Model providers (synthetic adapters) and pool actors find the store through the environment."""
    import os

    os.environ["COEVOLVE_STORE"] = str(Path(store_path).resolve())


def check_workers(workers: int, address: str | None) -> None:
    """An embedded Ray has this machine's CPUs: refuse more rollout actors than it can place, before
    anything runs. (On an attached cluster, which may scale up, the pool's readiness timeout decides.)"""
    if workers <= 0:
        raise ValueError(f"--workers must be positive, got {workers}")
    if address is not None:
        from coevolve.cluster.runtime import check_reachable, check_token

        check_token(address)  # no token for the cluster: say so now, not after the store is opened
        check_reachable(address)  # nothing listening there: say so now, not after minutes of retries
        return
    from coevolve.services.pools.rollouts import WORKER_CPUS

    try:
        from ray._private.utils import get_num_cpus  # what ray.init will detect (cgroup quotas included)

        cpus = float(get_num_cpus())
    except (ImportError, AttributeError):
        cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    need = workers * WORKER_CPUS
    if need > cpus:
        fit = int(cpus // WORKER_CPUS)
        raise ValueError(
            f"--workers {workers} asks for {need:g} CPUs ({WORKER_CPUS:g} each) but the embedded Ray has {cpus:g}: "
            f"use --workers {fit} or fewer, or attach to a larger cluster with --address"
        )


def validate_model(model: str) -> None:
    ref = ModelRef.parse(model)
    if ref.provider == "synthetic":
        from coevolve.testbed.policy import PROFILES

        if ref.model not in PROFILES:
            raise ValueError(f"unknown synthetic model {ref.model!r} (models: {', '.join(PROFILES)})")
        if ref.adapter:
            # where coevolve.testbed.provider reads it; looked at first, as importing that module imports
            # litellm (10+ CPU seconds) just to say the adapter is not there
            path = Path(os.environ.get("COEVOLVE_STORE", ".coevolve")) / "adapters" / ref.adapter / "synthetic_adapter.json"
            if not path.is_file():
                raise ValueError(f"synthetic adapter {ref.adapter!r} not found at {path}")
            from coevolve.testbed.provider import load_synthetic_adapter

            load_synthetic_adapter(ref.adapter)
        return
    if ref.provider == "vllm":
        _validate_served(ref)
        return
    if ref.provider not in litellm_providers():
        raise ValueError(f"unknown model provider {ref.provider!r} in {model!r}")


@functools.cache
def litellm_providers() -> frozenset[str]:
    """The provider names litellm routes (`litellm.provider_list`, which is `list(LlmProviders)`), read
    from that enum's source: importing litellm takes 10+ CPU seconds, too long to refuse a typo in.
    Imported after all if the source cannot be read that way."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("litellm")
    try:
        tree = ast.parse((Path(spec.origin).parent / "types" / "utils.py").read_text())
        enum = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LlmProviders")
        names = {a.value.value for a in enum.body
                 if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant) and isinstance(a.value.value, str)}
        if names:
            return frozenset(names)
    except (AttributeError, TypeError, OSError, SyntaxError, StopIteration):
        pass
    import litellm

    return frozenset(str(p.value) if hasattr(p, "value") else str(p) for p in litellm.provider_list)


def _validate_served(ref: ModelRef) -> None:
    """A `vllm/<model>[@adapter]` ref must name a model a running server serves (and an adapter it can
    load): the server from $COEVOLVE_SERVE_URL or the store's serve.json, asked for its model list."""
    from coevolve.services.serving.app import (
        SERVE_URL_ENV,
        ServingError,
        probe,
        read_state,
        serve_url,
        served_model_name,
        state_path,
    )

    try:
        url = serve_url()
    except ServingError as e:
        raise ValueError(f"model {ref}: {e}") from None
    listed = probe(url, timeout=5.0)
    where = f"${SERVE_URL_ENV}" if os.environ.get(SERVE_URL_ENV) else str(state_path())
    if listed is None:
        raise ValueError(f"model {ref}: no vLLM server answers at {url} (from {where}); start one: coevolve serve --config ...")
    served = sorted(m for m in listed if ":" not in m)  # base models; adapters are listed as model:adapter
    if ref.model not in listed:
        raise ValueError(f"model {ref}: {ref.model!r} is not served at {url} (served: {', '.join(served) or 'none'})")
    if ref.adapter and served_model_name(ref) not in listed:
        state = read_state() or {}
        adapters = Path(state.get("adapters_dir") or Path(os.environ.get("COEVOLVE_STORE", ".coevolve")) / "adapters")
        if not (adapters / ref.adapter).is_dir():
            raise ValueError(f"model {ref}: no adapter {ref.adapter!r} in {adapters} (register it: coevolve models register ...)")


def parse_params(text: str) -> tuple[tuple[str, Any], ...]:
    """`size=0,difficulty=1` -> (("difficulty", 1), ("size", 0)); integers only (every family's
    parameters are); ValueError with one line otherwise."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise ValueError(f"--params item {item!r} is not key=value (e.g. --params size=0,difficulty=1)")
        if key in out:
            raise ValueError(f"--params names {key!r} twice")
        try:
            out[key] = int(value)
        except ValueError:
            raise ValueError(f"--params {key}={value!r}: not an integer") from None
    return tuple(sorted(out.items()))


def check_params(fam: Any, params: dict[str, Any]) -> None:
    """Family parameters are known to the family and within 0..64 (the levels use 0..4)."""
    unknown = sorted(set(params) - set(fam.default_params))
    if unknown:
        raise ValueError(f"{fam.name} has no parameter {', '.join(map(repr, unknown))} (it has: {', '.join(sorted(fam.default_params))})")
    for k, v in params.items():
        if not 0 <= v <= 64:
            raise ValueError(f"parameter {k}={v} is out of range 0..64")


def validate_eval(req: EvalRequest, store_path: Path) -> EvalPlan:
    """Check every input; raise ValueError/StoreError with one clear line. Writes nothing."""
    from coevolve.store.store import HarnessStore, is_fresh_store_dir
    from coevolve.tasks import family_names, get_family

    if req.n <= 0:
        raise ValueError(f"--n must be positive, got {req.n}")
    if req.repeats <= 0:
        raise ValueError(f"--repeats must be positive, got {req.repeats}")
    if req.max_in_flight is not None and req.max_in_flight <= 0:
        raise ValueError(f"--max-in-flight must be positive, got {req.max_in_flight}")
    check_workers(req.workers, req.address)
    check_seed(req.seed)
    if req.seed + req.repeats - 1 > SEED_MAX + 2**20:
        raise ValueError(f"--seed {req.seed} with --repeats {req.repeats} runs past 64 bits")
    families = tuple(family_names()) if req.family == "all" else (req.family,)
    fams = {f: get_family(f) for f in families}  # unknown family -> ValueError
    if not req.models:
        raise ValueError("--model names no model")
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
                raise ValueError(f"unknown harness {req.harness!r}: the store {store_path} does not exist yet")
            harnesses[name], baseline[name] = store.resolve_harness(req.harness, name), False
        instances[name] = fam.generate(req.split, req.n, seed=req.seed, **params)
    return EvalPlan(req, store_path, families, harnesses, baseline, instances)


def reference_result(fam: str, instances: list[TaskInstance], split: str) -> dict[str, Any]:
    """The reference solver's score on the same instances (no model: the plan run through the tools)."""
    from coevolve.tasks import get_family

    family = get_family(fam)
    outcomes = [family.reference_solve(i)[0] for i in instances]
    passed = sum(o.passed for o in outcomes)
    out = {"family": fam, "model": "reference", "split": split, "n": len(instances), "passed": passed,
           "pass_rate": round(passed / len(instances), 4), "errors": {}, "run_id": None}
    from coevolve.values import Trajectory

    trajs = [Trajectory(i, "reference", "reference", 0, (), (), o) for i, o in zip(instances, outcomes)]
    if (block := tau2_block(fam, trajs, split, 1)) is not None:  # the gold actions replayed: never tau2's number
        why = "the reference solver replays tau2's gold actions: a check of the tasks, not an agent"
        block["comparable"], block["not_comparable"] = False, [why, *block["not_comparable"]]
        block["note"] = "not comparable with tau2's leaderboard: " + "; ".join(block["not_comparable"])
        out["tau2"] = block
    return out


def run_eval(plan: EvalPlan, progress: bool = True) -> list[EvalResult]:
    from coevolve.services.pools.rollouts import RolloutPool
    from coevolve.store.store import HarnessStore

    req = plan.request
    store = HarnessStore(plan.store_path, create=True)
    results: list[EvalResult] = []
    pool = None
    try:
        _start_ray(req.address)
        pool = RolloutPool(req.workers, max_in_flight=req.max_in_flight)
        for fam in plan.families:
            h = plan.harnesses[fam]
            store.put_harness(h, rationale="family baseline" if plan.baseline[fam] else "")
            if plan.baseline[fam]:
                store.set_alias(f"{fam}:baseline", h.id)
            for model in req.models:
                results.append(_eval_one(store, pool, plan, fam, h, model, progress))
    except KeyboardInterrupt as e:
        _mark(e, "eval", None)
        intr = interruption(e)
        for r in results:
            intr.runs.setdefault(r.run_id, "done")
        raise
    finally:
        if pool is not None:
            pool.shutdown()
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
        _mark(e, "eval", run_id, status)
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


# ------------------------------------------------------------------------------------------ evolve
def run_evolve(
    config: Any,
    store_path: Path,
    *,
    address: str | None,
    workers: int,
    resume: str | None,
    on_progress: Any = None,
) -> dict[str, Any]:
    """Run (or resume) a harness evolution; record the evolved harness under `<family>:evolved`."""
    from coevolve.agents.meta import HarnessEvolution, LLMProposer
    from coevolve.services.gateway import Gateway
    from coevolve.services.pools.rollouts import PoolEvaluator, RolloutPool
    from coevolve.store.store import HarnessStore

    check_workers(workers, address)
    if config is not None:
        check_seed(config.seed)
    use_store(store_path)
    store = HarnessStore(store_path, create=True)
    lease = None
    if resume:
        run = store.get_run(resume)
        if run.kind != "evolve":
            raise ValueError(f"run {resume!r} is a {run.kind} run, not an evolve run")
        from coevolve.agents.meta.loop import EvolveConfig

        config = EvolveConfig.from_json(run.config)
        run_id = resume
        lease = store.claim_run(run_id)  # refuses a done run, or one another live process is running
    else:
        run_id = store.create_run("evolve", config.to_json())
        lease = store.claim_run(run_id)  # heartbeats let other hosts see the owner is alive
    pool = None
    try:  # from here on the lease is released (run `interrupted` unless done) however the job ends
        gateway = Gateway()
        _start_ray(address)
        pool = RolloutPool(workers)
        from coevolve.tasks import get_family

        handbook = get_family(config.family).handbook if config.handbook else None
        proposer = LLMProposer(config.proposer, lambda m, msgs, tools, seed: gateway.complete(m, msgs, tools, seed=seed), handbook,
                                 windows=gateway.budget)
        loop = HarnessEvolution(config, PoolEvaluator(pool), proposer, store, run_id, on_progress=on_progress)
        try:
            result = loop.run(resume=bool(resume))
        except BaseException as e:
            _mark(e, "evolve", run_id, "interrupted")
            store.update_run(run_id, status="interrupted", result={"error": f"{type(e).__name__}: {e}"})
            raise
        store.set_alias(f"{config.family}:evolved", result.harness_id)
        out = {
            "run_id": run_id,
            "family": config.family,
            "model": config.model,
            "proposer": config.proposer,
            "harness_id": result.harness_id,
            "baseline_id": result.baseline_id,
            "baseline_val": round(result.baseline_val, 4),
            "evolved_val": round(result.evolved_val, 4),
            "rollouts_used": result.rollouts_used,
            "iterations": result.iterations,
            "accepted": len(result.accepted),
            "rejected": result.rejected,
            "invalid": result.invalid,
            "stop_reason": result.stop_reason,
            "spend": result.spend,
            "edits": result.accepted,
        }
        from coevolve.agents.fit import evolve_cut_note

        if note := evolve_cut_note([e.payload for e in store.events(run_id, "proposal")]):
            out["context_note"] = note  # what the proposer's evidence lost to its context window
        out["usage"] = usage_report(store, pool, result.harness_id, config.family, [config.model], "val", config.val_n, config.seed)
        out["test"] = held_out_comparison(
            store, pool, run_id, config.family, config.model, result.baseline_id, result.harness_id,
            repeats=config.val_seeds, seed=config.seed,
        )
        if "tau2" in out["test"]:  # the val numbers too: a tau2 family's val split is not tau2's leaderboard set
            from coevolve.analysis.tau2 import verdict

            out["tau2_note"] = verdict(list(out["test"]["tau2"].values()))
        if config.model.startswith("synthetic/"):
            out["notice"] = TESTBED_NOTICE
        store.finish_run(run_id, "done", out)
        return out
    except KeyboardInterrupt as e:
        _mark(e, "evolve", run_id, "interrupted")
        raise
    finally:
        if pool is not None:
            pool.shutdown()
        if lease is not None:
            lease.release()


def held_out_comparison(
    store: Any, pool: Any, run_id: str, family: str, model: str, baseline_id: str, evolved_id: str, *, repeats: int, seed: int
) -> dict[str, Any]:
    """Baseline vs evolved harness on the whole test split (never used for acceptance), `repeats` seeds
    each: pass@1 with 95% intervals and the paired gain with its interval."""
    from coevolve.analysis.stats import paired_difference
    from coevolve.services.pools.rollouts import RolloutJob
    from coevolve.tasks import get_family

    instances = get_family(family).generate("test")
    rates = {}
    tau2 = {}
    for label, hid in (("baseline", baseline_id), ("evolved", evolved_id)):
        h = store.get_harness(hid)
        jobs = [RolloutJob(i, h, model, seed + r) for r in range(repeats) for i in instances]
        trajs = pool.run(jobs)
        store.put_trajectories(run_id, trajs, batch=f"test-{label}")
        rates[label] = pass_rate(trajs)
        if (block := tau2_block(family, trajs, "test", repeats)) is not None:
            tau2[label] = block
    gain, ci = paired_difference(rates["baseline"], rates["evolved"])
    return {**({"tau2": tau2} if tau2 else {}),
        "split": "test",
        "instances": len(instances),
        "repeats": repeats,
        "baseline": {k: v for k, v in rates["baseline"].as_json().items() if k != "per_instance"},
        "evolved": {k: v for k, v in rates["evolved"].as_json().items() if k != "per_instance"},
        "gain": round(gain, 4),
        "gain_ci95": [round(ci[0], 4), round(ci[1], 4)],
    }


def accepted_edits(store: Any, harness_id: str) -> list[Any]:
    return [r.edit for r in store.lineage(harness_id) if r.edit is not None]


def usage_report(
    store: Any, pool: Any, harness_id: str, family: str, models: list[str], split: str, n: int, seed: int,
    trajectories: dict[str, list[Any]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per model, the usage rate of every accepted edit on the harness's lineage."""
    from coevolve.analysis.usage import edit_usage
    from coevolve.services.pools.rollouts import RolloutJob
    from coevolve.tasks import get_family

    edits = accepted_edits(store, harness_id)
    if not edits:
        return {m: [] for m in models}
    h = store.get_harness(harness_id)
    out = {}
    for m in models:
        trajs = (trajectories or {}).get(m)
        if trajs is None:
            insts = get_family(family).generate(split, n)
            trajs = pool.run([RolloutJob(i, h, m, seed) for i in insts])
        out[m] = edit_usage(edits, trajs)
    return out


# ---------------------------------------------------------------------------------------- transfer
def run_transfer(
    store_path: Path, families: list[str], harness_ref: str, models: list[str], split: str, n: int, seed: int,
    address: str | None, workers: int, progress: bool,
) -> list[dict[str, Any]]:
    """Weak vs expert under baseline vs evolved harness, one row per (family, model), plus edit usage."""
    from coevolve.analysis.summary import summarise
    from coevolve.analysis.tau2 import verdict
    from coevolve.services.pools.rollouts import RolloutJob, RolloutPool
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family

    check_workers(workers, address)
    check_seed(seed)
    use_store(store_path)
    store = HarnessStore(store_path, create=False)
    plan = []
    for fam in families:
        evolved = store.resolve_harness(harness_ref, fam)
        baseline = get_family(fam).baseline_harness()
        plan.append((fam, baseline, evolved, get_family(fam).generate(split, n, seed=0)))
    for m in models:
        validate_model(m)
    pool = None
    run_id = None
    rows = []
    try:
        _start_ray(address)
        pool = RolloutPool(workers)
        run_id = store.create_run("transfer", {"families": families, "harness": harness_ref, "models": models,
                                                "split": split, "n": n, "seed": seed})
        for fam, baseline, evolved, insts in plan:
            evolved_trajs = {}
            for m in models:
                res = {}
                blocks: dict[str, Any] = {}
                for label, h in (("baseline", baseline), ("evolved", evolved)):
                    trajs = pool.run([RolloutJob(i, h, m, seed) for i in insts], progress=progress,
                                     description=f"{fam} {m} {label}")
                    store.put_trajectories(run_id, trajs, batch=f"{fam}-{m}-{label}")
                    res[label] = summarise(trajs, split=split, seed=seed).pass_rate
                    blocks[label] = tau2_block(fam, trajs, split, 1)
                    if label == "evolved":
                        evolved_trajs[m] = trajs
                rows.append({"family": fam, "model": m, "baseline": round(res["baseline"], 4),
                             "evolved": round(res["evolved"], 4), "gain": round(res["evolved"] - res["baseline"], 4),
                             "harness_id": evolved.id})
                if (note := verdict(list(blocks.values()))) is not None:
                    rows[-1]["tau2_note"] = note
            usage = usage_report(store, pool, evolved.id, fam, models, split, n, seed, trajectories=evolved_trajs)
            for r in rows:
                if r["family"] == fam:
                    r["usage"] = usage[r["model"]]
        store.finish_run(run_id, "done", {"rows": rows})
    except KeyboardInterrupt as e:
        _mark(e, "transfer", run_id, "interrupted")
        if run_id is not None:
            store.finish_run(run_id, "interrupted", {"rows": rows, "error": "interrupted"})
        raise
    finally:
        if pool is not None:
            pool.shutdown()
    return rows
