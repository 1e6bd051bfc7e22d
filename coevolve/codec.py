"""The one msgpack codec for every value of `coevolve.values` (docs/ARCHITECTURE.md §3): the value types register
themselves (`register`, called once at the end of `coevolve.values`), so the codec imports nothing of
the project and the values can hash themselves with it (`Harness.id`, `Trajectory.id`).

A dataclass becomes a map with a type tag (`"~t": "Harness"`); tuples travel as arrays and come back
as tuples where the field is annotated as one. `canonical` sorts every map so that equal values
encode to equal bytes, which is what content ids (harness ids, trajectory ids, blob names) hash.

A field declared with `OMIT_DEFAULT` in its metadata (a field added to a type after values of it
were stored, e.g. `Harness.decoding`) is left out while it holds its default, and a map without it
decodes to the default: every value stored or identified before the field existed keeps its bytes and
its content id, and a value that sets the field gets a new one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import typing
from collections.abc import Iterable
from functools import cache
from typing import Any

import msgpack

TAG = "~t"
# A field whose metadata carries OMIT_DEFAULT is left out of the encoding while it holds its default,
# so adding it to a value type keeps the content id of every existing value.
OMIT_DEFAULT = "omit_default"

_TYPES: dict[str, type] = {}


class CodecError(ValueError):
    pass


def register(types: Iterable[type]) -> None:
    """Make dataclasses encodable under their class names (a name taken by another class is an error)."""
    for cls in types:
        if not dataclasses.is_dataclass(cls):
            raise CodecError(f"{cls.__qualname__} is not a dataclass")
        if _TYPES.setdefault(cls.__name__, cls) is not cls:
            raise CodecError(f"value type name {cls.__name__!r} is already registered")


@cache
def _tuple_fields(cls: type) -> frozenset[str]:
    hints = typing.get_type_hints(cls)
    return frozenset(
        name for name, hint in hints.items() if typing.get_origin(hint) is tuple or hint is tuple
    )


@cache
def _omitted_defaults(cls: type) -> dict[str, Any]:
    """Field name -> default, for the fields of `cls` left out of the encoding while at their default."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get(OMIT_DEFAULT):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
    return out


def _is_default(value: Any, default: Any) -> bool:
    """Equal to the default and of its type (`True == 1`, `0.0 == 0`: those must still be encoded)."""
    return type(value) is type(default) and value == default


def to_plain(value: Any, *, sort: bool = False) -> Any:
    """Value -> msgpack-ready structure (maps, arrays, scalars)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if _TYPES.get(name) is not type(value):
            raise CodecError(f"{type(value).__qualname__} is not a registered value type")
        out: dict[str, Any] = {TAG: name}
        omit = _omitted_defaults(type(value))
        for f in dataclasses.fields(value):
            field_value = getattr(value, f.name)
            if f.name in omit and _is_default(field_value, omit[f.name]):
                continue
            out[f.name] = to_plain(field_value, sort=sort)
        return dict(sorted(out.items())) if sort else out
    if isinstance(value, dict):
        items = ((_escape(k), to_plain(v, sort=sort)) for k, v in value.items())
        if sort:
            return dict(sorted(items, key=lambda kv: str(kv[0])))
        return dict(items)
    if isinstance(value, (list, tuple)):
        return [to_plain(v, sort=sort) for v in value]
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    raise CodecError(f"cannot encode {type(value).__qualname__}")


def _escape(key: Any) -> Any:
    """A plain dict's key that starts with `~` gets one more, so that no payload (a tool schema, a
    model's JSON) can pass for a tagged value; `_hook` strips it again."""
    return "~" + key if isinstance(key, str) and key.startswith("~") else key


def _hook(obj: dict[str, Any]) -> Any:
    name = obj.get(TAG)
    if name is None:
        if any(isinstance(k, str) and k.startswith("~") for k in obj):
            return {(k[1:] if isinstance(k, str) and k.startswith("~~") else k): v for k, v in obj.items()}
        return obj
    cls = _TYPES.get(name)
    if cls is None:
        raise CodecError(f"unknown type tag {name!r}")
    tuples = _tuple_fields(cls)
    kwargs = {k: (tuple(v) if k in tuples and isinstance(v, list) else v) for k, v in obj.items() if k != TAG}
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise CodecError(f"cannot decode {name}: {e}") from e


def encode(value: Any) -> bytes:
    return msgpack.packb(to_plain(value), use_bin_type=True)


def decode(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, object_hook=_hook, strict_map_key=False)


def canonical(value: Any) -> bytes:
    return msgpack.packb(to_plain(value, sort=True), use_bin_type=True)


def content_id(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def from_plain(obj: Any) -> Any:
    """The inverse of `to_plain` for structures that arrive as JSON (e.g. from a model)."""
    return decode(msgpack.packb(obj, use_bin_type=True))
