"""Stock alerting family: golden instances (hand-derived expected rows and emails) with mutations, checker
reports, concepts, handbook search, tools. The checks every family shares (traps, rules, handbook) are in
test_family_contract.py, the levers (stated facts help, hooks help) in test_families.py."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from coevolve.tasks import get_family
from coevolve.tasks.base import Knowledge
from coevolve.tasks.stock import SHEET, SUPPLIER_SHEET, StockEnv
from tests.helpers import failed

FAM = get_family("stock")
FULL = FAM.full_knowledge()
GOLDEN = json.loads((Path(__file__).resolve().parent.parent / "coevolve" / "tasks" / "stock" / "golden.json").read_text())[
    "instances"
]
TRAP_FACT = {
    "at_threshold": "strictly_below",
    "reserved": "available_stock",
    "discontinued": "skip_discontinued",
    "open_alert": "open_alert_dedup",
    "case_pack": "case_pack",
}


def run_plan(inst, knowledge: Knowledge) -> StockEnv:
    env = FAM.make_env(inst)
    for step in FAM.plan(inst, knowledge):
        result = env.call(step.tool, dict(step.args))
        assert not result.error, result.content
    assert isinstance(env, StockEnv)
    return env


def with_trap(trap: str, n: int = 3) -> list:
    found = []
    for split in ("val", "train", "test"):
        for inst in FAM.generate(split, difficulty=3):
            if trap in FAM.answer_key(inst)["traps"]:
                found.append(inst)
                if len(found) == n:
                    return found
    return found


def env_with(inst, rows: list[list[str]], emails: list[dict]) -> StockEnv:
    env = FAM.make_env(inst)
    assert not env.call("append_rows", {"sheet": SHEET, "rows": rows}).error
    if emails:
        assert not env.call("send_emails", {"emails": emails}).error
    assert isinstance(env, StockEnv)
    return env


def new_rows(env: StockEnv) -> list[list[str]]:
    return env.sheets[SHEET][len(env.world.existing) + 1 :]


# ------------------------------------------------------------------ golden instances
def test_golden_instances_cover_every_trap():
    traps = {t for g in GOLDEN for t in FAM.answer_key(FAM.instance(g["id"]))["traps"]}
    assert len(GOLDEN) >= 5 and {f"stock/test/{i}" for i in range(5)} <= {g["id"] for g in GOLDEN}
    assert set(TRAP_FACT) | {"urgent"} <= traps


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_reference_solver_writes_the_hand_derived_rows_and_emails(golden):
    inst = FAM.instance(golden["id"])
    outcome, env = FAM.reference_solve(inst)
    assert outcome.passed and outcome.score == 1.0
    assert env.sheets[SHEET][0] == golden["header"]
    assert sorted(new_rows(env)) == sorted(golden["new_rows"])
    assert sorted(env.sent, key=json.dumps) == sorted(golden["emails"], key=json.dumps)


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_checker_accepts_the_golden_state_and_rejects_each_mutation(golden):
    inst = FAM.instance(golden["id"])
    rows, emails = golden["new_rows"], golden["emails"]
    assert FAM.check(env_with(inst, rows, emails)).passed
    header = golden["header"]
    sku, qty, avail = header.index("SKU"), header.index("Reorder Qty"), header.index("Available")
    alerted = {r[sku] for r in rows}
    other = next(p for p in FAM.world(inst.seed, inst.params).products if p.sku not in alerted)
    first, mail = rows[0], emails[0]
    urgent = golden["emails"][0]["priority"] == "high"
    mutations = {
        "row dropped": (rows[1:], emails, {"alert_row_for_each_product_to_reorder"}),
        "email dropped": (rows, emails[1:], {"email_for_each_product_to_reorder"}),
        "row added for another product": (
            [*rows, [other.sku if i == sku else c for i, c in enumerate(first)]],
            emails,
            {"no_other_alert_rows"},
        ),
        "row doubled": ([*rows, first], emails, {"no_other_alert_rows"}),
        "email doubled": (rows, [*emails, mail], {"no_other_emails"}),
        "reorder qty altered": (
            [[str(int(c) + 1) if i == qty else c for i, c in enumerate(first)], *rows[1:]],
            emails,
            {"alert_row_values_correct"},
        ),
        "available altered": (
            [[str(int(c) + 2) if i == avail else c for i, c in enumerate(first)], *rows[1:]],
            emails,
            {"alert_row_values_correct"},
        ),
        "status left empty": (
            [["" if c == "open" else c for c in first], *rows[1:]],
            emails,
            {"alert_row_values_correct"},
        ),
        "wrong recipient": (rows, [{**mail, "to": "purchasing@example.com"}, *emails[1:]], {"email_content_correct"}),
        "body altered": (rows, [{**mail, "body": mail["body"] + "\nP.S."}, *emails[1:]], {"email_content_correct"}),
        "priority flipped": (
            rows,
            [{**mail, "priority": "normal" if urgent else "high"}, *emails[1:]],
            {"high_priority"} if urgent else {"email_content_correct"},
        ),
    }
    for what, (mrows, mmails, expect) in mutations.items():
        outcome = FAM.check(env_with(inst, mrows, mmails))
        assert not outcome.passed and outcome.score < 1.0, what
        reasons = failed(outcome)
        assert set(reasons) == expect and all(reasons.values()), (what, reasons)


@pytest.mark.parametrize("golden", GOLDEN[:3], ids=lambda g: g["id"])
def test_reasons_never_name_what_the_agent_did_not_write(golden):
    inst = FAM.instance(golden["id"])
    rows, emails = golden["new_rows"], golden["emails"]
    sku = golden["header"].index("SKU")
    dropped = rows[0][sku]
    outcome = FAM.check(env_with(inst, rows[1:], emails[1:]))
    report = json.dumps(outcome.detail)
    assert set(failed(outcome)) == {"alert_row_for_each_product_to_reorder", "email_for_each_product_to_reorder"}
    assert dropped not in report and emails[0]["subject"] not in report
    assert "traps" not in report and not any(t in report for t in FAM.answer_key(inst)["traps"])


def test_checker_passes_exactly_when_the_state_matches_the_reference():
    """Random edits of the reference rows and emails: the requirements pass iff the state is exact."""
    rng = random.Random(7)
    for inst in FAM.generate("val", 8, difficulty=3):
        _, ref = FAM.reference_solve(inst)
        rows, emails = new_rows(ref), ref.sent
        for _ in range(15):
            r, e = [list(x) for x in rows], [dict(x) for x in emails]
            for _ in range(rng.randint(0, 2)):
                kind = rng.choice(("drop_row", "dup_row", "cell", "drop_mail", "dup_mail", "field", "swap"))
                if kind == "drop_row" and r:
                    r.pop(rng.randrange(len(r)))
                elif kind == "dup_row" and r:
                    r.append(list(rng.choice(r)))
                elif kind == "cell" and r:
                    row = rng.choice(r)
                    row[rng.randrange(len(row))] = rng.choice(("0", "open", "x", row[0]))
                elif kind == "drop_mail" and e:
                    e.pop(rng.randrange(len(e)))
                elif kind == "dup_mail" and e:
                    e.append(dict(rng.choice(e)))
                elif kind == "field" and e:
                    m = rng.choice(e)
                    field = rng.choice(("to", "subject", "body", "priority"))
                    m[field] = {"to": "a@b.example", "priority": rng.choice(("normal", "high"))}.get(field, "x")
                elif kind == "swap" and len(r) > 1:
                    r.reverse()
            outcome = FAM.check(env_with(inst, r, e))  # the checker itself asserts passed == exact match
            exact = sorted(r) == sorted(rows) and sorted(e, key=json.dumps) == sorted(emails, key=json.dumps)
            assert outcome.passed == exact, (inst.id, failed(outcome))
            assert exact or failed(outcome)


# ------------------------------------------------------------------ checker reports per trap
def test_reference_passes_and_empty_agent_scores_zero():
    for inst in FAM.generate("val", 10):
        outcome, _ = FAM.reference_solve(inst)
        assert outcome.passed and outcome.score == 1.0
        empty = FAM.check(FAM.make_env(inst))
        assert not empty.passed and empty.score == 0.0
        assert {"alert_row_for_each_product_to_reorder", "email_for_each_product_to_reorder"} <= set(failed(empty))


def test_unknown_facts_are_harmless_without_their_traps():
    for inst in FAM.generate("val"):
        traps = set(FAM.answer_key(inst)["traps"])
        missing = {f for t, f in TRAP_FACT.items() if t not in traps}
        assert FAM.check(run_plan(inst, replace(FULL, facts=FULL.facts - missing))).passed, inst.id


def test_skipped_priority_constraint_fails():
    instances = with_trap("urgent")
    assert instances
    for inst in instances:
        outcome = FAM.check(run_plan(inst, replace(FULL, constraints=frozenset())))
        assert not outcome.passed
        assert set(failed(outcome)) == {"high_priority"}
        assert "priority high" in failed(outcome)["high_priority"]


@pytest.mark.parametrize("cut", [0, 1, 2])
def test_unseen_observation_fails(cut):
    for inst in FAM.generate("val", 5):
        outcome = FAM.check(run_plan(inst, replace(FULL, cut=frozenset({cut}))))
        assert not outcome.passed, (inst.id, cut)


def test_damaged_existing_row_fails_and_names_the_row():
    inst = FAM.instance_at("val", 0)
    env = run_plan(inst, FULL)
    header = env.sheets[SHEET][0]
    old = env.sheets[SHEET][1][header.index("Status")]
    env.call("update_cell", {"sheet": SHEET, "row": 2, "column": "Status", "value": "open" if old != "open" else "x"})
    outcome = FAM.check(env)
    assert not outcome.passed and outcome.score == 0.0
    assert set(failed(outcome)) == {"earlier_alerts_unchanged"}
    assert "row 2 (Status)" in failed(outcome)["earlier_alerts_unchanged"]


def test_header_or_supplier_sheet_change_fails():
    inst = FAM.instance_at("val", 1)
    env = run_plan(inst, FULL)
    env.call("update_cell", {"sheet": SUPPLIER_SHEET, "row": 2, "column": "Email", "value": "x@y.example"})
    outcome = FAM.check(env)
    assert not outcome.passed and outcome.score == 0.0
    assert "row 2 (Email)" in failed(outcome)["suppliers_sheet_unchanged"]
    env = run_plan(inst, FULL)
    env.sheets[SHEET][0][0] = "Renamed"
    assert set(failed(FAM.check(env))) == {"stock_alert_header_unchanged"}


def test_duplicate_or_extra_email_fails():
    inst = FAM.instance_at("val", 2)
    emails = FAM.plan(inst, FULL)[4].args["emails"]
    env = run_plan(inst, FULL)
    env.call("send_emails", {"emails": emails[:1]})
    assert set(failed(FAM.check(env))) == {"no_other_emails"}
    env = run_plan(inst, FULL)
    env.call("send_emails", {"emails": [{"to": "someone@else.example", "subject": "hello", "body": "hi"}]})
    outcome = FAM.check(env)
    assert set(failed(outcome)) == {"no_other_emails"} and "no product SKU" in failed(outcome)["no_other_emails"]


def test_unfilled_placeholder_is_named():
    inst = FAM.instance_at("val", 3)
    env = FAM.make_env(inst)
    for step in FAM.plan(inst, FULL):
        args = dict(step.args)
        if step.tool == "send_emails":
            first = dict(args["emails"][0])
            first["body"] += " {{supplier}}"
            args["emails"] = [first, *args["emails"][1:]]
        env.call(step.tool, args)
    reason = failed(FAM.check(env))["email_content_correct"]
    assert "{{supplier}}" in reason and "body" in reason


def test_duplicate_row_or_wrong_cell_fails():
    inst = FAM.instance_at("val", 3)
    rows = FAM.plan(inst, FULL)[3].args["rows"]
    env = run_plan(inst, FULL)
    env.call("append_rows", {"sheet": SHEET, "rows": rows[:1]})
    assert set(failed(FAM.check(env))) == {"no_other_alert_rows"}
    env = run_plan(inst, FULL)
    last = len(env.sheets[SHEET])
    env.call("update_cell", {"sheet": SHEET, "row": last, "column": "Reorder Qty", "value": 99999})
    outcome = FAM.check(env)
    assert set(failed(outcome)) == {"alert_row_values_correct"}
    assert f"row {last}" in failed(outcome)["alert_row_values_correct"] and "Reorder Qty is 99999" in str(outcome.detail)


def test_numbers_as_strings_are_accepted():
    inst = FAM.instance_at("val", 4)
    env = FAM.make_env(inst)
    for step in FAM.plan(inst, FULL):
        args = dict(step.args)
        if step.tool == "append_rows":
            args["rows"] = [[str(c) for c in r] for r in args["rows"]]
        env.call(step.tool, args)
    assert FAM.check(env).passed


# ------------------------------------------------------------------ facts, concepts, handbook
PARAPHRASES = {
    "strictly_below": [
        "Only alert when available stock is strictly less than the threshold.",
        "If stock equals the threshold, do not reorder.",
        "A product sitting exactly on its reorder point is fine.",
    ],
    "available_stock": [
        "Available = on_hand - reserved; compare that with the threshold.",
        "Don't count reserved units as available stock.",
        "Available stock means on-hand quantity net of reservations.",
    ],
    "skip_discontinued": [
        "Never reorder discontinued products.",
        "Skip products whose status is discontinued, even when their stock is low.",
        "Products being phased out get no alert and no email.",
    ],
    "open_alert_dedup": [
        "If a product already has an open alert in the Stock Alert sheet, don't add another row or email.",
        "Don't re-alert products with open alerts.",
        "Skip SKUs that have an existing row with Status open.",
    ],
    "case_pack": [
        "Round the reorder quantity up to a multiple of case_pack.",
        "Suppliers only ship whole cases, so the order quantity goes up to full cases.",
    ],
    "high_priority": [
        "If the task says the restock is urgent, send every email with priority high.",
        "Urgent restocks: mark the alert emails as high priority.",
    ],
}
NOT_STATED = [
    "threshold",
    "reserved",
    "discontinued",
    "open",
    "case pack",
    "priority",
    "Products below the threshold need reordering.",
    "Reserved units belong to customer orders.",
    "Discontinued products stay in the catalogue.",
    "Append one row with Status = open for each product.",
    "Reserved units are promised to open orders.",
    "The case_pack column gives the number of units in one case.",
    "Par level minus available gives the reorder quantity.",
    "Emails have an optional priority ('normal' by default, or 'high').",
]


def _items():
    return [*FAM.facts, *FAM.constraints]


def test_statements_and_paraphrases_are_recognised_lone_keywords_are_not():
    items = {i.id: i for i in _items()}
    assert set(PARAPHRASES) == set(items)
    for item in items.values():
        assert item.stated_in(item.statement), item.id
    for fid, texts in PARAPHRASES.items():
        for text in texts:
            assert items[fid].stated_in(text), (fid, text)
    for text in NOT_STATED:
        assert not [i.id for i in items.values() if i.stated_in(text)], text


def test_instructions_state_only_the_priority_constraint_when_urgent():
    for inst in FAM.generate("val"):
        stated = {i.id for i in _items() if i.stated_in(inst.instruction)}
        assert stated == ({"high_priority"} if "urgent" in FAM.answer_key(inst)["traps"] else set()), inst.id


def test_handbook_search_finds_the_rules():
    hits = FAM.handbook.search("discontinued products reorder", k=3)
    assert hits and any("phased" in h["id"] for h in hits)


# ------------------------------------------------------------------ tools
def test_bad_arguments_give_error_observations():
    env = FAM.make_env(FAM.instance_at("val", 0))
    for tool, args in [
        ("read_files", {"paths": ["nope.txt"]}),
        ("read_sheet", {"sheet": ["x"]}),
        ("append_rows", {"sheet": SHEET, "rows": [["too", "short"]]}),
        ("update_cell", {"sheet": SHEET, "row": 1, "column": "SKU", "value": "x"}),
        ("send_emails", {"emails": [{"to": "not an address", "subject": "s", "body": "b"}]}),
        (
            "send_emails",
            {"emails": [{"to": "a@b.example", "subject": "s", "body": "b", "priority": "urgent"}]},
        ),
        ("list_products", {"verbose": True}),
        ("nope", {}),
    ]:
        result = env.call(tool, args)
        assert result.error and result.content.startswith("error"), (tool, result.content)
    assert env.sent == []
