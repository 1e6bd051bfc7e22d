"""`coevolve report RUN_ID`: a self-contained static HTML page and a Markdown twin for an experiment run.

The page has no external resource (plots are inline SVG made with matplotlib, styles inline), so it
works offline. Sections: the main table (test pass@1 with 95% intervals); pass rate per family per
arm with intervals; failure composition over the six categories (the judge classifies every hard
failure; infra errors are never counted); the harness lineage of each family's evolution with the
accepted and rejected edits and their paired results; edit usage as a heatmap; planning drift of each
adapted model from its base; cost (tokens, dollars, wall time) per stage. Reports made with synthetic
models say so at the top.
"""

from __future__ import annotations

import html
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from coevolve.analysis.rollouts import FINGERPRINT, composition, drift, fingerprint, hard_failures
from coevolve.analysis.summary import SYNTHETIC_ADAPTER_RULES, TESTBED_NOTICE, synthetic_adapters
from coevolve.errors import BadInput
from coevolve.pipeline.steps import cell_rollouts
from coevolve.values import FAILURE_CATEGORIES, is_synthetic

ARMS = (("weak", "base"), ("weak", "imitation"), ("weak", "correction"), ("expert", "base"))
COLORS = {"other": "#9e9e9e", "tool-use": "#1f77b4", "instruction-following": "#ff7f0e",
          "implicit-knowledge": "#2ca02c", "long-context": "#9467bd", "planning": "#d62728"}


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9})
    return plt


# ------------------------------------------------------------------ data gathering
def gather(store: Any, run_id: str, judge_model: str | None = None) -> dict[str, Any]:
    """Everything the report shows, from the experiment run's cells and trajectories."""
    run = store.get_run(run_id)
    if run.kind != "experiment":
        raise BadInput(f"run {run_id!r} is a {run.kind} run; reports are made for experiment runs")
    cfg = run.config
    cells = {e.payload["cell"]: e.payload for e in store.events(run_id, "cell")}
    judge_model = judge_model or cfg.get("judge", "synthetic/judge")
    comp_events = {e.payload["cell"]: e.payload for e in store.events(run_id, "composition")}
    data: dict[str, Any] = {"run_id": run_id, "config": cfg, "cells": cells, "drift": {},
                            "lineage": {}, "usage": {}, "cost": defaultdict(lambda: defaultdict(float))}
    from coevolve.agents.judge import Judge
    from coevolve.analysis.usage import edit_usage
    from coevolve.services.gateway import Gateway
    from coevolve.tasks import get_family

    gateway = Gateway()
    judge = Judge(judge_model, gateway)
    for key, cell in cells.items():
        stage = key.split(":")[0]
        data["cost"][stage]["seconds"] += cell.get("seconds", 0.0)
        usage = cell.get("usage") or {}
        for role in usage.values():
            data["cost"][stage]["tokens"] += role.get("tokens", 0)
            data["cost"][stage]["usd"] += role.get("usd", 0.0)
        if stage == "evolve":
            data["cost"][stage]["usd"] += (cell.get("spend") or {}).get("usd", 0.0)
            data["cost"][stage]["tokens"] += (cell.get("spend") or {}).get("proposer_tokens", 0)
    for family in cfg["families"]:
        fam = get_family(family)
        tools = {t.name: t.description for t in fam.baseline_tools()}
        evolve = cells.get(f"evolve:{family}")
        if evolve:
            decisions = [e.payload for e in store.events(evolve["run_id"], "decision")]
            data["lineage"][family] = {"harness_id": evolve["harness_id"], "decisions": decisions, "val": evolve["val"]}
        for label in ("baseline", "evolved"):
            fps = {}
            for who, weights in ARMS:
                key = f"eval:{family}:{who}:{label}:{weights}"
                if key not in cells:
                    continue
                trajs = cell_rollouts(store, run_id, key)
                fps[(who, weights)] = fingerprint(trajs, tools)
                for t in trajs:
                    data["cost"]["eval"]["tokens"] += t.tokens
                    data["cost"]["eval"]["usd"] += t.cost_usd
                if key not in comp_events:
                    labels = [judge.classify(t.public_view()) for t in hard_failures(trajs)]
                    comp_events[key] = {"cell": key, "labels": [lab.category for lab in labels]}
                    store.append_event(run_id, "composition", comp_events[key])
                if label == "evolved" and weights == "base" and evolve:
                    edits = [r.edit for r in store.lineage(evolve["harness_id"]) if r.edit is not None]
                    data["usage"].setdefault(family, {})[who] = edit_usage(edits, trajs)
            base = fps.get(("weak", "base"))
            for arm in ("imitation", "correction"):
                if base and ("weak", arm) in fps:
                    data["drift"][(family, label, arm)] = {"distance": drift(base, fps[("weak", arm)]),
                                                          "base": base, "adapted": fps[("weak", arm)]}
    data["composition"] = {key: ev["labels"] for key, ev in comp_events.items()}
    return data


