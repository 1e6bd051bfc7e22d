"""The rollout loop: one task instance, one harness, one model -> one `Trajectory`.

The prompt comes from the harness; the tools are the harness tools the family's environment
implements; hooks run around each tool call; the context policy is applied before every model call;
the loop stops on finish, the turn limit, a context-window overflow or a loop (the last `LOOP_TURNS`
turns each made one call, the same tool with the same arguments, and got the same result: the rollout
would only repeat itself to the turn limit, so it ends there, with the detail `loop: ...` and the event
`loop_ended`, scored as the turn limit would score it); the checker scores the final service state. A failed rollout is data (its trajectory says why); only a model/transport error that
outlasts the retries makes an `infra` trajectory, which is never counted as a task failure.

The harness's decoding policy goes with every model call of the rollout (`decoding=`, only when it is
not the default, so a client that predates it keeps working for every harness that does not set one).
In constrained mode every reply is one schema-valid call (the gateway's doing); a reply the gateway
could not read as one is recorded with a `constrained_error` event and, having no call, gets the
no-tool-call nudge. A model that cannot honour the mode (`DecodingUnsupported`) is a configuration
error: it ends the rollout with that exception, not with an infra trajectory.

Blocking work runs off the event loop, so that one slow tool does not stall the other rollouts of the
same executor (an actor runs many at once): the environment's construction (it may open a browser
page or a database), the calls of the tools the environment names in `blocking_tools` (a sandbox
subprocess, a Chromium page, a user model) and, for such an environment, its checker. They run on a
thread pool the executor owns, one call at a time per rollout, so a rollout's calls keep their order
and an env never sees two threads at once. Cheap pure-Python tools stay inline: a hop to a thread and
back costs more than they do. The pool is sized by `tool_threads` (default `COEVOLVE_TOOL_THREADS`,
else 32): its threads only wait (on a subprocess, on the browser's own thread, on a remote model), and
where the work behind them is serial per process (one sandbox fork server, one Playwright thread) more
threads would only wait longer; 0 runs everything inline on the loop.

**A user channel.** A family's environment may declare that the assistant's plain text is a message to a
simulated user (`user_channel = True`, as tau2's conversations do), unless the harness offers the env's
`user_tool` (a tool through which the agent talks instead). The executor then asks the env to open the
conversation (`open_conversation(seed, channel, call)`: the user is created with the rollout's seed and,
when it is a model, calls it through `call`, this executor's client; its opening is the first user
message, in place of the instance's instruction). With the channel on:
- an assistant message without tool calls goes to the user (`say(text) -> (reply, ended)`), and the reply
  comes back as a user message (no nudge);
- a message with tool calls opens a turn (`begin_turn(text)`: its text is recorded with the calls), each
  call that never reaches the env's tools (unknown tool, arguments not JSON or not an object) is reported
  (`call_failed(name, error, raw_arguments)`), as is an empty message, and `end_turn() -> ended` closes it;
- the env alone ends the conversation (its user, its limits); no finish tool is needed.
The opening and, for an env with `blocking_user` set, every message to the user run on the tool threads.
A family without a user channel has none of this.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from coevolve.agents import hooks as hk
from coevolve.agents.context import apply_policy
from coevolve.errors import BadInput
from coevolve.llm.contract import (
    Completion,
    ContextWindowExceeded,
    DecodingUnsupported,
    ModelClient,
    ModelUnavailable,
    RetryPolicy,
)
from coevolve.settings import environment, variable
from coevolve.tasks import get_family
from coevolve.values import (
    LOOP_DETAIL,
    DecodingPolicy,
    Harness,
    HookSpec,
    TaskInstance,
    ToolSpec,
    Trajectory,
    TurnRecord,
)

T = TypeVar("T")

LOOP_TURNS = 3  # identical one-call turns in a row that end a rollout (docs/results/real-weights-design.md §10)


def call_signature(calls: Sequence[dict[str, Any]], results: Sequence[str]) -> tuple[str, str, str] | None:
    """(tool, arguments as canonical JSON, result) of a turn that made exactly one call, else None."""
    if len(calls) != 1:
        return None
    raw = calls[0]["arguments"]
    try:
        args = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        args = raw
    return calls[0]["name"], args, results[0]


def looping(signatures: Sequence[tuple[str, str, str] | None]) -> bool:
    """The last `LOOP_TURNS` turns made the same single call with the same result."""
    last = signatures[-LOOP_TURNS:]
    return len(last) == LOOP_TURNS and last[0] is not None and all(s == last[0] for s in last)
TASK_ID_LINE = "(Task id: {id})"
TOOL_THREADS_ENV = variable("tool_threads")
DEFAULT_TOOL_THREADS = 32
NO_TOOL_NUDGE = "No tool was called. Use the tools to make progress, and call finish when the task is done."


def openai_tool(t: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}


@dataclass(frozen=True)
class Resume:
    """Resume a recorded rollout: its first `turn` assistant messages are replayed verbatim (their tool
    calls re-executed against a fresh environment, so hooks, context policy and service state are as
    they were), `forced` is used as the next assistant message, and the model continues from there."""

    source: Trajectory
    turn: int
    forced: dict[str, Any]


def assistant_positions(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Index in `messages` of each assistant message, in turn order."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


def same_calls(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two assistant messages make the same tool calls (names and parsed arguments, in order)."""

    def calls(m: dict[str, Any]) -> list[tuple[str, Any]]:
        out = []
        for c in m.get("tool_calls") or ():
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = fn.get("arguments")
            out.append((fn.get("name"), args))
        return out

    return calls(a) == calls(b)


