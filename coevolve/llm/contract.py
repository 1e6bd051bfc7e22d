"""The model-call contract every floor above this one speaks: a `Completion` (one normalised reply),
the `ModelClient` protocol the executor calls (the gateway implements it; tests may fake it), the
`RoleClient` the roles (judge, expert, proposer) call, the retry policy, and the errors a call can end in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from coevolve.errors import BadInput, CoevolveError
from coevolve.values import DecodingPolicy


@dataclass(frozen=True)
class Completion:
    """One model reply, normalised by the gateway."""

    message: dict[str, Any]  # OpenAI assistant message: role, content, tool_calls
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. a synthetic model's failure cause


class ModelClient(Protocol):
    """`decoding` is passed only for a harness whose decoding policy is not the default."""

    async def acomplete(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int,
        decoding: DecodingPolicy | None = None,
    ) -> Completion: ...


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    backoff_s: float = 0.25
    backoff_max_s: float = 4.0
    call_timeout_s: float = 300.0


class ModelUnavailable(RuntimeError):
    pass


class ProposerUnreachable(CoevolveError, RuntimeError):
    """A harness search's proposer failed step after step (after the gateway's retries): the search cannot
    do its work, so the run fails with this reason instead of spending its budget on nothing (exit 1:
    the input was fine)."""

    exit_code = 1


class DecodingUnsupported(BadInput):
    """The model (its provider) cannot honour the harness's decoding policy, e.g. constrained tool calls
    from a provider without structured output. Not retried and not an infra trajectory: every call
    would fail the same way."""


class ContextWindowExceeded(ModelUnavailable):
    """The conversation outgrew the model's context window. The rollout ends there as a task failure:
    the same model, harness and seed would overflow again, and a harness is expected to manage its
    context (its context policy), so it is not an infra fault to be excused from the pass rate."""


class RoleClient(Protocol):
    """What a role (judge, expert rewriter, proposer) holds of its model client: a reply, and the budget
    its prompts must fit (a `coevolve.agents.fit.Budget`: the model's context window and prompt counter).
    The gateway implements it."""

    def complete(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 seed: int = 0) -> Completion: ...

    def budget(self, model: str, role: str) -> Any: ...
