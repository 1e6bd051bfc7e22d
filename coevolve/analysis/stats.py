"""Pass rates over repeated rollouts: pass@1 with a 95% interval, per-instance pass counts, pass^k.

Repeats of one instance are correlated, so the interval treats instances as the unit: pass@1 is the
mean over instances of each instance's pass share, and its standard error is the spread of those
shares over sqrt(n instances) (a cluster-robust normal interval, clipped to [0, 1]). Infra-failed
rollouts are excluded from every rate.

pass^k follows tau2-bench (`tau2.metrics.agent_metrics`): per instance the unbiased C(c, k) / C(n, k)
from its own c passes in n scored runs, averaged over instances, for k = 1 .. the smallest n over the
instances (`PassRate.max_k`; tau2's `get_metrics_df` caps k there when some task has fewer trials).
An instance with no scored run (every run infra-failed) is left out, as a task with no simulation is in
tau2. `pass_hat_ks(k_max)` reports k = 1 .. min(k_max, max_k) and that cap, and never raises.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from math import comb, sqrt
from typing import Any

from coevolve.values import Trajectory

Z95 = 1.959964


@dataclass(frozen=True)
class PassRate:
    pass_at_1: float
    ci95: tuple[float, float]
    instances: int
    rollouts: int
    infra: int
    per_instance: dict[str, tuple[int, int]]  # instance id -> (passes, scored runs)

    @property
    def max_k(self) -> int:
        """The largest k pass^k is defined for: the smallest scored-run count over the instances that
        have one (0 when none has)."""
        return min((n for _, n in self.per_instance.values() if n), default=0)

    def pass_hat_k(self, k: int) -> float:
        """tau-bench's pass^k: the chance that k i.i.d. runs of an instance all pass, averaged over
        instances (unbiased from c passes in n runs: C(c, k) / C(n, k)); defined for 1 <= k <= max_k
        (ValueError beyond: reports use `pass_hat_ks`, which caps k)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        if k > self.max_k:
            raise ValueError(
                f"pass^{k} needs {k} scored runs of every instance; the fewest any instance has is {self.max_k} "
                "(pass_hat_ks caps k there)"
            )
        runs = [(c, n) for c, n in self.per_instance.values() if n]
        return sum(comb(c, k) / comb(n, k) for c, n in runs) / len(runs)

    def pass_hat_ks(self, k_max: int) -> tuple[dict[int, float], int]:
        """({k: pass^k} for k = 1 .. cap, cap) with cap = min(k_max, max_k), as tau2 reports pass^k up to
        the smallest trial count; never raises ({} and 0 when no instance has a scored run)."""
        cap = max(0, min(int(k_max), self.max_k))
        return {k: self.pass_hat_k(k) for k in range(1, cap + 1)}, cap

    @property
    def boundary_share(self) -> float:
        """Share of instances passed on some runs but not all (the capability boundary)."""
        multi = [(c, n) for c, n in self.per_instance.values() if n > 1]
        return sum(0 < c < n for c, n in multi) / len(multi) if multi else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "pass_at_1": round(self.pass_at_1, 4),
            "ci95": [round(self.ci95[0], 4), round(self.ci95[1], 4)],
            "instances": self.instances,
            "rollouts": self.rollouts,
            "infra": self.infra,
            "boundary_share": round(self.boundary_share, 4),
            "per_instance": {k: list(v) for k, v in sorted(self.per_instance.items())},
        }


INFRA_SHARE = 0.1  # above this share of rollouts failed for infrastructure, a measurement is not a score


def infra_note(infra: int, rollouts: int) -> str | None:
    """Why a set of rollouts is no score (more than `INFRA_SHARE` of them failed for infrastructure), or None."""
    if rollouts and infra > INFRA_SHARE * rollouts:
        return (f"{infra} of {rollouts} rollouts failed for infrastructure (more than {INFRA_SHARE:.0%}): the pass "
                f"rate is over the other {rollouts - infra} only and measures the infrastructure as much as the model")
    return None


def cap_note(cap: int) -> str:
    """The line a report prints when pass^k stops below the eval's repeats."""
    if cap < 1:
        return "no pass^k: no instance has a scored run"
    return f"pass^k capped at {cap}: an instance has only {cap} scored runs"


def mean_ci(values: Sequence[float], clip: bool = True) -> tuple[float, tuple[float, float]]:
    """Mean and 95% normal interval of per-unit values (clipped to [0, 1] unless `clip` is False)."""
    if not values:
        return 0.0, (0.0, 0.0)
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, (mean, mean)
    sd = sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = Z95 * sd / sqrt(n)
    if not clip:
        return mean, (mean - half, mean + half)
    return mean, (max(0.0, mean - half), min(1.0, mean + half))


def pass_rate(trajectories: Iterable[Trajectory], success: Callable[[Trajectory], bool] | None = None) -> PassRate:
    """Rates over `trajectories`; a run passes when `success(t)` holds (default: `t.passed`)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    rollouts = infra = 0
    for t in trajectories:
        rollouts += 1
        if t.error == "infra":
            infra += 1
            continue
        c = counts[t.instance.id]
        c[0] += bool(success(t)) if success is not None else t.passed
        c[1] += 1
    shares = [c / n for c, n in counts.values() if n]
    mean, ci = mean_ci(shares)
    return PassRate(mean, ci, len(shares), rollouts, infra, {k: (c, n) for k, (c, n) in counts.items()})


def paired_difference(a: PassRate, b: PassRate) -> tuple[float, tuple[float, float]]:
    """Mean difference b - a of per-instance pass shares over the instances both measured, with a 95%
    interval (paired: the same instances under two conditions)."""
    common = sorted(set(a.per_instance) & set(b.per_instance))
    diffs = []
    for k in common:
        (ca, na), (cb, nb) = a.per_instance[k], b.per_instance[k]
        if na and nb:
            diffs.append(cb / nb - ca / na)
    return mean_ci(diffs, clip=False)


def comparison(rates: dict[str, PassRate], base: str, other: str) -> dict[str, Any]:
    """Arms measured on the same instances: each arm's rates (without the per-instance counts), then the
    paired gain of arm `other` over arm `base` with its 95% interval."""
    gain, ci = paired_difference(rates[base], rates[other])
    return {**{label: {k: v for k, v in r.as_json().items() if k != "per_instance"} for label, r in rates.items()},
            "gain": round(gain, 4), "gain_ci95": [round(ci[0], 4), round(ci[1], 4)]}
