"""The main job, `coevolve run`: its profile read and checked (or a stopped, failed or orphaned run's own
profile, with corrections of the fields no finished cell depends on), the run recorded, the local Ray
head and the run's meta-agent actor (`jobs.meta_agent`) started. Every check comes before the first
write: a bad profile, override, model, address or server leaves no store behind. The CLI follows the
actor it returns."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.errors import BadInput

STOPPED = "stop requested"  # the stop reason of a run ended by `coevolve stop`: it can be resumed


@dataclass(frozen=True)
class Plan:
    """What `coevolve run` would start: the profile, and the run it resumes (None: a new run)."""

    profile: Any  # coevolve.config.RunProfile
    resume: str | None = None
    was: str | None = None  # the resumed run's status


@dataclass(frozen=True)
class Started:
    run_id: str
    address: str
    actor: Any  # the meta-agent's actor handle
    local_head: bool  # the run's Ray is the store's local head (not a cluster the profile names)


def plan_run(store: Path, config: str | None, overrides: list[str], resume: str | None, *, served: bool = True) -> Plan:
    """The profile a run would use, every input checked (the `vllm/` models' server only when `served`);
    writes nothing (BadInput, one line)."""
    from coevolve.cluster.runtime import check_reachable, check_token
    from coevolve.config import load_profile
    from coevolve.jobs import use_store, validate_model
    from coevolve.store.store import HarnessStore, is_fresh_store_dir
    from coevolve.values import ModelRef

    use_store(store)
    existing = None if is_fresh_store_dir(store) else HarnessStore(store, create=False)  # unreadable store: fails here
    was = None
    if resume is not None:
        if not resume.strip():
            raise BadInput("--resume needs a run id (coevolve runs list --kind coevolve shows them)")
        if existing is None:
            raise BadInput(f"cannot resume {resume!r}: store {store} does not exist")
        if config:
            raise BadInput("--resume continues a run with its own profile: give no profile, only key=value corrections")
        run = existing.get_run(resume)
        if run.kind != "coevolve":
            raise BadInput(f"run {resume!r} is a {run.kind} run, not a coevolve run")
        if run.status == "done" and (run.result or {}).get("stop_reason") != STOPPED:
            raise BadInput(f"run {resume!r} is done; start a new run instead")
        profile, was = resumed_profile(run.config, overrides, resume), run.status
    else:
        profile = load_profile(config, overrides)
        for m in (profile.weak.model, profile.expert.model, profile.judge.model, profile.proposer):
            if m.startswith("vllm/"):  # served by the run's own serve config: its form and adapter id checked here
                ModelRef.parse(m)
            else:
                validate_model(m)
    if profile.address:
        check_token(profile.address)
        check_reachable(profile.address)
    if served:
        check_served(profile, store)
    return Plan(profile, resume, was)


def resumed_profile(config: dict[str, Any], overrides: list[str], run_id: str) -> Any:
    """The profile a resumed run continues with: its own, with `key=value` corrections of the fields that
    no finished cell depends on (`RESUMABLE`); any other field is refused (BadInput)."""
    from coevolve.config import RESUMABLE, RunProfile, validated

    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if not any(key == f or key.startswith(f + ".") for f in RESUMABLE):
            raise BadInput(f"--resume cannot change {key!r}: finished cells depend on it (a resumed run may "
                           f"change {', '.join(RESUMABLE)})")
    return validated(RunProfile, dict(config), overrides, "profile", f"run {run_id}")


def check_served(profile: Any, store: Path) -> None:
    """A profile whose roles call `vllm/` models needs their server up before the run starts: refused
    (BadInput naming the command that starts it) when none is known for the store or it does not answer,
    so no run ends "done" with every rollout an infra failure."""
    served = [m for m in (profile.weak.model, profile.expert.model, profile.judge.model, profile.proposer) if m.startswith("vllm/")]
    if not served:
        return
    import urllib.request

    from coevolve.services.serving.app import ServingError, serve_url

    start = f"coevolve serve --config {profile.serve.config or 'deploy/serve/<config>.yaml'} --store {store}"
    try:
        url = serve_url(store)
    except ServingError:
        raise BadInput(f"{served[0]} needs a vLLM server and none is known for store {store}: start it first "
                       f"({start}) or set COEVOLVE_SERVE_URL") from None
    try:
        urllib.request.urlopen(f"{url}/v1/models", timeout=3).close()  # the server the store or environment names
    except (OSError, ValueError) as e:
        raise BadInput(f"the vLLM server {url} that {served[0]} needs does not answer ({e}): start it ({start})") from None


def start_run(plan: Plan, store: Path, overrides: list[str]) -> Started:
    """Record the run (or its resumption) and start its meta-agent on the store's local head or the
    profile's cluster; a resumed run's earlier meta-agent, if it is still there but not at work, goes."""
    from coevolve.cluster.head import ensure_local_head
    from coevolve.cluster.runtime import start_ray
    from coevolve.jobs import meta_agent
    from coevolve.store.store import HarnessStore

    profile, run_id = plan.profile, plan.resume
    st = HarnessStore(store, create=True)
    if run_id is not None:
        # a resume event: stop requests before it are answered; the run is pending again, so the head's keeper
        # keeps the head up for the meta-agent that takes it over
        st.append_event(run_id, "resume", {"overrides": list(overrides), "was": plan.was})
        if overrides:
            st.update_run(run_id, config=profile.model_dump())
    else:
        run_id = st.create_run("coevolve", profile.model_dump())
    st.update_run(run_id, status="pending")  # the meta-agent actor, not this client, owns the run
    address = profile.address or ensure_local_head(store, run_id)[0]
    start_ray(address, log_to_driver=False)
    actor = meta_agent.find(run_id)
    if actor is not None and plan.resume is not None and not meta_agent.at_work(actor):
        import ray

        ray.kill(actor)  # the meta-agent of the run's failed or stopped attempt: a new one takes the run over
        deadline = time.monotonic() + 30
        while meta_agent.find(run_id) is not None and time.monotonic() < deadline:  # its name is free once it is gone
            time.sleep(0.2)
        actor = None
    if actor is None:
        actor = meta_agent.launch(profile.model_dump(), str(Path(store).resolve()), run_id)
    return Started(run_id, address, actor, local_head=not profile.address)
