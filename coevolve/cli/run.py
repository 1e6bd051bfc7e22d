"""The main job: `coevolve run`, and `status`, `stop`, `monitor` to watch and steer it from anywhere."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from coevolve.cli.options import DEFAULT_STORE, JsonOpt, StoreOpt, UsageError, cli_errors, echo_json

TERMINAL = ("done", "failed", "refused")
FINISHED = ("done", "failed")  # stored statuses of a run that has ended (a stop has nothing to stop)
PATIENCE = 5  # status polls (30 s each) a busy meta-agent may leave unanswered before the client gives up on it


def _connect(address: str | None, store: Path) -> str:
    """Attach to the run's Ray: an explicit address, else the store's local head."""
    from coevolve.cluster.head import read_head
    from coevolve.cluster.runtime import check_reachable, check_token, start_ray

    if address in (None, "local"):
        head = read_head(store)
        if head is None:
            raise UsageError(f"no local Ray head is running for store {store} (start a run, or pass --address)")
        address = head["address"]
    check_token(address)
    check_reachable(address)  # seconds, not Ray's minute of retries
    start_ray(address, log_to_driver=False)
    return address


def _latest_run(store: Path, run_id: str | None) -> str:
    from coevolve.store.store import HarnessStore

    if run_id:
        return run_id
    runs = HarnessStore(store, create=False).list_runs("coevolve")
    if not runs:
        raise UsageError(f"no coevolve run in store {store}")
    return max(runs, key=lambda r: r.created).run_id


def run_cmd(
    config: Annotated[str | None, typer.Argument(help="profile name (local, cpu, gpu-cluster) or YAML path")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides, e.g. budget.cycles=1 families='\\[iot]'")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="continue a run from the store")] = None,
    detach: Annotated[bool, typer.Option("--detach", help="start the run and return; watch it with monitor/status")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="check the profile and print it as the run would use it; start"
                                          " nothing (a vllm/ model's server is not asked)")] = False,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Co-evolve harness and weights: the meta-agent (a detached Ray actor) runs cycles until budgets or a plateau.

    With no argument: the embedded default (profile `local`): local Ray, synthetic models for every role,
    all seven families at small sizes, ending with the report. Ctrl-C detaches; the run goes on."""
    from coevolve.cluster.head import stop_head_if_idle
    from coevolve.jobs.run import plan_run, start_run

    if config and "=" in config:  # `coevolve run key=value` without a profile
        overrides, config = [config, *(overrides or [])], None
    plan = plan_run(store, config, list(overrides or ()), resume, served=not dry_run)
    if dry_run:
        _say(as_json, {"resume": plan.resume, "profile": plan.profile.model_dump()},
             yaml_text(plan.profile.model_dump()) + ("" if plan.resume is None else f"(resumes {plan.resume})"))
        return
    started = start_run(plan, store, list(overrides or ()))
    run_id = started.run_id
    if detach:
        _say(as_json, {"run_id": run_id, "address": started.address, "detached": True},
             f"run {run_id} started on {started.address}; watch: coevolve monitor --store {store} | coevolve status {run_id}")
        return
    try:
        final = _follow(started.actor, run_id, store, quiet=as_json)
    except KeyboardInterrupt:
        typer.echo(f"detached from run {run_id}: it keeps running (coevolve status {run_id} | coevolve monitor | "
                   f"coevolve stop {run_id})", err=True)
        raise typer.Exit(130) from None
    if started.local_head and final.get("stage") in TERMINAL:
        import ray

        ray.shutdown()
        stop_head_if_idle(store)  # its other runs, if any, keep it up; their end (or the head's keeper) stops it
    if as_json:
        echo_json(final)
    else:
        _print_final(final)
    if final.get("stage") != "done":  # with --json too: a script sees a failed run by its exit status
        raise typer.Exit(1)


def yaml_text(data: dict[str, Any]) -> str:
    """A profile as YAML, in its fields' order."""
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _follow(actor: Any, run_id: str, store: Path, quiet: bool) -> dict[str, Any]:
    """The run's status until it ends. When the meta-agent cannot be reached (gone, or not answering
    `PATIENCE` polls in a row), the store decides: a run it records as ended is reported as it ended (the
    keeper may end the head between the run's last write and this client's next poll)."""
    import ray
    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=True)
    status: dict[str, Any] = {}
    silent = 0
    with Live(console=console, refresh_per_second=2, transient=False, auto_refresh=not quiet) as live:
        while True:
            try:
                status = ray.get(actor.status.remote(), timeout=30)
                silent = 0
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
                stored = _stored_end(store, run_id)
                if stored is not None:
                    return stored
                silent += 1
                if isinstance(e, ray.exceptions.GetTimeoutError) and silent < PATIENCE:
                    continue
                return {"run_id": run_id, "stage": "failed",
                        "error": f"the meta-agent is gone ({type(e).__name__}); resume: coevolve run --resume {run_id}"}
            if not quiet:
                live.update(_panel(status))
            if status.get("stage") in TERMINAL:
                return status
            time.sleep(1.0)