# ------------------------------------------------------------------ plots
def _pass_bars(ax: Any, bars: list[tuple[float, dict[str, Any] | None]], width: float, **style: Any) -> None:
    """A bar at each x with a cell: its test pass@1, its 95% interval as the error bar."""
    cs = [(x, c) for x, c in bars if c]
    ys = [c["pass_at_1"] for _, c in cs]
    err = [[y - c["ci95"][0] for y, (_, c) in zip(ys, cs)], [c["ci95"][1] - y for y, (_, c) in zip(ys, cs)]]
    ax.bar([x for x, _ in cs], ys, width, yerr=err, capsize=2, **style)


def _pass_axis(ax: Any, names: list[str]) -> None:
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("test pass@1 (95% CI)")


def plot_pass_rates(data: dict[str, Any]) -> str:
    plt = _plt()
    cfg, cells = data["config"], data["cells"]
    fams = cfg["families"]
    series = [(who, label, weights) for label in ("baseline", "evolved") for who, weights in ARMS]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(fams)), 3.6))
    width = 0.8 / len(series)
    for i, (who, label, weights) in enumerate(series):
        bars = [(j + i * width - 0.4 + width / 2, cells.get(f"eval:{f}:{who}:{label}:{weights}"))
                for j, f in enumerate(fams)]
        hatch = "//" if label == "evolved" else None
        _pass_bars(ax, bars, width, label=f"{who} {label} {weights}", hatch=hatch, alpha=0.9)
    _pass_axis(ax, fams)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    return _svg(fig)


def composition_rows(data: dict[str, Any]) -> list[tuple[str, dict[str, float], int]]:
    """(model/harness/weights, shares over categories, hard failures) pooled over families."""
    pooled: dict[str, list[str]] = defaultdict(list)
    for key, labels in data["composition"].items():
        _, _, who, label, weights = key.split(":")
        pooled[f"{who} | {label} | {weights}"] += labels
    from coevolve.values import FailureLabel

    return [(k, composition([FailureLabel(c, "") for c in v]), len(v)) for k, v in sorted(pooled.items())]


def plot_composition(data: dict[str, Any]) -> str:
    plt = _plt()
    rows = composition_rows(data)
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(3, len(rows)) + 1))
    left = [0.0] * len(rows)
    for cat in FAILURE_CATEGORIES:
        vals = [shares[cat] for _, shares, _ in rows]
        ax.barh([r[0] for r in rows], vals, left=left, color=COLORS[cat], label=cat)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of hard failures")
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    return _svg(fig)


KEPT = ("accept", "admitted")  # the sign-test loop's and the racing search's outcome for a kept candidate


def _evidence(d: dict[str, Any]) -> str:
    """A candidate's paired tally and the statistic it was decided by (the loop's p-value, the race's
    posterior chance of being better), or its screen tally when the screen kept it from val."""
    if "screen" in d:
        return f"passed {d['screen']['passed']} of {d['screen']['jobs']} of its parent's train failures"
    stat = f"p={d['p_value']}" if "p_value" in d else f"P(better)={d.get('p_better')}"
    return f"wins {d['wins']}, losses {d['losses']}, {stat}"


