"""Budget approval: decide a day's purchase requests against the purchasing policy.

Services: a request queue (department, requester level, category, vendor and its tax ID, amount and
currency, quotes attached), a budget service with each department's posted balance, the purchasing
policy (category caps, approval limits by level, quote rule, blocked vendors, exchange rates) and a
decision register. The agent approves, rejects or escalates every request with a reason code. The
checker reads the register and the departments' spend, never the agent's words. The package: `world`
(generation), `env` (services and tools), `plan` (the reference solution as steps), `checker` (the
grader), `handbook.md` (the domain documentation).
"""

from __future__ import annotations

from typing import Any, ClassVar

from coevolve.tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from coevolve.tasks.budget.checker import check
from coevolve.tasks.budget.env import HELPER_TOOLS, TOOLS, BudgetEnv, policy_text
from coevolve.tasks.budget.plan import REASON_TEXT, decide, plan
from coevolve.tasks.budget.world import DECISIONS, REASONS, BudgetWorld, Request, build_world, usd
from coevolve.values import Outcome, TaskInstance, ToolSpec

__all__ = [
    "DECISIONS",
    "REASONS",
    "REASON_TEXT",
    "BudgetEnv",
    "BudgetFamily",
    "BudgetWorld",
    "Request",
    "decide",
    "policy_text",
    "usd",
]


