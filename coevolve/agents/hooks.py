"""Execution hooks from the registry (`coevolve.edits.HOOK_KINDS`), run by the executor.

Each hook is a pure function of what it is given and returns a message or None; hooks never mutate
their input. Their messages start with `[kind]` so that readers (and synthetic agents) can tell a
hook spoke, not the environment.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft7Validator

from coevolve.values import HookSpec, ToolSpec

DEFAULT_REMINDER = "Fix the arguments and call {tool} again."
DEFAULT_PROGRESS = (
    "No tool call has succeeded for {n} turns. Re-read the task, check your last error, then continue "
    "or call finish."
)
DEFAULT_CHECKLIST = (
    "Every field the task asks for is present in your output.",
    "The output is written to the exact location the task names.",
    "Nothing outside the task was changed.",
)


def marker(kind: str) -> str:
    return f"[{kind}]"


def validate_args(hook: HookSpec, tool: ToolSpec, args: dict[str, Any]) -> str | None:
    """before_call: strict JSON-schema validation of a call's arguments."""
    only = hook.params.get("tools")
    if only and tool.name not in only:
        return None
    errors = sorted(Draft7Validator(tool.parameters).iter_errors(args), key=lambda e: list(e.path))
    if not errors:
        return None
    what = "; ".join(
        f"{'/'.join(map(str, e.path)) or 'arguments'}: {e.message}" for e in errors[:3]
    )
    reminder = hook.params.get("reminder") or DEFAULT_REMINDER
    return f"{marker('validate_args')} Invalid arguments for {tool.name}: {what}. {reminder.format(tool=tool.name)}"


def progress_reminder(hook: HookSpec, turns_without_progress: int) -> str | None:
    """on_turn: a reminder once the agent has gone N turns without a successful tool call."""
    n = int(hook.params.get("after_turns", 3))
    if turns_without_progress == 0 or turns_without_progress % n:
        return None
    text = hook.params.get("text") or DEFAULT_PROGRESS
    return f"{marker('progress_reminder')} {text.format(n=turns_without_progress)}"


def finish_checklist(hook: HookSpec, already_shown: bool) -> str | None:
    """on_finish: the first finish is held back with a checklist; the next one goes through."""
    if already_shown:
        return None
    items = hook.params.get("items") or DEFAULT_CHECKLIST
    lines = "\n".join(f"{i + 1}. {item}" for i, item in enumerate(items))
    return (
        f"{marker('finish_checklist')} Before finishing, check each item against the task:\n{lines}\n"
        "Fix anything that does not hold, then call finish again."
    )


def hooks_for(hooks: tuple[HookSpec, ...], event: str) -> list[HookSpec]:
    return [h for h in hooks if h.event == event]
