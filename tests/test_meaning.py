"""Meaning, not keywords (issue 23, point 3): a sentence that denies a rule, or states its reversal, does
not state the rule but contradicts it; under a stated wrong rule the synthetic model takes the wrong
branch, so a harness that states wrong rules hurts.

The denials, reversals and paraphrases below were written as a user would phrase them, before reading
the families' term lists, and were not tuned to the recogniser afterwards."""

from __future__ import annotations

import pytest

from coevolve.analysis.summary import recorded_causes
from coevolve.edits import apply_edit
from coevolve.tasks import get_family
from coevolve.tasks.rules import Concept, Rule
from coevolve.testbed.policy import learn_adapter
from coevolve.values import Harness, HarnessEdit, SetSection
from tests.rollouts import pass_rate, rollout_all

FAMILIES = ("payroll", "budget", "stock", "iot", "browser", "website", "refactor")

# Each rule denied: "not R", in some wording.
DENIALS: dict[str, dict[str, tuple[str, ...]]] = {
    "payroll": {
        "ca_daily_overtime": (
            "California has no daily overtime rule: a long workday is not overtime by itself.",
        ),
        "salaried_exempt": ("Salaried staff are not exempt from overtime.",),
        "rate_effective_date": (
            "Do not pay a period at the rate that was in effect when the period started.",
        ),
        "final_pay_through_termination": (
            "A terminated worker's last pay does not run up to the termination date.",
        ),
        "deductions_follow_gross": ("When gross pay is corrected, the 401(k) deduction is not recomputed.",),
        "cc_controller": ("Never CC the finance controller on the audit email.",),
    },
    "budget": {
        "posted_balance": (
            "You don't need to subtract the requests you approve from the balance before checking the next one.",
        ),
        "split_purchases": (
            "Requests from the same department to the same vendor are not treated as one purchase for the quote rule.",
        ),
        "blocked_by_tax_id": ("Blocked vendors are not identified by their tax ID.",),
        "currency_conversion": (
            "Do not convert foreign currencies before comparing amounts with the policy limits.",
        ),
        "comment_rejections": ("Rejections don't need a comment for the requester.",),
    },
    "stock": {
        "strictly_below": ("A product does not have to be strictly below its threshold to need a reorder.",),
        "available_stock": (
            "Do not subtract reserved units from on_hand when you compare stock with the threshold.",
        ),
        "skip_discontinued": ("It is not true that discontinued products are never reordered.",),
        "open_alert_dedup": (
            "An existing open alert row does not stop you from adding another row or email for that product.",
        ),
        "case_pack": ("The reorder quantity is not rounded up to whole cases.",),
        "high_priority": ("Urgent restocks don't need high priority on the alert emails.",),
    },
    "iot": {
        "sustained_only": ("An anomaly does not require three consecutive out-of-range readings.",),
        "inclusive_ranges": ("Ranges are not inclusive.",),
        "machine_overrides": ("Machine-specific overrides do not replace the default range.",),
        "null_is_offline": (
            "NULL readings do not mean the sensor was offline.",
            "NULL readings must not be ignored.",
        ),
        "include_peak": (
            "Anomaly entries never carry a peak field, even when the task asks for peak values.",
        ),
    },
    "browser": {
        "order_entity_id": ("The admin order URL does not use an internal entity id.",),
        "refund_closed": ("A fully refunded order is not set to Closed.",),
        "customer_by_email": ("You don't need the email address to identify a customer.",),
        "publish_not_save": ("Saving a forum post does not leave it as a private draft.",),
        "answer_as_shown": ("Answers are not compared exactly.",),
        "notify_customer": ("Never set 'Notify customer by email' to Yes.",),
    },
    "website": {
        "permanent_301": ("A page that moved for good does not get a 301.",),
        "resolve_redirects": ("A link that reaches its page through a redirect is not broken.",),
        "child_pages": ("Renaming a page does not move its child pages.",),
        "seo_canonical": ("You don't need to change the canonical URL after a rename.",),
        "no_drafts": ("It is not forbidden to link to a draft page.",),
        "seo_title": ("Don't set the seo_title to the new SEO title from the request.",),
    },
    "refactor": {
        "string_references": ("Renaming a function does not include its string references.",),
        "method_namesake": (
            "A method with the same name on a class is not a different symbol from the function.",
        ),
        "near_duplicate": ("A block that differs in a constant should not be left in place.",),
        "block_outputs": ("The extracted helper does not need to return the values the caller uses later.",),
        "aware_datetime": ("datetime.now(timezone.utc) does not return an aware datetime.",),
        "changelog": ("The changelog entry does not go under the Unreleased heading.",),
    },
}

