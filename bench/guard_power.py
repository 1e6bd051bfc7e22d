"""What a guarded release can certify in a given number of pairs, and what two refinements of the guard
would buy. Each part prints a table; the guard is `coevolve.agents.meta.guard` at its first attempt
(alpha_1 = alpha * 6 / pi^2, alpha 0.1 unless `--alpha`), without its abandon rule, which can only lower the chance of a release.

- `power`: the exact chance that an attempt releases a candidate of true gain g (over the released
  harness, on the guard's instance distribution) within n pairs, when a pair is discordant with chance D.
  The walk over discordant pairs is a dynamic programme over wins; the number of discordant pairs among
  n is Binomial(n, D).
- `oracle`: what a guarded search would gain if its search were free: it is given GEPA's own returned
  harnesses (their test gains from a vs_gepa cells file) and spends all, half or a quarter of the budget
  on guard pairs (2 rollouts each). Each run contributes g * P(release), with D = max(--discordance, g),
  against GEPA's sum of g. With all of the budget on the guard, it bounds any guarded search that finds
  no better harnesses than GEPA's.
- `mixing`: the chance of a release under other mixing distributions over the bet than the guard's
  uniform one. Each is a valid e-process, so the choice is free before the data.
- `instances`: the discordance rate on each guard instance between the baseline and a modest real edit,
  over seeds, for the weak model. The edit adds the first third of the family's handbook passages that
  state its rules. From it: the factor by which an oracle importance sampler of guard instances (pi_i
  proportional to sqrt(E d_i^2), the variance-optimal draw for the weighted increments d / (N pi)) would
  cut the increments' second moment against uniform draws. That factor bounds what importance-sampled
  guard pairs could buy; a sampler that learns pi from the attempt's own pairs gets less.

Usage: python bench/guard_power.py [--parts power,oracle,mixing,instances] [--cells docs/results/vs-gepa-v5/cells.jsonl]
       [--arm gepa@4] [--budget 80] [--families all] [--seeds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from coevolve.agents.meta.guard import attempt_alpha, e_value

GRID = np.linspace(0.0005, 0.9995, 2000)  # bets lambda = 2p - 1 on a win among discordant pairs


def mixture(kind: str) -> np.ndarray:
    """Weights over GRID: `uniform` (the guard's), `uniform<=c`, or `beta:a,b` on lambda."""
    if kind == "uniform":
        w = np.ones_like(GRID)
    elif kind.startswith("uniform<="):
        w = (GRID <= float(kind.split("<=")[1])).astype(float)
    elif kind.startswith("beta:"):
        a, b = map(float, kind[5:].split(","))
        w = GRID ** (a - 1) * (1 - GRID) ** (b - 1)
    else:
        raise ValueError(f"unknown mixture {kind!r}")
    return w / w.sum()


def crosses(k_max: int, threshold: float, kind: str) -> np.ndarray:
    """crossed[w, k]: whether the e-value after w wins in k discordant pairs reaches the threshold."""
    out = np.zeros((k_max + 1, k_max + 1), dtype=bool)
    if kind == "uniform":  # the guard's closed form, increasing in the wins at a fixed k: the fewest that cross
        for k in range(k_max + 1):
            lo, hi = 0, k + 1
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if e_value(mid, k - mid) >= threshold else (mid + 1, hi)
            out[lo : k + 1, k] = True
        return out
    w = mixture(kind)
    logw = np.where(w > 0, np.log(np.maximum(w, 1e-300)), -np.inf)
    up, down = np.log1p(GRID), np.log1p(-GRID)
    for k in range(k_max + 1):
        wins = np.arange(k + 1)[:, None]
        log_e = wins * up + (k - wins) * down + logw
        m = log_e.max(axis=1)
        out[: k + 1, k] = m + np.log(np.exp(log_e - m[:, None]).sum(axis=1)) >= math.log(threshold)
    return out


def release_by_discordant(p: float, crossed: np.ndarray) -> np.ndarray:
    """P(released within k discordant pairs), k = 0..k_max, when each is a win with chance p."""
    k_max = crossed.shape[1] - 1
    mass, done, out = np.zeros(k_max + 2), 0.0, [0.0]
    mass[0] = 1.0
    for k in range(1, k_max + 1):
        mass[1:] = mass[1:] * (1 - p) + mass[:-1] * p
        mass[0] *= 1 - p
        hit = crossed[: k + 1, k]
        done += mass[: k + 1][hit].sum()
        mass[: k + 1][hit] = 0.0
        out.append(done)
    return np.array(out)


def power(gain: float, discordance: float, pairs: int, crossed: np.ndarray) -> float:
    """P(an attempt releases within `pairs` pairs) for a candidate of true gain `gain`."""
    if gain <= 0:
        return 0.0
    d = max(discordance, gain)
    by_k = release_by_discordant((1 + gain / d) / 2, crossed)
    k = np.arange(pairs + 1)
    binom = np.exp([math.lgamma(pairs + 1) - math.lgamma(i + 1) - math.lgamma(pairs - i + 1) for i in k]
                   + k * math.log(d) + (pairs - k) * math.log1p(-d))
    return float((binom * by_k[np.minimum(k, len(by_k) - 1)]).sum())


def part_power(discordance: float, crossed: np.ndarray) -> dict:
    gains, pairs = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4), (20, 40, 75, 150, 250, 500)
    return {f"{g:.2f}": {n: round(power(g, discordance, n, crossed), 3) for n in pairs} for g in gains}


