"""The contract every family of this project keeps, one test per check parametrised over the families
(each family's own data in the tables below): its rules file loads and a malformed one is refused by
name; each trap left unhandled fails with a grader's reason, and only where the trap is; the rare and
common facts; no generic harness text states a rule; the handbook states every rule in its own words
among more irrelevant sections; difficulty raises the trap rate. Family-specific checks stay in
tests/test_<family>.py; the synthetic testbed's levers are in tests/test_families.py."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from coevolve.agents.executor import NO_TOOL_NUDGE
from coevolve.agents.hooks import DEFAULT_CHECKLIST, DEFAULT_PROGRESS, DEFAULT_REMINDER
from coevolve.tasks import external_family_names, family_names, get_family
from coevolve.tasks.payroll import TRAPS as PAYROLL_TRAPS
from coevolve.tasks.rules import RULES_FILE, Concept, DomainFact, RulesFileError, load_rules
from tests.helpers import failed, solved_env

FAMILIES = family_names()


@dataclass(frozen=True)
class Traps:
    """How a family's traps are checked: the fact that handles each, the instances to look at (`splits`
    at `params`, the first `limit` with the trap, at least `min_hits`), and what a trap left unhandled
    fails: only requirements in `may_fail`, at least one of `fails_one_of`, the requirement `fails[trap]`."""

    fact: dict[str, str]
    splits: tuple[str, ...] = ("train",)
    params: dict[str, int] = field(default_factory=dict)
    limit: int | None = 1
    min_hits: int = 1
    may_fail: frozenset[str] | None = None
    fails_one_of: frozenset[str] = frozenset()
    fails: dict[str, str] = field(default_factory=dict)
    labels: tuple[str, ...] = ()  # words no report may carry, beside the trap's own label and "trap"

    def instances(self, name: str, trap: str) -> list:
        family = get_family(name)
        hits = [i for s in self.splits for i in family.generate(s, **self.params) if trap in family.answer_key(i)["traps"]]
        return hits[: self.limit]


TRAPS = {
    "iot": Traps(
        fact={"spike": "sustained_only", "boundary": "inclusive_ranges", "override": "machine_overrides",
              "null": "null_is_offline"},
        may_fail=frozenset({"every_anomaly_reported", "no_false_alarms"}),
    ),
    "payroll": Traps(
        fact={"ca_daily": "ca_daily_overtime", "salaried_long_week": "salaried_exempt",
              "rate_change": "rate_effective_date", "late_termination": "final_pay_through_termination"},
        splits=("train", "val"), limit=None, min_hits=3,
        may_fail=frozenset({"every_erroneous_stub_reported", "no_false_findings", "error_types_correct",
                            "corrected_amounts_correct"}),
        labels=(*PAYROLL_TRAPS, "injected"),
    ),
    "budget": Traps(
        fact={"running_balance": "posted_balance", "split_purchase": "split_purchases",
              "renamed_vendor": "blocked_by_tax_id"},
        splits=("train", "val"), limit=None, min_hits=3,
        fails_one_of=frozenset({"approvals_correct", "rejections_correct", "escalations_correct"}),
    ),
    "stock": Traps(
        fact={"at_threshold": "strictly_below", "reserved": "available_stock", "discontinued": "skip_discontinued",
              "open_alert": "open_alert_dedup", "case_pack": "case_pack"},
        splits=("val", "train", "test"), params={"difficulty": 3}, limit=3,
        may_fail=frozenset({"alert_row_for_each_product_to_reorder", "no_other_alert_rows", "alert_row_values_correct",
                            "email_for_each_product_to_reorder", "no_other_emails", "email_content_correct"}),
    ),
    "refactor": Traps(
        fact={"all_list": "string_references", "namesake": "method_namesake", "near_dup": "near_duplicate",
              "outputs": "block_outputs", "naive_mix": "aware_datetime"},
        fails={"all_list": "old_name_gone", "namesake": "tests_pass", "near_dup": "tests_pass",
               "outputs": "tests_pass", "naive_mix": "tests_pass"},
    ),
}  # fmt: skip
# the families whose facts, missing, break no instance without their trap (the traps are the only lever)
ONLY_WHERE_THE_TRAP_IS = ("payroll", "budget")
RARE_AND_COMMON = {
    "payroll": (["rate_effective_date"], ["deductions_follow_gross"]),
    "budget": (["split_purchases"], ["currency_conversion"]),
    "stock": (["open_alert_dedup"], ["strictly_below"]),
    "browser": (["publish_not_save"], ["answer_as_shown"]),
    "website": (["seo_canonical"], ["permanent_301"]),
    "refactor": (["near_duplicate"], []),
}
# handbooks whose prose shares five words in a row with a statement (the others share none)
SHARES_FIVE_WORDS = ("iot", "stock")
# a handbook search and what it must find: the first hit's id, or None for any hit among the rules' sections
HANDBOOK_SEARCH = {
    "payroll": ("overtime salaried", None),
    "browser": ("refunded order status", None),
    "refactor": ("rename __all__ string", "renames-and-the-public-name-list"),
}


def rules(name: str) -> tuple:
    family = get_family(name)
    return (*family.facts, *family.constraints)


# ------------------------------------------------------------------ the rules file
@pytest.mark.parametrize("name", FAMILIES)
def test_the_rules_come_from_the_file_beside_the_family(name):
    family = get_family(name)
    path = Path(type(family).__module__.replace(".", "/")) / RULES_FILE
    assert (family.facts, family.constraints) == load_rules(Path(__file__).resolve().parents[1] / path)
    assert family.facts and all(isinstance(f, DomainFact) for f in family.facts)
    assert all(isinstance(g, tuple) for r in rules(name) for c in (r.concept, *r.reversals) for g in c.groups)


@pytest.mark.parametrize("name", external_family_names())
def test_an_external_family_has_no_rules(name):
    family = get_family(name)
    assert family.facts == () and family.constraints == ()


GOOD = """\
terms:
  money: &money ["usd", "dollar"]
