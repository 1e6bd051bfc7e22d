"""The real-weights experiment's level-selection rule (docs/results/real-weights-design.md §4), measured.

For each level of the ladder (coevolve.tasks.helpers.LEVELS, in order) and each candidate family: the model
under the rule's **oracle** harness and its **baseline** harness (coevolve.tasks.helpers.selection_harnesses)
on the val split, all 50 instances x seeds {0, 1}. Every cell is one `coevolve eval` run in the store
(`--store`), so a cut-short cell continues where it stopped when the same command runs again (its
stored rollouts are reused), and the cells already finished are read back from `--out` (one JSON line
per cell) and not run again.

Order: the oracle cells of a level before its baseline cells, a level before the next, so the rule's
decision (the lowest level where at least two families' oracle val rate is within [10%, 90%]) is known
as early as the measurements allow; `--levels` and `--harnesses` restrict what runs (the table then
shows what is measured). The rule itself is `choose_level` below, fixed before any SmolLM2 run.

    # a served SmolLM2 (coevolve serve --config deploy/serve/cpu-smollm2.yaml --store .coevolve-real ...)
    .venv/bin/python bench/level_selection.py --model vllm/smollm2 --store .coevolve-real \\
        --out docs/results/level-selection.jsonl
    .venv/bin/python bench/level_selection.py --table --out docs/results/level-selection.jsonl   # table only

Progress on stderr; the table and the rule's decision (or `--json`: one object) on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from coevolve.analysis.cells import read_cells, write_cell

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

QUALIFY = (0.10, 0.90)  # a family qualifies at a level when its oracle val rate is in this range (inclusive)
MIN_FAMILIES = 2  # the experiment's level is the lowest level with at least this many qualifying families
MAX_FAMILIES = 3  # of which at most this many run: those whose oracle rate is nearest 50%
VAL_N, SEEDS = 50, 2


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def choose_level(rates: dict[tuple[str, str], float], levels: list[str], families: list[str]) -> dict[str, Any]:
    """The selection rule (design §4, steps 3-4) on oracle val rates {(level, family): rate}.

    Returns {"level": name or None, "families": [...], "qualifying": {level: [families]}, "complete":
    whether every cell the decision depends on is measured}. A level is decided only when all its
    families are measured and every lower level is measured and fails."""
    lo, hi = QUALIFY
    qualifying: dict[str, list[str]] = {}
    for level in levels:
        measured = [f for f in families if (level, f) in rates]
        qualifying[level] = [f for f in measured if lo <= rates[level, f] <= hi]
        if len(measured) < len(families):  # this level's decision waits for its missing cells
            return {"level": None, "families": [], "qualifying": qualifying, "complete": False}
        if len(qualifying[level]) >= MIN_FAMILIES:
            order = {f: i for i, f in enumerate(families)}
            best = sorted(qualifying[level], key=lambda f: (abs(rates[level, f] - 0.5), order[f]))
            return {"level": level, "families": best[:MAX_FAMILIES], "qualifying": qualifying, "complete": True}
    return {"level": None, "families": [], "qualifying": qualifying, "complete": True}


def cells_by_key(path: Path) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Finished cells from the JSON-lines file, by (model, level, family, harness)."""
    return {(c["model"], c["level"], c["family"], c["harness"]): c for c in read_cells(path)}


def run_cell(store: Path, model: str, level: str, family: str, kind: str, workers: int, n: int, in_flight: int) -> dict[str, Any]:
    """One cell: an eval run of `model` under the rule's `kind` harness at `level`'s params."""
    from coevolve.jobs import EvalRequest, run_eval, validate_eval
    from coevolve.store.store import HarnessStore
    from coevolve.tasks.helpers import LEVELS, selection_harnesses

    harness = selection_harnesses(family)[kind]
    with HarnessStore(store, create=True) as hs:
        hs.put_harness(harness, rationale=f"level selection: the rule's {kind} harness (docs/results/real-weights-design.md §3)")
        hs.set_alias(f"{family}:selection-{kind}", harness.id)
    params = tuple(sorted(LEVELS[level].items()))
    req = EvalRequest(family, "val", n, harness.id, (model,), workers, 0, None, repeats=SEEDS, params=params, max_in_flight=in_flight)
    started = time.perf_counter()
    [res] = run_eval(validate_eval(req, store), progress=sys.stderr.isatty())
    out = res.as_json()
    return {
        "model": model, "level": level, "params": dict(params), "family": family, "harness": kind,
        "harness_id": harness.id, "run_id": out["run_id"], "pass_at_1": out["pass_at_1"], "ci95": out["ci95"],
        "rollouts": out["n"], "passed": out["passed"], "errors": out["errors"], "failure_causes": out["failure_causes"],
        "mean_turns": out["mean_turns"], "total_tokens": out["total_tokens"], "seconds": round(time.perf_counter() - started, 1),
    }