def plot_lineage(data: dict[str, Any]) -> str:
    plt = _plt()
    fams = [f for f in data["config"]["families"] if f in data["lineage"]]
    fig, axes = plt.subplots(1, max(1, len(fams)), figsize=(max(4, 2.2 * len(fams)), 2.8), squeeze=False)
    for ax, f in zip(axes[0], fams):
        for d in data["lineage"][f]["decisions"]:
            ok = d["outcome"] in KEPT
            ax.scatter(d["iteration"], d["wins"] - d["losses"], c="#2ca02c" if ok else "#d62728", marker="o" if ok else "x")
        ax.axhline(0, color="#999", lw=0.5)
        ax.set_title(f, fontsize=8)
        ax.set_xlabel("iteration")
    axes[0][0].set_ylabel("paired wins - losses")
    return _svg(fig)


def plot_usage(data: dict[str, Any]) -> str:
    plt = _plt()
    labels, values = [], []
    for f, by_model in data["usage"].items():
        weak, expert = by_model.get("weak", []), by_model.get("expert", [])
        for i, u in enumerate(weak):
            labels.append(f"{f}: {'+'.join(u['ops'])} #{i + 1}")
            e = expert[i] if i < len(expert) else {}
            values.append([u["rate"] if u["rate"] is not None else float("nan"),
                           e.get("rate") if e.get("rate") is not None else float("nan")])
    fig, ax = plt.subplots(figsize=(4.5, 0.3 * max(3, len(labels)) + 1))
    if values:
        im = ax.imshow(values, aspect="auto", cmap="viridis", vmin=0, vmax=1)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        fig.colorbar(im, ax=ax, label="usage rate")
    ax.set_xticks([0, 1], ["weak", "expert"])
    return _svg(fig)


def plot_drift(data: dict[str, Any]) -> str:
    plt = _plt()
    keys = sorted(data["drift"])
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(keys)), 3))
    ax.bar([f"{f}\n{h}\n{a}" for f, h, a in keys], [data["drift"][k]["distance"] for k in keys],
           color=["#ff7f0e" if a == "imitation" else "#2ca02c" for _, _, a in keys])
    ax.set_ylabel("planning drift from base")
    ax.tick_params(axis="x", labelsize=6)
    return _svg(fig)


