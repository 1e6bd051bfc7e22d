"""Noise-aware acceptance: a candidate harness must beat the current one on identical instances and
seeds. Rules see the paired outcomes so far and how many pairs still to come could be wins (the
current harness failed there) or losses (it passed), and return accept / reject / undecided; the loop
stops evaluating a candidate as soon as no remaining outcome could change the decision."""

from __future__ import annotations

import random
from dataclasses import dataclass
from math import comb


@dataclass(frozen=True)
class PairedResult:
    wins: int  # candidate passed, current failed
    losses: int  # current passed, candidate failed
    ties: int
    winnable: int = 0  # pairs not evaluated yet where the current harness failed (a win is possible)
    losable: int = 0  # pairs not evaluated yet where the current harness passed (a loss is possible)

    @property
    def n(self) -> int:
        return self.wins + self.losses + self.ties

    @property
    def gain(self) -> int:
        return self.wins - self.losses


def sign_test_p(wins: int, losses: int) -> float:
    """One-sided exact sign test: P(X >= wins) for X ~ Binomial(wins + losses, 1/2)."""
    n = wins + losses
    if n == 0:
        return 1.0
    return sum(comb(n, k) for k in range(wins, n + 1)) / 2**n


class SignTest:
    """Accept when the candidate has more passes and the one-sided sign test gives p < alpha."""

    name = "sign"

    def __init__(self, alpha: float = 0.1):
        self.alpha = alpha

    def accepts(self, r: PairedResult) -> bool:
        return r.wins > r.losses and self.p_value(r) < self.alpha

    def p_value(self, r: PairedResult) -> float:
        return sign_test_p(r.wins, r.losses)

    def decide(self, r: PairedResult) -> str | None:
        """'accept' / 'reject' once the remaining pairs cannot change it, else None."""
        best = PairedResult(r.wins + r.winnable, r.losses, r.ties)
        worst = PairedResult(r.wins, r.losses + r.losable, r.ties)
        if not self.accepts(best):
            return "reject"
        if self.accepts(worst):
            return "accept"
        return None


class BootstrapTest(SignTest):
    """Paired bootstrap of the mean pass difference: p = share of resamples with mean <= 0."""

    name = "bootstrap"

    def __init__(self, alpha: float = 0.1, resamples: int = 2000, seed: int = 0):
        super().__init__(alpha)
        self.resamples = resamples
        self.seed = seed

    def p_value(self, r: PairedResult) -> float:
        diffs = [1] * r.wins + [-1] * r.losses + [0] * r.ties
        if not diffs:
            return 1.0
        rng = random.Random(self.seed)
        n = len(diffs)
        worse = sum(1 for _ in range(self.resamples) if sum(rng.choice(diffs) for _ in range(n)) <= 0)
        return worse / self.resamples


def make_rule(name: str, alpha: float) -> SignTest:
    rules = {"sign": SignTest, "bootstrap": BootstrapTest}
    if name not in rules:
        raise ValueError(f"unknown acceptance rule {name!r} (rules: {', '.join(rules)})")
    return rules[name](alpha)
