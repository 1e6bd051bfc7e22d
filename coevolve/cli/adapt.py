"""CLI for weight adaptation: `coevolve data build|show|list`, `coevolve adapt`, `coevolve judge accuracy`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from coevolve import defaults
from coevolve.analysis.summary import SYNTHETIC_ADAPTER_RULES, TESTBED_NOTICE, synthetic_adapters
from coevolve.cli.options import (
    DEFAULT_STORE,
    JsonOpt,
    SeedOpt,
    StoreOpt,
    UsageError,
    check_resume,
    cli_errors,
    echo_json,
    open_store,
)
from coevolve.values import is_synthetic

data_app = typer.Typer(no_args_is_help=True, help="Training datasets for the adaptation arms.")
judge_app = typer.Typer(no_args_is_help=True, help="The judge role.")
experiment_app = typer.Typer(no_args_is_help=True, help="Experiments that run a whole protocol.")

ArmOpt = Annotated[str, typer.Option("--arm", help="correction (the method) or imitation (the baseline)")]
FamilyOpt = Annotated[str, typer.Option("--family")]
HarnessOpt = Annotated[str, typer.Option("--harness", help="harness id, prefix, alias or 'baseline'")]
ModelOpt = Annotated[str, typer.Option("--model", help="the weak model (the student)")]
ExpertOpt = Annotated[str, typer.Option("--expert", help="expert model (rewriter / imitation teacher)")]
JudgeOpt = Annotated[str, typer.Option("--judge", help="judge model")]
RowsOpt = Annotated[int, typer.Option("--rows", help="target dataset size")]
KOpt = Annotated[int, typer.Option("--k", help="rewrite candidates per failure")]
SamplesOpt = Annotated[int, typer.Option("--samples", help="rollouts per train instance")]
VerifiedOpt = Annotated[bool, typer.Option("--require-verified", help="keep only corrections whose replay passed")]
WorkersOpt = Annotated[int, typer.Option("--workers", help="actors per pool")]
AddressOpt = Annotated[str | None, typer.Option("--address", help="attach to a Ray cluster")]
InFlightOpt = Annotated[int | None, typer.Option(
    "--in-flight", help="most rollouts at once (default: all; e.g. the served model's batch size on a small server)")]


class _Stage:
    """A one-line live status on stderr for long builds (off with --json)."""

    def __init__(self, enabled: bool):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = enabled

    def __call__(self, p: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if p.get("stage") == "correct":
            self.console.print(f"  corrections: {p['rows']} rows from {p['handled']}/{p['failures']} failures", highlight=False)
        else:
            self.console.print(f"  {p.get('stage')}", highlight=False)


def _request(arm: str, family: str, harness: str, model: str, expert: str, judge: str, rows: int, k: int,
             samples: int, require_verified: bool, seed: int, workers: int, address: str | None,
             in_flight: int | None):
    from coevolve.config import MAX_SIZE
    from coevolve.jobs.adapt import BuildRequest, build_config

    for flag, value in (("--rows", rows), ("--k", k), ("--samples", samples), ("--in-flight", in_flight)):
        if value is not None and value > MAX_SIZE:  # a typo is a build that never ends
            raise UsageError(f"{flag} must be at most {MAX_SIZE:,}, got {value:,}")
    cfg = build_config(arm=arm, family=family, model=model, expert=expert, judge=judge, rows=rows, k=k,
                       samples=samples, require_verified=require_verified, seed=seed)
    return BuildRequest(cfg, harness, workers, address, in_flight)


def _print_manifest(m: dict[str, Any]) -> None:
    from coevolve.cli.display import console, escape

    console.print(f"dataset [bold]{m['id']}[/bold] ({m['arm']}): {m['rows']} rows at {m.get('path', '')}")
    console.print("  by provenance: " + ", ".join(f"{k} {v}" for k, v in sorted(m.get("by_kind", {}).items())))
    if m.get("verified_share") is not None:
        console.print(f"  verified by replay: {m['verified_share']:.0%} of corrected rows")
    console.print(f"  student rollouts {m.get('student_rollouts')} (pass rate {m.get('student_pass_rate')}), "
                  f"expert tokens {m.get('expert_tokens')} ({m.get('expert_tokens_per_row')} per row)")
    for role, u in sorted((m.get("usage") or {}).items()):
        console.print(f"  {role}: {int(u.get('calls', 0))} calls, {int(u.get('tokens', 0))} tokens, ${u.get('usd', 0):.4f}")
    from coevolve.agents.fit import build_cut_note

    if note := build_cut_note(m):
        console.print(f"[dim]note: {escape(note)}[/dim]")
    if m.get("notice"):
        console.print(f"[dim]note: {m['notice']}[/dim]")


@data_app.command("build")
@cli_errors
def data_build(
    arm: ArmOpt = "correction",
    family: FamilyOpt = "iot",
    harness: HarnessOpt = "baseline",
    model: ModelOpt = "synthetic/weak",
    expert: ExpertOpt = "synthetic/expert",
    judge: JudgeOpt = "synthetic/judge",
    rows: RowsOpt = defaults.ROWS,
    k: KOpt = defaults.K,
    samples: SamplesOpt = defaults.SAMPLES,
    require_verified: VerifiedOpt = False,
    resume: Annotated[str | None, typer.Option("--resume", help="continue an interrupted build run")] = None,
    workers: WorkersOpt = 2,
    in_flight: InFlightOpt = None,
    address: AddressOpt = None,
    seed: SeedOpt = 0,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Build one arm's training rows (JSONL + Parquet, content-addressed, in the store)."""
    from coevolve.jobs.adapt import build_dataset

    check_resume(resume, store, "data", "a data build")
    req = _request(arm, family, harness, model, expert, judge, rows, k, samples, require_verified, seed, workers, address, in_flight)
    out = build_dataset(req, store, resume=resume, progress=_Stage(not as_json))
    echo_json(out) if as_json else _print_manifest(out)


