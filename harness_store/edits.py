"""Applying a `HarnessEdit`: a pure function `Harness -> Harness`.

Every operation is checked before anything is built, so an invalid edit raises `EditError` (naming
the operation and why) and the input harness is untouched — it is frozen anyway; the point is that no
partially-applied result ever escapes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness_store.values import (
    CONTEXT_STRATEGIES,
    HOOK_EVENTS,
    AddHook,
    AddRecipe,
    AddTool,
    AlterTool,
    AppendSection,
    ContextPolicy,
    Harness,
    HarnessEdit,
    HookSpec,
    PromptSection,
    Recipe,
    RemoveHook,
    RemoveSection,
    RemoveTool,
    SetContextPolicy,
    SetMaxTurns,
    SetSection,
    ToolSpec,
)

# Hook kinds the executor implements (agents/hooks.py); params each one accepts.
HOOK_KINDS: dict[str, frozenset[str]] = {
    "validate_args": frozenset({"tools", "reminder"}),
    "progress_reminder": frozenset({"after_turns", "text"}),
    "finish_checklist": frozenset({"items"}),
}
HOOK_KIND_EVENTS: dict[str, str] = {
    "validate_args": "before_call",
    "progress_reminder": "on_turn",
    "finish_checklist": "on_finish",
}

MAX_TEXT = 20_000
MAX_TURNS_LIMIT = 200


class EditError(ValueError):
    """An edit that cannot apply; the message says which operation and why."""


def validate_harness(h: Harness) -> None:
    _unique([s.name for s in h.system_prompt], "prompt section")
    _unique([t.name for t in h.tools], "tool")
    _unique([r.name for r in h.recipes], "recipe")
    _unique([(k.event, k.kind) for k in h.hooks], "hook")
    for t in h.tools:
        _check_tool(t)
    for k in h.hooks:
        _check_hook(k)
    _check_context(h.context)
    if not 1 <= h.max_turns <= MAX_TURNS_LIMIT:
        raise EditError(f"max_turns must be in 1..{MAX_TURNS_LIMIT}, got {h.max_turns}")


def apply_edit(harness: Harness, edit: HarnessEdit) -> Harness:
    if not edit.ops:
        raise EditError("edit has no operations")
    h = harness
    for i, op in enumerate(edit.ops):
        try:
            h = _apply_op(h, op)
        except EditError as e:
            raise EditError(f"op {i} ({type(op).__name__}): {e}") from None
    validate_harness(h)
    if h == harness:
        raise EditError("edit changes nothing")
    return h


def _apply_op(h: Harness, op: Any) -> Harness:
    replace = dataclasses.replace
    match op:
        case SetSection(name=name, text=text):
            _check_text(text)
            if h.section(name):
                sections = tuple(PromptSection(name, text) if s.name == name else s for s in h.system_prompt)
            else:
                sections = (*h.system_prompt, PromptSection(name, text))
            return replace(h, system_prompt=sections)
        case AppendSection(name=name, text=text):
            old = h.section(name)
            if old is None:
                raise EditError(f"no prompt section {name!r} (sections: {[s.name for s in h.system_prompt]})")
            _check_text(text)
            new_text = old.text.rstrip() + "\n" + text.strip()
            _check_text(new_text)
            return replace(
                h,
                system_prompt=tuple(
                    PromptSection(name, new_text) if s.name == name else s for s in h.system_prompt
                ),
            )
        case RemoveSection(name=name):
            if h.section(name) is None:
                raise EditError(f"no prompt section {name!r}")
            return replace(h, system_prompt=tuple(s for s in h.system_prompt if s.name != name))
        case AddTool(tool=tool):
            if not isinstance(tool, ToolSpec):
                raise EditError("tool must be a ToolSpec")
            if h.tool(tool.name):
                raise EditError(f"tool {tool.name!r} already exists")
            _check_tool(tool)
            return replace(h, tools=(*h.tools, tool))
        case AlterTool(name=name, description=description, parameters=parameters):
            old = h.tool(name)
            if old is None:
                raise EditError(f"no tool {name!r} (tools: {[t.name for t in h.tools]})")
            if description is None and parameters is None:
                raise EditError("alter_tool needs a description or parameters")
            new = replace(
                old,
                description=old.description if description is None else description,
                parameters=old.parameters if parameters is None else parameters,
            )
            _check_tool(new)
            return replace(h, tools=tuple(new if t.name == name else t for t in h.tools))
        case RemoveTool(name=name):
            if h.tool(name) is None:
                raise EditError(f"no tool {name!r}")
            if name == "finish":
                raise EditError("the finish tool cannot be removed")
            return replace(h, tools=tuple(t for t in h.tools if t.name != name))
        case AddHook(hook=hook):
            if not isinstance(hook, HookSpec):
                raise EditError("hook must be a HookSpec")
            _check_hook(hook)
            if any(k.event == hook.event and k.kind == hook.kind for k in h.hooks):
                raise EditError(f"hook {hook.kind!r} on {hook.event!r} already present")
            return replace(h, hooks=(*h.hooks, hook))
        case RemoveHook(event=event, kind=kind):
            if not any(k.event == event and k.kind == kind for k in h.hooks):
                raise EditError(f"no hook {kind!r} on {event!r}")
            return replace(h, hooks=tuple(k for k in h.hooks if not (k.event == event and k.kind == kind)))
        case SetContextPolicy(policy=policy):
            if not isinstance(policy, ContextPolicy):
                raise EditError("policy must be a ContextPolicy")
            _check_context(policy)
            return replace(h, context=policy)
        case AddRecipe(recipe=recipe):
            if not isinstance(recipe, Recipe):
                raise EditError("recipe must be a Recipe")
            if any(r.name == recipe.name for r in h.recipes):
                raise EditError(f"recipe {recipe.name!r} already exists")
            _check_text(recipe.text)
            return replace(h, recipes=(*h.recipes, recipe))
        case SetMaxTurns(max_turns=n):
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_TURNS_LIMIT:
                raise EditError(f"max_turns must be an int in 1..{MAX_TURNS_LIMIT}")
            return replace(h, max_turns=n)
        case _:
            raise EditError(f"unknown operation {op!r}")


def _check_text(text: Any) -> None:
    if not isinstance(text, str) or not text.strip():
        raise EditError("text must be a non-empty string")
    if len(text) > MAX_TEXT:
        raise EditError(f"text is {len(text)} characters, over the {MAX_TEXT} limit")


def _check_tool(t: ToolSpec) -> None:
    if not t.name or not t.name.replace("_", "").isalnum():
        raise EditError(f"tool name {t.name!r} must be alphanumeric with underscores")
    if not isinstance(t.parameters, dict) or t.parameters.get("type") != "object":
        raise EditError(f"tool {t.name!r}: parameters must be a JSON schema of type object")
    if not t.impl:
        raise EditError(f"tool {t.name!r} names no implementation")


def _check_hook(k: HookSpec) -> None:
    if k.event not in HOOK_EVENTS:
        raise EditError(f"hook event {k.event!r} is not one of {HOOK_EVENTS}")
    allowed = HOOK_KINDS.get(k.kind)
    if allowed is None:
        raise EditError(f"hook kind {k.kind!r} is not one of {sorted(HOOK_KINDS)}")
    if HOOK_KIND_EVENTS[k.kind] != k.event:
        raise EditError(f"hook {k.kind!r} runs on {HOOK_KIND_EVENTS[k.kind]!r}, not {k.event!r}")
    unknown = set(k.params) - allowed
    if unknown:
        raise EditError(f"hook {k.kind!r} has unknown params {sorted(unknown)}")


def _check_context(c: ContextPolicy) -> None:
    if c.strategy not in CONTEXT_STRATEGIES:
        raise EditError(f"context strategy {c.strategy!r} is not one of {CONTEXT_STRATEGIES}")
    if not 500 <= c.token_budget <= 1_000_000:
        raise EditError(f"token_budget {c.token_budget} is outside 500..1000000")
    if not 1 <= c.keep_last <= 100:
        raise EditError(f"keep_last {c.keep_last} is outside 1..100")


def _unique(names: list[Any], what: str) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise EditError(f"duplicate {what} {n!r}")
        seen.add(n)


# ------------------------------------------------------------------------------ JSON form of edits
# The form a proposer (an LLM) writes: {"rationale": str, "targets": str, "ops": [{"op": ..., ...}]}.
_OPS_JSON = {
    "set_section": (SetSection, ("name", "text")),
    "append_section": (AppendSection, ("name", "text")),
    "remove_section": (RemoveSection, ("name",)),
    "alter_tool": (AlterTool, ("name", "description?", "parameters?")),
    "remove_tool": (RemoveTool, ("name",)),
    "remove_hook": (RemoveHook, ("event", "kind")),
    "set_max_turns": (SetMaxTurns, ("max_turns",)),
}


def edit_from_json(obj: Any) -> HarnessEdit:
    """Parse a proposer's JSON edit; any problem raises EditError naming what is wrong."""
    if not isinstance(obj, dict):
        raise EditError("an edit must be a JSON object with 'ops'")
    ops_in = obj.get("ops")
    if not isinstance(ops_in, list) or not ops_in:
        raise EditError("'ops' must be a non-empty list")
    ops = []
    for i, o in enumerate(ops_in):
        if not isinstance(o, dict) or not isinstance(o.get("op"), str):
            raise EditError(f"op {i}: must be an object with a string 'op'")
        try:
            ops.append(_op_from_json(o))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, EditError):
                raise EditError(f"op {i} ({o['op']}): {e}") from None
            raise EditError(f"op {i} ({o['op']}): missing or bad field {e}") from None
    rationale, targets = obj.get("rationale", ""), obj.get("targets", "")
    if not isinstance(rationale, str) or not isinstance(targets, str):
        raise EditError("'rationale' and 'targets' must be strings")
    return HarnessEdit(tuple(ops), rationale=rationale, targets=targets)


