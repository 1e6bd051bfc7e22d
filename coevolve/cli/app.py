"""The `coevolve` command line.

Every command that runs or stores takes `--seed` and `--store`. Bad input (unknown family, model or
harness; n out of range; an unreadable store) prints one `error:` line, exits with status 2 and writes
nothing: all input is checked before the first write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from coevolve import defaults
from coevolve.cli.options import (
    DEFAULT_STORE,
    MAX_CANDIDATES,
    MAX_SCREEN,
    JsonOpt,
    LogJsonOpt,
    OneLineUsageErrors,
    SeedOpt,
    StoreOpt,
    UsageError,
    check_resume,
    cli_errors,
    echo_json,
    open_store,
    say_error,
)

app = typer.Typer(
    cls=OneLineUsageErrors, add_completion=False, no_args_is_help=True, help="Co-evolve an agent harness and its weights."
)
harness_app = typer.Typer(no_args_is_help=True, help="Inspect stored harnesses.")
tasks_app = typer.Typer(no_args_is_help=True, help="Inspect the task families.")
app.add_typer(harness_app, name="harness")
app.add_typer(tasks_app, name="tasks")

@app.callback()
def _setup() -> None:
    """Logs go to stderr for every command (commands with --log-json reconfigure)."""
    from coevolve.services.logs import configure_logging

    configure_logging()


def _stopped(
    e: BaseException, store: Path, log_json: bool, progress: dict[str, Any] | None = None, *, after_live: bool = False
) -> typer.Exit:
    """SIGINT/SIGTERM during eval/evolve/transfer: one line saying where the run stopped and how to go on
    (coevolve.jobs marks the run interrupted); the exit status is 128 + the signal (130, 143)."""
    from coevolve.jobs import interruption

    intr = interruption(e)
    sig = intr.args[0] if intr and intr.args else "SIGINT"
    code = intr.exit_code if intr else 130
    kind, run_id = (intr.kind, intr.run_id) if intr else (None, None)
    store_opt = "" if store == DEFAULT_STORE else f" --store {store}"
    fields: dict[str, Any] = {"event": "interrupted", "level": "warning", "signal": sig, "exit_code": code,
                              "kind": kind, "run_id": run_id}
    if kind == "evolve" and run_id:
        where = ""
        if progress:
            where = f" in iteration {progress.get('iteration')} after {progress.get('rollouts')} rollouts"
        resume = f"coevolve evolve --resume {run_id}{store_opt}"
        fields["resume"] = resume
        line = f"interrupted ({sig}): evolve run {run_id} stopped{where}; continue it with: {resume}"
    elif run_id:
        done = [r for r, st in (intr.runs if intr else {}).items() if st == "done"]
        kept = f"; finished runs kept: {', '.join(done)}" if done else ""
        again = ("run the same command again to finish it (the rollouts it stored are reused)" if kind == "eval"
                 else "run the same command again to redo it")
        line = f"interrupted ({sig}): {kind} run {run_id} is recorded as interrupted{kept}; {again}"
    else:
        line = f"interrupted ({sig}) before any run started: nothing was recorded"
    if after_live and not sys.stderr.isatty():
        typer.echo("", err=True)  # rich ends a live display's last line only on a terminal
    say_error(line, log_json, **fields)
    return typer.Exit(code)


# --------------------------------------------------------------------------------------------- eval
@app.command("eval")
@cli_errors
def eval_cmd(
    family: Annotated[str, typer.Option("--family", help="task family, or 'all'")] = "iot",
    split: Annotated[str, typer.Option("--split", help="train, val or test; base: tau2's leaderboard set (tau2 families only)")] = "val",
    n: Annotated[int, typer.Option("--n", help="instances per family")] = 50,
    harness: Annotated[str, typer.Option("--harness", help="harness id, prefix, alias or 'baseline'")] = "baseline",
    model: Annotated[str, typer.Option("--model", help="provider/model\\[@adapter], or several, comma-separated")] = "synthetic/weak",
    reference: Annotated[bool, typer.Option("--reference", help="also score the reference solver")] = False,
    repeats: Annotated[int, typer.Option("--repeats", help="rollouts per instance (seeds seed..seed+K-1)")] = 1,
    params: Annotated[str, typer.Option("--params", help="family parameters, e.g. size=0,difficulty=1 (the small-model level)")] = "",
    workers: Annotated[int, typer.Option("--workers", help="rollout actors")] = 2,
    max_in_flight: Annotated[int | None, typer.Option("--max-in-flight", help="rollouts at once (default: all); a small server's batch size keeps its queue short")] = None,
    address: Annotated[str | None, typer.Option("--address", help="attach to a Ray cluster")] = None,
    seed: SeedOpt = 0,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
    log_json: LogJsonOpt = False,
) -> None:
    """Evaluate models under a harness on a split; store trajectories and results.

    One family and one model print one table row (`--json`: one object); several families (`--family
    all`) or models print one row per (family, model) and a family x model pass-rate table (`--json`: a
    list of objects). `--repeats K` runs every instance K times and reports pass@1 with a 95% interval
    and each instance's pass count, and pass^k for k up to K (fewer when infra failures left an instance
    fewer scored runs: `pass_hat_k_cap`). A tau2 family's eval also reports tau2's numbers (`tau2`:
    reward, pass^k, answered_customer, data version) and whether they are comparable with tau2's
    leaderboard (`--split base` under tau2's protocol and LLM user), naming each reason they are not."""
    from coevolve.jobs import EvalRequest, parse_params, reference_result, run_eval, validate_eval
    from coevolve.services.logs import configure_logging

    configure_logging(json_lines=log_json or None)
    models = tuple(m.strip() for m in model.split(",") if m.strip())
    req = EvalRequest(family, split, n, harness, models, workers, seed, address, reference, repeats, parse_params(params), max_in_flight)
    plan = validate_eval(req, store)  # raises on bad input; writes nothing
    from coevolve.jobs import stop_on_signals

    try:
        with stop_on_signals():
            refs = [reference_result(f, plan.instances[f], split) for f in plan.families] if reference else []
            results = run_eval(plan, progress=not (as_json or log_json))  # --log-json: stderr is JSON only
    except KeyboardInterrupt as e:
        raise _stopped(e, store, log_json) from None
    rows = refs + [r.as_json() for r in results]
    if as_json:
        echo_json(rows[0] if len(rows) == 1 else rows)
        return
    from coevolve.cli.display import eval_table, suite_table

    eval_table(results)
    if len(rows) > 1:
        suite_table(rows)


# ------------------------------------------------------------------------------------------- evolve
@app.command("evolve")
@cli_errors
def evolve_cmd(
    family: Annotated[str, typer.Option("--family")] = "iot",
    model: Annotated[str, typer.Option("--model", help="the weak model the harness is evolved for")] = "synthetic/weak",
    proposer: Annotated[str, typer.Option("--proposer", help="expert model that proposes edits")] = "synthetic/meta",
    budget_rollouts: Annotated[int, typer.Option("--budget-rollouts")] = defaults.ROLLOUTS,
    budget_iterations: Annotated[int, typer.Option("--budget-iterations", help="steps (race) or iterations (loop) at most")] = defaults.ITERATIONS,
    budget_tokens: Annotated[int, typer.Option("--budget-tokens", help="proposer tokens")] = 2_000_000,
    budget_usd: Annotated[float, typer.Option("--budget-usd")] = 25.0,
    budget_seconds: Annotated[float, typer.Option("--budget-seconds")] = 4 * 3600.0,
    train_batch: Annotated[int, typer.Option("--train-batch")] = defaults.TRAIN_BATCH,
    val_n: Annotated[int, typer.Option("--val-n", help="val instances the search compares on (race: the rest of the val split is the release guard's)")] = defaults.VAL_N,
    search: Annotated[str, typer.Option("--search", help="race: pool, racing and guarded release; loop: the paired sign-test loop")] = "race",
    candidates: Annotated[int, typer.Option("--candidates", help="edits proposed per iteration")] = defaults.CANDIDATES,
    rule: Annotated[str, typer.Option("--rule", help="acceptance rule: sign or bootstrap")] = "sign",
    alpha: Annotated[float, typer.Option("--alpha")] = defaults.ALPHA,
    plateau: Annotated[int, typer.Option("--plateau", help="N iterations without a gain make a plateau (see --on-plateau)")] = 3,
    on_plateau: Annotated[str, typer.Option("--on-plateau", help="at a plateau: stop, or continue with fresh train batches until a budget ends the run")] = "stop",
    screen: Annotated[int, typer.Option("--screen", help=f"0..{MAX_SCREEN}: a candidate reaches val only if it passes one of the first N train failures it was proposed from (GEPA's minibatch gate; 0: off)")] = 0,
    admit: Annotated[str, typer.Option("--admit", help="race: a child joins the pool by winning its val race; gate: by passing the screen (needs --screen); chain: as gate, and it is the next parent")] = "race",
    no_early_stop: Annotated[bool, typer.Option("--no-early-stop", help="evaluate candidates on all of val")] = False,
    val_seeds: Annotated[int, typer.Option("--val-seeds", help="seeds per val instance in paired comparisons")] = defaults.VAL_SEEDS,
    no_handbook: Annotated[bool, typer.Option("--no-handbook", help="the proposer works without the handbook")] = False,
    resume: Annotated[str | None, typer.Option("--resume", help="continue a killed run")] = None,
    workers: Annotated[int, typer.Option("--workers")] = 2,
    address: Annotated[str | None, typer.Option("--address")] = None,
    seed: SeedOpt = 0,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
    log_json: LogJsonOpt = False,
) -> None:
    """Evolve a harness around a weak model; ends with the evolved harness id."""
    import math

    from coevolve.agents.meta.loop import ON_PLATEAU, SEARCHES, Budget, EvolveConfig
    from coevolve.agents.meta.race import validate_search
    from coevolve.cli.display import EvolveProgress, evolve_summary
    from coevolve.config import MAX_CYCLES, MAX_ROLLOUTS, MAX_SIZE, MAX_TOKENS, check_seed
    from coevolve.jobs import check_workers, run_evolve, stop_on_signals, use_store, validate_model
    from coevolve.services.logs import configure_logging
    from coevolve.store.store import is_fresh_store_dir
    from coevolve.tasks import get_family

    configure_logging(json_lines=log_json or None)
    use_store(store)
    fresh = is_fresh_store_dir(store)  # absent, empty or only the project's subfolders: no store yet
    if not fresh:
        open_store(store, create=False)  # unreadable store: fail before anything runs
    if resume is not None:  # checked before the progress display starts: its line would run into the error's
        check_resume(resume, store, "evolve", "an evolve run", "coevolve runs list --kind evolve shows them")
        config = None
    else:
        fam = get_family(family)
        if not 1 <= val_n <= fam.split_sizes["val"]:
            raise UsageError(f"--val-n must be in 1..{fam.split_sizes['val']} (the val split of {family}), got {val_n}")
        if search not in SEARCHES:
            raise UsageError(f"--search must be one of {', '.join(SEARCHES)}, got {search!r}")
        if not 0 < alpha < 1:
            raise UsageError(f"--alpha must be in (0, 1), got {alpha}")
        validate_model(model)
        validate_model(proposer)
        if min(budget_rollouts, budget_iterations, budget_tokens, workers, val_seeds) <= 0 or not all(
            math.isfinite(x) and x > 0 for x in (budget_usd, budget_seconds)
        ):
            raise UsageError("budgets, --workers and --val-seeds must be positive and finite")
        # a typo (--budget-rollouts 1e26 as digits) is an evolution that never ends, or a number the store cannot encode
        for flag, value, most in (("--budget-rollouts", budget_rollouts, MAX_ROLLOUTS), ("--budget-iterations", budget_iterations, MAX_CYCLES),
                                  ("--budget-tokens", budget_tokens, MAX_TOKENS), ("--plateau", plateau, MAX_CYCLES),
                                  ("--candidates", candidates, MAX_CANDIDATES), ("--train-batch", train_batch, MAX_SIZE),
                                  ("--val-seeds", val_seeds, MAX_SIZE)):
            if value > most:
                raise UsageError(f"{flag} must be at most {most:,}, got {value:,}")
        if not 0 <= screen <= MAX_SCREEN:
            raise UsageError(f"--screen must be in 0..{MAX_SCREEN} (0: off), got {screen}")
        if on_plateau not in ON_PLATEAU:
            raise UsageError(f"--on-plateau must be one of {', '.join(ON_PLATEAU)}, got {on_plateau!r}")
        check_seed(seed)
        check_workers(workers, address)
        config = EvolveConfig(
            family=family, model=model, proposer=proposer, seed=seed, train_batch=train_batch, val_n=val_n,
            candidates=candidates, rule=rule, alpha=alpha, plateau=plateau, on_plateau=on_plateau, screen=screen, admit=admit, early_stop=not no_early_stop,
            val_seeds=val_seeds, handbook=not no_handbook, search=search,
            budget=Budget(budget_iterations, budget_rollouts, budget_tokens, budget_usd, budget_seconds),
        )
        validate_search(config, fam.split_sizes["val"])  # BadInput: one error line (cli_errors)
    last: dict[str, Any] = {}

    def on_progress(d: dict[str, Any]) -> None:
        last.update(d)
        progress.update(d)

    try:
        with stop_on_signals(), EvolveProgress(enabled=not (as_json or log_json)) as progress:
            out = run_evolve(config, store, address=address, workers=workers, resume=resume, on_progress=on_progress)
    except KeyboardInterrupt as e:
        raise _stopped(e, store, log_json, last, after_live=not (as_json or log_json)) from None
    echo_json(out) if as_json else evolve_summary(out)


@app.command("transfer")
@cli_errors
def transfer_cmd(
    family: Annotated[str, typer.Option("--family", help="task family, or 'all'")] = "iot",
    harness: Annotated[str, typer.Option("--harness", help="evolved harness (default: alias <family>:evolved)")] = "evolved",
    models: Annotated[str, typer.Option("--models", help="comma-separated")] = "synthetic/weak,synthetic/expert",
    split: Annotated[str, typer.Option("--split")] = "test",
    n: Annotated[int, typer.Option("--n")] = 50,
    workers: Annotated[int, typer.Option("--workers")] = 2,
    address: Annotated[str | None, typer.Option("--address")] = None,
    seed: SeedOpt = 0,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Upward transfer: each model under the baseline vs the evolved harness, with edit usage."""
    from coevolve.jobs import run_transfer, stop_on_signals
    from coevolve.tasks import family_names, get_family

    families = family_names() if family == "all" else [family]
    for f in families:
        get_family(f).generate(split, n)  # validates split and n
    try:
        with stop_on_signals():
            rows = run_transfer(store, families, harness, [m.strip() for m in models.split(",") if m.strip()],
                                split, n, seed, address, workers, progress=not as_json)
    except KeyboardInterrupt as e:
        raise _stopped(e, store, False) from None
    from coevolve.cli.display import transfer_table

    echo_json(rows) if as_json else transfer_table(rows)


# ------------------------------------------------------------------------------------------ harness
@harness_app.command("list")
@cli_errors
def harness_list(
    family: Annotated[str | None, typer.Option("--family")] = None,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """List stored harnesses."""
    s = open_store(store, create=False)
    records = s.list_harnesses(family)
    aliases: dict[str, list[str]] = {}
    for name, hid in s.aliases().items():
        aliases.setdefault(hid, []).append(name)
    if as_json:
        echo_json([{"id": r.id, "family": r.family, "parent": r.parent, "aliases": aliases.get(r.id, []),
                    "rationale": r.rationale, "val_gain": r.val_gain} for r in records])
        return
    from coevolve.cli.display import harness_table

    harness_table(records, aliases)


@harness_app.command("show")
@cli_errors
def harness_show(ref: str, store: StoreOpt = DEFAULT_STORE, as_json: JsonOpt = False) -> None:
    """Show one harness."""
    from coevolve.cli.display import show_harness
    from coevolve.codec import to_plain

    h = open_store(store, create=False).get_harness(ref)
    echo_json({"id": h.id, "harness": to_plain(h)}) if as_json else show_harness(h)


@harness_app.command("diff")
@cli_errors
def harness_diff(a: str, b: str, store: StoreOpt = DEFAULT_STORE) -> None:
    """Unified diff of two harnesses' readable form."""
    import difflib

    s = open_store(store, create=False)
    ha, hb = s.get_harness(a), s.get_harness(b)
    lines = difflib.unified_diff(
        ha.describe().splitlines(), hb.describe().splitlines(), ha.id[:12], hb.id[:12], lineterm=""
    )
    typer.echo("\n".join(lines) or "(identical)")


@harness_app.command("apply")
@cli_errors
def harness_apply(
    base: Annotated[str, typer.Argument(help="harness id, prefix or alias to edit (or FAMILY:baseline)")],
    edit_file: Annotated[Path, typer.Argument(help="an edit in the proposer's JSON form")],
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Apply a hand-written edit to a stored harness; store the result with lineage; print its id."""
    from coevolve.config import MAX_INPUT_BYTES, regular_file
    from coevolve.edits import apply_edit, edit_from_json

    regular_file(edit_file, "edit file", MAX_INPUT_BYTES)  # not a FIFO, /dev/zero or 10 GB: before it is read
    try:
        raw = json.loads(edit_file.read_text())
    except OSError as e:
        raise UsageError(f"cannot read {edit_file}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{edit_file} is not a JSON edit: {e}") from None
    except RecursionError:
        raise UsageError(f"{edit_file} is nested too deeply to be an edit") from None
    edit = edit_from_json(raw)
    from_baseline = base.endswith(":baseline") and base.count(":") == 1
    if from_baseline:
        from coevolve.tasks import get_family

        parent = get_family(base.split(":")[0]).baseline_harness()
    else:
        parent = open_store(store, create=False).get_harness(base)
    new = apply_edit(parent, edit)  # a bad edit raises here, before anything is stored
    s = open_store(store, create=True)
    if from_baseline:
        s.put_harness(parent, rationale="family baseline")
        s.set_alias(base, parent.id)
    s.put_harness(new, parent=parent.id, edit=edit, rationale=edit.rationale or "hand-written edit")
    echo_json({"id": new.id, "parent": parent.id}) if as_json else typer.echo(new.id)


@harness_app.command("lineage")
@cli_errors
def harness_lineage(ref: str, store: StoreOpt = DEFAULT_STORE, as_json: JsonOpt = False) -> None:
    """The chain of edits from the root to this harness, with val gains."""
    s = open_store(store, create=False)
    h = s.get_harness(ref)
    chain = s.lineage(h.id)
    if as_json:
        echo_json([{"id": r.id, "parent": r.parent, "rationale": r.rationale, "val_gain": r.val_gain} for r in chain])
        return
    from coevolve.cli.display import lineage_tree

    lineage_tree(s, chain)


# -------------------------------------------------------------------------------------------- tasks
@tasks_app.command("list")
@cli_errors
def tasks_list(as_json: JsonOpt = False) -> None:
    """The task families and their split sizes."""
    from coevolve.tasks import external_family_names, family_names, get_family

    names = family_names() + external_family_names()
    from coevolve.cli.display import tasks_table

    rows = [{"family": n, **get_family(n).split_sizes, "title": get_family(n).title} for n in names]
    echo_json(rows) if as_json else tasks_table(rows)


@tasks_app.command("show")
@cli_errors
def tasks_show(family: str, instance_id: str, as_json: JsonOpt = False) -> None:
    """Print one instance (id like `iot/val/3`, or just the index within val)."""
    from coevolve.tasks import get_family

    fam = get_family(family)
    iid = instance_id if "/" in instance_id else f"{family}/val/{instance_id}"
    inst = fam.instance(iid)
    env = fam.make_env(inst)
    info = {
        **{f: getattr(inst, f) for f in ("id", "split", "params", "instruction")},
        "tools": [t.name for t in env.tool_specs()],
        "facts": [f.id for f in fam.facts],
    }
    if as_json:
        echo_json(info)
        return
    for k, v in info.items():
        typer.echo(f"{k}: {v}")


def _register_extensions() -> None:
    """Commands that live in their own modules (serving, training, models)."""
    from coevolve.cli import adapt as cli_adapt
    from coevolve.cli import models as cli_models
    from coevolve.cli import run as cli_run
    from coevolve.cli import store as cli_store

    cli_models.register(app)
    cli_store.register(app)
    cli_adapt.register(app)
    cli_run.register(app)


def main() -> None:  # pragma: no cover
    app(prog_name="coevolve")


_register_extensions()

if __name__ == "__main__":  # pragma: no cover - `python -m coevolve.cli.app`
    sys.exit(main())
