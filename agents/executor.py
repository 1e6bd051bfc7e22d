"""The rollout loop: one task instance, one harness, one model -> one `Trajectory`.

The prompt comes from the harness; the tools are the harness tools the family's environment
implements; hooks run around each tool call; the context policy is applied before every model call;
the loop stops on finish or the turn limit; the checker scores the final service state. A failed
rollout is data (its trajectory says why); only a model/transport error that outlasts the retries
makes an `infra` trajectory, which is never counted as a task failure.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from agents import hooks as hk
from agents.context import apply_policy
from harness_store.values import Harness, HookSpec, TaskInstance, ToolSpec, Trajectory, TurnRecord
from tasks import get_family

TASK_ID_LINE = "(Task id: {id})"
NO_TOOL_NUDGE = "No tool was called. Use the tools to make progress, and call finish when the task is done."


@dataclass(frozen=True)
class Completion:
    """One model reply, normalised by the gateway."""

    message: dict[str, Any]  # OpenAI assistant message: role, content, tool_calls
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. a synthetic model's failure cause


class ModelClient(Protocol):
    async def acomplete(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int
    ) -> Completion: ...


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    backoff_s: float = 0.25
    backoff_max_s: float = 4.0
    call_timeout_s: float = 300.0


def openai_tool(t: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}


class ModelUnavailable(RuntimeError):
    pass


class Executor:
    def __init__(self, client: ModelClient, retry: RetryPolicy = RetryPolicy()):
        self.client = client
        self.retry = retry

    async def rollout(self, instance: TaskInstance, harness: Harness, model: str, seed: int = 0) -> Trajectory:
        log = structlog.get_logger(role="executor", harness_id=harness.id[:12], instance=instance.id, model=model)
        family = get_family(instance.family)
        env = family.make_env(instance)
        available = {t.impl for t in env.tool_specs()}
        tools = [t for t in harness.tools if t.impl in available]
        by_name = {t.name: t for t in tools}
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": harness.render_system()},
            {"role": "user", "content": f"{instance.instruction}\n\n{TASK_ID_LINE.format(id=instance.id)}"},
        ]
        turns: list[TurnRecord] = []
        cost = 0.0
        checklist_shown = False
        without_progress = 0
        error, error_detail = "none", ""
        for turn in range(harness.max_turns):
            visible, events = apply_policy(messages, harness.context)
            started = time.perf_counter()
            try:
                comp = await self._complete(model, visible, [openai_tool(t) for t in tools], seed, log)
            except ModelUnavailable as e:
                error, error_detail = "infra", str(e)
                break
            latency = time.perf_counter() - started
            cost += comp.cost_usd
            msg = {k: v for k, v in comp.message.items() if k in ("role", "content", "tool_calls")}
            msg["role"] = "assistant"
            messages.append(msg)
            calls = msg.get("tool_calls") or []
            results: list[str] = []
            record_calls: list[dict[str, Any]] = []
            progressed = False
            finished = False
            if not calls:
                messages.append({"role": "user", "content": NO_TOOL_NUDGE})
                events.append("no_tool_call")
            for call in calls:
                fn = call.get("function") or {}
                name, raw = fn.get("name", ""), fn.get("arguments") or "{}"
                record_calls.append({"id": call.get("id", ""), "name": name, "arguments": raw})
                if finished:
                    content, ok = "error: the episode has already finished", False
                else:
                    content, ok, finished, fired = self._run_call(
                        env, by_name, harness.hooks, name, raw, checklist_shown
                    )
                    if "finish_checklist" in fired:
                        checklist_shown = True
                    events.extend(f"hook:{k}" for k in fired)
                    if not ok:
                        events.append(f"error:{name}")
                progressed |= ok
                results.append(content)
                messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": content})
            without_progress = 0 if progressed else without_progress + 1
            if not finished:
                for h in hk.hooks_for(harness.hooks, "on_turn"):
                    note = hk.progress_reminder(h, without_progress)
                    if note:
                        messages.append({"role": "user", "content": note})
                        events.append("hook:progress_reminder")
            turns.append(
                TurnRecord(
                    index=turn,
                    tool_calls=tuple(record_calls),
                    tool_results=tuple(results),
                    prompt_tokens=comp.prompt_tokens,
                    completion_tokens=comp.completion_tokens,
                    latency_s=round(latency, 6),
                    events=tuple(events),
                    cause=comp.meta.get("cause"),
                    relied_on=tuple(comp.meta.get("relied_on") or ()),
                )
            )
            if finished:
                break
        else:
            error, error_detail = "task", f"turn limit {harness.max_turns} reached without finish"
        outcome = None if error == "infra" else family.check(env)
        traj = Trajectory(
            instance=instance,
            harness_id=harness.id,
            model=model,
            seed=seed,
            messages=tuple(messages),
            turns=tuple(turns),
            outcome=outcome,
            error=error,
            error_detail=error_detail,
            cost_usd=round(cost, 8),
        )
        log.debug("rollout done", passed=traj.passed, turns=len(turns), error=error)
        return traj

    def _run_call(
        self,
        env: Any,
        by_name: dict[str, ToolSpec],
        harness_hooks: tuple[HookSpec, ...],
        name: str,
        raw: str,
        checklist_shown: bool,
    ) -> tuple[str, bool, bool, list[str]]:
        """Execute one tool call: (observation, succeeded, finished, hooks that fired)."""
        spec = by_name.get(name)
        if spec is None:
            return f"error: unknown tool {name!r}; available: {', '.join(by_name)}", False, False, []
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as e:
            return f"error: arguments are not valid JSON ({e.msg})", False, False, []
        if not isinstance(args, dict):
            return "error: arguments must be a JSON object", False, False, []
        for h in hk.hooks_for(harness_hooks, "before_call"):
            blocked = hk.validate_args(h, spec, args)
            if blocked:
                return blocked, False, False, [h.kind]
        if spec.impl == "finish":
            for h in hk.hooks_for(harness_hooks, "on_finish"):
                held = hk.finish_checklist(h, checklist_shown)
                if held:
                    return held, True, False, [h.kind]
        try:
            result = env.call(spec.impl, args)
        except Exception as e:  # noqa: BLE001 — an environment bug must not kill the rollout; it is recorded
            return f"error: tool {name} crashed: {type(e).__name__}: {e}", False, False, []
        return result.content, not result.error, result.finished, []

    async def _complete(self, model: str, messages: list[dict], tools: list[dict], seed: int, log: Any) -> Completion:
        last: Exception | None = None
        for attempt in range(self.retry.attempts):
            try:
                return await asyncio.wait_for(
                    self.client.acomplete(model, messages, tools, seed=seed), self.retry.call_timeout_s
                )
            except Exception as e:  # noqa: BLE001 — transport, provider, timeout: all retried, then infra
                last = e
                if attempt + 1 < self.retry.attempts:
                    delay = min(self.retry.backoff_max_s, self.retry.backoff_s * 2**attempt)
                    delay *= 0.5 + random.random() / 2
                    log.warning("model call failed, retrying", attempt=attempt + 1, error=str(e)[:200], delay=round(delay, 2))
                    await asyncio.sleep(delay)
        raise ModelUnavailable(f"model {model} failed {self.retry.attempts} times: {type(last).__name__}: {last}")
