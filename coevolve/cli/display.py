"""Rich tables and trees for the CLI. Text that a model, a user or the store wrote (rationales, names,
model ids, error text) goes through `escape`, so a `[/]` in it is shown, never read as rich markup."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Self

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from coevolve.values import Harness, is_synthetic


class _Console:
    """A console bound to the current stdout at each use (wide when not a terminal)."""

    def print(self, *args, **kwargs):
        Console(width=None if sys.stdout.isatty() else 200).print(*args, **kwargs)


console = _Console()


def eval_table(results: Sequence[Any]) -> None:
    t = Table("family", "model", "harness", "n", "pass@1 [95% CI]", "turns", "tokens", "errors", "failure causes",
              "run", title="evaluation")
    for r in results:
        s = r.summary
        lo, hi = r.rate.ci95
        t.add_row(
            escape(s.family),
            escape(s.model),
            s.harness_id[:12],
            f"{r.rate.instances} x {r.repeats}" if r.repeats > 1 else str(s.n),
            f"{r.rate.pass_at_1:.1%} [{lo:.0%}, {hi:.0%}]",
            f"{s.mean_turns:.1f}",
            str(s.total_tokens),
            escape(", ".join(f"{k}={v}" for k, v in sorted(s.errors.items())) or "-"),
            escape(", ".join(f"{k}={v}" for k, v in sorted(r.causes.items())) or "-"),
            r.run_id,
        )
    console.print(t)
    from coevolve.analysis.stats import cap_note, infra_note

    for r in results:
        if note := infra_note(r.rate.infra, r.rate.rollouts):
            console.print(escape(f"{r.summary.family} {r.summary.model}: not a score: {note}"), style="bold red")

    for r in results:
        if r.repeats > 1:
            values, cap = r.rate.pass_hat_ks(r.repeats)
            ks = ", ".join(f"pass^{k} {v:.1%}" for k, v in values.items()) or "pass^k: no scored runs"
            console.print(
                f"{escape(r.summary.family)} {escape(r.summary.model)}: {ks}; "
                f"{r.rate.boundary_share:.0%} of instances passed on some runs but not all"
                + (f" ({cap_note(cap)})" if cap < r.repeats else "")
            )
        if getattr(r, "tau2", None):
            tau2_lines(r.summary.family, r.summary.model, r.tau2)
    if any(is_synthetic(r.summary.model) for r in results):
        print_testbed_notice()


def tau2_lines(family: str, model: str, t: dict[str, Any]) -> None:
    """tau2's numbers of one eval: its reward and pass^k (to the cap), answered_customer beside them,
    the data version, and whether they are comparable with tau2's leaderboard (one line, with why not)."""
    ks = ", ".join(f"pass^{k} {v:.1%}" for k, v in t["pass_hat_k"].items()) or "no scored runs"
    cap = f" ({t['pass_hat_k_note']})" if t.get("pass_hat_k_note") else ""
    console.print(
        f"{escape(family)} {escape(model)} tau2: avg reward {t['avg_reward']:.1%}, {ks}{cap} over {t['scored']} scored runs; "
        f"answered the customer in {t['answered_customer']:.0%} of them; "
        f"protocol {', '.join(t['protocols']) or '-'}, user {', '.join(t['users']) or '-'}"
        + (f" ({', '.join(t['user_models'])})" if t["user_models"] else ""),
        markup=False, highlight=False, soft_wrap=True,
    )
    console.print(f"{family} tau2 data: {t['data_version']}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"{family} {t['note']}", markup=False, highlight=False, soft_wrap=True)


def print_testbed_notice() -> None:
    from coevolve.analysis.summary import TESTBED_NOTICE

    console.print(f"[dim]note: {TESTBED_NOTICE}[/dim]")


def suite_table(rows: Sequence[dict[str, Any]]) -> None:
    """Pass rate per family (rows) and model (columns)."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    families = list(dict.fromkeys(r["family"] for r in rows))
    rate = {(r["family"], r["model"]): r["pass_rate"] for r in rows}
    t = Table("family", *map(escape, models), title="pass rate by family and model")
    for f in families:
        t.add_row(escape(f), *(f"{rate[(f, m)]:.0%}" if (f, m) in rate else "-" for m in models))
    console.print(t)


def harness_table(records: Sequence[Any], aliases: dict[str, list[str]]) -> None:
    t = Table("id", "family", "parent", "aliases", "val gain", "rationale", title="harnesses")
    for r in records:
        t.add_row(
            r.id[:12],
            escape(r.family),
            (r.parent or "-")[:12],
            escape(", ".join(aliases.get(r.id, [])) or "-"),
            "-" if r.val_gain is None else _pts(r.val_gain),
            escape((r.rationale or "")[:60]),
        )
    console.print(t)


def show_harness(h: Harness) -> None:
    console.print(f"[bold]harness {h.id}[/bold]")
    console.print(h.describe(), markup=False, highlight=False)


def lineage_tree(store: Any, chain: Sequence[Any]) -> None:
    if not chain:
        return
    tree = Tree(f"{chain[0].id[:12]} (root) {escape(chain[0].rationale or '')}")
    node = tree
    for r in chain[1:]:
        gain = "" if r.val_gain is None else f" val {_pts(r.val_gain)}"
        ops = ", ".join(type(op).__name__ for op in (r.edit.ops if r.edit else ()))
        node = node.add(f"{r.id[:12]}{gain} {escape(f'[{ops}]')} {escape(r.rationale or '')}")
    console.print(tree)


def tasks_table(rows: Sequence[dict[str, Any]]) -> None:
    t = Table("family", "title", "train", "val", "test", title="task families")
    for r in rows:
        t.add_row(r["family"], r["title"], str(r["train"]), str(r["val"]), str(r["test"]))
    console.print(t)


class EvolveProgress:
    """A live status line for `coevolve evolve` (iteration, best val, accepted/rejected, spend)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._live = None

    def __enter__(self) -> Self:
        if self.enabled:
            from rich.live import Live

            self._live = Live("starting…", console=Console(stderr=True), refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def update(self, d: dict[str, Any]) -> None:
        if self._live is None:
            return
        self._live.update(
            f"iteration {d['iteration']} [{d['phase']}]  best val {d['best_val']:.1%}  "
            + (f"released {d['accepted']}  pool {d['pool']}  dropped {d['rejected']}  invalid {d['invalid']}  " if "pool" in d
               else f"accepted {d['accepted']}  rejected {d['rejected']}  invalid {d['invalid']}  ")
            + f"rollouts {d['rollouts']}  proposer tokens {d['proposer_tokens']}  ${d['usd']:.4f}"
        )

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)


def evolve_summary(out: dict[str, Any]) -> None:
    console.print(
        f"[bold]{escape(out['family'])}[/bold] {escape(out['model'])}: val {out['baseline_val']:.1%} -> {out['evolved_val']:.1%} "
        + ("(the search's val pairs; each release was decided on fresh guard pairs) " if out.get("search") == "race"
           else "(the split that accepted the edits) ")
        + f"in {out['iterations']} iterations, {out['rollouts_used']} rollouts ({escape(out['stop_reason'])})"
    )
    if out.get("guard"):
        console.print(escape(out["guard"]), highlight=False)
    t = Table("iteration", "ops", "val gain", "usage", "rationale",
              title="released edits" if out.get("search") == "race" else "accepted edits")
    usage = out.get("usage", {}).get(out["model"], [])
    for i, e in enumerate(out["edits"]):
        u = usage[i] if i < len(usage) else {}
        rate = "-" if u.get("rate") is None else f"{u['rate']:.0%} of {u['rollouts']}"
        t.add_row(str(e["iteration"]), escape(", ".join(o["op"] for o in e["ops"])), _pts(e["val_gain"]), rate,
                  escape(e.get("rationale", "")[:70]))
    console.print(t)
    test = out.get("test")
    if test:
        b, e = test["baseline"], test["evolved"]
        console.print(
            f"held-out test split ({test['instances']} instances x {test['repeats']} seeds): "
            f"baseline {b['pass_at_1']:.1%} [{b['ci95'][0]:.0%}, {b['ci95'][1]:.0%}] -> "
            f"evolved {e['pass_at_1']:.1%} [{e['ci95'][0]:.0%}, {e['ci95'][1]:.0%}], "
            f"gain {test['gain'] * 100:+.1f} pts [{test['gain_ci95'][0] * 100:+.1f}, {test['gain_ci95'][1] * 100:+.1f}]"
        )
    if out.get("tau2_note"):
        console.print(f"{out['family']} {out['tau2_note']}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"evolved harness: {out['harness_id']}  (run {out['run_id']})")
    if out.get("context_note"):
        console.print(f"[dim]note: {escape(out['context_note'])}[/dim]")  # its [cut: ...] lines are text
    if is_synthetic(out["model"]):
        print_testbed_notice()


def _pts(gain: float) -> str:
    """A difference of two pass rates, in percentage points."""
    return f"{gain * 100:+.1f} pts"


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"


def transfer_table(rows: Sequence[dict[str, Any]]) -> None:
    t = Table("family", "model", "baseline", "evolved", "gain", "edit usage", title="upward transfer")
    for r in rows:
        usage = ", ".join(f"{'+'.join(u['ops'])}:{_rate(u['rate'])}" for u in r.get("usage", []))
        t.add_row(escape(r["family"]), escape(r["model"]), f"{r['baseline']:.1%}", f"{r['evolved']:.1%}",
                  f"{r['gain'] * 100:+.1f} pts", escape(usage or "-"))
    console.print(t)
    for r in rows:
        if r.get("tau2_note"):
            console.print(f"{r['family']} {r['model']}: {r['tau2_note']}", markup=False, highlight=False, soft_wrap=True)
    if any(is_synthetic(r["model"]) for r in rows):
        print_testbed_notice()


def experiment_table(out: dict[str, Any]) -> None:
    """The reference study's table: test pass@1 [95% CI] per family, model and harness, by weights."""

    def cell(c: dict[str, Any] | None) -> str:
        return "-" if c is None else f"{c['pass_at_1']:.1%} [{c['ci95'][0]:.0%}, {c['ci95'][1]:.0%}]"

    cfg = out["config"]
    t = Table("family", "model", "harness", "base weights", "+ imitation", "+ correction",
              title=f"test pass@1 [95% CI], {cfg['repeats']} seeds per instance")
    for r in out["rows"]:
        if r["model"] == "expert":
            t.add_row(escape(r["family"]), escape(cfg["expert"]), escape(r["harness"]), cell(r["base"]), "n/a", "n/a")
        else:
            t.add_row(escape(r["family"]), escape(cfg["weak"]), escape(r["harness"]), cell(r["base"]),
                      cell(r["imitation"]), cell(r["correction"]))
    console.print(t)
    console.print(f"run {out['run_id']}: {out['cells_done']} of {out['cells_total']} cells done")
    if out.get("notice"):
        print_testbed_notice()
