"""Noise-aware acceptance: a candidate harness must beat the current one on identical instances and
seeds. Rules see the paired outcomes so far and how many pairs still to come could be wins (the
current harness failed there) or losses (it passed), and return accept / reject / undecided; the loop
stops evaluating a candidate as soon as no remaining outcome could change the decision.

**Several candidates per iteration: the family-wise rule.** An iteration compares k candidates with
the current harness and keeps at most one. Tested each at `alpha` on its own, k edits that change
nothing are accepted with probability up to k x alpha per iteration (on the synthetic testbed any text
change resamples every rollout, so a no-op edit meets real noise). `FamilyRule` controls the
family-wise rate instead: each of the k candidates actually compared (valid ones, not the k requested)
is accepted only if its p-value is below alpha / k.

Why this rule, Holm's procedure in its one-winner form, and not a confirmation of the winner on fresh
seeds:
- Only one candidate is kept per iteration, so the event that matters is "some candidate is accepted".
  Under Holm's step-down that event is decided by its first step alone (the smallest p-value against
  alpha / k), so the rule has Holm's family-wise rate: P(any false accept) <= alpha, under any
  dependence between the candidates' tests (they share the current harness's outcomes, so they are
  dependent), and the iteration accepts an edit exactly when Holm would.
- Holm's later steps (alpha / (k-1), ...) only widen the pool the largest-gain winner is drawn from,
  and they would tie each candidate's verdict to the other candidates' unfinished evaluations: a
  candidate could not stop early until every other p-value was pinned down. With one threshold per
  candidate, each candidate's early stop stays its own and stays exact.
- It costs no rollouts. A confirmation would evaluate the winner and the current harness again on new
  seeds (2 x val pairs per accepted iteration, out of budgets of a few hundred rollouts), and a real
  edit would then have to pass two tests (power about squared) to gain the same protection.
The price is the one any family-wise rule pays: a real edit needs stronger evidence (with k = 3 and
alpha = 0.1, 5-0 or 9-2 among the discordant pairs rather than 4-0 or 9-3), so small val sets accept
fewer real edits.

**Exact early decisions.** A decision taken before all pairs are in equals the one the full
evaluation would give: the final tally lies between the best case (every pair still to come where the
current harness failed is a win, every other one a tie) and the worst case (no more wins, every pair
where the current harness passed a loss), and both tests are monotone between them: the sign test's
p-value falls with wins and rises with losses, and the bootstrap's p-value (computed exactly, as the
limit of infinitely many resamples) falls when a tie becomes a win or a loss a tie (one resampled
draw's class moves up, so under a coupling the resampled difference can only grow). So "rejected
even at best" and "accepted even at worst" are final, under the threshold actually applied. (The
loop's futility cut, a candidate with no win in the first chunk where wins were possible, is the one
stop that is a heuristic; it can only reject, so it never raises the false-accept rate.)
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb, exp, lgamma, log
from typing import Any

from coevolve.errors import BadInput


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

    def best_case(self) -> PairedResult:
        """The complete tally if every pair still to come goes the candidate's way."""
        return PairedResult(self.wins + self.winnable, self.losses, self.ties + self.losable)

    def worst_case(self) -> PairedResult:
        """The complete tally if every pair still to come goes against the candidate."""
        return PairedResult(self.wins, self.losses + self.losable, self.ties + self.winnable)


def sign_test_p(wins: int, losses: int) -> float:
    """One-sided exact sign test: P(X >= wins) for X ~ Binomial(wins + losses, 1/2)."""
    n = wins + losses
    if n == 0:
        return 1.0
    return sum(comb(n, k) for k in range(wins, n + 1)) / 2**n


def _log_binomial_pmf(n: int, k: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else float("-inf")
    if p >= 1.0:
        return 0.0 if k == n else float("-inf")
    return lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) + k * log(p) + (n - k) * log(1 - p)