def part_oracle(cells: Path, arm: str, budget: int, share: float, discordance: float, crossed: np.ndarray) -> dict:
    rows = [json.loads(line) for line in cells.read_text().splitlines() if line.strip()]
    gains = [r["arms"][arm]["final_gain"] for r in rows if r["budget"] == budget and arm in r["arms"]]
    if not gains:
        raise SystemExit(f"error: no {arm} cells at budget {budget} in {cells}")
    pairs = int(share * budget) // 2
    bound = sum(g * power(g, discordance, pairs, crossed) for g in gains)
    return {"arm": arm, "budget": budget, "guard_share": share, "runs": len(gains), "guard_pairs": pairs, "gepa_gain": round(sum(gains) / len(gains), 4),
            "bound_gain": round(bound / len(gains), 4), "ratio": round(bound / sum(gains), 3) if sum(gains) > 0 else None}


def part_mixing(threshold: float, k_max: int) -> dict:
    kinds = ("uniform", "uniform<=0.8", "uniform<=0.6", "beta:1,2", "beta:2,4")
    table = {}
    for kind in kinds:
        crossed = crosses(k_max, threshold, kind)
        table[kind] = {f"{p:.2f}": round(float(release_by_discordant(p, crossed)[-1]), 3) for p in (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9)}
    return table