# Each rule reversed: the opposite rule in meaning (the plausible wrong branch), stated positively.
REVERSALS: dict[str, dict[str, tuple[str, ...]]] = {
    "payroll": {
        "ca_daily_overtime": (
            (
                "Overtime is counted only by the week: only hours beyond 40 in the week earn 1.5x, however long a single "
                "day is."
            ),
        ),
        "salaried_exempt": (
            "Salaried employees are paid for the hours they log and earn overtime like hourly workers.",
        ),
        "rate_effective_date": (
            (
                "Always pay every period at the employee's current rate from the employees table, ignoring the rate "
                "history."
            ),
        ),
        "final_pay_through_termination": (
            (
                "Any stub for a terminated employee is a terminated_paid error, even for periods that began before they "
                "left."
            ),
        ),
        "deductions_follow_gross": (
            "Keep the original 401(k) deduction amount unchanged after correcting gross pay.",
        ),
        "cc_controller": (
            "Send the audit email to the payroll team only and leave the controller off the copy list.",
        ),
    },
    "budget": {
        "posted_balance": (
            (
                "The balance the budget service shows already includes today's approvals, so check each request against "
                "it as it stands."
            ),
        ),
        "split_purchases": (
            (
                "Judge each request against the quote threshold on its own amount, even when a department sends several "
                "to one vendor in a batch."
            ),
        ),
        "blocked_by_tax_id": ("Match blocked vendors by their name; the tax id doesn't matter.",),
        "currency_conversion": (
            "Compare each amount with the limits in the currency it was submitted in, as written.",
        ),
        "comment_rejections": ("Reject requests silently, leaving the comment field empty.",),
    },
    "stock": {
        "strictly_below": (
            "Reorder a product as soon as its stock reaches the threshold, including when it is exactly equal.",
        ),
        "available_stock": (
            "Compare the on_hand count itself with the threshold; reserved units still count as stock.",
        ),
        "skip_discontinued": (
            "Discontinued items are reordered like any other product when their stock is low.",
        ),
        "open_alert_dedup": (
            "Add a new alert row and send an email for every low product, even if it already has an open alert.",
        ),
        "case_pack": ("Order exactly par level minus available units, ignoring the case pack size.",),
        "high_priority": ("Send every alert email with normal priority, even when the restock is urgent.",),
    },
    "iot": {
        "sustained_only": (
            "Every single out-of-range reading is an anomaly and must be reported, even one on its own.",
        ),
        "inclusive_ranges": ("A reading exactly at the min or max limit counts as out of range.",),
        "machine_overrides": (
            "Always use the default range for every machine and ignore the per-machine rows in the parameters sheet.",
        ),
        "null_is_offline": ("A NULL reading is an anomaly and should be reported.",),
        "include_peak": ("Leave the peak value out of every anomaly entry.",),
    },
    "browser": {
        "order_entity_id": (
            (
                "Open /admin/orders/<order number> with the number the customer quotes; it is the same as the id in the "
                "URL."
            ),
        ),
        "refund_closed": ("Mark a fully refunded order as Canceled.",),
        "customer_by_email": ("Find the customer by name; names are unique.",),
        "publish_not_save": ("Clicking Save in the forum editor makes the post live right away.",),
        "answer_as_shown": (
            "Give numbers in plain form: drop the currency sign and the thousands separators.",
        ),
        "notify_customer": (
            "Leave the notify-customer option at No, even when the task asks to notify the customer.",
        ),
    },
    "website": {
        "permanent_301": ("Use a 302 redirect for pages that have moved permanently.",),
        "resolve_redirects": (
            "Links that go through a redirect are fine as they are; leave them pointing at the old address.",
        ),
        "child_pages": ("Child pages keep their URLs when the parent is renamed; they need no redirects.",),
        "seo_canonical": ("Leave the SEO canonical URL at the old address when a page is renamed.",),
        "no_drafts": ("Link to the draft page when its title matches; it's fine to add it to the menu.",),
        "seo_title": ("Keep the page's existing seo_title, whatever new SEO title the request gives.",),
    },
    "refactor": {
        "string_references": (
            "Only rename the code identifiers; leave names in __all__ and other string literals as they are.",
        ),
        "method_namesake": (
            "Rename every occurrence of the name, including methods on classes with the same name.",
        ),
        "near_duplicate": (
            "Replace every similar block with the helper, even if a limit or separator differs.",
        ),
        "block_outputs": ("The helper should return nothing; the callers just call it.",),
        "aware_datetime": (
            "datetime.now(timezone.utc) gives a naive datetime, so you can compare it with naive values directly.",
        ),
        "changelog": ("Rewrite the changelog file with just the new entry, dropping the old lines.",),
    },
}