def _op_from_json(o: dict[str, Any]) -> Any:
    kind = o["op"]
    if kind in _OPS_JSON:
        cls, fields = _OPS_JSON[kind]
        kwargs = {}
        for f in fields:
            name = f.rstrip("?")
            if f.endswith("?"):
                if name in o:
                    kwargs[name] = o[name]
            else:
                kwargs[name] = o[name]
        _check_types(kwargs)
        return cls(**kwargs)
    if kind == "add_tool":
        return AddTool(ToolSpec(o["name"], o["description"], o["parameters"], o.get("impl", o["name"])))
    if kind == "add_hook":
        params = o.get("params") or {}
        if not isinstance(params, dict):
            raise EditError("params must be an object")
        return AddHook(HookSpec(o.get("event") or HOOK_KIND_EVENTS.get(o["kind"], ""), o["kind"], params))
    if kind == "set_context_policy":
        base = ContextPolicy()
        return SetContextPolicy(
            ContextPolicy(
                strategy=o["strategy"],
                token_budget=int(o.get("token_budget", base.token_budget)),
                keep_last=int(o.get("keep_last", base.keep_last)),
            )
        )
    if kind == "add_recipe":
        return AddRecipe(Recipe(o["name"], o["text"]))
    raise EditError(f"unknown op {kind!r} (ops: {sorted([*_OPS_JSON, 'add_tool', 'add_hook', 'set_context_policy', 'add_recipe'])})")