def table(cells: dict[tuple[str, str, str, str], dict[str, Any]], model: str, levels: list[str], families: list[str]) -> str:
    sizes = sorted({c["rollouts"] for k, c in cells.items() if k[0] == model}) or [VAL_N * SEEDS]
    lines = [f"level selection: {model}, val, {'/'.join(map(str, sizes))} rollouts a cell ({SEEDS} seeds), pass@1 % [95% interval]", ""]
    head = "| family | " + " | ".join(f"{lv} oracle | {lv} baseline" for lv in levels) + " |"
    lines += [head, "|---" * (1 + 2 * len(levels)) + "|"]
    for f in families:
        row = [f]
        for lv in levels:
            for kind in ("oracle", "baseline"):
                c = cells.get((model, lv, f, kind))
                row.append("-" if c is None else f"{100 * c['pass_at_1']:.0f} [{100 * c['ci95'][0]:.0f}, {100 * c['ci95'][1]:.0f}]")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from coevolve.tasks.helpers import LEVELS, SMALL_LEVEL_FAMILIES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vllm/smollm2")
    ap.add_argument("--store", type=Path, default=Path(".coevolve-real"))
    ap.add_argument("--out", type=Path, default=Path("docs/results/level-selection.jsonl"))
    ap.add_argument("--levels", default=",".join(LEVELS), help="comma-separated, of " + ",".join(LEVELS))
    ap.add_argument("--families", default=",".join(SMALL_LEVEL_FAMILIES))
    ap.add_argument("--harnesses", default="oracle,baseline")
    ap.add_argument("--n", type=int, default=VAL_N, help="val instances per cell (the rule: 50)")
    ap.add_argument("--workers", type=int, default=4, help="rollout actors")
    ap.add_argument("--in-flight", type=int, default=16, help="rollouts at once (the served engine's max_num_seqs: a longer queue only waits, past the gateway's timeout)")
    ap.add_argument("--table", action="store_true", help="print the table of what --out holds; run nothing")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    levels = [x for x in a.levels.split(",") if x]
    families = [x for x in a.families.split(",") if x]
    kinds = [x for x in a.harnesses.split(",") if x]
    bad = [x for x in levels if x not in LEVELS] + [x for x in families if x not in SMALL_LEVEL_FAMILIES]
    bad += [x for x in kinds if x not in ("oracle", "baseline")]
    if bad or not (1 <= a.n <= VAL_N) or a.workers < 1 or a.in_flight < 1:
        print(f"error: unknown level/family/harness {bad} or --n outside 1..{VAL_N} or --workers/--in-flight < 1", file=sys.stderr)
        return 2
    cells = cells_by_key(a.out)
    if not a.table:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        order = [(lv, kind, f) for lv in levels for kind in ("oracle", "baseline") if kind in kinds for f in families]
        todo = [c for c in order if (a.model, c[0], c[2], c[1]) not in cells or cells[a.model, c[0], c[2], c[1]]["rollouts"] < a.n * SEEDS]
        progress(f"{len(order) - len(todo)} of {len(order)} cells already measured in {a.out}")
        for i, (lv, kind, f) in enumerate(todo, 1):
            progress(f"[{i}/{len(todo)}] {a.model} {lv} {LEVELS[lv]} {f} {kind} ...")
            cell = run_cell(a.store, a.model, lv, f, kind, a.workers, a.n, a.in_flight)
            progress(f"[{i}/{len(todo)}] {f} {lv} {kind}: {100 * cell['pass_at_1']:.0f}% in {cell['seconds']:.0f}s")
            with a.out.open("a") as fh:
                write_cell(fh, cell)
            cells[a.model, lv, f, kind] = cell
    # only cells of the rule's size decide (a pilot with --n < 50 decides nothing)
    rates = {(lv, f): c["pass_at_1"] for (m, lv, f, kind), c in cells.items()
             if m == a.model and kind == "oracle" and c["rollouts"] >= VAL_N * SEEDS}
    decision = choose_level(rates, list(LEVELS), list(SMALL_LEVEL_FAMILIES))
    if a.json:
        print(json.dumps({"cells": [c for k, c in sorted(cells.items()) if k[0] == a.model], "decision": decision}, sort_keys=True))
    else:
        print(table(cells, a.model, [lv for lv in LEVELS if any(k[0] == a.model and k[1] == lv for k in cells)] or levels, families))
        where = "not decided yet (cells of the rule's size missing)" if not decision["complete"] else (
            f"{decision['level']} with {', '.join(decision['families'])}" if decision["level"] else "no level qualifies")
        print(f"\nthe rule's experiment level: {where}; qualifying so far: {decision['qualifying']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
