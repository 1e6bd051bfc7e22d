"""tau2's metrics over an eval's rollouts, and whether the numbers are comparable with tau2's leaderboard.

Read from each scored rollout's `outcome.detail["tau2"]` (`coevolve.tasks.tau2.checker.check`): tau2's reward,
the conversation's protocol, the customer's kind and model, and `answered_customer`.

The numbers are tau2's own (`tau2.metrics.agent_metrics`):
- `avg_reward`: tau2's reward averaged over the scored runs (`compute_metrics`' avg_reward, a mean over
  simulations, not over tasks);
- `pass_hat_k`: pass^k over tasks with tau2's success (a reward within 1e-6 of 1, `is_successful`),
  per task C(c, k) / C(n, k) from its own runs, averaged over tasks, for k = 1 .. the smallest number
  of scored runs any task has (`pass_hat_k_cap`; tau2's `get_metrics_df` caps k the same way). pass^1
  is the leaderboard's "pass_1". With the same number of runs per task and 0/1 rewards, avg_reward and
  pass^1 coincide; they part when some task has fewer scored runs or a reward is partial;
- `answered_customer`: the share of scored runs in which the agent said something to the customer,
  reported beside the reward, never folded into it (tau2 scores a silent run by its database alone).

Infra-failed rollouts (no outcome) are counted in `infra` and left out of every number, as everywhere
in this project.

A number is comparable with tau2's leaderboard (`comparable`) only when all of these hold; each one that
does not is named in `not_comparable`, and `note` says it in one line:
1. every scored run used tau2's protocol (`protocol == "tau2"`): the `tool` protocol (message_user and
   finish tools) is this project's variant for experiments;
2. every scored run's customer was tau2's LLM user simulator (`user == "llm"`): the scripted customer is
   an offline stand-in for CI and plumbing;
3. the split is `base`, tau2's leaderboard set (train/val/test are this project's splits of it);
4. every task of the split was run (tau2's leaderboard verification wants all of them);
5. every task has the eval's full number of scored runs, i.e. no infra-failed rollout was left out (tau2's
   verification wants `num_trials` runs of every task);
6. the domain's tasks.json is a known tau2-bench release (`data.data_version`, which every report names:
   the pre-τ³ data is comparable with the pre-τ³ leaderboard only).
The harness is not a condition: an evolved harness under tau2's protocol is another agent, measured the
same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coevolve.analysis.stats import cap_note, pass_rate
from coevolve.errors import BadInput
from coevolve.tasks.tau2.checker import is_successful
from coevolve.values import Trajectory

LEADERBOARD_SPLIT = "base"

NOT_TAU2_PROTOCOL = "the tool protocol (message_user/finish tools) is this project's variant, not tau2's"
SCRIPTED_USER = "the scripted customer is an offline stand-in for CI and plumbing, not tau2's LLM user simulator"


def detail(t: Trajectory) -> dict[str, Any] | None:
    """The rollout's tau2 record, or None (an infra-failed rollout has no outcome)."""
    if t.outcome is None:
        return None
    d = t.outcome.detail.get("tau2")
    return d if isinstance(d, dict) else None


def reward(t: Trajectory) -> float:
    """tau2's reward of a scored rollout (0 for one without a tau2 record)."""
    d = detail(t)
    return float(d.get("reward") or 0.0) if d else 0.0


def tau2_report(
    trajectories: Sequence[Trajectory], *, domain: str, split: str, repeats: int, split_size: int | None = None
) -> dict[str, Any]:
    """tau2's metrics of one eval (family, model) and whether they are comparable with tau2's leaderboard
    (see the module docstring). `split_size`: the split's number of tasks (read from `data.splits`
    when None)."""
    from coevolve.tasks.tau2 import data

    if repeats < 1:
        raise BadInput(f"repeats must be >= 1, got {repeats}")
    version = data.data_version(domain)
    if split_size is None:
        split_size = len(data.splits(domain).get(split, ()))
    scored = [t for t in trajectories if t.error != "infra"]
    infra = len(trajectories) - len(scored)
    records = [d for d in map(detail, scored) if d is not None]
    protocols = sorted({str(d.get("protocol")) for d in records})
    users = sorted({str(d.get("user")) for d in records})
    user_models = sorted({str(d["user_model"]) for d in records if d.get("user_model")})
    rate = pass_rate(trajectories, success=lambda t: t.error == "none" and is_successful(reward(t)))
    ks, cap = rate.pass_hat_ks(repeats)
    rewards = [reward(t) for t in scored]

    reasons = []
    if any(p != "tau2" for p in protocols):
        reasons.append(NOT_TAU2_PROTOCOL)
    if any(u != "llm" for u in users):
        reasons.append(SCRIPTED_USER)
    if split != LEADERBOARD_SPLIT:
        reasons.append(f"the {split} split is not tau2's leaderboard set ({LEADERBOARD_SPLIT})")
    elif rate.instances < split_size:
        reasons.append(f"{rate.instances} of the {split_size} {LEADERBOARD_SPLIT} tasks were scored, not all")
    if infra:
        reasons.append(f"{infra} infra-failed rollout(s) were left out, so not every task has {repeats} scored run(s)")
    elif cap < repeats and rate.instances:
        reasons.append(f"some task has only {cap} scored run(s) of {repeats}")
    if "unknown release" in version:
        reasons.append("the domain's tasks.json matches no known tau2-bench release")
    if not records:
        reasons.append("no rollout was scored")
    comparable = not reasons
    out: dict[str, Any] = {
        "data_version": version,
        "protocols": protocols,
        "users": users,
        "user_models": user_models,
        "scored": len(scored),
        "infra": infra,
        "avg_reward": round(sum(rewards) / len(rewards), 4) if rewards else 0.0,
        "pass_hat_k": {str(k): round(v, 4) for k, v in ks.items()},
        "pass_hat_k_cap": cap,
        "answered_customer": round(sum(bool(d.get("answered_customer")) for d in records) / len(records), 4) if records else 0.0,
        "comparable": comparable,
        "not_comparable": reasons,
        "note": (
            f"comparable with tau2's leaderboard for this data ({version})" if comparable
            else "not comparable with tau2's leaderboard: " + "; ".join(reasons)
        ),
    }
    if cap < repeats:
        out["pass_hat_k_note"] = cap_note(cap)
    return out


def verdict(blocks: Sequence[dict[str, Any] | None]) -> str | None:
    """One line for a report that shows several tau2 measurements (an evolve's baseline and evolved arms,
    a transfer row): each reason any of them is not comparable, once, in order, and the data version(s);
    None when there is no tau2 block."""
    blocks = [b for b in blocks if b]
    if not blocks:
        return None
    reasons = list(dict.fromkeys(r for b in blocks for r in b["not_comparable"]))
    versions = "; ".join(dict.fromkeys(b["data_version"] for b in blocks))
    if not reasons:
        return f"comparable with tau2's leaderboard for this data ({versions})"
    return "not comparable with tau2's leaderboard: " + "; ".join(reasons) + f" (data: {versions})"
