"""How much of a family's handbook that states its rules the proposer's handbook search reaches (issue 33,
item 9): per family, the rule sections (handbook sections in which one of the family's facts or
constraints is stated, by the family's own stance check), and of those, the ones whose text reaches a
proposal as a recipe, over proposer calls on the baseline's failed train rollouts, each through the real
proposer path (`LLMProposer` and the gateway) as the search makes them.

    .venv/bin/python bench/handbook_reach.py --calls 5
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any


def rule_sections(family: Any) -> dict[str, list[str]]:
    """Section id -> the ids of the rules (facts and constraints) its text states."""
    out: dict[str, list[str]] = {}
    for s in family.handbook.sections:
        stated = [r.id for r in (*family.facts, *family.constraints) if r.stance(f"{s.title}\n{s.text}") is True]
        if stated:
            out[s.id] = stated
    return out


def reached(family_name: str, calls: int, model: str, proposer_model: str, batch: int) -> dict[str, Any]:
    from coevolve.agents.local import LocalEvaluator
    from coevolve.agents.meta import LLMProposer
    from coevolve.agents.meta.evidence import build_evidence
    from coevolve.services.gateway import Gateway
    from coevolve.tasks import get_family
    from coevolve.values import AddRecipe

    family = get_family(family_name)
    rules = rule_sections(family)
    texts = {s.id: " ".join(s.text.split()) for s in family.handbook.sections}
    gateway = Gateway()
    evaluator = LocalEvaluator(client=gateway)
    proposer = LLMProposer(proposer_model, gateway,
                           family.handbook)
    baseline = family.baseline_harness()
    train = family.generate("train")
    hit: set[str] = set()
    per_call = []
    for c in range(calls):
        instances = random.Random(f"handbook-reach|{family_name}|{c}").sample(train, min(batch, len(train)))
        trajs = evaluator.evaluate([(i, baseline, c) for i in instances], model)
        failures = [t for t in trajs if not t.passed and t.error != "infra"]
        if not failures:
            per_call.append([])
            continue
        proposals, _ = proposer.propose(build_evidence(family_name, baseline, failures, [], 8), baseline, 3, seed=c)
        recipes = {" ".join(op.recipe.text.split()) for p in proposals if p.edit for op in p.edit.ops
                   if isinstance(op, AddRecipe)}
        these = sorted(sid for sid in rules if any(texts[sid] in r or r in texts[sid] for r in recipes))
        per_call.append(these)
        hit.update(these)
    return {"family": family_name, "rule_sections": len(rules), "reached": len(hit), "sections": sorted(rules),
            "reached_sections": sorted(hit), "per_call": per_call}


def main(argv: list[str] | None = None) -> None:
    from coevolve.services.logs import configure_logging
    from coevolve.tasks import family_names

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="all")
    ap.add_argument("--calls", type=int, default=5, help="proposer calls per family (train batches of the baseline)")
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--model", default="synthetic/weak")
    ap.add_argument("--proposer", default="synthetic/meta")
    args = ap.parse_args(argv)
    configure_logging(json_lines=False, level="error")
    families = family_names() if args.families == "all" else args.families.split(",")
    total = [0, 0]
    print("| family | rule sections | reached by the proposer's recipes | share |\n|---|---|---|---|")
    rows = []
    for f in families:
        r = reached(f, args.calls, args.model, args.proposer, args.batch)
        rows.append(r)
        total[0] += r["rule_sections"]
        total[1] += r["reached"]
        share = r["reached"] / r["rule_sections"] if r["rule_sections"] else 0.0
        print(f"| {f} | {r['rule_sections']} | {r['reached']} | {share:.2f} |", flush=True)
    print(f"| all | {total[0]} | {total[1]} | {total[1] / max(1, total[0]):.2f} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