@data_app.command("show")
@cli_errors
def data_show(dataset: str, store: StoreOpt = DEFAULT_STORE, as_json: JsonOpt = False) -> None:
    """A dataset's manifest: rows by provenance, verified share, expert tokens."""
    from coevolve.store.datasets import read_manifest

    rec = read_manifest(store, dataset)
    out = {**rec.manifest, "path": str(rec.path)}
    echo_json(out) if as_json else _print_manifest(out)


@data_app.command("list")
@cli_errors
def data_list(store: StoreOpt = DEFAULT_STORE, as_json: JsonOpt = False) -> None:
    """Datasets in the store."""
    from coevolve.store.datasets import list_datasets

    open_store(store, create=False).close()  # a --store that is no store (absent, a file): one error line
    recs = [{"id": r.id, "arm": r.manifest.get("arm"), "rows": r.manifest.get("rows"),
             "family": (r.manifest.get("config") or {}).get("family")} for r in list_datasets(store)]
    if as_json:
        echo_json(recs)
        return
    for r in recs:
        typer.echo(f"{r['id']}  {r['arm']:10s} {r['family'] or '-':10s} {r['rows']} rows")


def _train_config(overrides: list[str]) -> dict[str, Any]:
    """`key=value` TrainConfig overrides, validated as training will validate them; UsageError (one line)."""
    from pydantic import ValidationError

    from coevolve.config import check_train_bounds, parse_override
    from coevolve.services.training import TrainConfig

    train_cfg: dict[str, Any] = {}
    for item in overrides:
        keys, value = parse_override(item)
        train_cfg[".".join(keys)] = value
    try:
        check_train_bounds(TrainConfig.model_validate(train_cfg))
    except ValidationError as e:
        first = e.errors()[0]
        raise UsageError(f"train config: {'.'.join(map(str, first['loc'])) or '(top level)'}: {first['msg']}") from None
    except (TypeError, RecursionError) as e:
        raise UsageError(f"train config: cannot be read ({type(e).__name__})") from None
    return train_cfg


