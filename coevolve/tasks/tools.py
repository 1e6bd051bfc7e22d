"""Tool schemas derived from the typed `tool_<name>` methods of an environment and their docstrings.

`tool_spec(method)` is the `ToolSpec` a method describes: the name is the method's without `tool_`
(and so is `impl`), the description is its docstring's first paragraph on one line, and the parameters
are a closed JSON-schema object with one property per argument after `self`, in order, required where
the argument has no default. A property's schema comes from the argument's type hint:

- `str`, `int`, `float`, `bool` -> string, integer, number, boolean; `X | None` is `X`'s schema (give it
  a default of None to make it optional); `X | Y` -> `"type": [X's, Y's]`;
- `Literal["a", "b"]` -> the literal's type with `"enum": ["a", "b"]`;
- `list[X]` -> array with `"items"`: X's schema (none for `list[Any]`);
- `dict[str, X]` -> object with `"additionalProperties"`: X's schema (none for `dict[str, Any]`);
- `Annotated[X, Param(keyword=value, ...)]` -> X's schema, then these JSON-schema keywords in the order
  written; a keyword X's schema has too moves to its place among them (`Param(minItems=1, items=...)` on
  a `list[dict[str, Any]]` writes `minItems` before `items`).

A docstring can name values (`{OT_MULT:g}`) that `fill_doc` fills in when the method is defined, so its
text and the schema's description say the same thing.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union

from coevolve.values import ToolSpec

PREFIX = "tool_"
_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, init=False)
class Param:
    """JSON-schema keywords of one tool argument beyond its type, for `Annotated[type, Param(...)]`
    (`Param(minLength=1, description="an element id")`), in the order written."""

    keywords: dict[str, Any]

    def __init__(self, **keywords: Any) -> None:
        object.__setattr__(self, "keywords", keywords)


def json_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a type hint (the rules are in the module's docstring)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        schema = json_schema(args[0])
        for param in args[1:]:
            if isinstance(param, Param):
                schema = {k: v for k, v in schema.items() if k not in param.keywords} | param.keywords
        return schema
    if origin in (Union, types.UnionType):
        kinds = [json_schema(a) for a in args if a is not type(None)]
        return kinds[0] if len(kinds) == 1 else {"type": [k["type"] for k in kinds]}
    if origin is Literal:
        return {"type": _JSON_TYPES[type(args[0])], "enum": list(args)}
    if origin is list:
        return {"type": "array"} | ({"items": json_schema(args[0])} if args[0] is not Any else {})
    if origin is dict:
        values = {"additionalProperties": json_schema(args[1])} if args[1] is not Any else {}
        return {"type": "object"} | values
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    raise TypeError(f"no JSON schema for the type {hint!r}")


def tool_spec(method: Callable[..., Any], *, required_always: bool = False) -> ToolSpec:
    """The ToolSpec of a `tool_<name>` method (unbound: its first argument is `self`). With
    `required_always`, the schema lists `required` even when it is empty."""
    if not method.__name__.startswith(PREFIX):
        raise ValueError(f"{method.__qualname__} is not a tool method (its name must start with {PREFIX!r})")
    name = method.__name__.removeprefix(PREFIX)
    doc = inspect.getdoc(method)
    if not doc:
        raise ValueError(f"{method.__qualname__} has no docstring to describe the tool")
    hints = typing.get_type_hints(method, include_extras=True)
    arguments = list(inspect.signature(method).parameters.values())[1:]
    required = [a.name for a in arguments if a.default is inspect.Parameter.empty]
    properties = {a.name: json_schema(hints[a.name]) for a in arguments}
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required or required_always:
        parameters["required"] = required
    parameters["additionalProperties"] = False
    return ToolSpec(name, " ".join(doc.split("\n\n")[0].split()), parameters, name)


def tool_specs(*methods: Callable[..., Any], required_always: bool = False) -> tuple[ToolSpec, ...]:
    """`tool_spec` of each method, in order."""
    return tuple(tool_spec(m, required_always=required_always) for m in methods)


def fill_doc(**values: Any) -> Callable[[F], F]:
    """A decorator that fills the `{name}` fields of a method's docstring from `values` (format syntax)."""

    def fill(method: F) -> F:
        method.__doc__ = inspect.cleandoc(method.__doc__ or "").format(**values)
        return method

    return fill
