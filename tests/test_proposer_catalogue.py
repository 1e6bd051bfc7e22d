"""What the proposer is told it may do: every edit op documented, the environment's tool catalogue
listed (issue 22.2: harness evolution can hand computation to tools), and synthetic/meta's use of both."""

from __future__ import annotations

import json
import re

import pytest

from coevolve.agents.meta.proposer import (
    PROMPT,
    catalogue_from_messages,
    parse_response,
    proposer_messages,
    tool_catalogue,
)
from coevolve.edits import OP_MODELS, apply_edit, edit_from_json
from coevolve.tasks import get_family
from coevolve.tasks.helpers import SMALL_LEVEL_FAMILIES, optional_tools
from coevolve.testbed import meta as synthetic_meta


def test_every_edit_op_is_documented_in_the_proposer_prompt():
    documented = set(re.findall(r'"op": "([a-z_]+)"', PROMPT.format(k=3)))
    assert set(OP_MODELS) - {"remove_hook"} <= documented, set(OP_MODELS) - documented
    assert documented <= set(OP_MODELS)  # no op the parser refuses


@pytest.mark.parametrize("family", SMALL_LEVEL_FAMILIES)
def test_the_catalogue_lists_the_helpers_the_harness_lacks(family):
    fam = get_family(family)
    base = fam.baseline_harness()
    cat = tool_catalogue(family, base)
    assert [t["name"] for t in cat] == [t["name"] for t in optional_tools(family)] and cat
    first = cat[0]
    with_one = apply_edit(base, edit_from_json({"ops": [{"op": "add_tool", **first}]}))
    assert [t["name"] for t in tool_catalogue(family, with_one)] == [t["name"] for t in cat[1:]]
    msgs = proposer_messages({"family": family, "failures": []}, 3, catalogue=cat)
    assert catalogue_from_messages(msgs) == cat
    assert catalogue_from_messages(proposer_messages({"family": family, "failures": []}, 3)) == []


def test_no_catalogue_for_a_family_without_helpers_or_an_unknown_one():
    refactor = get_family("refactor")
    assert tool_catalogue("refactor", refactor.baseline_harness()) == []
    assert tool_catalogue("nosuch", refactor.baseline_harness()) == []


def _failure(i: int, malformed: bool, turns: int = 8, errors: int | None = None) -> dict:
    """A failure of `turns` turns; `malformed`: `errors` of them (default: all) came back with errors,
    bad arguments among them; else one error of another kind."""
    if malformed:
        shown = ["error: sql_query: bad arguments: 'query' is a required property"]
        count = turns if errors is None else errors
    else:
        shown, count = ["error: no such sensor"], 1
    return {"instance": f"iot/train/{i}", "instruction": "Check the sensors.", "turns": turns, "tool_errors": shown,
            "tool_error_count": count, "failed_requirements": []}


@pytest.fixture(autouse=True)
def _no_noise(monkeypatch):
    """synthetic/meta swaps a seeded share of its candidates for useless, harmful or broken ones: off
    here, so the candidate list itself is compared."""
    for name in ("USELESS_SHARE", "HARMFUL_SHARE", "BROKEN_SHARE"):
        monkeypatch.setattr(synthetic_meta, name, 0.0)


def _answer(family: str, failures: list[dict], k: int = 3, catalogue: bool = False, constrained: bool = False) -> list[dict]:
    fam = get_family(family)
    h = fam.baseline_harness()
    if constrained:
        h = apply_edit(h, edit_from_json({"ops": [{"op": "set_decoding", "tool_calls": "constrained"}]}))
    evidence = {"family": family, "harness_id": h.id[:12], "harness": h.describe(), "failures": failures,
                "failures_total": len(failures), "history": []}
    msgs = proposer_messages(evidence, k, catalogue=tool_catalogue(family, h) if catalogue else None)
    reply = synthetic_meta.propose(msgs, [], seed=0, generic_only=False)
    return json.loads(reply.message["content"])["edits"]


def _kinds(edits: list[dict]) -> list[str]:
    return [e["ops"][0]["op"] for e in edits]


def test_constrained_decoding_comes_first_when_most_failures_are_mostly_broken_calls():
    # k large enough that every candidate is shown
    most = _answer("iot", [_failure(i, malformed=i < 3) for i in range(4)], k=8)
    few = _answer("iot", [_failure(i, malformed=i < 1) for i in range(4)], k=8)
    # a weak model's occasional bad call (1 turn in 8 of every failure) is no reason to constrain first
    sparse = _answer("iot", [_failure(i, malformed=True, errors=1) for i in range(4)], k=8)
    for edits in (most, few, sparse):
        assert "set_decoding" in _kinds(edits) and "add_hook" in _kinds(edits)
    assert _kinds(most).index("set_decoding") < _kinds(most).index("add_hook")
    assert _kinds(few).index("set_decoding") > _kinds(few).index("add_hook")
    assert _kinds(sparse).index("set_decoding") > _kinds(sparse).index("add_hook")


def test_synthetic_meta_proposes_the_catalogue_first_once_calls_are_constrained():
    fam = get_family("payroll")
    failures = [_failure(i, malformed=False) for i in range(3)]
    edits = _answer("payroll", failures, k=8, catalogue=True, constrained=True)
    assert _kinds(edits)[0] == "add_tool" and _kinds(edits).count("add_tool") == 1
    [proposal] = parse_response(json.dumps({"edits": edits[:1]}), fam.baseline_harness())
    assert proposal.error is None
    assert {t["name"] for t in optional_tools("payroll")} <= {t.name for t in proposal.candidate.tools}
    # not under free calls, and not without a catalogue in the prompt
    assert "add_tool" not in _kinds(_answer("payroll", failures, k=8, catalogue=True, constrained=False))
    assert "add_tool" not in _kinds(_answer("payroll", failures, k=8, catalogue=False, constrained=True))