def _stored_end(store: Path, run_id: str) -> dict[str, Any] | None:
    """The run as the store records its end (its status and result), or None while it has not ended."""
    from coevolve.store.store import HarnessStore

    rec = HarnessStore(store, create=False).get_run(run_id)
    if rec.status not in FINISHED:
        return None
    error = {"error": (rec.result or {}).get("error", "")} if rec.status == "failed" else {}
    return {"run_id": run_id, "stage": rec.status, "result": rec.result, "alive": False, **error}


def _panel(s: dict[str, Any]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(f"coevolve run {s.get('run_id', '')}"), show_header=False)
    spend, budget, work = s.get("spend") or {}, s.get("budget") or {}, s.get("work") or {}
    t.add_row("stage", escape(str(s.get("stage"))))
    for name, f in (s.get("families") or {}).items():  # the families run at once: where each one is
        t.add_row(escape(name), escape(f"cycle {f.get('cycle', '-')}, {str(f.get('stage', '-')).split(':')[0]}; harness "
                                       f"{str(f.get('harness_id') or '-')[:12]} / adapter {f.get('adapter') or '-'}"))
    t.add_row("work", f"{work.get('rollouts', 0)} rollouts, {work.get('in_flight', 0)} in flight, {work.get('rollouts_per_s', 0)}/s")
    t.add_row("spend", f"{spend.get('rollouts', 0)}/{budget.get('rollouts', '-')} rollouts, ${spend.get('usd', 0)}/{budget.get('usd', '-')}, "
                       f"{spend.get('seconds', 0)}s/{budget.get('seconds', '-')}s")
    return t


def _print_final(s: dict[str, Any]) -> None:
    from coevolve.cli.display import console, escape, print_testbed_notice

    result = s.get("result") or {}
    console.print(escape(f"run {s.get('run_id')}: {s.get('stage')} ({result.get('stop_reason', s.get('error', ''))})"))
    for family, f in (result.get("families") or {}).items():
        test = f.get("test", {})
        cells = ", ".join(f"{k} {v['pass_at_1']:.1%} [{v['ci95'][0]:.0%}, {v['ci95'][1]:.0%}]" for k, v in test.items())
        console.print(escape(f"  {family}: {cells}; gain {f['gain'] * 100:+.1f} pts; adapter {f.get('adapter') or '-'}"))
        for line in f.get("release_guard", ()):  # why each cycle's harness was or was not released
            console.print(escape(f"    {line}"), style="dim", highlight=False)
    if result.get("report"):
        console.print(escape(f"report: {result['report']['html']}"))
    print_testbed_notice()
    if s.get("train_backend") == "synthetic" and any(f.get("adapter") for f in (result.get("families") or {}).values()):
        from coevolve.analysis.summary import SYNTHETIC_ADAPTER_RULES

        console.print(f"[dim]note: {SYNTHETIC_ADAPTER_RULES}[/dim]")


def _say(as_json: bool, obj: dict[str, Any], text: str) -> None:
    echo_json(obj) if as_json else typer.echo(text)


