"""Applying a `HarnessEdit`: a pure function `Harness -> Harness`, behind a typed boundary.

Two layers check an edit, and `EditError` (one line: which operation, which field, why) is the only
exception either raises:

- **Types** (pydantic, strict). Every operation is parsed into a model before anything uses it: the
  proposer's JSON form through `EditJson` (a discriminated union on `"op"`), and a dataclass operation
  (built in code, decoded from a stored record) through the same models. The models are derived from
  the dataclasses of `coevolve.values`, so there is one definition of what a well-typed operation is. Strict means no coercion: `"3"` and `1.5` are not integers, `True` is
  not an integer, a dict is not a string. Unknown fields are refused (`extra="forbid"`): a proposer
  that writes `{"op": "add_hook", "kind": "validate_args", "tools": [...]}` has misplaced its params,
  and silently dropping them would test a different edit from the one it meant. Payloads (tool
  schemas, hook params) must be JSON-like: str-keyed objects, arrays, finite floats, 64-bit integers,
  valid Unicode, at most `MAX_JSON_DEPTH` levels deep — so that the codec can store the result and no
  check can overflow the stack.
- **Meaning** (`_apply_op`, `validate_harness`): the section or tool exists, names are unique, a hook
  runs on its event, numbers are in range (a decoding policy's mode is one of `TOOL_CALL_MODES`, its
  temperature in 0..`MAX_TEMPERATURE`, its reply cap in 1..`MAX_REPLY_TOKENS`).

**Limits**, so that neither an edit nor a harness can grow without bound (a proposer's answer, a file
given to `harness apply` and a stored record are all untrusted sizes):

- an edit has at most `MAX_OPS` (64) operations, counted before any operation is parsed or checked,
  and its operations hold at most `MAX_EDIT_CHARS` (100,000) characters of text, names and JSON
  payloads; its rationale and targets at most `MAX_TEXT` characters each;
- a harness has at most `MAX_SECTIONS` (64) prompt sections, `MAX_TOOLS` (64) tools and
  `MAX_RECIPES` (32) recipes (hooks are at most one per kind, three in all), checked as each operation
  applies, and at most `MAX_HARNESS_CHARS` (100,000) characters in all (`harness_chars`: what a model
  is sent of it, ~25k tokens; the largest baseline, tau2's, is about 20,000);
- every text (a section, a recipe) at most `MAX_TEXT` (20,000) characters.

Each violation is one EditError. Operations apply to a working copy keyed by name, so an edit's cost
is linear in its number of operations (and in the size of what they carry), never quadratic.

Nothing is built before an operation is checked, so no partially-applied result escapes; the input
harness is frozen and never changed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from typing import Annotated, Any, Literal

import pydantic
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from coevolve.errors import BadInput
from coevolve.values import (
    CONTEXT_STRATEGIES,
    HOOK_EVENTS,
    TOOL_CALL_MODES,
    AddHook,
    AddRecipe,
    AddTool,
    AlterTool,
    AppendSection,
    ContextPolicy,
    DecodingPolicy,
    EditOp,
    Harness,
    HarnessEdit,
    HookSpec,
    PromptSection,
    Recipe,
    RemoveHook,
    RemoveSection,
    RemoveTool,
    SetContextPolicy,
    SetDecoding,
    SetMaxTurns,
    SetSection,
    ToolSpec,
)

# Hook kinds the executor implements (coevolve/agents/hooks.py); params each one accepts.
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
MAX_OPS = 64  # operations in one edit
MAX_EDIT_CHARS = 100_000  # characters an edit's operations carry (texts, names, JSON payloads)
MAX_SECTIONS = 64  # prompt sections of a harness
MAX_TOOLS = 64
MAX_RECIPES = 32
MAX_HARNESS_CHARS = 100_000  # `harness_chars`: texts, names and JSON payloads of a whole harness
MAX_TEMPERATURE = 2.0  # the OpenAI API's range, which vLLM and litellm's providers accept
MAX_REPLY_TOKENS = 32_768  # a reply cap above any context window a harness here runs in
MAX_JSON_DEPTH = 32  # nesting of a tool schema or hook params (real schemas need a handful of levels)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what msgpack (the store's codec) encodes as a signed integer


class EditError(BadInput):
    """An edit that cannot apply; the message (one line) says which operation and why."""


# ------------------------------------------------------------------------------------ type layer
def _valid_unicode(text: str) -> str:
    """A lone surrogate (JSON allows `"\\ud800"`) cannot be encoded as UTF-8, so the store could not
    encode a harness holding it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode (it holds a lone surrogate)") from None
    return text


