"""Analysis of rollouts: failure composition, the planning-style fingerprint and its drift,
and agreement statistics for a judge against the testbed's answer key (locus accuracy beside the
random-turn and first-error baselines, on all keyed failures and where the first-error rule is wrong).

This is analysis code: it may read `Trajectory.ground_truth` (the answer key) to score a judge; no
role ever calls it. Decisive turns come from the counterfactual, which a rollout does not compute:
pass trajectories through `coevolve.testbed.counterfactual.with_counterfactuals` first. Infra errors are never
failures and never get a category.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from math import sqrt
from typing import Any

from coevolve.analysis.stats import Z95, mean_ci
from coevolve.values import FAILURE_CATEGORIES, FailureLabel, Trajectory

READ_VERBS = ("read", "list", "get", "search", "show", "fetch", "find", "look", "query", "run", "return", "view", "open", "go ")


def reads_only(name: str, description: str = "") -> bool:
    """Whether a tool only reads or checks, judged from its name and description as a reader would."""
    first = (name.replace("_", " ").strip().lower(), description.strip().lower())
    return any(w.startswith(READ_VERBS) for w in first)


def hard_failures(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Task failures only: passes and infra errors excluded."""
    return [t for t in trajectories if not t.passed and t.error != "infra"]


def composition(labels: Sequence[FailureLabel]) -> dict[str, float]:
    """Share of hard failures per category; the shares sum to 1 (all six categories present)."""
    counts = Counter(label.category for label in labels)
    unknown = set(counts) - set(FAILURE_CATEGORIES)
    if unknown:
        raise ValueError(f"labels outside the taxonomy: {sorted(unknown)}")
    n = sum(counts.values())
    return {c: (counts[c] / n if n else 0.0) for c in FAILURE_CATEGORIES}


def answer_key_category(t: Trajectory) -> str | None:
    """The testbed's category of a failed rollout: the cause recorded at its decisive turn (the
    trajectory must carry its counterfactual: `coevolve.testbed.counterfactual.with_counterfactuals`)."""
    decisive = t.ground_truth.get("decisive_turn")
    turns = t.ground_truth.get("turns") or []
    if decisive is None or decisive >= len(turns) or not turns[decisive]:
        return None
    cause = turns[decisive].get("cause") or {}
    return cause.get("category", "other")


