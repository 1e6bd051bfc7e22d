"""The real-weights experiment's level-selection rule (docs/results/real-weights-design.md §4), measured.

For each level of the ladder (coevolve.tasks.helpers.LEVELS, in order) and each candidate family: the model
under the rule's **oracle** harness and its **baseline** harness (coevolve.tasks.helpers.selection_harnesses)
on the val split, at most all 50 instances x seeds {0, 1}, sequentially (design §10.3): in looks of 10
instances x 2 seeds, each look one `coevolve eval` run in the store (`--store`), the cell stopping at the
first look whose 99% Wilson interval lies wholly below 10%, above 90% or inside [10%, 90%]. A cut-short
look continues where it stopped when the same command runs again (its stored rollouts are reused), a
finished look is read back from the store, and finished cells are read back from `--out` (one JSON line
per cell) and not run again.

Order: the oracle cells of a level before its baseline cells, a level before the next, so the rule's
decision (the lowest level where at least two families' oracle val rate is within [10%, 90%]) is known
as early as the measurements allow; `--levels` and `--harnesses` restrict what runs (the table then
shows what is measured). The rule itself is `choose_level` below, fixed before any SmolLM2 run; its
sequential cells (`look_decision`, `verdict`) by the dated amendment of design §10, and one look for a
baseline cell whose oracle cell stopped below 10% (`cell_instances`, design §11).

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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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
# Sequential cells (design §10.3): looks of LOOK val instances x SEEDS seeds, decided at each look by a
# Wilson interval at 99% (5 looks x 1%, Bonferroni); after the last look by the point estimate.
LOOK, Z_LOOK = 10, 2.576
MAX_INFRA = 0.10  # a cell with a larger share of infrastructure failures is not decided (rerun it)
DECIDED_BY_LOOK = ("below", "above", "inside")
ONE_LOOK = "one look"  # a baseline cell whose oracle cell stopped below 10% (design §11)


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def look_decision(passed: int, scored: int) -> str | None:
    """What a look decides from the cell's tally so far: "below" (the 99% interval lies wholly under
    10%), "above" (wholly over 90%), "inside" (wholly within [10%, 90%]), or None (go on)."""
    from coevolve.analysis.rollouts import wilson_interval

    if scored <= 0:
        return None
    lo, hi = wilson_interval(passed, scored, Z_LOOK)
    if hi < QUALIFY[0]:
        return "below"
    if lo > QUALIFY[1]:
        return "above"
    if QUALIFY[0] <= lo and hi <= QUALIFY[1]:
        return "inside"
    return None


def verdict(cell: dict[str, Any]) -> bool | None:
    """Whether a measured cell's family qualifies: by the look that stopped it, else by the point estimate
    of a cell that ran all the rule's rollouts; None when the cell decides nothing (a pilot cut short)."""
    stopped = cell.get("stopped", "point")
    if stopped in DECIDED_BY_LOOK:
        return stopped == "inside"
    if cell["rollouts"] - cell.get("infra", 0) < VAL_N * SEEDS * (1 - MAX_INFRA):
        return None
    return QUALIFY[0] <= cell["pass_at_1"] <= QUALIFY[1]


def choose_level(decided: dict[tuple[str, str], tuple[float, bool]], levels: list[str], families: list[str]) -> dict[str, Any]:
    """The selection rule (design §4, steps 3-4, with §10.3's sequential cells) on the oracle cells
    {(level, family): (pass rate, qualifies)}.

    Returns {"level": name or None, "families": [...], "qualifying": {level: [families]}, "complete":
    whether every cell the decision depends on is measured}. A level is decided only when all its
    families are measured and every lower level is measured and fails."""
    qualifying: dict[str, list[str]] = {}
    for level in levels:
        measured = [f for f in families if (level, f) in decided]
        qualifying[level] = [f for f in measured if decided[level, f][1]]
        if len(measured) < len(families):  # this level's decision waits for its missing cells
            return {"level": None, "families": [], "qualifying": qualifying, "complete": False}
        if len(qualifying[level]) >= MIN_FAMILIES:
            order = {f: i for i, f in enumerate(families)}
            best = sorted(qualifying[level], key=lambda f: (abs(decided[level, f][0] - 0.5), order[f]))
            return {"level": level, "families": best[:MAX_FAMILIES], "qualifying": qualifying, "complete": True}
    return {"level": None, "families": [], "qualifying": qualifying, "complete": True}