def resolve_tool_threads(explicit: int | None = None) -> int:
    """Threads for blocking tools: `explicit`, else $COEVOLVE_TOOL_THREADS, else 32; 0 = run inline."""
    if explicit is None:
        raw = environment().tool_threads
        try:
            explicit = int(raw) if raw else DEFAULT_TOOL_THREADS
        except ValueError:
            raise BadInput(f"${TOOL_THREADS_ENV} must be a whole number of threads, got {raw!r}") from None
    if explicit < 0:
        raise BadInput(f"tool_threads must be >= 0, got {explicit}")
    return explicit


class Executor:
    def __init__(self, client: ModelClient, retry: RetryPolicy = RetryPolicy(), *, tool_threads: int | None = None):  # noqa: B008 - frozen
        self.client = client
        self.retry = retry
        self.tool_threads = resolve_tool_threads(tool_threads)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    async def _off_loop(self, fn: Callable[..., T], *args: Any, offload: bool = True) -> T:
        """`fn(*args)` on the executor's tool threads (with this task's context vars); inline when
        `tool_threads` is 0 or not `offload` (a call that does not block)."""
        if not offload or not self.tool_threads:
            return fn(*args)
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.tool_threads, thread_name_prefix="executor-tool")
            pool = self._pool
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    def _customer_call(self) -> Callable[..., Any] | None:
        """How a conversation's LLM customer reaches its model: this executor's client, synchronously (the
        customer answers inside a tool call, on a tool thread), so the gateway's timeout, retries and
        redaction apply to it as to the agent's calls. None for a client without a synchronous call."""
        complete = getattr(self.client, "complete", None)
        if complete is None:
            return None
        return lambda model, messages, tools, seed, args: complete(model, messages, tools, seed=seed, **args)

    def close(self) -> None:
        """Stop the tool threads (idle ones also end when the executor is garbage-collected)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    async def rollout(
        self, instance: TaskInstance, harness: Harness, model: str, seed: int = 0, *, resume: Resume | None = None
    ) -> Trajectory:
        log = structlog.get_logger(role="executor", harness_id=harness.id[:12], instance=instance.id, model=model)
        family = get_family(instance.family)
        env = await self._off_loop(family.make_env, instance)  # may open a browser page, a database
        available = {t.impl for t in env.tool_specs()}
        tools = [t for t in harness.tools if t.impl in available]
        tool_schemas = [openai_tool(t) for t in tools]
        by_name = {t.name: t for t in tools}
        first = instance.instruction
        channel = False
        if getattr(env, "user_channel", False):
            channel = getattr(env, "user_tool", None) not in {t.impl for t in tools}
            first = await self._off_loop(env.open_conversation, seed, channel, self._customer_call())
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": harness.render_system()},
            {"role": "user", "content": f"{first}\n\n{TASK_ID_LINE.format(id=instance.id)}"},
        ]
        if resume is not None:
            if not 0 <= resume.turn < len(resume.source.turns):
                raise ValueError(f"cannot resume at turn {resume.turn}: the rollout has {len(resume.source.turns)} turns")
            replayed = [resume.source.messages[i] for i in assistant_positions(resume.source.messages)]
            source_testbed = resume.source.ground_truth.get("turns") or []
        turns: list[TurnRecord] = []
        testbed: list[dict[str, Any] | None] = []
        cost = 0.0
        checklist_shown = False
        without_progress = 0
        signatures: list[tuple[str, str, str] | None] = []
        error, error_detail = "none", ""
        for turn in range(harness.max_turns):
            if channel and env.finished:  # the user ended it before the agent spoke
                break
            visible, events = apply_policy(messages, harness.context)
            started = time.perf_counter()
            if resume is not None and turn < resume.turn:  # replay the recorded turn
                rec = resume.source.turns[turn]
                comp = Completion(replayed[turn], rec.prompt_tokens, rec.completion_tokens)
                turn_testbed = source_testbed[turn] if turn < len(source_testbed) else None
                events.append("replayed")
            elif resume is not None and turn == resume.turn:
                comp = Completion(resume.forced, 0, 0)
                turn_testbed = None
                events.append("forced")
            else:
                try:
                    comp = await self._complete(model, visible, tool_schemas, seed, log, harness.decoding)
                except ContextWindowExceeded as e:
                    error, error_detail = "task", f"context window exceeded at turn {turn}: {e}"
                    break
                except ModelUnavailable as e:
                    error, error_detail = "infra", str(e)
                    break
                turn_testbed = comp.meta.get("testbed")
                if comp.meta.get("constrained_error"):
                    events.append("constrained_error")
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
            text = msg.get("content") if isinstance(msg.get("content"), str) else ""
            if channel and not calls and text.strip():
                # off the loop when the user is a remote model
                reply, finished = await self._off_loop(env.say, text, offload=getattr(env, "blocking_user", False))
                if reply is not None:
                    messages.append({"role": "user", "content": reply})
                events.append("to_user")
                progressed = True
            elif channel:
                env.begin_turn(text or None)
                if not calls:
                    env.call_failed("", "the assistant message is empty")
                    events.append("empty_message")
            elif not calls:
                messages.append({"role": "user", "content": NO_TOOL_NUDGE})
                events.append("no_tool_call")
            for call in calls:
                fn = call.get("function") or {}
                name, raw = fn.get("name", ""), fn.get("arguments") or "{}"
                record_calls.append({"id": call.get("id", ""), "name": name, "arguments": raw})
                if finished:
                    content, ok = "error: the episode has already finished", False
                else:
                    content, ok, finished, fired, unrun = await self._run_call(
                        env, by_name, harness.hooks, name, raw, checklist_shown
                    )
                    if channel and unrun:
                        env.call_failed(name, content, raw)
                    if "finish_checklist" in fired:
                        checklist_shown = True
                    events.extend(f"hook:{k}" for k in fired)
                    if not ok:
                        events.append(f"error:{name}")
                progressed |= ok
                results.append(content)
                messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": content})
            if channel and (calls or not text.strip()):
                finished = env.end_turn() or finished
            without_progress = 0 if progressed else without_progress + 1
            signatures.append(call_signature(record_calls, results))
            loop = not finished and looping(signatures)
            if loop:
                events.append("loop_ended")
            if not finished and not loop:
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
                )
            )
            testbed.append(turn_testbed)
            if finished:
                break
            if loop:
                tool, args, _ = signatures[-1]
                error, error_detail = "task", f"{LOOP_DETAIL} the same call {tool}({args[:200]}) with the same result {LOOP_TURNS} turns in a row"
                break
        else:
            error, error_detail = "task", f"turn limit {harness.max_turns} reached without finish"
        if getattr(env, "infra_error", "") and error != "infra":  # a service outside the agent failed the episode
            error, error_detail = "infra", env.infra_error
        if error == "infra":
            outcome = None
        else:  # off the loop when its checker reads the same blocking services (e.g. a sandbox run)
            outcome = await self._off_loop(family.check, env, offload=bool(getattr(env, "blocking_tools", None)))
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
            ground_truth=self._ground_truth(family, instance, testbed, passed=error == "none" and bool(outcome and outcome.passed)),
        )
        # The counterfactual answer key (deviations, decisive turn) is not computed here: the per-turn
        # records above are all it needs, and the analysis that reads it computes it lazily
        # (`coevolve.testbed.counterfactual`), so a rollout costs only its own model calls.
        log.debug("rollout done", passed=traj.passed, turns=len(turns), error=error)
        return traj

    @staticmethod
    def _ground_truth(
        family: Any, instance: TaskInstance, testbed: list[dict[str, Any] | None], passed: bool
    ) -> dict[str, Any]:
        """Trap labels, and what a testbed model recorded per turn (its cause, the harness sentences it
        relied on, the oracle that knows the turn's right action): all that the counterfactual answer
        key (`counterfactual`) needs to be computed later. A rollout that passed carries no cause."""
        gt = family.answer_key(instance)
        if any(testbed):
            gt["turns"] = [
                None if t is None else {k: v for k, v in t.items() if not (passed and k == "cause")} for t in testbed
            ]
        return gt

    async def offered_tools(self, instance: TaskInstance, harness: Harness) -> list[dict[str, Any]]:
        """The tool schemas a rollout of `instance` under `harness` offers the model: the harness tools
        the family's environment implements (what `rollout` sends with every model call)."""
        env = await self._off_loop(get_family(instance.family).make_env, instance)
        available = {t.impl for t in env.tool_specs()}
        return [openai_tool(t) for t in harness.tools if t.impl in available]

    async def counterfactual(self, traj: Trajectory, harness: Harness) -> dict[str, Any]:
        """The answer key of a failed testbed rollout `traj` run under `harness`: every turn whose calls
        differ from the fully informed action for the state the model was in (a *deviation*, with the
        category the model recorded), and the *decisive turn* — the earliest turn whose replacement by
        that action, with the model's own continuation after it (same seed), makes the rollout pass;
        None when no single turn does. The fully informed action is the answer of the oracle model
        the testbed recorded for the turn (`ground_truth["turns"][t]["oracle"]`), sent the messages
        the context policy let the model see then. A model service that stays unavailable ends the
        search: what was found is returned with `counterfactual_error`. Analysis code only (through
        `coevolve.testbed.counterfactual`, which caches the result): no rollout computes it."""
        if harness.id != traj.harness_id:
            raise ValueError(
                f"trajectory {traj.instance.id} ran under harness {traj.harness_id[:12]},"
                f" not {harness.id[:12]}"
            )
        log = structlog.get_logger(role="counterfactual", harness_id=harness.id[:12],
                                   instance=traj.instance.id)
        turns_testbed = traj.ground_truth.get("turns") or []
        positions = assistant_positions(traj.messages)
        deviations: list[dict[str, Any]] = []
        decisive = None
        tool_schemas: list[dict[str, Any]] | None = None
        try:
            for t, pos in enumerate(positions):
                info = turns_testbed[t] if t < len(turns_testbed) else None
                if not info or not info.get("oracle"):
                    continue
                if tool_schemas is None:
                    tool_schemas = await self.offered_tools(traj.instance, harness)
                visible, _ = apply_policy(list(traj.messages[:pos]), harness.context)
                right = await self._complete(info["oracle"], visible, tool_schemas, traj.seed, log)
                if same_calls(right.message, traj.messages[pos]):
                    continue
                deviations.append({"turn": t, "category": (info.get("cause") or {}).get("category", "other")})
                if decisive is None:
                    replay = await self.rollout(
                        traj.instance, harness, traj.model, traj.seed, resume=Resume(traj, t, right.message)
                    )
                    if replay.passed:
                        decisive = t
        except ModelUnavailable as e:
            return {"deviations": deviations, "decisive_turn": None, "counterfactual_error": str(e)}
        return {"deviations": deviations, "decisive_turn": decisive}

    async def _run_call(
        self,
        env: Any,
        by_name: dict[str, ToolSpec],
        harness_hooks: tuple[HookSpec, ...],
        name: str,
        raw: str,
        checklist_shown: bool,
    ) -> tuple[str, bool, bool, list[str], bool]:
        """Execute one tool call: (observation, succeeded, finished, hooks that fired, failed before the
        env's tools: an unknown tool, arguments not JSON or not an object, an env that raised). Argument
        checks and hooks run inline; the call itself runs off the loop when the env names the tool
        blocking. A call a hook holds back is the harness's doing, not a failed call."""
        spec = by_name.get(name)
        if spec is None:
            return f"error: unknown tool {name!r}; available: {', '.join(by_name)}", False, False, [], True
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as e:
            return f"error: arguments are not valid JSON ({e.msg})", False, False, [], True
        if not isinstance(args, dict):
            return "error: arguments must be a JSON object", False, False, [], True
        for h in hk.hooks_for(harness_hooks, "before_call"):
            blocked = hk.validate_args(h, spec, args)
            if blocked:
                return blocked, False, False, [h.kind], False
        if spec.impl == "finish":
            for h in hk.hooks_for(harness_hooks, "on_finish"):
                held = hk.finish_checklist(h, checklist_shown)
                if held:
                    return held, True, False, [h.kind], False
        try:
            result = await self._off_loop(env.call, spec.impl, args, offload=spec.impl in getattr(env, "blocking_tools", ()))
        except Exception as e:  # noqa: BLE001 — an environment bug must not kill the rollout; it is recorded
            return f"error: tool {name} crashed: {type(e).__name__}: {e}", False, False, [], True
        return result.content, not result.error, result.finished, [], False

    async def _complete(
        self, model: str, messages: list[dict], tools: list[dict], seed: int, log: Any,
        decoding: DecodingPolicy | None = None,
    ) -> Completion:
        kw = {} if decoding is None or decoding.is_default else {"decoding": decoding}
        last: Exception | None = None
        for attempt in range(self.retry.attempts):
            try:
                return await asyncio.wait_for(
                    self.client.acomplete(model, messages, tools, seed=seed, **kw), self.retry.call_timeout_s
                )
            except (ModelUnavailable, DecodingUnsupported):
                raise  # the client (the gateway) has retried already, or the error is not retryable
            except Exception as e:  # noqa: BLE001 — transport, provider, timeout: all retried, then infra
                last = e
                if attempt + 1 < self.retry.attempts:
                    delay = min(self.retry.backoff_max_s, self.retry.backoff_s * 2**attempt)
                    delay *= 0.5 + random.random() / 2
                    log.warning("model call failed, retrying", attempt=attempt + 1, error=str(e)[:200], delay=round(delay, 2))
                    await asyncio.sleep(delay)
        raise ModelUnavailable(f"model {model} failed {self.retry.attempts} times: {type(last).__name__}: {last}")