def bootstrap_p(wins: int, losses: int, ties: int) -> float:
    """The paired bootstrap's p-value computed exactly: P(mean of n resampled differences <= 0), i.e.
    P(W <= L) for (W, L, T) ~ Multinomial(n; wins/n, losses/n, ties/n)."""
    n = wins + losses + ties
    if n == 0 or wins == 0:
        return 1.0
    p_win, p_loss = wins / n, losses / n
    loss_given_no_win = p_loss / (1 - p_win) if p_win < 1 else 0.0
    total = 0.0
    for w in range(n + 1):
        log_pw = _log_binomial_pmf(n, w, p_win)
        if log_pw == float("-inf"):
            continue
        rest = n - w  # draws that are not wins: L ~ Binomial(rest, loss_given_no_win), need L >= w
        tail = sum(exp(_log_binomial_pmf(rest, k, loss_given_no_win)) for k in range(w, rest + 1))
        total += exp(log_pw) * tail
    return min(1.0, total)


class SignTest:
    """Accept when the candidate has more passes and the one-sided sign test gives p < alpha (or
    below an explicit `threshold`, which the family-wise rule passes)."""

    name = "sign"

    def __init__(self, alpha: float = 0.1):
        self.alpha = alpha

    def accepts(self, r: PairedResult, threshold: float | None = None) -> bool:
        limit = self.alpha if threshold is None else threshold
        return r.wins > r.losses and self.p_value(r) < limit

    def p_value(self, r: PairedResult) -> float:
        return sign_test_p(r.wins, r.losses)

    def decide(self, r: PairedResult, threshold: float | None = None) -> str | None:
        """'accept' / 'reject' once the remaining pairs cannot change it, else None."""
        if not self.accepts(r.best_case(), threshold):
            return "reject"
        if self.accepts(r.worst_case(), threshold):
            return "accept"
        return None


class BootstrapTest(SignTest):
    """Paired bootstrap of the mean pass difference: p = P(resampled mean <= 0), computed exactly."""

    name = "bootstrap"

    def p_value(self, r: PairedResult) -> float:
        return bootstrap_p(r.wins, r.losses, r.ties)


def make_rule(name: str, alpha: float) -> SignTest:
    rules = {"sign": SignTest, "bootstrap": BootstrapTest}
    if name not in rules:
        raise BadInput(f"unknown acceptance rule {name!r} (rules: {', '.join(rules)})")
    return rules[name](alpha)


class FamilyRule:
    """The acceptance rule for the k candidates compared in one iteration: each at alpha / k (Holm's
    first step; see the module docstring), or, with `family_wise=False` (the null-edit bench's
    baseline), each at alpha on its own."""

    def __init__(self, test: SignTest, k: int, family_wise: bool = True):
        if k < 1:
            raise ValueError("a family has at least one candidate")
        self.test = test
        self.k = k
        self.family_wise = family_wise

    @property
    def alpha(self) -> float:
        return self.test.alpha

    @property
    def threshold(self) -> float:
        """The p-value a candidate must fall below: alpha / k family-wise, alpha per candidate."""
        return self.test.alpha / self.k if self.family_wise else self.test.alpha

    def p_value(self, r: PairedResult) -> float:
        return self.test.p_value(r)

    def accepts(self, r: PairedResult) -> bool:
        return self.test.accepts(r, self.threshold)

    def decide(self, r: PairedResult) -> str | None:
        return self.test.decide(r, self.threshold)

    def as_json(self) -> dict[str, Any]:
        """What a decision was taken under, for the journal and the report."""
        return {
            "rule": self.test.name,
            "family_wise": self.family_wise,
            "alpha": self.alpha,
            "k": self.k,
            "alpha_effective": self.threshold,
        }


def min_wins(rule: FamilyRule, pairs: int) -> int | None:
    """The fewest wins (with no loss) among `pairs` paired outcomes that `rule` accepts, or None when
    even all `pairs` won cannot reach its threshold. For the sign test this is the m with
    2^-m < alpha / k, whatever the ties; only pairs the current harness failed can be wins, so a val
    set with fewer such pairs than this cannot accept any edit."""

    def ok(w: int) -> bool:
        return rule.accepts(PairedResult(w, 0, pairs - w))

    if pairs < 1 or not ok(pairs):
        return None
    lo, hi = 1, pairs  # acceptance is monotone in the wins: binary search for the first that accepts
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