def adapt_cmd(
    arm: ArmOpt = "correction",
    family: FamilyOpt = "iot",
    harness: HarnessOpt = "baseline",
    model: ModelOpt = "synthetic/weak",
    expert: ExpertOpt = "synthetic/expert",
    judge: JudgeOpt = "synthetic/judge",
    rows: RowsOpt = defaults.ROWS,
    k: KOpt = defaults.K,
    samples: SamplesOpt = defaults.SAMPLES,
    require_verified: VerifiedOpt = False,
    backend: Annotated[str, typer.Option("--backend", help="synthetic (synthetic models) or peft (real LoRA)")] = "",
    base: Annotated[str, typer.Option("--base", help="peft: the base model folder")] = "",
    eval_model: Annotated[str, typer.Option("--eval-model", help="model ref the adapter is served under (default --model)")] = "",
    repeats: Annotated[int, typer.Option("--repeats", help="test-split rollouts per instance")] = 3,
    test_n: Annotated[int | None, typer.Option("--test-n", help="test-split instances to evaluate (default: all)")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="continue an interrupted build run (data-...)")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="TrainConfig key=value, e.g. epochs=3")] = None,
    workers: WorkersOpt = 2,
    in_flight: InFlightOpt = None,
    address: AddressOpt = None,
    seed: SeedOpt = 0,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Build -> train -> evaluate model@adapter on the test split against the base weights."""
    from coevolve.jobs.adapt import build_dataset, evaluate_adapter, train_on, validate_build

    check_resume(resume, store, "data", "a data build")
    req = _request(arm, family, harness, model, expert, judge, rows, k, samples, require_verified, seed, workers, address, in_flight)
    h = validate_build(req, store)
    synthetic = is_synthetic(model)
    backend = backend or ("synthetic" if synthetic else "peft")
    from coevolve.services.training import BACKENDS

    if backend not in BACKENDS:
        raise UsageError(f"unknown --backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend == "peft" and not base:
        raise UsageError("--backend peft needs --base (the base model folder)")
    if repeats < 1:
        raise UsageError(f"--repeats must be positive, got {repeats}")
    from coevolve.tasks import get_family

    get_family(family).generate("test", test_n)  # validates --test-n against the split
    train_cfg = _train_config(overrides or [])  # before the dataset is built: a typo costs nothing
    stage = _Stage(not as_json)
    manifest = build_dataset(req, store, resume=resume, progress=stage)
    stage({"stage": f"training on {manifest['id']} ({backend})"})

    def trained(p: dict[str, Any]) -> None:
        loss = f", loss {p['loss']:.3f}" if isinstance(p.get("loss"), (int, float)) else ""
        stage({"stage": f"training: step {p.get('step')}/{p.get('total')}, epoch {p.get('epoch')}{loss}"})

    adapter = train_on(store, manifest["id"], base or model, backend, config=train_cfg, progress=trained)
    stage({"stage": f"evaluating {eval_model or model}@{adapter.id}"})
    result = evaluate_adapter(store, family, h, eval_model or model, adapter.id, n=test_n, repeats=repeats, seed=seed,
                              workers=workers, in_flight=in_flight, address=address)
    out = {"dataset": manifest, "adapter": {"id": adapter.id, "path": adapter.path, "metrics": adapter.metrics}, "eval": result}
    rules = synthetic_adapters(model, backend)
    if rules:
        out["adapter_rules"] = SYNTHETIC_ADAPTER_RULES
    if as_json:
        echo_json(out)
        return
    from coevolve.cli.display import console

    _print_manifest(manifest)
    b, a = result["base"], result["adapted"]
    console.print(
        f"{family} test ({result['instances']} instances x {repeats} seeds): {result['model']} {b['pass_at_1']:.1%} [{b['ci95'][0]:.0%}, {b['ci95'][1]:.0%}] -> "
        f"+{adapter.id} {a['pass_at_1']:.1%} [{a['ci95'][0]:.0%}, {a['ci95'][1]:.0%}], "
        f"gain {result['gain'] * 100:+.1f} pts [{result['gain_ci95'][0] * 100:+.1f}, {result['gain_ci95'][1] * 100:+.1f}]"
    )
    if synthetic:
        console.print(f"[dim]note: {TESTBED_NOTICE}[/dim]")
    if rules:
        console.print(f"[dim]note: {SYNTHETIC_ADAPTER_RULES}[/dim]")


@judge_app.command("accuracy")
@cli_errors
def judge_accuracy_cmd(
    family: Annotated[str, typer.Option(
        "--family", help="a task family, several comma-separated, or 'all'")] = "iot",
    judge: JudgeOpt = "synthetic/judge",
    model: Annotated[str, typer.Option("--model", help="whose failures are judged (a synthetic model: the answer key)")] = "synthetic/weak",
    split: Annotated[str, typer.Option("--split")] = "test",
    n: Annotated[int | None, typer.Option(
        "--n", help="instances per family (default: the whole split)")] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="rollouts per instance")] = 2,
    workers: WorkersOpt = 2,
    address: AddressOpt = None,
    seed: SeedOpt = 0,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """Failure-locus accuracy of a judge against the testbed's decisive turns, per family, beside the
    random-turn and first-error baselines: on all keyed failures, where the first-error rule is wrong, and
    where the rule's guess (the first error, else the last action) misses."""
    from coevolve.jobs.adapt import judge_accuracy, judge_families
    from coevolve.tasks import get_family

    if not is_synthetic(model):
        raise UsageError("the answer key exists for synthetic models only: --model must be synthetic/...")
    from coevolve.config import MAX_SIZE, check_seed
    from coevolve.jobs import check_workers

    if not 1 <= repeats <= MAX_SIZE:
        raise UsageError(f"--repeats must be in 1..{MAX_SIZE:,}, got {repeats}")
    check_seed(seed)
    check_workers(workers, address)  # an address is probed here: seconds, not a minute of Ray's retries
    families = judge_families(family)
    for f in families:
        get_family(f).generate(split, n)  # validates split and n
    out = judge_accuracy(store, families, judge, model=model, split=split, n=n, repeats=repeats, seed=seed,
                         workers=workers, address=address, progress=_Stage(not as_json))
    echo_json(out) if as_json else print_judge_accuracy(out)


