"""Stock alerting: alert the purchasing manager about every product that needs reordering.

Services: a web shop (products with on-hand and reserved quantities, threshold, par level, case pack,
status), a spreadsheet with the "Stock Alert" sheet (earlier alerts) and a "Suppliers" sheet, a shared
drive with the email template and the purchasing manager's address, and a mailbox. The agent appends
one row per product to alert and sends exactly one templated email per product. The checker reads
the final sheet and the sent mail, never the agent's words. The package: `world` (generation), `env`
(services and tools), `plan` (the reference solution as steps), `checker` (the grader), `handbook.md`
(the domain documentation).
"""

from __future__ import annotations

from typing import Any

from coevolve.tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from coevolve.tasks.stock.checker import check
from coevolve.tasks.stock.env import HELPER_TOOLS, TOOLS, StockEnv
from coevolve.tasks.stock.plan import plan, render_template, solve
from coevolve.tasks.stock.world import COLUMNS, SHEET, SUPPLIER_SHEET, Product, StockWorld, build_world
from coevolve.values import Outcome, TaskInstance, ToolSpec

__all__ = [
    "COLUMNS",
    "SHEET",
    "SUPPLIER_SHEET",
    "TOOLS",
    "Product",
    "StockEnv",
    "StockFamily",
    "StockWorld",
    "render_template",
    "solve",
]


def _neg(*verbs: str) -> tuple[str, ...]:
    """Negated forms of each verb ('not reorder', "don't reorder", ...), straight and curly apostrophes."""
    forms = ("not", "never", "don't", "doesn't", "won't", "shouldn't", "isn't", "aren't", "can't", "cannot")
    out = [f"{n} {v}" for v in verbs for n in forms]
    return (*out, *(t.replace("'", "\u2019") for t in out if "'" in t))


# words that put a sentence about stock levels in the "no alert" context
_NO_ALERT = (
    "fine", "ok", "healthy", "no reorder", "no alert", "no new alert", "no need", "not low", "enough",
    "sufficient", "safe", "no action", "not yet", *_neg("reorder", "be reorder", "alert", "be alert", "need",
    "trigger", "raise", "qualify", "count"),
)