def status_cmd(
    run_id: Annotated[str | None, typer.Argument(help="run id (default: the latest coevolve run)")] = None,
    address: Annotated[str | None, typer.Option("--address", help="Ray address (default: the store's local head)")] = None,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """A run's stage, progress and spend: from its meta-agent when alive, else from the store."""
    from coevolve.cluster.runtime import RayUnreachableError
    from coevolve.jobs import meta_agent
    from coevolve.store.store import HarnessStore

    run_id = _latest_run(store, run_id)
    rec = HarnessStore(store, create=False).get_run(run_id)
    status: dict[str, Any] = {"run_id": run_id, "stored_status": rec.status}
    try:
        _connect(address, store)
        actor = meta_agent.find(run_id)
    except RayUnreachableError:
        if address not in (None, "local"):  # the address the user gave is wrong: say so
            raise
        actor = None  # the store's head is gone: what the store knows
    except (UsageError, ConnectionError, RuntimeError):
        actor = None
    if actor is not None:
        import ray

        status.update(ray.get(actor.status.remote(), timeout=30))
    else:
        status.update({"stage": rec.status, "result": rec.result, "alive": False})
    if as_json:
        echo_json(status)
        return
    if actor is None and status["stage"] in TERMINAL:  # a finished run: its result, not live counters
        _print_final(status)
        return
    from coevolve.cli.display import console

    console.print(_panel(status))


def stop_cmd(
    run_id: Annotated[str, typer.Argument(help="the run to stop at its next safe point")],
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Stop a run at its next safe point (between steps; a resumed run continues from there). The request
    is written in the store, where the run's meta-agent looks for it, so no Ray address is needed."""
    from coevolve.store.store import HarnessStore

    st = HarnessStore(store, create=False)
    run = st.get_run(run_id)
    if run.kind != "coevolve":
        raise UsageError(f"run {run_id!r} ({run.kind}) has no safe point to stop at: only a coevolve run has "
                         "(interrupt its command instead)")
    if run.status in FINISHED:
        raise UsageError(f"run {run_id!r} has already ended ({run.status}): there is nothing to stop")
    if st.events(run_id, "stop"):
        raise UsageError(f"a stop was already requested for {run_id}: it stops at its next safe point")
    st.append_event(run_id, "stop", {"at": time.time(), "by": "coevolve stop"})
    typer.echo(f"stop requested for {run_id}: it stops at its next safe point")


def monitor_cmd(
    address: Annotated[str | None, typer.Option("--address", help="auto | ray://HOST:PORT | HOST:PORT (default: the store's local head)")] = None,
    run_id: Annotated[str | None, typer.Option("--run", help="the run to follow (default: every live run)")] = None,
    interval: Annotated[float, typer.Option("--interval")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="print one snapshot and exit")] = False,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """A live table of the cluster's actors by role and of each run's stage, progress and spend."""
    from rich.console import Console, Group
    from rich.live import Live

    _connect(address, store)
    console = Console()
    if once:
        console.print(Group(*_snapshot(run_id)))
        return
    try:
        with Live(console=console, refresh_per_second=1) as live:
            while True:
                live.update(Group(*_snapshot(run_id)))
                time.sleep(interval)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


ROLE_OF_CLASS = {"MetaAgent": "meta-agent", "RolloutWorker": "executor", "RoleWorker": "judge/expert",
                 "RayTrainWorker": "trainer", "TrainController": "trainer"}


def _snapshot(run_id: str | None) -> list[Any]:
    import ray
    from rich.markup import escape
    from rich.table import Table

    from coevolve.jobs import meta_agent

    actors = ray._private.state.actors()  # the GCS's actor table: works without the dashboard
    runs = [run_id] if run_id else [n[len("meta-"):] for n in (a.get("Name") or "" for a in actors.values()
                                                             if a.get("State") != "DEAD") if n.startswith("meta-")]
    statuses = []
    for rid in runs:
        actor = meta_agent.find(rid)
        if actor is None:
            continue
        try:
            statuses.append(ray.get(actor.status.remote(), timeout=10))
        except (ray.exceptions.RayError, TimeoutError) as e:  # a dying actor: show what is known
            statuses.append({"run_id": rid, "stage": f"unreachable ({type(e).__name__})"})
    work = {aid: w for st in statuses for pool in (st.get("pools") or {}).values() for aid, w in pool.get("actors", {}).items()}
    rows = []
    for a in actors.values():
        cls = (a.get("ActorClassName") or "").split(".")[-1]
        name = a.get("Name") or ""
        role = ROLE_OF_CLASS.get(cls) or ("serve" if "Serve" in cls or "LLMServer" in cls else None)
        if role == "judge/expert":
            role = "judge" if name.startswith("judge") else "expert" if name.startswith("expert") else role
        if role is None or a.get("State") == "DEAD":
            continue
        w = work.get(a.get("ActorID", ""), {})  # what the run's pools sent it (none for other actors)
        rows.append((role, name or a.get("ActorID", "")[:12], a.get("State", "?"), a.get("NumRestarts", 0),
                     w.get("in_flight", "-"), w.get("done", "-"), w.get("per_s", "-"),
                     (a.get("Address") or {}).get("NodeID", "")[:8], a.get("Pid", "")))
    t = Table(title="actors by role")
    t.add_column("role", no_wrap=True, min_width=max((len(r[0]) for r in rows), default=4))  # never cut: narrow terminals cut others
    for col in ("actor", "state", "restarts", "in flight", "done", "calls/s", "node", "pid"):
        t.add_column(col, overflow="fold" if col in ("actor", "node") else "ellipsis")  # an id folds onto more lines, never cut
    for r in sorted(rows, key=lambda r: (r[0], r[1])):
        t.add_row(*(escape(str(x)) for x in r))
    out: list[Any] = [t]
    for status in statuses:
        out.append(_panel(status))
        pools = status.get("pools") or {}
        if pools:
            p = Table("pool", "actors", "in flight", "queued", "replacements", title="pools")
            for name, v in pools.items():
                in_flight = sum(w["in_flight"] for w in v.get("actors", {}).values())
                p.add_row(escape(name), str(len(v.get("actors", {}))), str(in_flight), str(v.get("queued", 0)), str(v["replacements"]))
            out.append(p)
    return out


def register(app: typer.Typer) -> None:
    app.command("run")(cli_errors(run_cmd))
    app.command("status")(cli_errors(status_cmd))
    app.command("stop")(cli_errors(stop_cmd))
    app.command("monitor")(cli_errors(monitor_cmd))