def _check_types(kwargs: dict[str, Any]) -> None:
    for k, v in kwargs.items():
        if k == "max_turns":
            if not isinstance(v, int) or isinstance(v, bool):
                raise EditError("max_turns must be an integer")
        elif k == "parameters":
            if not isinstance(v, dict):
                raise EditError("parameters must be an object")
        elif not isinstance(v, str):
            raise EditError(f"{k} must be a string")


def edit_to_json(edit: HarnessEdit) -> dict[str, Any]:
    """The inverse of `edit_from_json` (for prompts, history and records)."""
    ops = []
    for op in edit.ops:
        match op:
            case AddTool(tool=t):
                ops.append({"op": "add_tool", "name": t.name, "description": t.description,
                            "parameters": t.parameters, "impl": t.impl})
            case AddHook(hook=h):
                ops.append({"op": "add_hook", "event": h.event, "kind": h.kind, "params": h.params})
            case SetContextPolicy(policy=p):
                ops.append({"op": "set_context_policy", "strategy": p.strategy,
                            "token_budget": p.token_budget, "keep_last": p.keep_last})
            case AddRecipe(recipe=r):
                ops.append({"op": "add_recipe", "name": r.name, "text": r.text})
            case _:
                name = next(k for k, (cls, _) in _OPS_JSON.items() if isinstance(op, cls))
                fields = {f.name: getattr(op, f.name) for f in dataclasses.fields(op) if getattr(op, f.name) is not None}
                ops.append({"op": name, **fields})
    return {"rationale": edit.rationale, "targets": edit.targets, "ops": ops}
