"""CLI commands that look after the store: `store check` and `runs list|show` (registered on the main app).

    coevolve store check [--store DIR] [--repair] [--json]   # exit 0 sound, 1 problems remain
    coevolve runs list [--store DIR] [--kind K] [--status S] [--json]
    coevolve runs show RUN_ID [--store DIR] [--json]

Bad input (no store, an unreadable one, an unknown run) gives one `error:` line and exit status 2.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer

from coevolve.cli.options import DEFAULT_STORE, JsonOpt, StoreOpt, cli_errors, echo_json, open_store

store_app = typer.Typer(no_args_is_help=True, help="Check and repair the store.")
runs_app = typer.Typer(no_args_is_help=True, help="List and inspect runs.")


def _print(renderable: Any) -> None:
    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 200).print(renderable)


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


# ------------------------------------------------------------------------------------------ store
@store_app.command("check")
@cli_errors
def store_check(
    store: StoreOpt = DEFAULT_STORE,
    repair: Annotated[bool, typer.Option("--repair", help="mark runs of dead processes interrupted, delete "
                                         "leftover temp files, quarantine corrupt objects")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Verify every object, record, lineage edge, adapter and run owner; exit 1 if problems remain."""
    from coevolve.store.store import PROBLEM_KINDS

    report = open_store(store, create=False).check(repair=repair)
    if as_json:
        echo_json(report.as_json())
    else:
        checked = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in report.checked.items())
        typer.echo(f"store {report.root}: checked {checked}")
        by_kind = report.by_kind()
        if not by_kind:
            typer.echo("no problems")
        for kind, n in by_kind.items():
            fixed = f", {n['repaired']} repaired" if n["repaired"] else ""
            typer.echo(f"{kind}: {n['found']} found{fixed} ({PROBLEM_KINDS.get(kind, '')})")
        for p in report.problems[:50]:
            mark = "repaired" if p.repaired else "PROBLEM"
            typer.echo(f"  {mark:8} {p.kind:16} {p.subject}: {p.detail}")
        if len(report.problems) > 50:
            typer.echo(f"  ... {len(report.problems) - 50} more (--json lists all)")
        if report.remaining:
            hint = "" if repair else "; --repair fixes what can be fixed"
            typer.echo(f"{len(report.remaining)} problems remain{hint}")
        elif report.problems:
            typer.echo("all problems repaired")
    if not report.ok:
        raise typer.Exit(1)


# ------------------------------------------------------------------------------------------- runs
def _status(run: Any) -> str:
    if run.status == "running" and run.owner_alive() is False:
        return "running (owner gone)"
    return run.status


def _run_json(run: Any) -> dict[str, Any]:
    fields = ("run_id", "kind", "status", "created", "updated", "finished", "pid", "host", "claimed")
    return {**{f: getattr(run, f) for f in fields}, "owner_alive": run.owner_alive()}


@runs_app.command("list")
@cli_errors
def runs_list(
    store: StoreOpt = DEFAULT_STORE,
    kind: Annotated[str | None, typer.Option("--kind", help="only runs of this kind (eval, evolve, ...)")] = None,
    status: Annotated[str | None, typer.Option("--status", help="only runs with this stored status")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The runs in the store, oldest first."""
    runs = open_store(store, create=False).list_runs(kind, status)
    if as_json:
        echo_json([_run_json(r) for r in runs])
        return
    from rich.table import Table

    t = Table("run", "kind", "status", "created", "updated", "pid@host", title=f"runs ({len(runs)})")
    for r in runs:
        owner = "-" if r.pid is None else f"{r.pid}@{r.host}"
        t.add_row(r.run_id, r.kind, _status(r), _when(r.created), _when(r.updated), owner)
    _print(t)


@runs_app.command("show")
@cli_errors
def runs_show(
    run_id: Annotated[str, typer.Argument(help="the run id (from `coevolve runs list`)")],
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """One run: its record, owner, config, result, trajectory batches and events."""
    s = open_store(store, create=False)
    run = s.get_run(run_id)
    batches = s.trajectory_batches(run_id)
    events = s.events(run_id)
    info = {
        **_run_json(run),
        "config": run.config,
        "result": run.result,
        "trajectory_batches": [{"batch": b, "blob": d, "count": n} for b, d, n in batches],
        "events": len(events),
        "last_event": None if not events else {"kind": events[-1].kind, "created": events[-1].created},
    }
    if as_json:
        echo_json(info)
        return
    alive = {True: "alive", False: "gone", None: "on another host"}[run.owner_alive()]
    owner = (
        "-"
        if run.pid is None
        else f"pid {run.pid} on {run.host} ({alive}{', lease held' if run.claimed else ''})"
    )
    lines = [
        ("run", run.run_id),
        ("kind", run.kind),
        ("status", _status(run)),
        ("created", _when(run.created)),
        ("updated", _when(run.updated)),
        ("finished", _when(run.finished)),
        ("owner", owner),
        ("config", json.dumps(run.config, sort_keys=True)),
        ("result", json.dumps(run.result, sort_keys=True, default=str)),
        ("batches", ", ".join(f"{b} ({n})" for b, _, n in batches) or "-"),
        ("events", f"{len(events)}" + (f" (last: {events[-1].kind} at {_when(events[-1].created)})"
                                       if events else "")),
    ]
    for k, v in lines:
        typer.echo(f"{k:9} {v}")


def register(app: typer.Typer) -> None:
    """Add `store` and `runs` to the main CLI (coevolve/cli/app.py calls this)."""
    app.add_typer(store_app, name="store")
    app.add_typer(runs_app, name="runs")


if __name__ == "__main__":  # `python -m coevolve.cli.store ...`
    _app = typer.Typer(no_args_is_help=True)
    register(_app)
    _app()