def plot_cost(data: dict[str, Any]) -> str:
    plt = _plt()
    stages = sorted(data["cost"])
    fig, axes = plt.subplots(1, 3, figsize=(9, 2.6))
    for ax, (metric, label) in zip(axes, (("tokens", "tokens"), ("usd", "dollars"), ("seconds", "wall seconds"))):
        ax.bar(stages, [data["cost"][s].get(metric, 0) for s in stages], color="#1f77b4")
        ax.set_title(label, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    return _svg(fig)


# ------------------------------------------------------------------ rendering
def _md(text: str) -> str:
    """Model- or user-written text for a Markdown line: on one line, with `&`, `<` and `>` as entities, so
    that no HTML in it is live where the Markdown is rendered."""
    return html.escape(" ".join(str(text).split()), quote=False)


def _cell(c: dict[str, Any] | None) -> str:
    return "-" if c is None else f"{c['pass_at_1']:.1%} [{c['ci95'][0]:.0%}, {c['ci95'][1]:.0%}]"


def main_table(data: dict[str, Any]) -> list[list[str]]:
    cfg, cells = data["config"], data["cells"]
    rows = [["family", "model", "harness", "base weights", "+ imitation", "+ correction"]]
    for f in cfg["families"]:
        for label in ("baseline", "evolved"):
            rows.append([f, cfg["weak"], label] + [_cell(cells.get(f"eval:{f}:weak:{label}:{w}")) for w in ("base", "imitation", "correction")])
        for label in ("baseline", "evolved"):
            rows.append([f, cfg["expert"], label, _cell(cells.get(f"eval:{f}:expert:{label}:base")), "n/a", "n/a"])
    return rows


def render(data: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = data["config"]
    synthetic = any(is_synthetic(cfg.get(k, "")) for k in ("weak", "expert", "judge", "proposer"))
    plots = {
        "pass-rates": ("Pass rate per family and arm (test split, 95% CI)", plot_pass_rates(data)),
        "composition": ("Failure composition (share of hard failures, all families)", plot_composition(data)),
        "lineage": ("Harness lineage: candidate edits per iteration (accepted green, rejected red)", plot_lineage(data)),
        "usage": ("Edit usage under the evolved harness", plot_usage(data)),
        "drift": ("Planning drift of adapted weak models from their base", plot_drift(data)),
        "cost": ("Cost per stage", plot_cost(data)),
    }
    table = main_table(data)
    comp = composition_rows(data)
    lineage_html, lineage_md = [], []
    for f, lin in data["lineage"].items():
        items = "".join(
            f"<li class='{html.escape(d['outcome'].replace(' ', '-'))}'>it {d['iteration']}: <b>{html.escape(d['outcome'])}</b> "
            f"{html.escape(d.get('rationale', ''))} ({' + '.join(html.escape(o['op']) for o in d['ops'])}; {_evidence(d)})</li>"
            for d in lin["decisions"]
        )
        lineage_html.append(f"<h3>{f}: val {lin['val'][0]:.0%} → {lin['val'][1]:.0%}</h3><ul>{items}</ul>")
        lineage_md.append(f"### {f}: val {lin['val'][0]:.0%} -> {lin['val'][1]:.0%}\n" + "\n".join(
            f"- it {d['iteration']}: **{_md(d['outcome'])}** {_md(d.get('rationale', ''))} ({_evidence(d)})"
            for d in lin["decisions"]))
    rules = synthetic_adapters(cfg.get("weak", ""), (cfg.get("train") or {}).get("backend"))
    notice = f"<p class='notice'>Note: {TESTBED_NOTICE}.</p>" if synthetic else ""
    rules_line = f"<p class='notice'>Note: {SYNTHETIC_ADAPTER_RULES}.</p>" if rules else ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in table[1:])
    comp_rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{n}</td>" + "".join(f"<td>{s[c]:.0%}</td>" for c in FAILURE_CATEGORIES) + "</tr>"
        for k, s, n in comp)
    drift_rows = "".join(
        f"<tr><td>{f}</td><td>{h}</td><td>{a}</td><td>{d['distance']:.2f}</td>"
        + "".join(f"<td>{d['base'][k]:.2f} → {d['adapted'][k]:.2f}</td>" for k in FINGERPRINT) + "</tr>"
        for (f, h, a), d in sorted(data["drift"].items()))
    sections = "".join(f"<section><h2>{html.escape(t)}</h2><figure id='{k}'>{svg}</figure></section>" for k, (t, svg) in plots.items())
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>coevolve report {data['run_id']}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;font-size:13px;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px}}
.notice{{background:#fff3cd;border:1px solid #e0c36b;padding:.6em}}figure svg{{max-width:100%;height:auto}}
li.reject{{color:#a33}}li.accept{{color:#285}}</style></head><body>
<h1>coevolve experiment {html.escape(cfg.get('name', ''))} — run {data['run_id']}</h1>{notice}
<p>weak {html.escape(cfg['weak'])}, expert {html.escape(cfg['expert'])}, proposer {html.escape(cfg['proposer'])},
judge {html.escape(cfg['judge'])}; {cfg['repeats']} seeds per test instance.</p>
<h2>Main table: test pass@1 [95% CI]</h2><table><tr>{head}</tr>{body}</table>{rules_line}
<h2>Failure composition</h2><table><tr><th>model | harness | weights</th><th>hard failures</th>
{''.join(f'<th>{c}</th>' for c in FAILURE_CATEGORIES)}</tr>{comp_rows}</table>
<h2>Planning drift</h2><table><tr><th>family</th><th>harness</th><th>arm</th><th>distance</th>
{''.join(f'<th>{k}</th>' for k in FINGERPRINT)}</tr>{drift_rows}</table>
{sections}<h2>Lineage</h2>{''.join(lineage_html)}</body></html>"""
    html_path = out_dir / "report.html"
    html_path.write_text(page)
    for k, (_, svg) in plots.items():
        (out_dir / f"{k}.svg").write_text(svg)
    md = [f"# coevolve experiment {_md(cfg.get('name', ''))} — run {data['run_id']}", ""]
    if synthetic:
        md += [f"> Note: {TESTBED_NOTICE}.", ""]
    md += ["## Main table: test pass@1 [95% CI]", "", "| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
    md += ["| " + " | ".join(r) + " |" for r in table[1:]]
    if rules:
        md += ["", f"> Note: {SYNTHETIC_ADAPTER_RULES}."]
    md += ["", "## Failure composition", "", "| model / harness / weights | hard failures | " + " | ".join(FAILURE_CATEGORIES) + " |",
           "|" + "---|" * (2 + len(FAILURE_CATEGORIES))]
    md += [f"| {k} | {n} | " + " | ".join(f"{s[c]:.0%}" for c in FAILURE_CATEGORIES) + " |" for k, s, n in comp]
    md += ["", "## Planning drift", ""] + [f"- {f} / {h} / {a}: {d['distance']:.2f}" for (f, h, a), d in sorted(data["drift"].items())]
    md += [""] + [f"## {t}\n\n![{t}]({k}.svg)\n" for k, (t, _) in plots.items()]
    md += ["## Lineage", ""] + lineage_md
    md_path = out_dir / "report.md"
    md_path.write_text("\n".join(md) + "\n")
    summary = {"run_id": data["run_id"], "table": table, "composition": {k: s for k, s, _ in comp}}
    if rules:
        summary["adapter_rules"] = SYNTHETIC_ADAPTER_RULES
    (out_dir / "report.json").write_text(json.dumps(summary, indent=1))
    return html_path, md_path


def write_report(store: Any, run_id: str, out_dir: Path | None = None, judge_model: str | None = None) -> tuple[Path, Path]:
    return render(gather(store, run_id, judge_model), out_dir or store.root / "reports" / run_id)


# ------------------------------------------------------------------ co-evolution runs (`coevolve run`)
def write_run_report(store: Any, run_id: str, result: dict[str, Any] | None = None, out_dir: Path | None = None) -> tuple[Path, Path]:
    """The report of a `coevolve run`: per family, test pass@1 of the baseline, the evolved harness and
    the evolved harness with the adapter; every cycle's decisions with their evidence; cost per stage."""
    run = store.get_run(run_id)
    cfg = run.config
    cells = {e.payload["cell"]: e.payload for e in store.events(run_id, "cell")}
    out_dir = out_dir or store.root / "reports" / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    synthetic = any(is_synthetic((cfg.get(r) or {}).get("model", "")) for r in ("weak", "expert", "judge"))
    finals = {k.split(":")[1]: v for k, v in cells.items() if k.startswith("final:")}
    arms = ("baseline", "evolved", "evolved+adapter")
    table = [["family", *arms, "gain (pts, 95% CI)", "harness", "adapter"]]
    for f, v in finals.items():
        table.append([f, *(_cell(v["test"].get(a)) for a in arms),
                      f"{v['gain'] * 100:+.1f} [{v['gain_ci95'][0] * 100:+.1f}, {v['gain_ci95'][1] * 100:+.1f}]",
                      v["harness_id"][:12], v["adapter"] or "-"])
    decisions = []
    for k, v in cells.items():
        kind = k.split(":")[0]
        if kind == "evolve":
            edits = "; ".join(f"{a['rationale']} ({a['val_gain'] * 100:+.1f} pts)" for a in v.get("accepted", [])) or "no edit accepted"
            if v.get("guard"):  # the racing search: why its harness was or was not released
                edits += f" ({v['guard']})"
            decisions.append((k, f"harness for {v['model']}: val {v['val'][0]:.0%} -> {v['val'][1]:.0%}; {edits}"))
        elif kind == "data":
            decisions.append((k, (f"correction set: {v['rows']} rows ({v.get('new_rows', 0)} new), verified share "
                                 f"{v.get('verified_share')}, student pass rate {v.get('student_pass_rate')}")))
        elif kind == "accept":
            verdict = "kept" if v["accepted"] else "rejected"
            decisions.append((k, (f"adapter {v['candidate']} {verdict}: wins {v['wins']}, losses {v['losses']}, p={v['p_value']} "
                                 f"(val {v['val_current']:.0%} -> {v['val_candidate']:.0%})")))
    cost: dict[str, float] = defaultdict(float)
    for k, v in cells.items():
        cost[k.split(":")[0]] += v.get("seconds", 0.0)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(finals)), 3.2))
    width = 0.27
    for i, a in enumerate(arms):
        _pass_bars(ax, [(j + (i - 1) * width, v["test"].get(a)) for j, v in enumerate(finals.values())], width, label=a)
    _pass_axis(ax, list(finals))
    ax.legend(fontsize=7)
    svg = _svg(fig)
    weak = cfg.get("weak") or {}
    rules = synthetic_adapters(str(weak.get("model", "")), (cfg.get("train") or {}).get("backend"))
    notice = f"<p class='notice'>Note: {TESTBED_NOTICE}.</p>" if synthetic else ""
    rules_line = f"<p class='notice'>Note: {SYNTHETIC_ADAPTER_RULES}.</p>" if rules else ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in table[1:])
    items = "".join(f"<li><code>{html.escape(k)}</code> {html.escape(t)}</li>" for k, t in decisions)
    costs = "".join(f"<tr><td>{k}</td><td>{v:.0f} s</td></tr>" for k, v in sorted(cost.items()))
    stop = (result or run.result or {}).get("stop_reason", "")
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>coevolve run {run_id}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 8px}}
.notice{{background:#fff3cd;border:1px solid #e0c36b;padding:.6em}}figure svg{{max-width:100%;height:auto}}</style></head><body>
<h1>coevolve run {run_id} ({html.escape(cfg.get('name', ''))})</h1>{notice}<p>stopped: {html.escape(stop)}</p>
<h2>Held-out test split: pass@1 [95% CI]</h2><table><tr>{head}</tr>{body}</table>{rules_line}
<figure id="pass-rates">{svg}</figure><h2>Decisions</h2><ul>{items}</ul>
<h2>Wall time per stage</h2><table>{costs}</table></body></html>"""
    html_path = out_dir / "report.html"
    html_path.write_text(page)
    (out_dir / "pass-rates.svg").write_text(svg)
    md = [f"# coevolve run {run_id} ({_md(cfg.get('name', ''))})", ""]
    if synthetic:
        md += [f"> Note: {TESTBED_NOTICE}.", ""]
    md += [f"stopped: {_md(stop)}", "", "## Held-out test split: pass@1 [95% CI]", "",
           "| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
    md += ["| " + " | ".join(str(c) for c in r) + " |" for r in table[1:]]
    if rules:
        md += ["", f"> Note: {SYNTHETIC_ADAPTER_RULES}."]
    md += ["", "![pass rates](pass-rates.svg)", "", "## Decisions", ""] + [f"- `{k}` {_md(t)}" for k, t in decisions]
    md += ["", "## Wall time per stage", ""] + [f"- {k}: {v:.0f} s" for k, v in sorted(cost.items())]
    md_path = out_dir / "report.md"
    md_path.write_text("\n".join(md) + "\n")
    return html_path, md_path
