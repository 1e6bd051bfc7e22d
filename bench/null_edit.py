"""False-accept rate of harness acceptance under a null edit, on the synthetic testbed.

Each trial runs one real evolution iteration (`agents.meta.loop.HarnessEvolution`, the paired,
multi-seed, early-stopping comparison that `coevolve evolve` uses) whose proposer offers exactly one
edit that states nothing (a politeness section). The edit changes the prompt, so the stochastic
synthetic model resamples every rollout: any accept is a false accept. Trials rotate over the seven
families and use distinct seeds. Prints the false-accept rate with a 95% interval against `--alpha`
(the ratio the bench reports), and the share of discordant pairs (how much noise the test met).

    .venv/bin/python bench/null_edit.py --trials 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from math import sqrt
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

NULL_EDIT = {"rationale": "tone", "targets": "other",
             "ops": [{"op": "set_section", "name": "tone", "text": "Be polite, concise and professional in every message."}]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--val-n", type=int, default=25)
    ap.add_argument("--val-seeds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from agents.executor import Completion
    from agents.local import LocalEvaluator
    from agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
    from agents.report import TESTBED_NOTICE
    from harness_store.store import HarnessStore
    from services.logs import configure_logging
    from tasks import family_names

    configure_logging(json_lines=False, level="error")
    answer = json.dumps({"edits": [NULL_EDIT]})

    def null_proposer(model, messages, tools, seed):
        return Completion({"role": "assistant", "content": answer}, 0, 0, 0.0)

    evaluator = LocalEvaluator()
    families = family_names()
    accepts = decided = wins = losses = pairs = 0
    root = Path(tempfile.mkdtemp())
    for trial in range(args.trials):
        family = families[trial % len(families)]
        config = EvolveConfig(
            family=family, model="synthetic/weak", seed=1000 + trial, train_batch=10, val_n=args.val_n,
            val_seeds=args.val_seeds, candidates=1, alpha=args.alpha, budget=Budget(iterations=1, rollouts=10_000),
        )
        store = HarnessStore(root / f"t{trial}")
        run_id = store.create_run("evolve", config.to_json())
        HarnessEvolution(config, evaluator, LLMProposer("x/null", null_proposer), store, run_id).run()
        for e in store.events(run_id, "decision"):
            decided += 1
            accepts += e.payload["outcome"] == "accept"
            wins += e.payload["wins"]
            losses += e.payload["losses"]
            pairs += e.payload["evaluated"]
        if not args.json and (trial + 1) % 20 == 0:
            print(f"  {trial + 1}/{args.trials} trials: {accepts} accepted of {decided} decided", file=sys.stderr)
    rate = accepts / decided if decided else 0.0
    half = 1.959964 * sqrt(rate * (1 - rate) / decided) if decided else 0.0
    out = {
        "trials": args.trials, "decided": decided, "false_accepts": accepts, "false_accept_rate": round(rate, 4),
        "ci95": [round(max(0.0, rate - half), 4), round(rate + half, 4)], "alpha": args.alpha,
        "rate_over_alpha": round(rate / args.alpha, 3), "pairs_evaluated": pairs,
        "discordant_share": round((wins + losses) / pairs, 4) if pairs else 0.0, "notice": TESTBED_NOTICE,
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"null edit, {decided} decisions over {args.trials} trials ({pairs} pairs evaluated, "
          f"{out['discordant_share']:.0%} of them discordant: the noise the rule met)")
    print(f"false-accept rate {rate:.3f} [{out['ci95'][0]:.3f}, {out['ci95'][1]:.3f}] vs alpha {args.alpha}: "
          f"ratio {out['rate_over_alpha']:.2f}")
    print(f"note: {TESTBED_NOTICE}")


if __name__ == "__main__":
    main()