facts:
  - id: convert
    statement: Convert amounts to USD.
    concept:
      groups:
        - ["convert"]
        - [*money, {negated: ["keep"]}]
    rare: true
    reversals:
      - groups: [["keep"], ["euro"]]
        unless: ["convert"]
constraints:
  - id: cite
    statement: Cite the rule.
    concept:
      groups: [["cite"], ["rule"]]
"""


def test_a_rules_file_reads_into_facts_and_constraints(tmp_path):
    path = tmp_path / RULES_FILE
    path.write_text(GOOD)
    facts, constraints = load_rules(path)
    negated = ("not keep", "never keep", "don't keep", "doesn't keep", "won't keep", "shouldn't keep",
               "isn't keep", "aren't keep", "can't keep", "cannot keep")  # fmt: skip
    curly = tuple(t.replace("'", "\u2019") for t in negated if "'" in t)
    assert facts == (
        DomainFact("convert", "Convert amounts to USD.", Concept((("convert",), ("usd", "dollar", *negated, *curly))),
                   rare=True, reversals=(Concept((("keep",), ("euro",)), unless=("convert",)),)),
    )  # fmt: skip
    assert [(c.id, c.concept.groups) for c in constraints] == [("cite", (("cite",), ("rule",)))]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.replace("[*money,", "[3,"), r"facts\[0\]\.concept\.groups\[1\]\[0\]: a term must be a string"),
        (lambda t: t.replace("    rare: true\n", "    rare: maybe\n"), r"facts\[0\]\.rare: expected true or false"),
        (lambda t: t.replace("  - id: cite\n", "  - id: cite\n    common: true\n"), r"constraints\[0\]: unknown key 'common'"),
        (lambda t: t.replace("    statement: Cite the rule.\n", ""), r"constraints\[0\]: missing 'statement'"),
        (lambda t: t.replace('groups: [["cite"], ["rule"]]', 'groups: [["cite"]]'), r"at least two non-empty"),
        (lambda t: t.replace("id: cite", "id: convert"), r"rule ids \['convert'\] are given more than once"),
        (lambda t: t.replace("facts:", "facts: [", 1), r"while parsing"),
        (lambda t: "- just a list\n", r"the file: expected a mapping"),
    ],
)
def test_a_malformed_rules_file_is_refused_naming_the_file_and_the_place(tmp_path, change, message):
    path = tmp_path / RULES_FILE
    path.write_text(change(GOOD))
    with pytest.raises(RulesFileError, match=message) as refused:
        load_rules(path)
    assert str(refused.value).startswith(f"malformed rules file {path}: ")


def test_a_family_declares_its_rules_in_one_place_only(tmp_path, monkeypatch):
    """A class body that declares facts beside a rules file is refused (the file would win unseen)."""
    (tmp_path / RULES_FILE).write_text(GOOD)
    (tmp_path / "twice.py").write_text(
        "from coevolve.tasks.iot import IotFamily\n\nclass Twice(IotFamily):\n    facts = ()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match="keep one"):
        __import__("twice")


# ------------------------------------------------------------------ traps
TRAP_CASES = [(name, trap) for name, t in TRAPS.items() for trap in sorted(t.fact)]


@pytest.mark.parametrize(("name", "trap"), TRAP_CASES, ids=[f"{n}-{t}" for n, t in TRAP_CASES])
def test_each_trap_left_unhandled_fails_with_a_graders_reason(name, trap):
    family, traps = get_family(name), TRAPS[name]
    full = family.full_knowledge()
    without = replace(full, facts=full.facts - {traps.fact[trap]})
    hits = traps.instances(name, trap)
    assert len(hits) >= traps.min_hits, f"{name}: {len(hits)} instances with trap {trap}"
    for inst in hits:
        assert family.check(solved_env(family, inst, full)).passed, inst.id
        outcome = family.check(solved_env(family, inst, without))
        assert not outcome.passed and 0 < outcome.score < 1.0, (inst.id, outcome.score)
        reasons = failed(outcome)
        assert reasons and all(reasons.values()), (inst.id, reasons)
        assert traps.may_fail is None or set(reasons) <= traps.may_fail, (inst.id, reasons)
        assert not traps.fails_one_of or traps.fails_one_of & set(reasons), (inst.id, reasons)
        assert trap not in traps.fails or traps.fails[trap] in reasons, (inst.id, reasons)
        lines = outcome.detail["requirements"]  # a grader's report: why each failed line failed, no labels
        assert set(outcome.detail) == {"requirements"} and all(bool(r["reason"]) != r["passed"] for r in lines)
        text = json.dumps(outcome.detail)
        assert not [w for w in (trap, "trap", *traps.labels) if w in text], (inst.id, text)


@pytest.mark.parametrize("name", ONLY_WHERE_THE_TRAP_IS)
def test_facts_matter_only_where_their_trap_is(name):
    family = get_family(name)
    full = family.full_knowledge()
    pool = (family.generate("train") + family.generate("val"))[:40]
    for trap, fact in TRAPS[name].fact.items():
        without = replace(full, facts=full.facts - {fact})
        for inst in pool:
            if trap not in family.answer_key(inst)["traps"]:
                assert family.check(solved_env(family, inst, without)).passed, (fact, inst.id)


@pytest.mark.parametrize("name", FAMILIES)
def test_difficulty_raises_the_trap_rate(name):
    family = get_family(name)

    counts = {d: [len(family.answer_key(i)["traps"]) for i in family.generate("train", difficulty=d)] for d in (1, 2, 3)}
    assert sum(counts[1]) < sum(counts[2]) < sum(counts[3]), {d: sum(c) for d, c in counts.items()}
    assert sum(counts[1][:40]) < sum(counts[3][:40])  # on the first 40 instances too


# ------------------------------------------------------------------ the rules' texts
@pytest.mark.parametrize("name", sorted(RARE_AND_COMMON))
def test_the_rare_facts_and_the_common_ones(name):
    facts = get_family(name).facts
    assert ([f.id for f in facts if f.rare], [f.id for f in facts if f.common]) == RARE_AND_COMMON[name]


@pytest.mark.parametrize("name", FAMILIES)
def test_each_statement_carries_its_own_concept(name):
    for item in rules(name):
        assert item.stated_in(item.statement), item.id


@pytest.mark.parametrize("name", FAMILIES)
def test_generic_harness_texts_state_no_rule(name):
    family = get_family(name)
    texts = [
        family.baseline_harness().render_system(),
        DEFAULT_REMINDER,
        DEFAULT_PROGRESS,
        *DEFAULT_CHECKLIST,
        "\n".join(DEFAULT_CHECKLIST),
        NO_TOOL_NUDGE,
        "\n".join(t.description for t in family.baseline_tools()),
    ]
    assert [(item.id, text[:80]) for item in rules(name) for text in texts if item.stated_in(text)] == []


def _shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9_]+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@pytest.mark.parametrize("name", FAMILIES)
def test_handbook_states_every_rule_in_its_own_words_among_twice_as_many_irrelevant_sections(name):
    handbook, items = get_family(name).handbook, rules(name)
    sections = handbook.sections
    assert handbook.title and all(s.text for s in sections)
    stating = {s.id: [i.id for i in items if i.stated_in(s.text)] for s in sections}
    relevant = [sid for sid, ids in stating.items() if ids]
    assert len(sections) - len(relevant) >= 2 * len(relevant), (relevant, len(sections))
    for item in items:
        where = [s for s in sections if item.id in stating[s.id]]
        assert where, item.id
        # its own prose, not the catalogue's: not the statement (nor five of its words in a row)
        assert not [s.id for s in sections if item.statement.lower() in s.text.lower()], item.id
        if name not in SHARES_FIVE_WORDS:
            assert not [s.id for s in where if _shingles(item.statement) & _shingles(s.text)], item.id
    if name in HANDBOOK_SEARCH:
        query, first = HANDBOOK_SEARCH[name]
        hits = handbook.search(query)
        assert hits and (hits[0]["id"] == first if first else hits[0]["id"] in relevant), hits