def part_instances(families: list[str], seeds: int) -> dict:
    from coevolve.agents.local import LocalEvaluator
    from coevolve.edits import apply_edit
    from coevolve.services.gateway import Gateway
    from coevolve.tasks import get_family
    from coevolve.values import AddRecipe, HarnessEdit, Recipe

    evaluator = LocalEvaluator(Gateway(), 32)
    out = {}
    for name in families:
        fam = get_family(name)
        instances = fam.generate("val")[4:]  # the guard's instances at the bench's --val-n 4
        rules = (*fam.facts, *fam.constraints)
        passages = [s for s in fam.handbook.sections if any(r.stated_in(s.text) for r in rules)]
        ops = tuple(AddRecipe(Recipe(s.id.replace("-", "_"), s.text)) for s in passages[: max(1, len(passages) // 3)])
        edited, base = apply_edit(fam.baseline_harness(), HarnessEdit(ops)), fam.baseline_harness()
        d = np.zeros((len(instances), seeds))
        for j, seed in enumerate(range(600, 600 + seeds)):  # seeds no bench run uses
            jobs = [(i, h, seed) for i in instances for h in (edited, base)]
            trajs = evaluator.evaluate(jobs, "synthetic/weak")
            d[:, j] = [int(a.passed) - int(b.passed) for a, b in zip(trajs[::2], trajs[1::2])]
        q = (d**2).mean(axis=1)
        uniform, oracle = q.mean(), np.sqrt(q).mean() ** 2
        out[name] = {"instances": len(instances), "gain": round(float(d.mean()), 3), "discordance": round(float(uniform), 3),
                     "never_discordant": int((q == 0).sum()), "oracle_is_factor": round(float(uniform / oracle), 2) if oracle else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="power,oracle,mixing")
    ap.add_argument("--alpha", type=float, default=0.1, help="the run's alpha (the guard's default)")
    ap.add_argument("--discordance", type=float, default=0.33, help="chance a pair is discordant (0.33: the instances part's median over the families)")
    ap.add_argument("--cells", type=Path, default=Path("docs/results/vs-gepa-v5/cells.jsonl"))
    ap.add_argument("--arm", default=None, help="the GEPA arm whose harnesses the oracle search is given (default: gepa@4 at 80, gepa@12 above)")
    ap.add_argument("--budgets", default="80,300")
    ap.add_argument("--families", default="all")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not (0 < args.discordance < 1 and 0 < args.alpha < 1):
        raise SystemExit("error: --discordance and --alpha must be in (0, 1)")
    parts = args.parts.split(",")
    threshold = 1 / attempt_alpha(args.alpha, 1)
    crossed = crosses(500, threshold, "uniform")
    result: dict = {"threshold": round(threshold, 3)}
    if "power" in parts:
        result["power"] = part_power(args.discordance, crossed)
    if "oracle" in parts:
        result["oracle"] = [part_oracle(args.cells, args.arm or ("gepa@4" if int(b) <= 80 else "gepa@12"), int(b), share, args.discordance,
                                        crossed) for b in args.budgets.split(",") for share in (1.0, 0.5, 0.25)]
    if "mixing" in parts:
        result["mixing"] = part_mixing(threshold, 40)
    if "instances" in parts:
        from coevolve.tasks import family_names

        result["instances"] = part_instances(family_names() if args.families == "all" else args.families.split(","), args.seeds)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"guard threshold at attempt 1: {result['threshold']} (alpha {args.alpha})")
    if "power" in result:
        print(f"\nP(release) by true gain (rows) and guard pairs (columns), discordance {args.discordance}:")
        cols = list(next(iter(result["power"].values())))
        print("gain  " + " ".join(f"{n:>6}" for n in cols))
        for g, row in result["power"].items():
            print(f"{g}  " + " ".join(f"{row[n]:>6.3f}" for n in cols))
    for o in result.get("oracle", []):
        print(f"oracle guarded search at {o['budget']} rollouts, {o['guard_share']:.0%} of them on {o['guard_pairs']} guard pairs, "
              f"{o['arm']}'s harnesses free ({o['runs']} runs): pooled gain {o['bound_gain']:+.4f} vs {o['gepa_gain']:+.4f}, ratio {o['ratio']}")
    if "mixing" in result:
        print("\nP(release within 40 discordant pairs) by win share p among them (columns), per mixture:")
        cols = list(result["mixing"]["uniform"])
        print(f"{'mixture':<14}" + " ".join(f"{p:>6}" for p in cols))
        for kind, row in result["mixing"].items():
            print(f"{kind:<14}" + " ".join(f"{row[p]:>6.3f}" for p in cols))
    if "instances" in result:
        print("\nper family: gain and discordance of a modest edit over the guard instances, and the oracle importance-sampling factor:")
        for name, r in result["instances"].items():
            print(f"{name:<9} N={r['instances']} gain {r['gain']:+.3f} discordance {r['discordance']:.3f} "
                  f"never discordant {r['never_discordant']} factor {r['oracle_is_factor']}")


if __name__ == "__main__":
    main()