def cell_instances(cells: dict[tuple[str, str, str, str], dict[str, Any]], model: str, level: str, family: str,
                   kind: str, n: int) -> int:
    """Val instances a cell may run: one look for a baseline cell whose family's oracle cell at the level
    stopped wholly below 10% (design §11), else `n`."""
    oracle = cells.get((model, level, family, "oracle"))
    return LOOK if kind == "baseline" and oracle is not None and oracle.get("stopped") == "below" else n


def cells_by_key(path: Path) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Finished cells from the JSON-lines file, by (model, level, family, harness)."""
    return {(c["model"], c["level"], c["family"], c["harness"]): c for c in read_cells(path)}


@contextmanager
def shared_pool(workers: int, in_flight: int) -> Iterator[Callable[[], Any]]:
    """A getter of one rollout pool for the block's looks, started at the first look that runs rollouts
    (a look read back from the store needs none) and shut down when the block ends."""
    from coevolve.jobs.runtime import rollout_pool

    with ExitStack() as stack:
        pools: list[Any] = []

        def get() -> Any:
            if not pools:
                pools.append(stack.enter_context(rollout_pool(None, workers, in_flight)))
            return pools[0]

        yield get


def run_look(store: Path, model: str, family: str, harness_id: str, params: tuple, start: int, n: int,
             workers: int, in_flight: int, pool: Callable[[], Any]) -> dict[str, Any]:
    """One look: val instances start .. start + n - 1 x SEEDS seeds, as an eval run on `pool()`. A look an
    earlier invocation finished (a done eval of the same request with few enough infra failures) is read
    back."""
    from coevolve.jobs import EvalRequest, run_eval, validate_eval
    from coevolve.store.store import HarnessStore

    req = EvalRequest(family, "val", n, harness_id, (model,), workers, 0, None, repeats=SEEDS, params=params,
                      max_in_flight=in_flight, start=start)
    want = {"family": family, "split": "val", "n": n, "harness_id": harness_id, "model": model, "seed": 0,
            "repeats": SEEDS, "params": dict(params)} | ({"start": start} if start else {})
    with HarnessStore(store, create=True) as hs:
        for run in reversed(hs.list_runs("eval", status="done")):
            cfg = {k: v for k, v in run.config.items() if k != "workers"}
            if cfg == want and run.result.get("infra", 0) <= MAX_INFRA * run.result["n"]:
                return run.result
    [res] = run_eval(validate_eval(req, store), progress=sys.stderr.isatty(), on=pool())
    return res.as_json()


def run_cell(store: Path, model: str, level: str, family: str, kind: str, workers: int, n: int, in_flight: int,
             pool: Callable[[], Any] | None = None) -> dict[str, Any]:
    """One sequential cell (design §10.3): `model` under the rule's `kind` harness at `level`'s params,
    look by look until a look decides or `n` instances are measured, on `pool()` (default: one pool for
    the cell's looks)."""
    if pool is None:
        with shared_pool(workers, in_flight) as own:
            return run_cell(store, model, level, family, kind, workers, n, in_flight, own)
    from coevolve.analysis.rollouts import wilson_interval
    from coevolve.store.store import HarnessStore
    from coevolve.tasks.helpers import LEVELS, selection_harnesses

    harness = selection_harnesses(family)[kind]
    with HarnessStore(store, create=True) as hs:
        hs.put_harness(harness, rationale=f"level selection: the rule's {kind} harness (docs/results/real-weights-design.md §3)")
        hs.set_alias(f"{family}:selection-{kind}", harness.id)
    params = tuple(sorted(LEVELS[level].items()))
    started = time.perf_counter()
    looks: list[dict[str, Any]] = []
    tally = {"rollouts": 0, "passed": 0, "infra": 0, "loop_ended": 0, "turns": 0.0, "tokens": 0}
    causes: dict[str, int] = {}
    stopped = "point"
    for first in range(0, n, LOOK):
        out = run_look(store, model, family, harness.id, params, first, min(LOOK, n - first), workers, in_flight, pool)
        tally["rollouts"] += out["n"]
        tally["passed"] += out["passed"]
        tally["infra"] += out.get("infra", 0)
        tally["loop_ended"] += out.get("loop_ended", 0)
        tally["turns"] += out["mean_turns"] * out["n"]
        tally["tokens"] += out["total_tokens"]
        for k, v in out["failure_causes"].items():
            causes[k] = causes.get(k, 0) + v
        scored = tally["rollouts"] - tally["infra"]
        decision = look_decision(tally["passed"], scored)
        looks.append({"run_id": out["run_id"], "instances": [first, first + out["n"] // SEEDS - 1], "passed": tally["passed"],
                      "scored": scored, "ci99": [round(x, 4) for x in wilson_interval(tally["passed"], scored, Z_LOOK)],
                      "decision": decision})
        progress(f"  look {len(looks)}: {tally['passed']}/{scored} passed, 99% {looks[-1]['ci99']} -> {decision or 'go on'}")
        if decision:
            stopped = decision
            break
    scored = tally["rollouts"] - tally["infra"]
    if tally["infra"] > MAX_INFRA * tally["rollouts"]:
        raise RuntimeError(f"{family} {level} {kind}: {tally['infra']} of {tally['rollouts']} rollouts were infrastructure "
                           "failures; the cell is not decided (fix the server and run again: finished looks are kept)")
    rate = tally["passed"] / scored if scored else 0.0
    cell = {
        "model": model, "level": level, "params": dict(params), "family": family, "harness": kind,
        "harness_id": harness.id, "pass_at_1": round(rate, 4),
        "ci95": [round(x, 4) for x in wilson_interval(tally["passed"], scored)], "rollouts": tally["rollouts"],
        "passed": tally["passed"], "infra": tally["infra"], "loop_ended": tally["loop_ended"], "failure_causes": causes,
        "mean_turns": round(tally["turns"] / max(tally["rollouts"], 1), 2), "total_tokens": tally["tokens"],
        "stopped": stopped, "looks": looks, "seconds": round(time.perf_counter() - started, 1),
    }
    with HarnessStore(store, create=True) as hs:
        cell["turns"] = turn_stats(hs, cell)
    return cell


def turn_stats(hs: Any, cell: dict[str, Any]) -> dict[str, int]:
    """A cell's turns, from its looks' rollouts in the store: assistant turns, those carrying exactly one
    schema-valid call of an offered tool, rollouts the loop rule ended, and rollouts the model ended
    (`finish`) at its first turn or later."""
    from coevolve.agents.executor import assistant_positions, openai_tool
    from coevolve.llm.constrained import message_call_error
    from coevolve.store.db import StoreError

    try:
        trajs = [t for look in cell["looks"] for t in hs.get_trajectories(look["run_id"])]
    except StoreError:  # the looks ran against another store (another machine's)
        trajs = []
    if not trajs:
        return dict.fromkeys(("rollouts", "assistant_turns", "schema_valid", "loop_ended", "finished_turn_1", "finished_later"), 0)
    tools = [openai_tool(t) for t in hs.get_harness(cell["harness_id"]).tools]
    verdicts = [message_call_error(t.messages[p], tools) is None for t in trajs for p in assistant_positions(t.messages)]
    ended = [len(t.turns) for t in trajs if t.error == "none"]
    return {"rollouts": len(trajs), "assistant_turns": len(verdicts), "schema_valid": sum(verdicts),
            "loop_ended": sum(t.loop_ended for t in trajs), "finished_turn_1": sum(n == 1 for n in ended),
            "finished_later": sum(n > 1 for n in ended)}


def turn_table(cells: dict[tuple[str, str, str, str], dict[str, Any]], store: Path, model: str) -> str:
    """Per measured cell, its `turn_stats` (recorded with the cell when it finished, else read from the
    store): the share of turns with one schema-valid call and the share of rollouts the loop rule ended."""
    from contextlib import nullcontext

    from coevolve.analysis.rollouts import wilson_interval
    from coevolve.store.store import HarnessStore

    lines = ["| level | family | harness | turns | one schema-valid call [95%] | rollouts loop-ended [95%] | ended by the model (finish) at turn 1 / later |",
             "|---|---|---|---|---|---|---|"]
    with HarnessStore(store, create=False) if (store / "store.db").is_file() else nullcontext() as hs:
        for (m, lv, f, kind), c in sorted(cells.items()):
            if m != model or "looks" not in c:
                continue
            st = c.get("turns") or (turn_stats(hs, c) if hs is not None else None)
            if not st or not st["rollouts"]:
                lines.append(f"| {lv} | {f} | {kind} | rollouts not in this store | | | |")
                continue
            vi, li = wilson_interval(st["schema_valid"], st["assistant_turns"]), wilson_interval(st["loop_ended"], st["rollouts"])
            lines.append(f"| {lv} | {f} | {kind} | {st['assistant_turns']} | {st['schema_valid'] / max(st['assistant_turns'], 1):.0%}"
                         f" [{vi[0]:.0%}, {vi[1]:.0%}] | {st['loop_ended']}/{st['rollouts']} [{li[0]:.0%}, {li[1]:.0%}]"
                         f" | {st['finished_turn_1']} / {st['finished_later']} |")
    return "\n".join(lines)


def table(cells: dict[tuple[str, str, str, str], dict[str, Any]], model: str, levels: list[str], families: list[str]) -> str:
    """Each cell: pass@1 % [95% Wilson interval] / rollouts, and how it stopped (below, above, inside:
    a look decided; point: all its looks ran)."""
    lines = [f"level selection: {model}, val, pass@1 % [95% interval] / rollouts (how the cell stopped)", ""]
    head = "| family | " + " | ".join(f"{lv} oracle | {lv} baseline" for lv in levels) + " |"
    lines += [head, "|---" * (1 + 2 * len(levels)) + "|"]
    for f in families:
        row = [f]
        for lv in levels:
            for kind in ("oracle", "baseline"):
                c = cells.get((model, lv, f, kind))
                row.append("-" if c is None else f"{100 * c['pass_at_1']:.0f} [{100 * c['ci95'][0]:.0f}, {100 * c['ci95'][1]:.0f}]"
                           f" / {c['rollouts']} ({c.get('stopped', 'point')})")
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
    ap.add_argument("--turns", action="store_true", help="with the table: each cell's schema-valid turns and loop-ended rollouts, read from --store")
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
        def measured(c: dict[str, Any] | None) -> bool:
            return c is not None and (c.get("stopped") in (*DECIDED_BY_LOOK, ONE_LOOK) or c["rollouts"] >= a.n * SEEDS)

        todo = [c for c in order if not measured(cells.get((a.model, c[0], c[2], c[1])))]
        progress(f"{len(order) - len(todo)} of {len(order)} cells already measured in {a.out}")
        with shared_pool(a.workers, a.in_flight) as pool:  # one pool for every cell's looks
            for i, (lv, kind, f) in enumerate(todo, 1):
                progress(f"[{i}/{len(todo)}] {a.model} {lv} {LEVELS[lv]} {f} {kind} ...")
                n = cell_instances(cells, a.model, lv, f, kind, a.n)
                cell = run_cell(a.store, a.model, lv, f, kind, a.workers, n, a.in_flight, pool)
                if n < a.n and cell["stopped"] == "point":
                    cell["stopped"] = ONE_LOOK
                progress(f"[{i}/{len(todo)}] {f} {lv} {kind}: {100 * cell['pass_at_1']:.0f}% of {cell['rollouts']}"
                         f" ({cell['stopped']}) in {cell['seconds']:.0f}s")
                with a.out.open("a") as fh:
                    write_cell(fh, cell)
                cells[a.model, lv, f, kind] = cell
    # a cell decides when a look stopped it or it ran the rule's 50 x 2 (a pilot cut short decides nothing)
    decided = {(lv, f): (c["pass_at_1"], v) for (m, lv, f, kind), c in cells.items()
               if m == a.model and kind == "oracle" and (v := verdict(c)) is not None}
    decision = choose_level(decided, list(LEVELS), list(SMALL_LEVEL_FAMILIES))
    if a.json:
        print(json.dumps({"cells": [c for k, c in sorted(cells.items()) if k[0] == a.model], "decision": decision}, sort_keys=True))
    else:
        print(table(cells, a.model, [lv for lv in LEVELS if any(k[0] == a.model and k[1] == lv for k in cells)] or levels, families))
        where = "not decided yet (cells of the rule's size missing)" if not decision["complete"] else (
            f"{decision['level']} with {', '.join(decision['families'])}" if decision["level"] else "no level qualifies")
        print(f"\nthe rule's experiment level: {where}; qualifying so far: {decision['qualifying']}")
        if a.turns:
            print("\n" + turn_table(cells, a.store, a.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
