"""The testbed's router: one reply of a `synthetic/<model>` to any prompt (docs/ARCHITECTURE.md §5). The agent
policies (`coevolve.testbed.policy`) answer task prompts; the role prompts (judge, expert:
`coevolve.testbed.roles`) and the proposer prompt (`coevolve.testbed.meta`) are recognised from the
messages and answered by those modules."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coevolve.testbed.meta import propose
from coevolve.testbed.policy import SyntheticPolicy, SyntheticReply, profile_for
from coevolve.testbed.roles import answer, role_of
from coevolve.values import with_adapter


def respond(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    seed: int = 0,
    adapter: dict[str, Any] | None = None,
    adapter_id: str | None = None,
    *,
    constrained: bool = False,
    temperature: float | None = None,
) -> SyntheticReply:
    """One reply of `synthetic/<model>[@adapter_id]`. The adapter is part of the model's identity, so it
    samples differently from its base (as different weights would), not with common random numbers.
    `constrained` and `temperature` come from the request (module doc); only the agent policies take
    them: a role (proposer, judge, expert) answers in text."""
    profile = profile_for(model, adapter)
    role = role_of(messages)
    if constrained and (profile.name in ("meta", "meta-generic", "judge") or role is not None):
        raise ValueError(f"synthetic/{model} answers this prompt in text; it cannot make a constrained tool call")
    if temperature is not None:
        profile = replace(profile, temperature=float(temperature))
    if profile.name in ("meta", "meta-generic"):
        reply = propose(messages, tools, seed, generic_only=profile.name == "meta-generic")
    elif role is not None:
        reply = answer(role, messages, tools, profile.name, seed)
    elif profile.name == "judge":
        raise ValueError("synthetic/judge answers the judge's prompts only")
    else:
        reply = SyntheticPolicy(profile).respond(
            messages, tools, seed, with_adapter(model, adapter_id), constrained=constrained
        )
    cost = reply.prompt_tokens * profile.usd_per_input_token + reply.completion_tokens * profile.usd_per_output_token
    return replace(reply, cost_usd=cost)