def _acc(a: dict[str, Any], metric: str) -> str:
    if a[metric] is None:
        return "-"
    lo, hi = a[f"{metric}_ci95"]
    return f"{a[metric]:.0%} [{lo:.0%}, {hi:.0%}]"


def print_judge_accuracy(out: dict[str, Any]) -> None:
    """The judge-accuracy table: per family and subset, exact and within-one locus accuracy of the
    judge beside the first-error and random-turn baselines; then category agreement per family."""
    from rich.table import Table

    from coevolve.cli.display import console

    t = Table("family", "failures", "subset", "n", "judge exact", "judge ±1", "first error exact",
              "first error ±1", "random exact", "random ±1",
              title=f"failure-locus accuracy of {out['judge']} on {out['model']} failures "
                    f"({out['split']} split, {out['repeats']} seeds per instance): exact | within one turn "
                    "[95% CI]")
    for f, r in out["families"].items():
        loci = r.get("loci")
        if not loci:
            t.add_row(f, str(r["failures"]), "no decisive turn", "0", *["-"] * 6)
            continue
        for subset, label in (("all", "all keyed"), ("first_error_wrong", "first error wrong"),
                              ("rule_wrong", "rule's guess wrong")):
            s = loci.get(subset)
            if s is None:
                continue
            if subset != "all":
                label += f" ({s['no_error_observation']} none, {s['first_error_not_decisive']} not decisive)"
            first = subset == "all"
            t.add_row(f if first else "", f"{r['with_decisive_turn']} of {r['failures']}" if first else "",
                      label, str(s["n"]), *(_acc(s[g], m) for g in ("judge", "first_error", "random")
                                            for m in ("exact", "within_one")))
    console.print(t)
    for f, r in out["families"].items():
        extra = f", {r['unparseable']} unparseable judge answers" if r.get("unparseable") else ""
        lost = r.get("counterfactual_errors")
        errors = f", {lost} counterfactuals lost to model errors" if lost else ""
        if r.get("category_accuracy") is not None:
            console.print(f"  {f}: failure categories: accuracy {r['category_accuracy']:.1%}, "
                          f"Cohen's kappa {r['category_kappa']:.2f}{extra}{errors}")
    console.print("  (MAST reports kappa 0.77 for its best LLM judge against humans)")
    if len(out["families"]) == 1:
        r = next(iter(out["families"].values()))
        cats = list(r["confusion"])
        c = Table("", *cats, title="answer key (rows) x judge (columns)")
        for truth, row in r["confusion"].items():
            if any(row.values()):
                c.add_row(truth, *(str(row[cat]) for cat in cats))
        console.print(c)
    console.print(f"[dim]note: {out['notice']}[/dim]")