def _json_object(value: dict[str, Any]) -> dict[str, Any]:
    _check_json_like(value, "", 0)
    return value


def _check_json_like(value: Any, path: str, depth: int) -> None:
    """Raise ValueError (naming the place inside the payload) for anything JSON cannot carry; `depth`
    is bounded, so a deeply nested or self-containing payload is an error, never a RecursionError."""
    where = f" at {_clip(path)}" if path else ""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"is nested deeper than {MAX_JSON_DEPTH} levels{where}")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"holds an integer outside the 64-bit range{where}")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"holds {value!r}, which is not a JSON number{where}")
    elif isinstance(value, str):
        _valid_unicode(value)
    elif isinstance(value, (list, tuple)):  # a tuple is an array to the codec
        for i, item in enumerate(value):
            _check_json_like(item, f"{path}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                # ValueError, not TypeError: pydantic reports only ValueError as a validation error
                raise ValueError(  # noqa: TRY004
                    f"has {_a(key)} as a key, but JSON object keys are strings{where}"
                )
            _valid_unicode(key)
            _check_json_like(item, f"{path}.{_clip_name(key)}" if path else _clip_name(key), depth + 1)
    else:
        raise ValueError(f"holds a {type(value).__name__}, which is not a JSON value{where}")  # noqa: TRY004


Text = Annotated[StrictStr, AfterValidator(_valid_unicode)]
JsonObject = Annotated[dict[Any, Any], AfterValidator(_json_object)]
Int64 = Annotated[StrictInt, Field(ge=INT64_MIN, le=INT64_MAX)]


class _Strict(BaseModel):
    """No coercion, no unknown fields, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


# The pydantic models are derived from the dataclasses in values.py (one definition of an operation):
# a field's type maps to its strict form (`_strict_type`), a field with a default may be left out.
# A JSON operation that wraps one part (add_tool: a ToolSpec) carries the part's fields at its top level.
_SCALAR_TYPES: dict[Any, Any] = {
    str: Text,
    int: Int64,
    float: Annotated[StrictFloat, Field(allow_inf_nan=False)],  # an integer is a number; NaN is not
}
# Fields a JSON operation must name although the dataclass has a default (a context policy with no
# strategy means nothing).
_REQUIRED_IN_JSON: dict[str, frozenset[str]] = {"set_context_policy": frozenset({"strategy"})}


def _strict_type(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):  # values.py uses only `X | None`
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _strict_type(inner) | None
    if tp is dict or typing.get_origin(tp) is dict:
        return JsonObject
    return _SCALAR_TYPES[tp]


def _model_fields(cls: type, required: frozenset[str] = frozenset()) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in required or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING):
            default: Any = ...
        elif f.default_factory is not dataclasses.MISSING:
            default = Field(default_factory=f.default_factory)
        else:
            default = f.default
        out[f.name] = (_strict_type(hints[f.name]), default)
    return out


class _AddToolJson(_Strict):
    """`impl` may be left out: the tool is then implemented by the environment tool of its name."""

    @model_validator(mode="before")
    @classmethod
    def _impl_defaults_to_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "impl" not in data and "name" in data:
            return {**data, "impl": data["name"]}
        return data


class _AddHookJson(_Strict):
    """`event` may be left out (or null, or empty): a hook kind runs on one event (`HOOK_KIND_EVENTS`).
    `params` may be left out or null: none."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("event") in (None, "") and isinstance(data.get("kind"), str):
            data["event"] = HOOK_KIND_EVENTS.get(data["kind"], "")
        if data.get("params", None) is None:
            data["params"] = {}
        return data


_JSON_BASES: dict[str, type[_Strict]] = {"add_tool": _AddToolJson, "add_hook": _AddHookJson}


def _op_kind_name(cls: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()  # SetMaxTurns -> set_max_turns


def _wrapped_part(cls: type) -> tuple[str, type] | None:
    """(field, part class) of an operation that wraps one harness part (AddTool(tool=ToolSpec))."""
    (only, *rest) = dataclasses.fields(cls)
    part = typing.get_type_hints(cls)[only.name]
    return (only.name, part) if not rest and dataclasses.is_dataclass(part) else None


# harness part class -> its model (for a part held in a dataclass: every field is present)
PART_MODELS: dict[type, type[_Strict]] = {
    cls: pydantic.create_model(f"{cls.__name__}Model", __base__=_Strict, **_model_fields(cls))
    for cls in (PromptSection, ToolSpec, HookSpec, ContextPolicy, Recipe, DecodingPolicy)
}


def _op_model(kind: str, cls: type) -> type[_Strict]:
    wrapped = _wrapped_part(cls)
    fields = _model_fields(wrapped[1] if wrapped else cls, _REQUIRED_IN_JSON.get(kind, frozenset()))
    return pydantic.create_model(f"{cls.__name__}Json", __base__=_JSON_BASES.get(kind, _Strict),
                                 op=(Literal[kind], ...), **fields)


# JSON op kind -> (its model, the dataclass it builds), in the order of `EditOp`
OP_MODELS: dict[str, tuple[type[_Strict], type]] = {
    _op_kind_name(cls): (_op_model(_op_kind_name(cls), cls), cls) for cls in typing.get_args(EditOp)
}
_OP_KIND: dict[type, str] = {cls: kind for kind, (_, cls) in OP_MODELS.items()}
_WRAPPED_PART: dict[type, tuple[str, type]] = {
    cls: wrapped for cls in _OP_KIND if (wrapped := _wrapped_part(cls)) is not None
}


def _to_op(model: _Strict) -> Any:
    """The dataclass operation a parsed JSON operation stands for."""
    cls = OP_MODELS[model.op][1]
    values = {name: getattr(model, name) for name in type(model).model_fields if name != "op"}
    wrapped = _WRAPPED_PART.get(cls)
    return cls(wrapped[1](**values)) if wrapped else cls(**values)


EditOpJson = Annotated[typing.Union[tuple(model for model, _ in OP_MODELS.values())], Field(discriminator="op")]  # noqa: UP007


class EditJson(_Strict):
    """A whole edit as a proposer writes it: {"rationale": str, "targets": str, "ops": [op, ...]}."""

    rationale: Text = ""
    targets: Text = ""
    ops: Annotated[list[EditOpJson], Field(min_length=1)]

    def to_edit(self) -> HarnessEdit:
        return HarnessEdit(tuple(_to_op(op) for op in self.ops), rationale=self.rationale, targets=self.targets)


# ------------------------------------------------------------------------------ type errors, one line
_TYPE_NAMES: dict[type, str] = {
    dict: "an object",
    list: "a list",
    tuple: "a tuple",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


def _a(value: Any) -> str:
    """What a value is, in words ("an object", "null"), never its repr (which may be huge or fail)."""
    return _TYPE_NAMES.get(type(value), f"a {type(value).__name__}")


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _q(value: Any) -> str:
    """A value quoted for a message: its repr (one line), clipped; `<type>` when repr fails."""
    try:
        return _clip(repr(value))
    except Exception:  # noqa: BLE001 - a huge int, a nesting too deep, any broken __repr__
        return f"<{type(value).__name__}>"


def _clip_name(name: Any) -> str:
    """A field or key name as it may appear inside a one-line message."""
    if isinstance(name, str) and name.isidentifier():
        return _clip(name, 40)
    return _clip(_q(name)[1:-1] if isinstance(name, str) else _q(name), 40)


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + _clip_name(part)
    return out


# pydantic's type errors: what the value must be
_MUST_BE = {"string_type": "a string", "int_type": "an integer", "float_type": "a number", "list_type": "a list",
            "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object"}


def _problem(error: Any, model: type[BaseModel] | None, owner: str = "this operation") -> str:
    """What one pydantic error says, in the words of this module."""
    kind, got = error["type"], _a(error.get("input"))
    if kind == "missing":
        return "is required but missing"
    if kind == "extra_forbidden":
        fields = [f for f in (model.model_fields if model else ()) if f != "op"]
        return f"is not a field of {owner}" + (f" (fields: {', '.join(fields)})" if fields else "")
    if kind in _MUST_BE:
        return f"must be {_MUST_BE[kind]}, not {got}"
    if kind == "finite_number":
        return "must be a finite number"
    if kind == "too_short":
        return "must not be empty"
    if kind in ("greater_than_equal", "less_than_equal"):
        return "must be a 64-bit integer"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    return f"is not valid: {error['msg']} (got {got})"


def _first(e: ValidationError) -> tuple[Any, str]:
    errors = e.errors(include_url=False)
    more = len(errors) - 1
    return errors[0], (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


def _model_error_line(e: ValidationError, model: type[BaseModel], field_prefix: str = "") -> str:
    """One line for a model validated directly (a dataclass op, a harness part)."""
    error, more = _first(e)
    path = field_prefix + _field_path(error["loc"])
    return f"field '{path}' {_problem(error, model)}{more}" if path else f"{_problem(error, model)}{more}"


def _edit_json_error_line(e: ValidationError, obj: Any) -> str:
    """One line for an `EditJson` parse: the op index, the op kind and the field."""
    error, more = _first(e)
    loc = error["loc"]
    if not loc:
        return f"an edit must be a JSON object with 'ops', not {_a(obj)}"
    if loc[0] != "ops" or len(loc) == 1:
        return f"edit: field '{_field_path(loc)}' {_problem(error, EditJson, 'an edit')}{more}"
    i = loc[1]
    raw = obj["ops"][i]
    if len(loc) == 2:  # the op itself: not an object, no 'op', or an 'op' no model has
        if error["type"] == "union_tag_invalid":
            if not isinstance(raw.get("op"), str):
                return f"op {i}: 'op' must be a string, not {_a(raw.get('op'))}{more}"
            return f"op {i}: unknown op {_q(raw['op'])} (ops: {', '.join(OP_MODELS)}){more}"
        return f"op {i}: must be an object with a string 'op', not {_a(raw)}{more}"
    kind, rest = loc[2], loc[3:]
    model = OP_MODELS[kind][0] if kind in OP_MODELS else None
    where = f"field '{_field_path(rest)}' " if rest else ""
    return f"op {i} ({kind}): {where}{_problem(error, model)}{more}"


def _validate(model: type[_Strict], data: dict[str, Any], field_prefix: str = "") -> _Strict:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise EditError(_model_error_line(e, model, field_prefix)) from None


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields, one level deep (no copying, no recursion: `dataclasses.asdict` recurses)."""
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def _op_kind(op: Any) -> str:
    kind = next((kind for cls, kind in _OP_KIND.items() if isinstance(op, cls)), None)
    if kind is None:
        raise EditError(f"unknown operation {_q(op)}")
    return kind


def _check_op_types(op: Any) -> None:
    """A dataclass op, checked by the same models as its JSON form; EditError names the field."""
    kind = _op_kind(op)
    wrapped = _WRAPPED_PART.get(OP_MODELS[kind][1])
    if wrapped is None:
        _validate(OP_MODELS[kind][0], {"op": kind, **_fields(op)})
        return
    field, part_cls = wrapped
    part = getattr(op, field)
    if not isinstance(part, part_cls):
        raise EditError(f"{field} must be a {part_cls.__name__}, not {_a(part)}")
    _validate(PART_MODELS[part_cls], _fields(part), f"{field}.")


_HARNESS_PARTS: tuple[tuple[str, type], ...] = (
    ("system_prompt", PromptSection),
    ("tools", ToolSpec),
    ("hooks", HookSpec),
    ("recipes", Recipe),
)


def _check_harness_types(h: Any) -> None:
    """Every part of a harness (which may come from a stored record) typed as values.py declares it."""
    if not isinstance(h, Harness):
        raise EditError(f"harness must be a Harness, not {_a(h)}")
    if not isinstance(h.family, str):
        raise EditError(f"harness family must be a string, not {_a(h.family)}")
    for field, _ in _HARNESS_PARTS:
        parts = getattr(h, field)
        if not isinstance(parts, (tuple, list)):
            raise EditError(f"harness {field} must be a tuple, not {_a(parts)}")
        _check_count(field, len(parts), "harness has")
    parts = [(f"{field}[{i}]", part, part_cls) for field, part_cls in _HARNESS_PARTS
             for i, part in enumerate(getattr(h, field))]
    for where, part, part_cls in [*parts, ("context", h.context, ContextPolicy), ("decoding", h.decoding, DecodingPolicy)]:
        if not isinstance(part, part_cls):
            raise EditError(f"harness {where} must be a {part_cls.__name__}, not {_a(part)}")
        try:
            _validate(PART_MODELS[part_cls], _fields(part), f"{where}.")
        except EditError as e:
            raise EditError(f"harness {e}") from None
    if not isinstance(h.max_turns, int) or isinstance(h.max_turns, bool):
        raise EditError(f"harness max_turns must be an integer, not {_a(h.max_turns)}")


# ------------------------------------------------------------------------------------------ limits
# harness part -> (its cap, what it is called in a message); hooks need none: one per kind at most
_PART_LIMITS: dict[str, tuple[int, str]] = {
    "system_prompt": (MAX_SECTIONS, "prompt sections"),
    "tools": (MAX_TOOLS, "tools"),
    "recipes": (MAX_RECIPES, "recipes"),
}


def _check_count(field: str, n: int, subject: str) -> None:
    limit = _PART_LIMITS.get(field)
    if limit is not None and n > limit[0]:
        raise EditError(f"{subject} {n} {limit[1]}, over the {limit[0]} limit")


def _part_chars(value: Any) -> int:
    """Characters of one harness part or op field: strings by length, payloads as JSON, a dataclass
    (a wrapped part) by its fields."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return len(json.dumps(value, ensure_ascii=False))  # checked by the type layer
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(_part_chars(v) for v in _fields(value).values())
    return 0


def harness_chars(h: Harness) -> int:
    """The size of a (type-checked) harness: the characters of its sections, tools, hooks and recipes
    (names, texts, descriptions, JSON schemas and params) — what a model is sent of it, and what the
    proposer reads. Bounded by `MAX_HARNESS_CHARS`."""
    return sum(_part_chars(part) for parts in (h.system_prompt, h.tools, h.hooks, h.recipes) for part in parts)


def _check_edit_shape(n_ops: int) -> None:
    if n_ops > MAX_OPS:
        raise EditError(f"edit has {n_ops} operations, over the {MAX_OPS} limit (split it into several edits)")


# ------------------------------------------------------------------------------- meaning layer
def validate_harness(h: Harness) -> None:
    """Raise EditError unless `h` is well-typed and consistent (unique names, known hooks, ranges)."""
    try:
        _check_harness_types(h)
    except RecursionError:
        raise EditError("harness is nested too deeply to check") from None
    _unique_names(h)
    for t in h.tools:
        _check_tool(t)
    for k in h.hooks:
        _check_hook(k)
    _check_context(h.context)
    _check_decoding(h.decoding)
    if not 1 <= h.max_turns <= MAX_TURNS_LIMIT:
        raise EditError(f"max_turns must be in 1..{MAX_TURNS_LIMIT}, got {_q(h.max_turns)}")
    size = harness_chars(h)
    if size > MAX_HARNESS_CHARS:
        raise EditError(f"harness holds {size} characters, over the {MAX_HARNESS_CHARS} limit")


def apply_edit(harness: Harness, edit: HarnessEdit) -> Harness:
    """`harness` with `edit`'s ops applied in order; EditError (one line) is the only exception, for a
    harness or an edit typed wrongly (from any source) as for one that does not apply."""
    try:
        return _apply_checked(harness, edit)
    except RecursionError:
        raise EditError("edit or harness is nested too deeply to check") from None


def _apply_checked(harness: Harness, edit: HarnessEdit) -> Harness:
    if not isinstance(edit, HarnessEdit):
        raise EditError(f"edit must be a HarnessEdit, not {_a(edit)}")
    if not isinstance(edit.ops, (tuple, list)):
        raise EditError(f"edit ops must be a tuple of operations, not {_a(edit.ops)}")
    if not edit.ops:
        raise EditError("edit has no operations")
    _check_edit_shape(len(edit.ops))
    if not isinstance(edit.rationale, str) or not isinstance(edit.targets, str):
        raise EditError("edit rationale and targets must be strings")
    for name, text in (("rationale", edit.rationale), ("targets", edit.targets)):
        if len(text) > MAX_TEXT:
            raise EditError(f"edit {name} is {len(text)} characters, over the {MAX_TEXT} limit")
    _check_harness_types(harness)
    draft = _Draft.of(harness)
    carried = 0
    for i, op in enumerate(edit.ops):
        try:
            _check_op_types(op)
            carried += _part_chars(op)
            if carried > MAX_EDIT_CHARS:
                raise EditError(f"the edit's operations carry over {MAX_EDIT_CHARS} characters")
            _apply_op(draft, op)
        except EditError as e:
            raise EditError(f"op {i} ({type(op).__name__}): {e}") from None
    h = draft.harness()
    validate_harness(h)
    if h == harness:
        raise EditError("edit changes nothing")
    return h


@dataclasses.dataclass
class _Draft:
    """A harness being edited: each part keyed by its name (dicts keep their order, and a replaced
    value keeps its place), so every operation costs O(1) plus the size of what it carries."""

    family: str
    sections: dict[str, PromptSection]
    tools: dict[str, ToolSpec]
    hooks: dict[tuple[str, str], HookSpec]
    context: ContextPolicy
    recipes: dict[str, Recipe]
    max_turns: int
    decoding: DecodingPolicy

    @classmethod
    def of(cls, h: Harness) -> _Draft:
        """The working copy of a type-checked harness; its names must be unique (keying would hide a
        duplicate that `validate_harness` refuses)."""
        _unique_names(h)
        return cls(
            family=h.family,
            sections={s.name: s for s in h.system_prompt},
            tools={t.name: t for t in h.tools},
            hooks={(k.event, k.kind): k for k in h.hooks},
            context=h.context,
            recipes={r.name: r for r in h.recipes},
            max_turns=h.max_turns,
            decoding=h.decoding,
        )

    def harness(self) -> Harness:
        return Harness(
            family=self.family,
            system_prompt=tuple(self.sections.values()),
            tools=tuple(self.tools.values()),
            hooks=tuple(self.hooks.values()),
            context=self.context,
            recipes=tuple(self.recipes.values()),
            max_turns=self.max_turns,
            decoding=self.decoding,
        )

    def grow(self, field: str, n: int) -> None:
        """Refuse the op that would take a part past its cap."""
        _check_count(field, n, "the harness would have")


def _names(names: Any) -> str:
    return _clip(repr(list(names)), 200)


def _apply_op(d: _Draft, op: Any) -> None:
    """One op whose types `_check_op_types` has checked, on the draft of a type-checked harness."""
    match op:
        case SetSection(name=name, text=text):
            _check_text(text)
            if name not in d.sections:
                d.grow("system_prompt", len(d.sections) + 1)
            d.sections[name] = PromptSection(name, text)
        case AppendSection(name=name, text=text):
            old = d.sections.get(name)
            if old is None:
                raise EditError(f"no prompt section {_q(name)} (sections: {_names(d.sections)})")
            _check_text(text)
            new_text = old.text.rstrip() + "\n" + text.strip()
            _check_text(new_text)
            d.sections[name] = PromptSection(name, new_text)
        case RemoveSection(name=name):
            if d.sections.pop(name, None) is None:
                raise EditError(f"no prompt section {_q(name)}")
        case AddTool(tool=tool):
            if tool.name in d.tools:
                raise EditError(f"tool {_q(tool.name)} already exists")
            _check_tool(tool)
            d.grow("tools", len(d.tools) + 1)
            d.tools[tool.name] = tool
        case AlterTool(name=name, description=description, parameters=parameters):
            old = d.tools.get(name)
            if old is None:
                raise EditError(f"no tool {_q(name)} (tools: {_names(d.tools)})")
            if description is None and parameters is None:
                raise EditError("alter_tool needs a description or parameters")
            new = dataclasses.replace(
                old,
                description=old.description if description is None else description,
                parameters=old.parameters if parameters is None else parameters,
            )
            _check_tool(new)
            d.tools[name] = new
        case RemoveTool(name=name):
            if name not in d.tools:
                raise EditError(f"no tool {_q(name)}")
            if name == "finish":
                raise EditError("the finish tool cannot be removed")
            del d.tools[name]
        case AddHook(hook=hook):
            _check_hook(hook)
            if (hook.event, hook.kind) in d.hooks:
                raise EditError(f"hook {_q(hook.kind)} on {_q(hook.event)} already present")
            d.hooks[(hook.event, hook.kind)] = hook
        case RemoveHook(event=event, kind=kind):
            if d.hooks.pop((event, kind), None) is None:
                raise EditError(f"no hook {_q(kind)} on {_q(event)}")
        case SetContextPolicy(policy=policy):
            _check_context(policy)
            d.context = policy
        case AddRecipe(recipe=recipe):
            if recipe.name in d.recipes:
                raise EditError(f"recipe {_q(recipe.name)} already exists")
            _check_text(recipe.text)
            d.grow("recipes", len(d.recipes) + 1)
            d.recipes[recipe.name] = recipe
        case SetMaxTurns(max_turns=n):
            if not 1 <= n <= MAX_TURNS_LIMIT:
                raise EditError(f"max_turns must be an int in 1..{MAX_TURNS_LIMIT}, got {n}")
            d.max_turns = n
        case SetDecoding(policy=policy):
            _check_decoding(policy)
            d.decoding = DecodingPolicy(policy.tool_calls, policy.temperature, policy.max_tokens)  # 0 -> 0.0
        case _:
            raise EditError(f"unknown operation {_q(op)}")


def _check_text(text: str) -> None:
    if not text.strip():
        raise EditError("text must be a non-empty string")
    if len(text) > MAX_TEXT:
        raise EditError(f"text is {len(text)} characters, over the {MAX_TEXT} limit")


def _check_tool(t: ToolSpec) -> None:
    if not t.name or not t.name.replace("_", "").isalnum():
        raise EditError(f"tool name {_q(t.name)} must be alphanumeric with underscores")
    if t.parameters.get("type") != "object":
        raise EditError(f"tool {_q(t.name)}: parameters must be a JSON schema of type object")
    if not t.impl:
        raise EditError(f"tool {_q(t.name)} names no implementation")


def _check_hook(k: HookSpec) -> None:
    if k.event not in HOOK_EVENTS:
        raise EditError(f"hook event {_q(k.event)} is not one of {HOOK_EVENTS}")
    allowed = HOOK_KINDS.get(k.kind)
    if allowed is None:
        raise EditError(f"hook kind {_q(k.kind)} is not one of {sorted(HOOK_KINDS)}")
    if HOOK_KIND_EVENTS[k.kind] != k.event:
        raise EditError(f"hook {_q(k.kind)} runs on {HOOK_KIND_EVENTS[k.kind]!r}, not {_q(k.event)}")
    unknown = set(k.params) - allowed
    if unknown:
        raise EditError(f"hook {_q(k.kind)} has unknown params {_clip(repr(sorted(unknown)), 200)}")


def _check_context(c: ContextPolicy) -> None:
    if c.strategy not in CONTEXT_STRATEGIES:
        raise EditError(f"context strategy {_q(c.strategy)} is not one of {CONTEXT_STRATEGIES}")
    if not 500 <= c.token_budget <= 1_000_000:
        raise EditError(f"token_budget {c.token_budget} is outside 500..1000000")
    if not 1 <= c.keep_last <= 100:
        raise EditError(f"keep_last {c.keep_last} is outside 1..100")


def _check_decoding(p: DecodingPolicy) -> None:
    if p.tool_calls not in TOOL_CALL_MODES:
        raise EditError(f"decoding tool_calls {_q(p.tool_calls)} is not one of {TOOL_CALL_MODES}")
    if p.temperature is not None and not 0.0 <= p.temperature <= MAX_TEMPERATURE:
        raise EditError(f"decoding temperature {p.temperature:g} is outside 0..{MAX_TEMPERATURE:g}")
    if p.max_tokens is not None and not 1 <= p.max_tokens <= MAX_REPLY_TOKENS:
        raise EditError(f"decoding max_tokens {p.max_tokens} is outside 1..{MAX_REPLY_TOKENS}")


def _unique_names(h: Harness) -> None:
    """A harness's sections, tools, recipes and hooks each named once. Names are strings (or tuples of
    them) by the time this runs: the type layer checked them."""
    for names, what in (([s.name for s in h.system_prompt], "prompt section"), ([t.name for t in h.tools], "tool"),
                        ([r.name for r in h.recipes], "recipe"), ([(k.event, k.kind) for k in h.hooks], "hook")):
        seen = set()
        for n in names:
            if n in seen:
                raise EditError(f"duplicate {what} {_q(n)}")
            seen.add(n)


# ------------------------------------------------------------------------------ JSON form of edits
def edit_from_json(obj: Any) -> HarnessEdit:
    """Parse a proposer's JSON edit through `EditJson`; any problem is one EditError, one line, naming
    the op index, the op kind and the field."""
    if isinstance(obj, dict) and isinstance(obj.get("ops"), list):
        _check_edit_shape(len(obj["ops"]))  # before a single op is parsed
    try:
        return EditJson.model_validate(obj).to_edit()
    except ValidationError as e:
        raise EditError(_edit_json_error_line(e, obj)) from None
    except RecursionError:
        raise EditError("edit is nested too deeply to read") from None


def edit_to_json(edit: HarnessEdit) -> dict[str, Any]:
    """The inverse of `edit_from_json` (for prompts, history and records): a wrapped part's fields at the
    operation's top level, fields that are None left out."""
    ops = []
    for op in edit.ops:
        kind = _op_kind(op)
        wrapped = _WRAPPED_PART.get(OP_MODELS[kind][1])
        fields = _fields(getattr(op, wrapped[0]) if wrapped else op)
        ops.append({"op": kind, **{k: v for k, v in fields.items() if v is not None}})
    return {"rationale": edit.rationale, "targets": edit.targets, "ops": ops}
