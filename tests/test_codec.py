"""Round-trip properties of the msgpack codec for every value type in `coevolve.values`."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coevolve import codec, values
from coevolve.codec import CodecError, canonical, content_id, decode, encode, from_plain, to_plain

VALUE_TYPES: list[type] = sorted(
    (
        obj
        for obj in vars(values).values()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == values.__name__
    ),
    key=lambda c: c.__name__,
)
IDS = [c.__name__ for c in VALUE_TYPES]

PROPERTY = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------------ strategies
INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
FLOATS = st.floats(allow_nan=False)
TEXT = st.text(max_size=12)
# Keys include `~t` and other `~`-prefixed strings on purpose: a payload must never pass for a tag.
KEYS = st.one_of(st.text(max_size=6), st.sampled_from(["~t", "~~t", "~", "~x"]))
JSON_SCALARS = st.none() | st.booleans() | INT64 | FLOATS | TEXT
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(KEYS, inner, max_size=2),
    max_leaves=4,
)
JSON_DICTS = st.dictionaries(KEYS, JSON, max_size=3)


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """A strategy for one annotated field type (the subset `values` uses)."""
    origin = typing.get_origin(hint)
    if hint is str:
        return TEXT
    if hint is bool:
        return st.booleans()
    if hint is int:
        return INT64
    if hint is float:
        return FLOATS
    if hint is Any:
        return JSON
    if hint is type(None):
        return st.none()
    if origin in (typing.Union, types.UnionType):
        return st.one_of([strategy_for(a) for a in typing.get_args(hint)])
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=2).map(tuple)
        return st.tuples(*(strategy_for(a) for a in args))
    if origin is dict or hint is dict:
        return JSON_DICTS
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return value_strategy(hint)
    raise TypeError(f"no strategy for field type {hint!r}")


@functools.cache
def field_strategies(cls: type) -> dict[str, st.SearchStrategy[Any]]:
    hints = typing.get_type_hints(cls)
    return {f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(cls)}


@functools.cache
def value_strategy(cls: type) -> st.SearchStrategy[Any]:
    return st.deferred(lambda: st.builds(cls, **field_strategies(cls)))


def reorder(x: Any) -> Any:
    """An equal value whose every dict has its insertion order reversed."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return type(x)(**{f.name: reorder(getattr(x, f.name)) for f in dataclasses.fields(x)})
    if isinstance(x, dict):
        return {k: reorder(v) for k, v in reversed(list(x.items()))}
    if isinstance(x, tuple):
        return tuple(reorder(v) for v in x)
    if isinstance(x, list):
        return [reorder(v) for v in x]
    return x


def same_types(a: Any, b: Any) -> None:
    """Structural equality that also tells tuple from list and bool from int (== does not)."""
    assert type(a) is type(b), (a, b)
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            same_types(getattr(a, f.name), getattr(b, f.name))
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same_types(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same_types(x, y)


# ------------------------------------------------------------------------------------ properties
def test_every_value_type_is_registered():
    assert len(VALUE_TYPES) >= 25
    assert set(codec._TYPES) == set(IDS)
    for cls in VALUE_TYPES:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls


@pytest.mark.parametrize("cls", VALUE_TYPES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_round_trip_and_canonical_form(cls: type, data: st.DataObject):
    value = data.draw(value_strategy(cls))
    # encode -> decode is the identity, down to tuple-vs-list and dict insertion order
    back = decode(encode(value))
    assert back == value
    same_types(back, value)
    canon = decode(canonical(value))
    assert canon == value
    assert type(canon) is cls
    assert from_plain(to_plain(value)) == value
    # an equal value built with every dict in another insertion order has the same canonical bytes
    shuffled = reorder(value)
    assert shuffled == value
    assert canonical(shuffled) == canonical(value)
    assert content_id(shuffled) == content_id(value)


@pytest.mark.parametrize("cls", VALUE_TYPES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_content_id_changes_with_any_field(cls: type, data: st.DataObject):
    value = data.draw(value_strategy(cls))
    strategies = field_strategies(cls)
    name = data.draw(st.sampled_from(sorted(strategies)))
    old = getattr(value, name)
    new = data.draw(strategies[name].filter(lambda v: v != old))
    changed = dataclasses.replace(value, **{name: new})
    assert changed != value
    assert content_id(changed) != content_id(value)
    assert len(content_id(value)) == 64


def test_canonical_differs_from_plain_encoding_only_in_order():
    tool = values.ToolSpec("t", "d", {"type": "object", "properties": {"b": {}, "a": {}}}, "impl")
    flipped = values.ToolSpec("t", "d", {"properties": {"a": {}, "b": {}}, "type": "object"}, "impl")
    assert encode(tool) != encode(flipped)  # plain encoding keeps insertion order ...
    assert canonical(tool) == canonical(flipped)  # ... canonical does not depend on it
    assert list(decode(encode(tool)).parameters["properties"]) == ["b", "a"]


def test_harness_and_trajectory_ids_are_content_ids():
    h = values.Harness("iot", (values.PromptSection("role", "r"),), ())
    assert h.id == content_id(h)
    assert values.Harness("iot", (values.PromptSection("role", "r2"),), ()).id != h.id


def test_payload_keys_cannot_forge_a_tag():
    inst = values.TaskInstance("iot", "i", "val", 1, "x", params={"~t": "Recipe", "name": "n", "text": "t"})
    back = decode(encode(inst))
    assert isinstance(back.params, dict)
    assert back == inst


# ------------------------------------------------------------------------------------ errors
def test_unknown_tag_raises_codec_error():
    with pytest.raises(CodecError, match="unknown type tag 'NoSuchValue'"):
        decode(msgpack.packb({"~t": "NoSuchValue", "x": 1}))


def test_unknown_nested_tag_raises_codec_error():
    plain = to_plain(values.Harness("iot", (values.PromptSection("role", "r"),), ()))
    plain["system_prompt"][0]["~t"] = "Bogus"
    with pytest.raises(CodecError, match="Bogus"):
        decode(msgpack.packb(plain))


def test_known_tag_with_wrong_fields_raises_codec_error():
    with pytest.raises(CodecError, match="cannot decode Recipe"):
        decode(msgpack.packb({"~t": "Recipe", "name": "n", "colour": "red"}))


def test_encoding_an_unregistered_type_raises_codec_error():
    @dataclasses.dataclass(frozen=True)
    class Recipe:  # same name as a registered value, different class
        name: str

    with pytest.raises(CodecError, match="not a registered value type"):
        encode(Recipe("x"))
    with pytest.raises(CodecError, match="cannot encode"):
        encode({"s": {1, 2}})