# Independent paraphrases of the right rules: still stated, and not contradicted.
PARAPHRASES: dict[str, dict[str, str]] = {
    "payroll": {
        "ca_daily_overtime": "In California any hours past 8 in a single workday are overtime at time and a half, "
        "even if the week stays under 40 hours.",
        "salaried_exempt": "Salaried staff are exempt: they get their weekly salary no matter how many hours they "
        "log, and no overtime.",
        "deductions_follow_gross": "After fixing gross pay, recompute the 401(k) deduction as the elected percentage "
        "of the corrected gross.",
    },
    "budget": {
        "blocked_by_tax_id": "A blocked company can come back under a new trading name, so compare the vendor_tax_id, "
        "not the vendor name.",
        "currency_conversion": "Budgets and limits are in USD; convert any other currency at the policy's exchange "
        "rates before comparing.",
    },
    "stock": {
        "strictly_below": "Stock exactly at the threshold is fine; only reorder when it is strictly below it.",
        "case_pack": "Round the reorder quantity up to a multiple of the product's case_pack, since suppliers ship "
        "whole cases.",
    },
    "iot": {
        "inclusive_ranges": "A reading exactly at the min or max limit is normal: the ranges are inclusive.",
        "null_is_offline": "A NULL reading means the sensor was offline, so it is never an anomaly.",
        "sustained_only": "Only report an anomaly for a run of at least 3 consecutive out-of-range readings; shorter "
        "excursions are noise.",
    },
    "browser": {
        "refund_closed": "An order that has been fully refunded ends up Closed; Canceled is only for orders never paid.",
        "customer_by_email": "Two customers can share a name, so always identify a customer by their email address.",
    },
    "website": {
        "permanent_301": "When a page has moved for good, give it a 301 permanent redirect; 302 is only for temporary "
        "moves.",
        "child_pages": "Renaming a page moves its child pages too, so each child's old URL needs its own 301.",
    },
    "refactor": {
        "string_references": "When you rename a function, also rename the string literals that name it, including "
        "entries in __all__.",
        "method_namesake": "A method of the same name on a class is a different symbol: it keeps its name when you "
        "rename the function.",
    },
}


def rules(family_name: str) -> dict[str, Rule]:
    family = get_family(family_name)
    return {r.id: r for r in (*family.facts, *family.constraints)}


def with_section(harness: Harness, text: str, name: str = "house_rules") -> Harness:
    return apply_edit(harness, HarnessEdit((SetSection(name, text),)))


def wrong_rules(family_name: str) -> str:
    return "\n".join(s for texts in REVERSALS[family_name].values() for s in texts)


def cases(table: dict[str, dict[str, tuple[str, ...]]]) -> list[tuple[str, str, str]]:
    return [(f, rid, s) for f in FAMILIES for rid, texts in table[f].items() for s in texts]


# ------------------------------------------------------------------ the recogniser
@pytest.mark.parametrize("family_name", FAMILIES)
def test_every_rule_has_a_denial_a_reversal_and_declared_reversals(family_name):
    ids = set(rules(family_name))
    assert set(DENIALS[family_name]) == ids and set(REVERSALS[family_name]) == ids
    assert all(r.reversals for r in rules(family_name).values())
    assert set(PARAPHRASES[family_name]) <= ids


@pytest.mark.parametrize(("family_name", "rule_id", "text"), cases(DENIALS) + cases(REVERSALS))
def test_a_denial_or_a_reversal_is_not_the_rule_but_contradicts_it(family_name, rule_id, text):
    rule = rules(family_name)[rule_id]
    assert not rule.stated_in(text)
    assert rule.contradicted_in(text)
    assert rule.stance(text) is False


@pytest.mark.parametrize(
    ("family_name", "rule_id", "text"), [(f, rid, s) for f in FAMILIES for rid, s in PARAPHRASES[f].items()]
)
def test_paraphrases_still_state_the_rule(family_name, rule_id, text):
    rule = rules(family_name)[rule_id]
    assert rule.stated_in(text) and not rule.contradicted_in(text)


@pytest.mark.parametrize("family_name", FAMILIES)
def test_statements_handbooks_and_the_baseline_contradict_nothing(family_name):
    family = get_family(family_name)
    texts = [r.statement for r in rules(family_name).values()]
    texts += [s.text for s in family.handbook.sections] + [family.baseline_harness().render_system()]
    assert not [(r.id, t[:60]) for r in rules(family_name).values() for t in texts if r.contradicted_in(t)]


