"""Stock alerting: alert the purchasing manager about every product that needs reordering.

Services: a web shop (products with on-hand and reserved quantities, threshold, par level, case pack,
status), a spreadsheet with the "Stock Alert" sheet (earlier alerts) and a "Suppliers" sheet, a shared
drive with the email template and the purchasing manager's address, and a mailbox. The agent appends
one row per product to alert and sends exactly one templated email per product. The checker reads
the final sheet and the sent mail, never the agent's words.
"""

from __future__ import annotations

from coevolve.tasks.base import TaskFamily
from coevolve.tasks.stock.checker import check
from coevolve.tasks.stock.env import HELPER_TOOLS, TOOLS, StockEnv
from coevolve.tasks.stock.plan import plan
from coevolve.tasks.stock.world import SHEET, SUPPLIER_SHEET, StockWorld, build_world

__all__ = ["SHEET", "SUPPLIER_SHEET", "StockEnv", "StockFamily"]


class StockFamily(TaskFamily):
    name = "stock"
    title = "inventory stock alerting"
    build_world = staticmethod(build_world)
    env_type = StockEnv
    base_tools = TOOLS
    helper_tools = HELPER_TOOLS
    planner = staticmethod(plan)
    checker = staticmethod(check)

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