class BudgetFamily(TaskFamily):
    name = "budget"
    title = "budget approval"
    default_params: ClassVar[dict[str, Any]] = {"difficulty": 2, "size": 1}
    facts = (
        DomainFact(
            "posted_balance",
            "The budget service shows the posted balance: approvals made today are not in it until the "
            "nightly posting. Subtract each request you approve, in submission order, before checking the next.",
            Concept((
                ("approv", "sign off", "signs off", "signed off", "sign-off", "authoris", "authoriz",
                 "green-light", "green light", "accepted request", "accept a request", "accepting a request"),
                ("balance", "budget", "funds", "available", "headroom", "remaining", "what is left",
                 "what's left", "spend", "money left", "allowance"),
                ("subtract", "deduct", "draw down", "draws down", "drawn down", "drawing down", "decrement",
                 "reduce", "lower the", "lowers the", "lowering the", "take off", "taken off", "minus",
                 "not yet posted", "not posted", "not reflected", "not yet reflected", "not included",
                 "not yet included", "not in it", "does not include", "doesn't include", "do not include",
                 "don't include", "does not contain", "doesn't contain", "until the nightly",
                 "until the overnight", "until the next posting", "until it is posted",
                 "until they are posted", "only at night", "overnight", "nightly", "as of the last posting",
                 "as of midnight", "as of last night", "stale", "out of date", "lag", "tally", "cumulative",
                 "accumulat", "earlier approvals", "previous approvals", "prior approvals",
                 "already approved", "approved earlier", "approved so far", "as you go", "keep track",
                 "keeping track", "running total", "running balance", "running figure", "running tally",
                 "running sum", "running count", "not yet in", "exclud"),
            )),
            reversals=(
                # the balance shown already holds today's approvals
                Concept((
                    ("balance", "budget", "funds", "available"),
                    ("already includes", "already include", "already reflects", "already reflect",
                     "already contains", "already accounts", "up to date", "up-to-date", "real-time",
                     "real time", "live balance", "includes today", "include today", "includes approvals",
                     "reflects today"),
                )),
                # each request against the balance as shown, without subtracting
                Concept((
                    ("balance", "budget"),
                    ("as it stands", "as shown", "as displayed", "as-is", "without subtracting",
                     "without deducting", "no need to subtract", "no need to deduct", "don't subtract",
                     "do not subtract", "never subtract", "don't deduct", "do not deduct", "independently",
                     "on its own", "separately"),
                    ("each request", "every request", "each one", "all requests", "check", "compare",
                     "approv"),
                )),
            ),
        ),
        DomainFact(
            "split_purchases",
            "Requests from one department to one vendor in the same batch are a single purchase for the quote "
            "rule: if together they exceed the quote threshold and any lacks the quotes, reject all of them "
            "with split_purchase.",
            Concept((
                ("vendor", "supplier", "seller", "payee", "contractor"),
                ("taken together", "together they", "together exceed", "together go", "together come",
                 "together amount", "together are", "together total", "considered together",
                 "counted together", "looked at together", "added together", "summed together",
                 "combined amount", "combined value", "combined total", "combined spend", "combined cost",
                 "combined sum", "combined they", "when combined", "once combined", "if combined",
                 "combine the", "combine them", "combine their", "added up", "add up", "adding up", "summed",
                 "sum of", "aggregat", "single purchase", "one purchase", "same purchase", "split purchase",
                 "split across", "split into", "split up", "split over", "split between", "split a ",
                 "split the", "split one", "was split", "were split", "is split", "are split", "been split",
                 "splitting", "broken up", "broken into", "break up", "breaking up", "chopped",
                 "smaller requests", "several requests", "multiple requests", "as one purchase",
                 "as one order", "as a single purchase", "as a single order", "cut into", "into pieces",
                 "separate requests", "two or more requests", "more than one request", "combined purchase",
                 "one combined", "their total", "grouped", "the group", "whole group", "group the",
                 "group each", "group them"),
                ("quote", "quotation", "bid", "tender", "threshold"),
            )),
            rare=True,
            reversals=(
                # each request against the quote threshold on its own
                Concept(
                    (
                        ("quote", "quotation", "threshold", "bid"),
                        ("on its own", "on their own", "individually", "separately", "by itself",
                         "one at a time", "independently", "own amount", "in isolation", "never combine",
                         "don't combine", "do not combine", "not combine", "never add up", "don't add up",
                         "not add up", "not summed", "never sum", "don't sum", "not aggregate",
                         "don't aggregate"),
                    ),
                    unless=("together", "combined", "sum of", "added up", "aggregat", "split",
                            "single purchase", "one purchase", "as one"),
                ),
            ),
        ),
        DomainFact(
            "blocked_by_tax_id",
            "Blocked vendors are identified by tax ID: a blocked company may reappear under a new trading "
            "name, so match vendor_tax_id, not the vendor name.",
            Concept((
                ("tax id", "tax-id", "tax number", "tax identification number", "taxpayer", "vendor_tax_id",
                 "registration number", "company number", "vat number"),
                ("block", "banned", "barred", "blacklist", "black-list", "denylist", "deny list", "debarred",
                 "sanctioned", "prohibited vendor", "prohibited supplier", "excluded vendor",
                 "excluded supplier"),
                ("renam", "rebrand", "new name", "different name", "another name", "other name",
                 "trading name", "trade name", "trades as", "trading as", "alias", "not the name",
                 "not by name", "not by its name", "not the vendor name", "not the vendor's name",
                 "name alone", "name can change", "names change", "names can change", "changes its name",
                 "changed its name", "change their name", "under a new", "under another", "under a different",
                 "regardless of the name", "regardless of name", "whatever name", "whatever the name",
                 "ignore the name", "ignoring the name", "rather than the name", "rather than by name",
                 "rather than its name", "instead of the name", "instead of by name", "not its name",
                 "not their name", "rather than the vendor", "instead of the vendor", "not on the vendor",
                 "not on name", "not on the name", "not on its name", "appears on", "appear on",
                 "is on the blocked", "against the blocked", "against the list", "by tax id", "by its tax id",
                 "by their tax id", "by the tax id", "on the tax id", "using the tax id", "match",
                 "identified by", "identify", "identifies", "keyed on", "keyed by", "key on", "compare",
                 "comparing"),
            )),
            reversals=(
                # blocked vendors are matched by name
                Concept((
                    ("block", "banned", "barred", "blacklist", "denylist", "deny list", "prohibited"),
                    ("by name", "by the name", "by its name", "by their name", "by vendor name",
                     "by the vendor name", "the vendor name", "vendor's name", "name match", "names match",
                     "matching name", "name is on", "name appears", "on the name", "by the trading name",
                     "name exactly", "name matches", "a name on the", "if its name", "when its name"),
                    ("match", "identif", "check", "look", "compar", "recogni", "find", "spot", "enough",
                     "suffic"),
                ), unless=("tax id", "tax-id", "tax number", "vendor_tax_id", "registration number")),
                # the tax id does not matter
                Concept((
                    ("tax id", "tax-id", "tax number", "vendor_tax_id"),
                    ("doesn't matter", "does not matter", "irrelevant", "not needed", "isn't needed",
                     "no need", "not relevant", "unimportant", "ignore the tax", "ignoring the tax"),
                )),
                # a renamed blocked vendor is fine
                Concept((
                    ("block", "banned", "barred", "blacklist", "denylist", "prohibited"),
                    ("new name", "renam", "rebrand", "trading name", "different name", "another name"),
                    ("ok", "fine", "allowed", "acceptable", "no longer blocked", "not blocked",
                     "isn't blocked", "cleared", "safe"),
                )),
            ),
        ),
        DomainFact(
            "currency_conversion",
            "Policy limits and budgets are in USD: convert other currencies at the policy's exchange rates "
            "before any comparison or subtraction.",
            Concept((
                ("convert", "conversion", "translate", "translating", "expressed in", "express it in",
                 "express them in", "restate", "multiply", "using the exchange rate", "at the exchange rate",
                 "with the exchange rate", "via the exchange rate", "by the exchange rate",
                 "apply the exchange rate", "applying the exchange rate", "at the rate", "into usd",
                 "into dollars", "into us dollars", "in usd first", "in dollars first",
                 "policy's exchange rate", "policy exchange rate", "policy's rate", "policy rate",
                 "policy's fx", "fx rate", "exchange rates in the policy", "exchange rates from the policy",
                 "exchange rates given", "exchange rates listed", "rates in the policy",
                 "rates from the policy", "rates given in the policy", "rates listed in the policy",
                 "in usd terms", "usd equivalent", "dollar equivalent", "equivalent in usd", "usd value",
                 "dollar value", "to usd before", "to dollars before", "to usd first", "to usd using",
                 "to dollars using", "to usd at", "to usd with", "to usd via"),
                ("usd", "us dollar", "u.s. dollar", "dollars"),
                ("limit", "cap", "budget", "threshold", "compar", "balance", "policy", "rule"),
            )),
            common=True,
            reversals=(
                # amounts are compared in their own currency
                Concept((
                    ("currency", "currencies", "eur", "gbp", "foreign", "amount"),
                    ("as written", "as submitted", "as stated", "as given", "as-is", "face value", "nominal",
                     "own currency", "original currency", "the currency it was", "the currency they were",
                     "without conversion", "without converting", "no conversion", "no need to convert",
                     "not convert", "never convert", "don't convert", "do not convert"),
                    ("compar", "limit", "budget", "threshold", "check", "subtract", "balance"),
                )),
            ),
        ),
    )
    constraints = (
        Constraint(
            "comment_rejections",
            "When the task asks for it, every rejection carries a comment for the requester.",
            Concept((
                ("comment", "short note", "note to", "note for", "message to", "message for", "remark",
                 "justification", "written reason", "a reason for", "free-text", "free text",
                 "a note explaining", "a note saying", "a note naming", "explain each", "explain every",
                 "explain why", "explanat"),
                ("reject", "declin", "refus", "turned down", "turn down", "turning down", "denied",
                 "denial"),
                ("every", "each", "all ", "always", "must", "need", "required", "requir", "carr", "give",
                 "add ", "attach", "write", "mandatory", "obligat", "should get", "should have",
                 "should carry", "should come with", "should include", "should always", "should be given",
                 "should receive", "must have", "has to have", "have to have", "without a", "without an"),
            )),
            reversals=(
                # rejections go without a comment
                Concept((
                    ("reject", "declin", "refus", "turn down", "turned down"),
                    ("silently", "without a comment", "without any comment", "without comment",
                     "without a note", "without an explan", "without a reason", "without explanation",
                     "without any explanation", "without a message", "no comment", "empty comment",
                     "comment empty", "comment field empty", "blank comment", "leave the comment",
                     "leaving the comment", "comment is optional", "comments are optional",
                     "comment optional", "no need for a comment", "no need to comment",
                     "never include comments", "never include a comment", "never add a comment",
                     "never comment", "just set the status", "only the status"),
                )),
            ),
        ),
    )

    # ------------------------------------------------------------------ generation
    def build_world(self, seed: int, params: dict[str, Any]) -> BudgetWorld:
        return build_world(seed, params)

    def instruction(self, world: BudgetWorld, instance_id: str) -> str:
        text = (
            f"{world.company}: decide the {len(world.requests)} pending purchase requests submitted on "
            f"{world.day}, in order of submission, under the purchasing policy. Approve, reject or escalate "
            "each one with the policy's reason code (decide_requests, or approve_request / reject_request / "
            "escalate_request). No department may spend more than its budget."
        )
        if world.comment_required:
            text += " Give every rejection a comment for the requester that names the rule."
        return text + " Then call finish."

    def make_env(self, instance: TaskInstance) -> BudgetEnv:
        return BudgetEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    def optional_tools(self) -> tuple[ToolSpec, ...]:
        """Helper tools the environment offers beside the baseline's (domain computation over data the base
        tools expose); an `add_tool` edit naming one adds it to a harness (`coevolve.tasks.helpers`)."""
        return HELPER_TOOLS

    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return plan(self.world(instance.seed, instance.params), knowledge)

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, BudgetEnv)
        return check(env, self.full_knowledge())
