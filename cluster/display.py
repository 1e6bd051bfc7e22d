"""Rich tables and trees for the CLI."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from harness_store.values import Harness



class _Console:
    """A console bound to the current stdout at each use (wide when not a terminal)."""

    def print(self, *args, **kwargs):
        Console(width=None if sys.stdout.isatty() else 200).print(*args, **kwargs)


console = _Console()


def eval_table(results: Sequence[Any]) -> None:
    t = Table(title="evaluation")
    for col in ("family", "model", "harness", "n", "pass rate", "turns", "tokens", "errors", "failure causes", "run"):
        t.add_column(col)
    for r in results:
        s = r.summary
        t.add_row(
            s.family,
            s.model,
            s.harness_id[:12],
            str(s.n),
            f"{s.pass_rate:.1%} ({s.passed})",
            f"{s.mean_turns:.1f}",
            str(s.total_tokens),
            ", ".join(f"{k}={v}" for k, v in sorted(s.errors.items())) or "-",
            ", ".join(f"{k}={v}" for k, v in sorted(r.causes.items())) or "-",
            r.run_id,
        )
    console.print(t)
    if any(r.summary.model.startswith("synthetic/") for r in results):
        console.print("[dim]synthetic models are a testbed, not evidence about real models[/dim]")


def harness_table(records: Sequence[Any], aliases: dict[str, list[str]]) -> None:
    t = Table(title="harnesses")
    for col in ("id", "family", "parent", "aliases", "val gain", "rationale"):
        t.add_column(col)
    for r in records:
        t.add_row(
            r.id[:12],
            r.family,
            (r.parent or "-")[:12],
            ", ".join(aliases.get(r.id, [])) or "-",
            "-" if r.val_gain is None else f"{r.val_gain:+.3f}",
            (r.rationale or "")[:60],
        )
    console.print(t)


def harness_text(h: Harness) -> str:
    """A stable, readable rendering (used by show and diff)."""
    lines = [f"family: {h.family}", f"max_turns: {h.max_turns}", "system_prompt:"]
    for s in h.system_prompt:
        lines.append(f"  [{s.name}]")
        lines += [f"    {line}" for line in s.text.splitlines()]
    lines.append("tools:")
    for tool in h.tools:
        lines.append(f"  {tool.name} (impl {tool.impl}): {tool.description}")
    lines.append("hooks:")
    lines += [f"  {k.event}: {k.kind} {k.params}" for k in h.hooks] or ["  (none)"]
    c = h.context
    lines.append(f"context: {c.strategy} budget={c.token_budget} keep_last={c.keep_last}")
    lines.append("recipes:")
    lines += [f"  {r.name}: {r.text}" for r in h.recipes] or ["  (none)"]
    return "\n".join(lines)


def show_harness(h: Harness) -> None:
    console.print(f"[bold]harness {h.id}[/bold]")
    console.print(harness_text(h), markup=False, highlight=False)


def lineage_tree(store: Any, chain: Sequence[Any]) -> None:
    if not chain:
        return
    tree = Tree(f"{chain[0].id[:12]} (root) {chain[0].rationale}")
    node = tree
    for r in chain[1:]:
        gain = "" if r.val_gain is None else f" val {r.val_gain:+.3f}"
        ops = ", ".join(type(op).__name__ for op in (r.edit.ops if r.edit else ()))
        node = node.add(f"{r.id[:12]}{gain} [{ops}] {r.rationale}")
    console.print(tree)


def tasks_table(rows: Sequence[dict[str, Any]]) -> None:
    t = Table(title="task families")
    for col in ("family", "title", "train", "val", "test"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["family"], r["title"], str(r["train"]), str(r["val"]), str(r["test"]))
    console.print(t)
