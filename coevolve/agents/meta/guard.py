"""The release guard: what bounds how often a whole run ships a harness that does not help.

A search may admit many candidates on weak evidence; what it *releases* (returns, and what
`coevolve run` carries into the next stage) must first beat the last released harness on fresh pairs
under an anytime-valid test.

**The statistic.** A guard attempt compares a candidate C with the last released harness R on pairs
t = 1, 2, ...: each pair is a val instance the search never used, drawn uniformly (with replacement,
by a seeded generator fixed before the attempt), at a seed no rollout of the run used before; both
harnesses run on it, and d_t = pass(C) - pass(R) is in {-1, 0, 1}. The e-value after n pairs with W
wins (d = 1) and L losses (d = -1) is the one-sided mixture of betting martingales

    E_n = integral over p in [1/2, 1] of (2p)^W (2(1 - p))^L  d(uniform on [1/2, 1])
        = sum_{k <= W} C(n' + 1, k) / ((n' + 1) C(n', W)),   n' = W + L,

a bettor's wealth who, before each pair, stakes the fraction lambda_t = 2 E[p | past pairs] - 1 of it on
a win, the posterior taken over [1/2, 1] from the past pairs only (ties leave the wealth as it is).

**Why it bounds false releases.** For one p >= 1/2 the factor of pair t has conditional mean
1 + (2p - 1)(P(win) - P(loss)); the pairs are fresh and drawn independently of everything before
them, so under the null "C does not help" (E[d_t] = P(win) - P(loss) <= 0) each factor's mean is at
most 1 given the past, each p's product is a nonnegative supermartingale starting at 1, and so is their
mixture. By Ville's inequality P(sup_n E_n >= 1/a) <= a: stopping at any data-dependent time (a
crossing, a cap, a budget, a futility cut) cannot raise it.

**The run-level bound.** Attempt j (j = 1, 2, ... counted over the whole run, released or not)
releases only when E_n >= 1/alpha_j with alpha_j = alpha * 6 / (pi^2 j^2), so sum_j alpha_j = alpha.
Each attempt uses its own fresh pairs, so whatever the search did before (any proposer, any number of
proposals, which candidate it picked and when) is fixed when the attempt starts; by the union bound
P(the run ever releases a harness that does not beat the one released before it) <= alpha.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from math import comb
from typing import Any

GUARD_SEED_BASE = 500_000  # guard seeds: far from the search's val seeds (seed + r) and train seeds (seed + step)
SEEDS_PER_ATTEMPT = 100_000
MAX_ATTEMPTS = 100


def e_value(wins: int, losses: int) -> float:
    """E_n of the module docstring: the one-sided uniform mixture over p in [1/2, 1] of the betting
    martingales on the signs of the discordant pairs (1 with no discordant pair)."""
    if wins < 0 or losses < 0:
        raise ValueError("wins and losses are counts")
    n = wins + losses
    return sum(comb(n + 1, k) for k in range(wins + 1)) / ((n + 1) * comb(n, wins))


def attempt_alpha(alpha: float, attempt: int) -> float:
    """alpha_j = alpha * 6 / (pi^2 j^2): the share of the run's alpha that attempt j (from 1) spends."""
    if attempt < 1:
        raise ValueError("attempts count from 1")
    return alpha * 6.0 / (math.pi**2 * attempt**2)


def min_pairs(alpha: float, attempt: int = 1) -> int:
    """The fewest pairs with which attempt `attempt` can release: every one a win."""
    need = 1.0 / attempt_alpha(alpha, attempt)
    n = 1
    while e_value(n, 0) < need:
        n += 1
    return n


ABANDON_BELOW = 0.05  # an attempt is abandoned when P(the candidate is better | its guard pairs) falls below this


def better_posterior(wins: int, losses: int) -> float:
    """P(p > 1/2) for p ~ Beta(wins + 1, losses + 1): the chance, under a uniform prior, that a candidate
    wins more discordant pairs than it loses."""
    n = wins + losses + 1
    return sum(comb(n, k) for k in range(wins + 1)) / 2**n


@dataclass
class GuardAttempt:
    """One attempt of the guard: `candidate` against `released` on fresh pairs."""

    attempt: int
    candidate: str
    released: str
    alpha: float
    wins: int = 0
    losses: int = 0
    ties: int = 0
    drawn: int = 0  # pairs drawn (pairs left unused after a decision, and pairs lost to infra, included)
    outcome: str | None = None  # "release" | "abandon" | "superseded", once decided

    @property
    def pairs(self) -> int:
        return self.wins + self.losses + self.ties

    @property
    def threshold(self) -> float:
        return 1.0 / attempt_alpha(self.alpha, self.attempt)

    @property
    def e_value(self) -> float:
        return e_value(self.wins, self.losses)

    def add(self, candidate_passed: bool, released_passed: bool) -> str | None:
        """Record one pair; the attempt's outcome once it is decided (then the pairs after it are not used):
        "release" when the e-value reaches the threshold, "abandon" when the posterior chance that the
        candidate is better falls below `ABANDON_BELOW` (a futility stop: it can only keep it out)."""
        if self.outcome is not None:
            raise ValueError("the attempt is decided")
        if candidate_passed and not released_passed:
            self.wins += 1
        elif released_passed and not candidate_passed:
            self.losses += 1
        else:
            self.ties += 1
        if self.e_value >= self.threshold:
            self.outcome = "release"
        elif better_posterior(self.wins, self.losses) < ABANDON_BELOW:
            self.outcome = "abandon"
        return self.outcome

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "pairs": self.pairs, "e_value": round(self.e_value, 4),
                "threshold": round(self.threshold, 4), "alpha_attempt": attempt_alpha(self.alpha, self.attempt)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GuardAttempt:
        return cls(**{k: d[k] for k in ("attempt", "candidate", "released", "alpha", "wins", "losses", "ties", "drawn", "outcome")})


def guard_pair(instances: int, seed: int, attempt: int, t: int) -> tuple[int, int]:
    """Pair t (from 0) of an attempt: the index of its guard instance, drawn uniformly with replacement
    by a generator of (seed, attempt, t) alone, and its seed, used by no other pair of the run."""
    if not 0 <= t < SEEDS_PER_ATTEMPT or not 1 <= attempt < MAX_ATTEMPTS:
        raise ValueError(f"an attempt (1..{MAX_ATTEMPTS - 1}) has at most {SEEDS_PER_ATTEMPT} pairs")
    index = random.Random(f"guard|{seed}|{attempt}|{t}").randrange(instances)
    return index, GUARD_SEED_BASE + seed * SEEDS_PER_ATTEMPT * MAX_ATTEMPTS + attempt * SEEDS_PER_ATTEMPT + t
