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

from harness_store.values import Outcome, TaskInstance, ToolSpec
from tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from tasks.stock.checker import check
from tasks.stock.env import TOOLS, StockEnv
from tasks.stock.plan import plan, render_template, solve
from tasks.stock.world import COLUMNS, SHEET, SUPPLIER_SHEET, Product, StockWorld, build_world

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

    # ------------------------------------------------------------------ solution and grade
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return plan(self.world(instance.seed, instance.params), knowledge)

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, StockEnv)
        return check(env, self.full_knowledge())
