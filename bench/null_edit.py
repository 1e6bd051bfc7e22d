"""Per-iteration false-accept rate of harness acceptance under null edits, on the synthetic testbed.

Each trial runs one real evolution iteration (`coevolve.agents.meta.loop.HarnessEvolution`, the paired,
multi-seed, early-stopping comparison that `coevolve evolve` uses) whose proposer offers
`--candidates` different edits that state nothing a task needs (a tone section, a greeting section, a
sentence of appreciation, ...). Each edit changes the prompt, so the stochastic synthetic model
resamples every rollout: the comparison meets real noise and any accept is a false accept. An
iteration with any accepted candidate is one false accept (the loop keeps at most one edit per
iteration). Trials rotate over the seven families and use distinct seeds.

Every trial is run under both acceptance rules, on the same seeds: the family-wise rule (the loop's
default: each of the k candidates compared at alpha / k) and the old per-candidate rule (each at
alpha, `EvolveConfig(family_wise=False)`), whose rate can reach k x alpha. Prints, per rule, the
per-iteration false-accept rate with a 95% Wilson interval beside alpha and their ratio, and the share
of discordant pairs (how much noise the test met).

    .venv/bin/python bench/null_edit.py --trials 200 --candidates 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from math import sqrt
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def section_edit(rationale: str, op: str, section: str, text: str) -> dict[str, Any]:
    """An edit as the proposer would answer it: one section op."""
    return {"rationale": rationale, "targets": "other", "ops": [{"op": op, "name": section, "text": text}]}


# Edits that state nothing a task needs (no domain fact, no constraint, no tool advice); each makes a
# different harness, so every candidate resamples every rollout on its own.
NULL_EDITS: list[dict[str, Any]] = [
    section_edit("tone", "set_section", "tone", "Be polite, concise and professional in every message."),
    section_edit(
        "greeting", "set_section", "greeting", "Start your first message with a short, friendly greeting."
    ),
    section_edit("appreciation", "append_section", "role", "We appreciate careful work."),
    section_edit("sign-off", "set_section", "sign_off", "End your last message with a brief thank-you."),
    section_edit("calm", "set_section", "mood", "Stay calm and friendly, whatever happens."),
]
RULES = {"family-wise": True, "per-candidate": False}  # name -> EvolveConfig.family_wise
Z95 = 1.959964


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (sound near 0, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    rate = successes / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarise(rule: str, tallies: dict[str, Any], alpha: float, k: int) -> dict[str, Any]:
    decided, accepts = tallies["iterations"], tallies["false_accepts"]
    rate = accepts / decided if decided else 0.0
    low, high = wilson_interval(accepts, decided)
    pairs = tallies["pairs"]
    return {
        "rule": rule,
        "alpha": alpha,
        "alpha_effective": tallies["alpha_effective"],
        "k": k,
        "iterations": decided,
        "false_accepts": accepts,
        "false_accept_rate": round(rate, 4),
        "ci95": [round(low, 4), round(high, 4)],
        "rate_over_alpha": round(rate / alpha, 3),
        "candidates_accepted": tallies["candidates_accepted"],
        "candidates_compared": tallies["candidates_compared"],
        "pairs_evaluated": pairs,
        "discordant_share": round(tallies["discordant"] / pairs, 4) if pairs else 0.0,
        "rollouts": tallies["rollouts"],
        "seconds": round(tallies["seconds"], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200, help="iterations per rule (one iteration per trial)")
    ap.add_argument(
        "--candidates", type=int, default=3, help=f"null edits per iteration (1..{len(NULL_EDITS)})"
    )
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--val-n", type=int, default=25)
    ap.add_argument("--val-seeds", type=int, default=2)
    ap.add_argument("--rules", default=",".join(RULES), help=f"comma-separated, of: {', '.join(RULES)}")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not 1 <= args.candidates <= len(NULL_EDITS):
        ap.error(f"--candidates must be in 1..{len(NULL_EDITS)}")
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    if not rules or any(r not in RULES for r in rules):
        ap.error(f"--rules: choose from {', '.join(RULES)}")

    from coevolve.agents.local import LocalEvaluator
    from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
    from coevolve.analysis.summary import TESTBED_NOTICE
    from coevolve.llm.contract import Completion
    from coevolve.services.gateway import Gateway
    from coevolve.services.logs import configure_logging
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import family_names

    configure_logging(json_lines=False, level="error")
    answer = json.dumps({"edits": NULL_EDITS[: args.candidates]})

    class NullClient:
        """A role client whose every reply is the null edits."""

        budget = staticmethod(Gateway.budget)

        def complete(self, model, messages, tools, seed=0):
            return Completion({"role": "assistant", "content": answer}, 0, 0, 0.0)

    evaluator = LocalEvaluator(Gateway())
    families = family_names()
    tallies = {
        rule: {
            "iterations": 0,
            "false_accepts": 0,
            "candidates_accepted": 0,
            "candidates_compared": 0,
            "pairs": 0,
            "discordant": 0,
            "rollouts": 0,
            "seconds": 0.0,
            "alpha_effective": None,
        }
        for rule in rules
    }
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="null-edit-"))
    try:
        for trial in range(args.trials):
            family = families[trial % len(families)]
            for rule in rules:
                config = EvolveConfig(
                    family=family,
                    model="synthetic/weak",
                    seed=1000 + trial,
                    train_batch=10,
                    val_n=args.val_n,
                    val_seeds=args.val_seeds,
                    candidates=args.candidates,
                    alpha=args.alpha,
                    family_wise=RULES[rule],
                    budget=Budget(iterations=1, rollouts=100_000),
                )
                store = HarnessStore(root / f"t{trial}-{rule}")
                run_id = store.create_run("evolve", config.to_json())
                t0 = time.monotonic()
                result = HarnessEvolution(
                    config, evaluator, LLMProposer("x/null", NullClient()), store, run_id
                ).run()
                tally = tallies[rule]
                tally["seconds"] += time.monotonic() - t0
                tally["rollouts"] += result.rollouts_used
                decisions = [e.payload for e in store.events(run_id, "decision")]
                if decisions:  # an iteration whose train batch had no failure proposes nothing: no test
                    tally["iterations"] += 1
                    tally["false_accepts"] += any(d["outcome"] == "accept" for d in decisions)
                    tally["alpha_effective"] = decisions[0]["alpha_effective"]
                for d in decisions:
                    tally["candidates_compared"] += 1
                    tally["candidates_accepted"] += d["outcome"] == "accept"
                    tally["discordant"] += d["wins"] + d["losses"]
                    tally["pairs"] += d["evaluated"]
                shutil.rmtree(root / f"t{trial}-{rule}", ignore_errors=True)
            if not args.json and (trial + 1) % 20 == 0:
                done = "; ".join(
                    f"{r}: {t['false_accepts']} of {t['iterations']}" for r, t in tallies.items()
                )
                print(
                    f"  {trial + 1}/{args.trials} trials ({time.monotonic() - started:.0f} s): {done}",
                    file=sys.stderr,
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = {
        "trials": args.trials,
        "candidates": args.candidates,
        "val_n": args.val_n,
        "val_seeds": args.val_seeds,
        "families": families,
        "null_edits": [e["rationale"] for e in NULL_EDITS[: args.candidates]],
        "rules": [summarise(rule, tallies[rule], args.alpha, args.candidates) for rule in rules],
        "wall_seconds": round(time.monotonic() - started, 1),
        "notice": TESTBED_NOTICE,
    }
    if args.json:
        print(json.dumps(out))
        return
    edits = ", ".join(out["null_edits"])
    print(
        f"null edits ({edits}): k = {args.candidates} per iteration, {args.trials} trials over "
        f"{len(families)} families, val {args.val_n} instances x {args.val_seeds} seeds, "
        f"{out['wall_seconds']:.0f} s wall"
    )
    for s in out["rules"]:
        low, high = s["ci95"]
        threshold = "-" if s["alpha_effective"] is None else f"{s['alpha_effective']:.4g}"
        print(
            f"  {s['rule']:<13} false-accept rate per iteration {s['false_accept_rate']:.3f} "
            f"[{low:.3f}, {high:.3f}] ({s['false_accepts']} of {s['iterations']} iterations) "
            f"vs alpha {s['alpha']}: ratio {s['rate_over_alpha']:.2f}"
        )
        print(
            f"  {'':<13} threshold per candidate {threshold}; {s['candidates_accepted']} of "
            f"{s['candidates_compared']} candidates accepted; {s['discordant_share']:.0%} of "
            f"{s['pairs_evaluated']} pairs discordant; {s['rollouts']} rollouts, {s['seconds']:.0f} s"
        )
    print(f"note: {TESTBED_NOTICE}")


if __name__ == "__main__":
    main()