class StockFamily(TaskFamily):
    name = "stock"
    title = "inventory stock alerting"
    facts = (
        DomainFact(
            "strictly_below",
            "A product needs reordering only when its stock is strictly below the threshold; stock exactly "
            "at the threshold is fine.",
            Concept((
                ("strict", "exactly at", "exactly on", "exactly equal", "exactly the threshold",
                 "exactly its threshold", "exactly matches", "precisely at", "precisely on", "equal to the threshold",
                 "equal to its threshold", "equal to the reorder", "equals the threshold", "equals its threshold",
                 "equals the reorder", "at the threshold", "at its threshold", "on the threshold", "on its threshold",
                 "same as the threshold", "same as its threshold", "matches the threshold", "matches its threshold",
                 "at or above", "level with", "not equal", "not when equal", "not at it"),
                ("threshold", "reorder point", "reorder level", "trigger level", "minimum level", "minimum stock"),
                (*_NO_ALERT, "below", "less than", "under the", "under its", "fewer than", "only when", "only if",
                 "only once", "<"),
            )),
            common=True,
            reversals=(
                # stock at the threshold needs a reorder too
                Concept(
                    (
                        ("threshold", "reorder point", "reorder level", "trigger level", "minimum level"),
                        ("at or below", "equal to or below", "equal to or less", "less than or equal", "<=",
                         "≤", "or equal", "is reached", "reaches the threshold", "reaches its threshold",
                         "hits the threshold", "hits its threshold", "at the threshold too",
                         "including when it is", "including equal", "even when equal", "even if equal",
                         "even when it is exactly", "even at the threshold", "when it equals",
                         "no more than the threshold", "not above the threshold", "not above its threshold",
                         "does not exceed", "doesn't exceed", "at the threshold counts",
                         "at the threshold is low", "equal to it counts"),
                        ("reorder", "re-order", "alert", "restock", "replenish", "order", "trigger", "low",
                         "need"),
                    ),
                    unless=("strict",),
                ),
            ),
        ),
        DomainFact(
            "available_stock",
            "The stock to compare with the threshold (and to report as Available) is on_hand minus "
            "reserved: reserved units are already promised to open orders.",
            Concept((
                ("reserved", "reservation", "allocated", "allocation", "committed", "promised", "earmarked",
                 "held for", "held back", "set aside", "spoken for"),
                ("minus", "subtract", "less the", "less any", "less its", "less reserved", "deduct", "take away", "taking away",
                 "taken away", "taken off", "take off", "net of", "excluding", "exclude", "remove", "after removing",
                 "left after", "what is left", "what remains", "free stock", "free to sell", "unreserved",
                 "- reserved", "on_hand -", "on_hand-", "on hand -", "\u2212 reserved", "on_hand \u2212",
                 "not available", "not part of",
                 *_neg("count", "be counted", "be sold", "be sold again", "include", "be included")),
                ("on_hand", "on hand", "on-hand", "physical", "stock", "available", "availability", "inventory",
                 "units", "quantit", "count"),
            )),
            reversals=(
                # reserved units still count
                Concept((
                    ("reserved", "reservation", "allocated", "committed"),
                    ("still count", "count as available", "counts as available", "count toward",
                     "counts toward", "part of the available", "part of available",
                     "included in the available", "are available", "is available", "can be sold",
                     "still available", "count as stock", "counts as stock", "count as on hand",
                     "still in the warehouse", "irrelevant", "doesn't matter", "does not matter",
                     "don't matter", "do not matter", "no need to subtract", "not subtract",
                     "don't subtract", "do not subtract", "never subtract", "not deduct", "don't deduct"),
                )),
                # on_hand itself is compared
                Concept((
                    ("on_hand", "on hand", "on-hand", "physical count"),
                    ("itself", "directly", "as is", "as-is", "raw", "alone", "by itself", "the full",
                     "whole"),
                    ("threshold", "compar", "check", "reorder"),
                )),
            ),
        ),
        DomainFact(
            "skip_discontinued",
            "Discontinued products are never reordered: no alert row and no email, however low their stock.",
            Concept((
                ("discontinu", "end-of-life", "end of life", "retired", "delisted", "phased out", "phased-out",
                 "being phased", "no longer sold", "no longer stocked", "no longer carried", "withdrawn", "obsolete"),
                ("skip", "ignore", "exclude", "omit", "leave out", "left out", "leave them out", "leave it out",
                 "no alert", "no email", "no row", "no reorder", "no restock", "do nothing",
                 *_neg("reorder", "be reorder", "re-order", "alert", "be alert", "get", "raise", "restock",
                       "be restock", "replenish", "be replenish", "need", "order", "email", "include", "be included")),
            )),
            reversals=(
                # discontinued products are reordered like any other
                Concept((
                    ("discontinu", "end-of-life", "end of life", "retired", "delisted", "phased out",
                     "obsolete"),
                    ("like any other", "like other", "same as any", "same as other", "as usual", "normally",
                     "just like", "treated the same", "no exception", "also reorder", "also get",
                     "still reorder", "still get", "still need", "still be reorder", "still alert",
                     "are reorder", "is reorder", "should be reorder", "must be reorder", "get reorder",
                     "get alert", "get an alert", "need an alert", "need a reorder", "are included",
                     "include them", "include discontinued"),
                )),
            ),
        ),
        DomainFact(
            "open_alert_dedup",
            "A product that already has a row with Status 'open' in the Stock Alert sheet has been alerted "
            "and is still being handled: do not add another row or send another email for it.",
            Concept((
                ("open",),
                ("already", "existing", "earlier", "previous", "still", "outstanding", "pending", "in progress",
                 "being handled", "unresolved", "not yet closed", "with an open", "with open", "has an open",
                 "has open", "have an open", "have open", "open alert", "open row", "open entry"),
                ("another", "again", "second", "duplicate", "new row", "new alert", "new email", "no new", "twice",
                 "repeat", "re-alert", "extra", "skip", "fresh", "one more", "no further", "not re-",
                 *_neg("add", "alert", "be alerted", "email", "send", "append", "write", "create")),
                ("alert", "row", "entry", "entries", "status", "line", "record", "sheet"),
            )),
            rare=True,
            reversals=(
                # a product with an open alert is alerted again
                Concept(
                    (
                        ("open",),
                        ("already", "existing", "earlier", "previous", "still", "outstanding", "pending",
                         "has an open", "have an open", "with an open", "with open", "open alert",
                         "open row"),
                        ("another", "again", "re-alert", "new row", "new alert", "additional", "second",
                         "one more", "a fresh"),
                        ("add", "append", "send", "email", "alert", "write", "create", "receive", "log",
                         "raise", "record", "row"),
                    ),
                    unless=("skip", "do nothing", "nothing further", "nothing more"),
                ),
                # a product is alerted again even when it has been alerted already
                Concept((
                    ("even if", "even when", "regardless"),
                    ("earlier row", "existing row", "previous row", "already has a row",
                     "already have a row", "earlier alert", "existing alert", "previous alert",
                     "already alerted", "already has an alert", "open row", "open alert"),
                    ("add", "new row", "another", "again", "email"),
                )),
            ),
        ),
        DomainFact(
            "case_pack",
            "Suppliers ship whole cases: the reorder quantity (par level minus available) is rounded up to a "
            "multiple of the product's case_pack.",
            Concept((
                ("case pack", "case_pack", "case-pack", "case size", "case quantit", "whole case", "full case",
                 "complete case", "cases", "carton", "pack size", "packs of", "outer"),
                ("round", "multiple", "whole", "full case", "complete case", "ceil", "next case", "next full",
                 "next whole", "partial case", "no partial", "broken case", "no broken", "go up to", "goes up to",
                 *_neg("split", "break", "be split", "be broken")),
                ("reorder q", "order q", "quantit", "qty", "order", "units", "amount"),
            )),
            reversals=(
                # the case pack does not matter
                Concept((
                    ("case pack", "case_pack", "case-pack", "case size", "pack size", "cases"),
                    ("ignor", "disregard", "irrelevant", "doesn't matter", "does not matter",
                     "no need to round", "not round", "don't round", "do not round", "never round",
                     "no rounding", "without rounding", "order partial", "partial cases are fine",
                     "partial cases are ok", "partial cases are allowed", "loose units", "single units"),
                )),
                # exactly par level minus available
                Concept(
                    (
                        ("par level", "par minus", "par-level"),
                        ("exactly", "as is", "as-is", "just the difference", "precisely"),
                        ("order", "quantit", "units"),
                    ),
                    unless=("round", "multiple", "whole case", "full case", "ceil"),
                ),
            ),
        ),
    )
    constraints = (
        Constraint(
            "high_priority",
            "When the task says the restock is urgent, every alert email is sent with priority 'high'.",
            Concept((
                ("priority", "importance"),
                ("high",),
                ("urgent", "rush", "expedit", "asap", "time-critical", "time critical", "when the task", "if the task",
                 "when the request", "if the request", "when asked", "if asked", "when requested", "if requested",
                 "when told", "if told", "says so"),
            )),
            reversals=(
                # alert emails go at normal priority
                Concept(
                    (
                        ("priority", "importance"),
                        ("normal", "low", "standard", "default", "regular", "usual"),
                        ("urgent", "rush", "even when", "even if", "always", "every", "all "),
                    ),
                    unless=("high",),
                ),
            ),
        ),
    )

    # ------------------------------------------------------------------ generation
    def build_world(self, seed: int, params: dict[str, Any]) -> StockWorld:
        return build_world(seed, params)

    def instruction(self, world: StockWorld, instance_id: str) -> str:
        urgent = (
            ' This restock is urgent: send the alert emails with priority "high".' if world.urgent else ""
        )
        return (
            f"{world.shop} web shop, {world.today}: check every product's stock against its threshold. For each "
            f'product that needs reordering, append one row to the "{SHEET}" sheet, filling every column of '
            f"the sheet (Date = {world.today}, Status = open, Reorder Qty = the quantity that brings the "
            "product back to its par level), and send the purchasing manager exactly one email written from "
            f"the template `{world.template_path}` (its first line is the subject; fill every placeholder). "
            f"The purchasing manager's name and address are in `{world.manager_path}`.{urgent} "
            "Then call finish."
        )

    def make_env(self, instance: TaskInstance) -> StockEnv:
        return StockEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    def optional_tools(self) -> tuple[ToolSpec, ...]:
        """Helper tools the environment offers beside the baseline's (domain computation over data the base
        tools expose); an `add_tool` edit naming one adds it to a harness (`coevolve.tasks.helpers`)."""
        return HELPER_TOOLS

    # ------------------------------------------------------------------ solution and grade
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return plan(self.world(instance.seed, instance.params), knowledge)

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, StockEnv)
        return check(env, self.full_knowledge())