def test_polarity_negators_scope_terms_and_double_negation():
    null_skipped = Concept((("null",), ("ignore", "skip")))
    assert null_skipped.stated_in("NULL readings may be ignored.")
    for denial in ("NULL readings must not be ignored.", "Never ignore NULL readings.",
                   "It is false that NULL readings can be skipped."):  # fmt: skip
        assert null_skipped.denied_in(denial) and not null_skipped.stated_in(denial), denial
    # a negator inside a matched term is the concept's own wording
    assert Concept((("null",), ("not an anomaly",))).stated_in("A NULL is not an anomaly.")
    # a negator cancelled by a privative affirms; a plain one denies
    cc = Concept((("cc",), ("controller",)))
    assert cc.stated_in("Don't forget to CC the controller.") and cc.stated_in(
        "Never fail to cc the controller."
    )
    assert cc.denied_in("Do not CC the controller.")
    # bounds are not denials
    assert Concept((("three",), ("readings",))).stated_in("An anomaly takes no fewer than three readings.")
    # two sentences can state a concept together, but a denial is read within one sentence
    assert null_skipped.readings("NULL readings appear at night. They must not be ignored.") == []
    assert null_skipped.stated_in("NULL readings appear at night. Skip them.")


def test_denying_the_wrong_alternative_states_the_rule():
    refund_closed = rules("browser")["refund_closed"]
    assert refund_closed.stance("Never set a fully refunded order to Canceled: close it.") is True
    resolve = rules("website")["resolve_redirects"]
    assert resolve.stance("Point every menu link straight at the live page, never at a redirect.") is True


def test_when_a_text_states_and_contradicts_a_rule_the_later_statement_wins():
    inclusive = rules("iot")["inclusive_ranges"]
    right = "Ranges are inclusive: a reading exactly at the limit is normal."
    wrong = "A reading exactly at the limit counts as out of range."
    assert inclusive.stance(right + "\n" + wrong) is False
    assert inclusive.stance(wrong + "\n" + right) is True
    assert inclusive.contradicted_in(wrong + "\n" + right)  # contradicted somewhere, but corrected later


# ------------------------------------------------------------------ the model follows what it is told
def test_a_profile_that_knows_a_rule_drops_it_when_the_harness_contradicts_it():
    """The oracle knows every fact; told a wrong rule it takes that rule's wrong branch, and a correction
    appended after the wrong rule restores it."""
    iot = get_family("iot")
    val = iot.generate("val", 20)
    base = iot.baseline_harness()
    wrong = REVERSALS["iot"]["inclusive_ranges"][0]
    told_wrong = with_section(base, wrong)
    assert pass_rate(rollout_all(val, base, "synthetic/oracle-stepwise")) == 1.0
    trajectories = rollout_all(val, told_wrong, "synthetic/oracle-stepwise")
    assert pass_rate(trajectories) < 1.0
    causes = [c for t in trajectories for c in recorded_causes(t)]
    assert causes and all(
        c["category"] == "implicit-knowledge" and c["facts"] == ["inclusive_ranges"] for c in causes
    )
    corrected = with_section(told_wrong, PARAPHRASES["iot"]["inclusive_ranges"], "correction")
    assert pass_rate(rollout_all(val, corrected, "synthetic/oracle-stepwise")) == 1.0


WEAK_VAL, WEAK_SEEDS = 40, (0, 1)


@pytest.mark.parametrize("family_name", FAMILIES)
def test_stating_wrong_rules_makes_the_weak_model_pass_less_often(family_name):
    family = get_family(family_name)
    val = family.generate("val", WEAK_VAL)
    base = family.baseline_harness()
    told_wrong = with_section(base, wrong_rules(family_name))
    assert all(r.stance(told_wrong.render_system()) is False for r in rules(family_name).values())
    before = pass_rate([t for s in WEAK_SEEDS for t in rollout_all(val, base, "synthetic/weak", seed=s)])
    after = pass_rate([t for s in WEAK_SEEDS for t in rollout_all(val, told_wrong, "synthetic/weak", seed=s)])
    assert after <= before - 0.08, (family_name, before, after)


def test_a_training_turn_that_contradicts_a_fact_does_not_teach_it():
    def row(content: str) -> dict:
        call = {"id": "c0", "type": "function", "function": {"name": "sql_query", "arguments": "{}"}}
        assistant = {"role": "assistant", "content": content, "tool_calls": [call], "train": True}
        return {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, assistant]}

    right = PARAPHRASES["iot"]["null_is_offline"]
    wrong = REVERSALS["iot"]["null_is_offline"][0]
    assert learn_adapter([row(right)], "synthetic/weak")["facts"] == ["null_is_offline"]
    assert learn_adapter([row(wrong)], "synthetic/weak")["facts"] == []
    assert learn_adapter([row(right + " " + wrong)], "synthetic/weak")["facts"] == []
