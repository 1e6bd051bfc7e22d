"""Expert tokens per training row: on-policy correction vs imitation, measured in the same run.

Both arms build their datasets from the same train split, under the same harness, with the same
student rollouts (the imitation arm also runs the expert on every train instance and keeps its passing
rollouts). Expert tokens: the rewriter's calls for correction, the expert's rollouts for imitation.
Prints per family and pooled expert tokens per row and the ratio correction / imitation (target <= 0.2).

    .venv/bin/python bench/adapt_cost.py [--families iot,payroll,browser] [--rows 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="iot,payroll,browser,refactor")
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from coevolve.agents.correction import BuildConfig, DatasetBuilder
    from coevolve.agents.expert import ExpertRewriter
    from coevolve.agents.judge import Judge
    from coevolve.agents.local import LocalBackend, LocalEvaluator
    from coevolve.analysis.summary import TESTBED_NOTICE
    from coevolve.services.gateway import Gateway
    from coevolve.services.logs import configure_logging
    from coevolve.tasks import get_family

    configure_logging(json_lines=False, level="error")
    gateway = Gateway()
    evaluator = LocalEvaluator(gateway)

    rows_out, totals = [], {"correction": [0, 0], "imitation": [0, 0]}
    for name in args.families.split(","):
        family = get_family(name)
        harness = family.baseline_harness()
        backend = LocalBackend(evaluator, Judge("synthetic/judge", gateway),
                               ExpertRewriter("synthetic/expert", gateway, family.handbook))
        student = None
        row = {"family": name}
        for arm in ("correction", "imitation"):
            cfg = BuildConfig(arm, name, "synthetic/weak", "synthetic/expert", "synthetic/judge", rows=args.rows,
                              samples=args.samples)
            builder = DatasetBuilder(cfg, harness, family.generate("train"), backend)
            student = student or builder.sample(cfg.model)
            expert_runs = builder.sample(cfg.expert) if arm == "imitation" else []
            rows, stats = builder.build(student, expert_runs)
            tokens = sum(t.tokens for t in expert_runs) if arm == "imitation" else int(stats["usage"]["expert"]["tokens"])
            row[arm] = {"rows": len(rows), "expert_tokens": tokens, "per_row": round(tokens / max(1, len(rows)), 1)}
            totals[arm][0] += tokens
            totals[arm][1] += len(rows)
            print(f"  {name} {arm}: {len(rows)} rows, {tokens} expert tokens", file=sys.stderr)
        row["ratio"] = round(row["correction"]["per_row"] / max(1e-9, row["imitation"]["per_row"]), 3)
        rows_out.append(row)
    pooled = {arm: t / max(1, n) for arm, (t, n) in totals.items()}
    ratio = pooled["correction"] / max(1e-9, pooled["imitation"])
    if args.json:
        print(json.dumps({"families": rows_out, "per_row": pooled, "ratio": round(ratio, 3), "target": 0.2,
                          "notice": TESTBED_NOTICE}))
        return
    print("expert tokens per training row (synthetic testbed)")
    for r in rows_out:
        print(f"  {r['family']:10s} correction {r['correction']['per_row']:>9.1f} ({r['correction']['rows']} rows)   "
              f"imitation {r['imitation']['per_row']:>9.1f} ({r['imitation']['rows']} rows)   ratio {r['ratio']:.2f}")
    print(f"pooled: correction {pooled['correction']:.1f} / imitation {pooled['imitation']:.1f} per row: "
          f"ratio {ratio:.2f} (target <= 0.2)")
    print(f"note: {TESTBED_NOTICE}")


if __name__ == "__main__":
    main()