@experiment_app.command("paper")
@cli_errors
def experiment_paper(
    config: Annotated[str, typer.Option("--config", help="experiment YAML (deploy/experiments/*.yaml)")] = "",
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides, e.g. repeats=2 families='\\[iot]'")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="continue an experiment run; finished cells are kept")] = None,
    address: AddressOpt = None,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """The reference study's matrix: {weak, expert} x {baseline, evolved} x {base, imitation, correction}."""
    from coevolve.jobs.experiment import ExperimentConfig, load_config, run_experiment

    check_resume(resume, store, "experiment", "an experiment")
    if not config and not resume:
        raise UsageError("--config FILE (or --resume RUN_ID) is required")
    if address is not None:
        from coevolve.cluster.runtime import check_reachable, check_token

        check_token(address)
        check_reachable(address)
    # load_config refuses a huge or aliased file before PyYAML spends minutes on it
    cfg = load_config(config, overrides or ()) if config else ExperimentConfig()
    stage = _Stage(not as_json)
    out = run_experiment(cfg, store, resume=resume, address=address,
                         progress=lambda p: stage({"stage": f"cell {p['cell']} ({p['done']} done)"}))
    echo_json(out) if as_json else print_experiment(out)


def print_experiment(out: dict[str, Any]) -> None:
    """The experiment's table, its testbed notice and, for synthetic arms, the rules that decide them."""
    from coevolve.cli.display import console, experiment_table

    experiment_table(out)
    if out.get("adapter_rules"):
        console.print(f"[dim]note: {out['adapter_rules']}[/dim]")


def report_cmd(
    run_id: Annotated[str, typer.Argument(help="an experiment run id")],
    out: Annotated[str | None, typer.Option("--out", help="folder (default <store>/reports/RUN_ID)")] = None,
    judge: Annotated[str | None, typer.Option("--judge", help="judge for the failure taxonomy (default: the run's)")] = None,
    store: StoreOpt = DEFAULT_STORE,
    as_json: JsonOpt = False,
) -> None:
    """A self-contained HTML page (and a Markdown twin) with the experiment's tables and plots."""
    from coevolve.jobs import use_store
    from coevolve.jobs.report import write_report
    from coevolve.store.store import HarnessStore

    use_store(store)
    html_path, md_path = write_report(HarnessStore(store, create=False), run_id, Path(out) if out else None, judge)
    if as_json:
        echo_json({"html": str(html_path), "markdown": str(md_path)})
    else:
        typer.echo(f"report: {html_path}\nmarkdown: {md_path}")


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
    app.add_typer(judge_app, name="judge")
    app.add_typer(experiment_app, name="experiment")
    app.command("adapt")(cli_errors(adapt_cmd))
    app.command("report")(cli_errors(report_cmd))

