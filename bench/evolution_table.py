"""Harness evolution on the synthetic testbed, every family, against four controls, on the held-out
test split with 95% intervals over repeats.

Arms (the weak model, `synthetic/weak`, in every cell):
- baseline:     the family's generic harness;
- generic:      evolved by `synthetic/meta-generic` (hooks, context policy, pacing only; no text
                taken from the evidence or the handbook);
- no-handbook:  evolved by `synthetic/meta` without the handbook tools (it may still turn the grader's
                reasons into a checklist);
- evolved:      evolved by `synthetic/meta` with the handbook (the honest proposer);
- oracle:       the baseline plus every fact and constraint of the family's catalogue stated (the
                ceiling of what stating rules can do; no evolution).
Evolution uses the train and val splits only; every number printed is measured on test, each
instance at `--repeats` seeds. The ratio column is evolved / baseline pass@1.

    .venv/bin/python bench/evolution_table.py [--families iot,payroll] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ARMS = ("baseline", "generic", "no-handbook", "evolved", "oracle")
EVOLVED = {"generic": ("synthetic/meta-generic", False), "no-handbook": ("synthetic/meta", False), "evolved": ("synthetic/meta", True)}


def oracle_harness(family):
    from coevolve.edits import apply_edit
    from coevolve.values import AddRecipe, HarnessEdit, Recipe

    ops = tuple(AddRecipe(Recipe(i.id, i.statement)) for i in (*family.facts, *family.constraints))
    return apply_edit(family.baseline_harness(), HarnessEdit(ops, rationale="every rule stated (control)"))


def run_family(name: str, args, evaluator, gateway, root: Path) -> dict:
    from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
    from coevolve.analysis.stats import paired_difference, pass_rate
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family

    family = get_family(name)
    store = HarnessStore(root / name)
    harnesses = {"baseline": family.baseline_harness(), "oracle": oracle_harness(family)}
    evolution = {}
    for arm, (proposer, with_handbook) in EVOLVED.items():
        config = EvolveConfig(
            family=name, model="synthetic/weak", proposer=proposer, seed=args.seed, val_n=args.val_n, val_seeds=2,
            handbook=with_handbook, budget=Budget(iterations=args.iterations, rollouts=args.budget),
        )
        run_id = store.create_run("evolve", config.to_json())
        proposer_ = LLMProposer(
            proposer, gateway,
            family.handbook if with_handbook else None,
        )
        result = HarnessEvolution(config, evaluator, proposer_, store, run_id).run()
        harnesses[arm] = store.get_harness(result.harness_id)
        evolution[arm] = {"val": [round(result.baseline_val, 3), round(result.evolved_val, 3)],
                          "accepted": len(result.accepted), "rollouts": result.rollouts_used}
        print(f"  {name} {arm}: val {result.baseline_val:.2f} -> {result.evolved_val:.2f}, "
              f"{len(result.accepted)} edits, {result.rollouts_used} rollouts", file=sys.stderr)
    test = family.generate("test")
    rates = {}
    for arm in ARMS:
        jobs = [(i, harnesses[arm], 10_000 + r) for r in range(args.repeats) for i in test]
        rates[arm] = pass_rate(evaluator.evaluate(jobs, "synthetic/weak"))
    gain, gain_ci = paired_difference(rates["baseline"], rates["evolved"])
    return {
        "family": name,
        "test": {arm: {"pass_at_1": round(r.pass_at_1, 4), "ci95": [round(x, 4) for x in r.ci95]} for arm, r in rates.items()},
        "evolved_gain": round(gain, 4),
        "evolved_gain_ci95": [round(x, 4) for x in gain_ci],
        "ratio_evolved_over_baseline": round(rates["evolved"].pass_at_1 / max(rates["baseline"].pass_at_1, 1e-9), 3),
        "weak_boundary_share": round(rates["baseline"].boundary_share, 3),
        "evolution": evolution,
        "evolved_edits": [e for e in _lineage_edits(store, harnesses["evolved"].id)],
    }


def _lineage_edits(store, harness_id: str) -> list[str]:
    return [r.rationale for r in store.lineage(harness_id)[1:]]


def main() -> None:
    from coevolve.tasks import family_names

    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default=",".join(family_names()))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val-n", type=int, default=50)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--budget", type=int, default=2500, help="rollouts per evolution")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from coevolve.agents.local import LocalEvaluator
    from coevolve.analysis.summary import TESTBED_NOTICE
    from coevolve.services.gateway import Gateway
    from coevolve.services.logs import configure_logging

    configure_logging(json_lines=False, level="error")
    gateway = Gateway()
    evaluator = LocalEvaluator(gateway)
    root = Path(tempfile.mkdtemp())
    started = time.monotonic()
    rows = [run_family(f, args, evaluator, gateway, root) for f in args.families.split(",")]
    mean = {arm: sum(r["test"][arm]["pass_at_1"] for r in rows) / len(rows) for arm in ARMS}
    if args.json:
        print(json.dumps({"rows": rows, "mean": mean, "repeats": args.repeats, "notice": TESTBED_NOTICE}))
        return
    print(f"weak model on the test split, pass@1 [95% CI] over {args.repeats} seeds per instance "
          f"({time.monotonic() - started:.0f} s)")
    head = f"{'family':10s}" + "".join(f"{a:>20s}" for a in ARMS) + f"{'evolved/base':>14s}{'boundary':>10s}"
    print(head)
    for r in rows:
        cells = "".join(
            f"{r['test'][a]['pass_at_1']:>8.1%} [{r['test'][a]['ci95'][0]:.0%},{r['test'][a]['ci95'][1]:.0%}]".rjust(20)
            for a in ARMS
        )
        print(f"{r['family']:10s}{cells}{r['ratio_evolved_over_baseline']:>14.2f}{r['weak_boundary_share']:>10.0%}")
    print(f"{'mean':10s}" + "".join(f"{mean[a]:>20.1%}" for a in ARMS))
    print(f"note: {TESTBED_NOTICE}")


if __name__ == "__main__":
    main()
