"""synthetic/meta's handbook rounds find the sections that state the rules a failure broke, from what the
grader said: the kinds of error its reasons list ("E776 2026-07-20 (wrong_rate)") and the tables the agent
last read, through the real proposer path (`LLMProposer`, the gateway, the handbook tools)."""

from __future__ import annotations

import pytest

from coevolve.agents.meta import LLMProposer
from coevolve.tasks import get_family
from coevolve.testbed import meta as synthetic_meta
from coevolve.values import AddRecipe
from tests.rollouts import FunctionClient, proposer_complete


@pytest.fixture(autouse=True)
def _no_noise(monkeypatch):
    """synthetic/meta swaps a seeded share of its candidates for useless, harmful or broken ones: off
    here, so that its first candidate is the edit of every section it read."""
    for name in ("USELESS_SHARE", "HARMFUL_SHARE", "BROKEN_SHARE"):
        monkeypatch.setattr(synthetic_meta, name, 0.0)


PAYROLL = "Birch Foods: audit the pay stubs of the weekly pay period 2026-07-06."
BUDGET = "Northwind: decide the 7 pending purchase requests submitted on 2026-04-14, in order of submission."


def _failure(i: int, instruction: str, requirements: list[tuple[str, str]], tail: list[dict] | None = None) -> dict:
    return {"instance": f"train/{i}", "instruction": instruction,
            "turns": 6, "ended": "finished", "failed_requirements": [{"id": r, "reason": why} for r, why in requirements],
            "transcript_tail": tail or [], "tool_errors": [], "tool_error_count": 0, "calls_per_turn_max": 1,
            "observation_tokens": 400, "context_events": []}


def _recipes(family_name: str, failures: list[dict]) -> set[str]:
    """The handbook sections whose text reached the proposer's first proposal as a recipe."""
    family = get_family(family_name)
    proposer = LLMProposer("synthetic/meta", FunctionClient(proposer_complete), family.handbook)
    h = family.baseline_harness()
    evidence = {"family": family_name, "harness_id": h.id[:12], "harness": h.describe(), "failures": failures,
                "failures_total": len(failures), "history": []}
    proposals, _ = proposer.propose(evidence, h, 1, seed=0)
    texts = {" ".join(op.recipe.text.split()) for p in proposals if p.edit for op in p.edit.ops if isinstance(op, AddRecipe)}
    return {s.id for s in family.handbook.sections if " ".join(s.text.split()) in texts}


def test_the_kinds_of_error_a_grader_lists_lead_to_the_sections_on_them():
    generic = [("report_saved", "no audit report was saved (write_audit_report never succeeded)"),
               ("every_erroneous_stub_reported", "1 of the 3 erroneous pay stubs in the audited periods is not in the report")]
    listed = ("no_false_findings", ("2 findings do not match an erroneous pay stub of the audited periods: "
                                   "E978 2026-07-06 (terminated_paid), E776 2026-07-20 (wrong_rate)"))
    assert "people-who-leave" in _recipes("payroll", [_failure(i, PAYROLL, [*generic, listed]) for i in range(4)])
    # without the listing, nothing points at it
    assert "people-who-leave" not in _recipes("payroll", [_failure(i, PAYROLL, generic) for i in range(4)])


def test_the_heading_of_a_table_the_agent_last_read_leads_to_the_section_on_it():
    requirements = [("every_request_decided", "no decision was recorded for any of the 7 pending requests")]
    tail = [{"role": "tool", "content": "department | posted_balance_usd | posted_at\nPeople | 2999.63 | 2026-12-02T00:00"}]
    assert "how-the-budget-service-reports-balances" in _recipes("budget", [_failure(i, BUDGET, requirements, tail) for i in range(3)])
    assert "how-the-budget-service-reports-balances" not in _recipes("budget", [_failure(i, BUDGET, requirements) for i in range(3)])