# ------------------------------------------------------------------ agreement
def confusion(pairs: Sequence[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """truth -> predicted -> count, over the six categories."""
    table = {t: {p: 0 for p in FAILURE_CATEGORIES} for t in FAILURE_CATEGORIES}
    for truth, predicted in pairs:
        table[truth][predicted] += 1
    return table


def cohen_kappa(pairs: Sequence[tuple[str, str]]) -> float:
    """Cohen's kappa of two labelings (1 = perfect, 0 = chance agreement)."""
    n = len(pairs)
    if not n:
        return 0.0
    observed = sum(a == b for a, b in pairs) / n
    ta, tb = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    expected = sum(ta[c] * tb[c] for c in set(ta) | set(tb)) / (n * n)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


# ------------------------------------------------------------------ failure-locus accuracy
LOCUS_GUESSERS = ("judge", "first_error", "random")
# all keyed failures; those where the first error observation is not the decisive turn (none, or another
# turn); those where the rule's guess (the first error, else its fallback, the last action) misses it
LOCUS_SUBSETS = ("all", "first_error_wrong", "rule_wrong")


def wilson_interval(hits: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion (defined at 0 and n hits and for small n)."""
    if n <= 0:
        return 0.0, 0.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def locus_row(
    t: Trajectory, judge_turn: int, first_error: int | None, guess: int, unknown: bool = False
) -> dict[str, Any]:
    """One keyed failure for `locus_accuracy`: its decisive turn (the answer key), the judge's turn,
    the first error observation's turn (None: there is none), the rule-based guess (the first error
    observation, else its fallback), and whether the judge's answer was unparseable."""
    truth = t.ground_truth["decisive_turn"]
    return {"truth": truth, "turns": len(t.turns), "judge": judge_turn, "first_error": guess,
            "first_error_observed": first_error is not None,
            "first_error_wrong": first_error is None or first_error != truth, "rule_wrong": guess != truth,
            "unknown": unknown}


def _random_chance(row: dict[str, Any]) -> tuple[float, float]:
    """A uniformly random turn's chance of being exact and within one turn of the truth."""
    n, truth = row["turns"], row["truth"]
    near = sum(1 for i in range(n) if abs(i - truth) <= 1)
    return 1 / n, near / n


def locus_accuracy(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Exact and within-one-turn locus accuracy of the judge and two baselines (the first error
    observation, a uniformly random turn), on all keyed failures, on the subset where the first-error
    rule is wrong (no error observation, or its first error is not the decisive turn), and on the
    subset where the rule's guess misses (where it has no error observation its guess is the last
    action before finishing, which may still be right; here the rule scores 0 exact by definition),
    with counts and 95% intervals: Wilson for the judge and the first-error rule (rollouts as the
    unit; repeats of an instance are correlated, so the intervals are somewhat optimistic), and for
    the random turn its expected accuracy (no draw) with a normal interval over failures."""
    out: dict[str, Any] = {}
    for subset in LOCUS_SUBSETS:
        sub = [r for r in rows if subset == "all" or r[subset]]
        entry: dict[str, Any] = {"n": len(sub)}
        if subset != "all":
            entry["no_error_observation"] = sum(not r["first_error_observed"] for r in sub)
            entry["first_error_not_decisive"] = sum(r["first_error_observed"] for r in sub)
        for guesser in LOCUS_GUESSERS:
            scores: dict[str, Any] = {}
            for metric in ("exact", "within_one"):
                if not sub:
                    scores[metric], scores[f"{metric}_ci95"] = None, None
                    continue
                if guesser == "random":
                    value, ci = mean_ci([_random_chance(r)[metric == "within_one"] for r in sub])
                else:
                    slack = 0 if metric == "exact" else 1
                    hits = sum(abs(r[guesser] - r["truth"]) <= slack for r in sub)
                    value, ci = hits / len(sub), wilson_interval(hits, len(sub))
                scores[metric], scores[f"{metric}_ci95"] = round(value, 4), [round(ci[0], 4), round(ci[1], 4)]
            entry[guesser] = scores
        out[subset] = entry
    return out


# ------------------------------------------------------------------ planning style
FINGERPRINT = ("calls_per_turn", "turns_before_first_action", "revisits", "verification_calls")
SCALE = {"calls_per_turn": 1.0, "turns_before_first_action": 3.0, "revisits": 0.25, "verification_calls": 0.25}


def fingerprint(trajectories: Sequence[Trajectory], tools: dict[str, str] | None = None) -> dict[str, float]:
    """A model's planning style from its rollouts (infra excluded):
    - calls_per_turn: tool calls per assistant turn (a batched planner > 1);
    - turns_before_first_action: turns before the first state-changing call;
    - revisits: share of calls that repeat an earlier call (same tool and arguments);
    - verification_calls: share of calls that read or check after the first change.
    `tools` maps tool name -> description (to tell reads from changes)."""
    tools = tools or {}
    per_turn, before, revisits, verify, calls_total = [], [], 0, 0, 0
    for t in trajectories:
        if t.error == "infra" or not t.turns:
            continue
        per_turn.append(sum(len(r.tool_calls) for r in t.turns) / len(t.turns))
        seen: set[tuple[str, str]] = set()
        first_change = None
        for i, rec in enumerate(t.turns):
            for c in rec.tool_calls:
                if c["name"] == "finish":
                    continue
                calls_total += 1
                key = (c["name"], json.dumps(decoded(c["arguments"]), sort_keys=True))
                revisits += key in seen
                seen.add(key)
                reading = reads_only(c["name"], tools.get(c["name"], ""))
                if first_change is None and not reading:
                    first_change = i
                elif first_change is not None and reading:
                    verify += 1
        before.append(first_change if first_change is not None else len(t.turns))
    if not per_turn:
        return {k: 0.0 for k in FINGERPRINT}
    return {
        "calls_per_turn": round(sum(per_turn) / len(per_turn), 4),
        "turns_before_first_action": round(sum(before) / len(before), 4),
        "revisits": round(revisits / calls_total, 4) if calls_total else 0.0,
        "verification_calls": round(verify / calls_total, 4) if calls_total else 0.0,
    }


def drift(base: dict[str, float], adapted: dict[str, float]) -> float:
    """Distance of an adapted model's fingerprint from its base's (each feature in its own unit)."""
    return round(sqrt(sum(((adapted[k] - base[k]) / SCALE[k]) ** 2 for k in FINGERPRINT)), 4)


def decoded(s: Any) -> Any:
    """A JSON string decoded; anything else, or a string that is not JSON, as it is."""
    try:
        return json.loads(s) if isinstance(s, str) else s
    except json.JSONDecodeError:
        return s
