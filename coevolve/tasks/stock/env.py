"""The stock services: the web shop's product list, the operations spreadsheet (Stock Alert and
Suppliers sheets), the shared drive (template, purchasing contact) and the shop mailbox."""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from coevolve.tasks.base import FINISH_TOOL, TaskEnv, ToolArgError
from coevolve.tasks.stock.plan import render_template
from coevolve.tasks.stock.world import SHEET, SUPPLIER_SHEET, StockWorld, supplier_sheet
from coevolve.tasks.tools import Param, tool_specs
from coevolve.values import TaskInstance, ToolSpec

MAX_CELL = 500
MAX_BODY = 5000
MAX_BATCH = 500
EMAIL = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[A-Za-z]{2,}$")
Cell = str | float  # a sheet cell or a template value, as the tools take it
_EMAIL_ITEM = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "subject": {"type": "string", "minLength": 1},
        "body": {"type": "string", "minLength": 1},
        "priority": {"type": "string", "enum": ["normal", "high"]},
    },
    "required": ["to", "subject", "body"],
    "additionalProperties": False,
}


def norm_cell(v: Any) -> str:
    """A cell as the sheet stores it: numbers without a trailing .0, booleans lower-cased, stripped."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    s = str(v).strip()
    if re.fullmatch(r"-?\d+\.0+", s):
        return s.split(".")[0]
    return s


class StockEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: StockWorld):
        super().__init__(instance)
        self.world = world
        self.sheets: dict[str, list[list[str]]] = {
            SHEET: [list(world.header), *[list(r) for r in world.existing]],
            SUPPLIER_SHEET: supplier_sheet(world),
        }
        self.files: dict[str, str] = {
            world.manager_path: (
                "# Purchasing contact for stock alerts\n"
                f"Purchasing manager: {world.manager_name} <{world.manager_email}>\n"
            ),
            world.template_path: world.template,
            "README.txt": f"Shared drive of {world.shop}. Templates and contact files live here.\n",
        }
        self.sent: list[dict[str, Any]] = []

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL, *HELPER_TOOLS)

    # files
    def tool_list_files(self) -> str:
        """List the files on the shop's shared drive."""
        return "\n".join(sorted(self.files))

    def tool_read_files(self, paths: Annotated[list[str], Param(minItems=1, maxItems=20)]) -> str:
        """Read one or more text files from the shared drive."""
        if not isinstance(paths, list) or not paths or len(paths) > 20:
            raise ToolArgError("paths must be a list of 1 to 20 file paths")
        out = []
        for p in paths:
            if not isinstance(p, str) or p not in self.files:
                raise ToolArgError(f"no such file: {str(p)[:200]!r} (files: {', '.join(sorted(self.files))})")
            out.append(f"=== {p} ===\n{self.files[p]}")
        return "\n".join(out)

    # spreadsheet
    def _sheet(self, sheet: Any) -> list[list[str]]:
        if not isinstance(sheet, str) or sheet not in self.sheets:
            raise ToolArgError(f"no such sheet: {str(sheet)[:200]!r} (sheets: {', '.join(self.sheets)})")
        return self.sheets[sheet]

    def tool_list_sheets(self) -> str:
        """List the sheets of the operations spreadsheet."""
        return "\n".join(f"{name} ({len(rows) - 1} rows)" for name, rows in self.sheets.items())

    def tool_read_sheet(self, sheet: str) -> str:
        """Read a sheet: the header row and every data row with its row number."""
        rows = self._sheet(sheet)
        lines = [f"row | {' | '.join(rows[0])}"]
        lines += [f"{i} | {' | '.join(r)}" for i, r in enumerate(rows[1:], start=2)]
        return "\n".join(lines) + f"\n({len(rows) - 1} data rows; row 1 is the header)"

    def tool_append_rows(
        self, sheet: str, rows: Annotated[list[list[Cell]], Param(maxItems=MAX_BATCH)]
    ) -> str:
        """Append rows at the end of a sheet. Each row is a list of cells in the sheet's column order."""
        target = self._sheet(sheet)
        width = len(target[0])
        if not isinstance(rows, list) or len(rows) > MAX_BATCH:
            raise ToolArgError(f"rows must be a list of at most {MAX_BATCH} rows")
        clean = []
        for i, r in enumerate(rows):
            if not isinstance(r, list) or len(r) != width:
                raise ToolArgError(f"row {i} must be a list of {width} cells (the sheet's columns)")
            if not all(isinstance(c, (str, int, float)) and not isinstance(c, bool) for c in r):
                raise ToolArgError(f"row {i}: cells must be strings or numbers")
            if any(len(str(c)) > MAX_CELL for c in r):
                raise ToolArgError(f"row {i}: a cell is longer than {MAX_CELL} characters")
            clean.append([norm_cell(c) for c in r])
        target.extend(clean)
        return f"appended {len(clean)} rows to {sheet} (now {len(target) - 1} data rows)"

    def tool_update_cell(
        self, sheet: str, row: Annotated[int, Param(minimum=2)], column: str, value: Cell
    ) -> str:
        """Overwrite one cell of a sheet (row number as shown by read_sheet, column by header name)."""
        target = self._sheet(sheet)
        if not isinstance(row, int) or isinstance(row, bool) or not 2 <= row <= len(target):
            raise ToolArgError(f"row must be a data row number 2..{len(target)}")
        if not isinstance(column, str) or column not in target[0]:
            raise ToolArgError(f"unknown column {str(column)[:100]!r} (columns: {', '.join(target[0])})")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool) or len(str(value)) > MAX_CELL:
            raise ToolArgError("value must be a string or a number")
        target[row - 1][target[0].index(column)] = norm_cell(value)
        return f"{sheet} row {row} {column} = {norm_cell(value)}"

    # web shop
    def tool_list_products(self) -> str:
        """List every product of the web shop with its stock fields."""
        cols = ("sku", "name", "supplier", "status", "on_hand", "reserved", "threshold", "par_level", "case_pack")
        lines = [" | ".join(cols)]
        for p in self.world.products:
            row = (p.sku, p.name, p.supplier, p.status, p.on_hand, p.reserved, p.threshold, p.par, p.case_pack)
            lines.append(" | ".join(map(str, row)))
        return "\n".join(lines) + f"\n({len(self.world.products)} products)"

    # mailbox
    def tool_send_emails(
        self, emails: Annotated[list[dict[str, Any]], Param(items=_EMAIL_ITEM, maxItems=MAX_BATCH)]
    ) -> str:
        """Send one or more emails from the shop mailbox. Each email has to, subject, body and an optional
        priority ('normal' by default, or 'high')."""
        if not isinstance(emails, list) or len(emails) > MAX_BATCH:
            raise ToolArgError(f"emails must be a list of at most {MAX_BATCH} messages")
        clean = []
        for i, e in enumerate(emails):
            if not isinstance(e, dict):
                raise ToolArgError(f"email {i} must be an object with to, subject, body")
            unknown = set(e) - {"to", "subject", "body", "priority"}
            if unknown:
                raise ToolArgError(f"email {i}: unknown fields {sorted(unknown)}")
            to, subject, body = e.get("to"), e.get("subject"), e.get("body")
            if not isinstance(to, str) or not EMAIL.match(to.strip()):
                raise ToolArgError(f"email {i}: 'to' must be one email address")
            if not isinstance(subject, str) or not subject.strip() or len(subject) > MAX_CELL:
                raise ToolArgError(f"email {i}: 'subject' must be a non-empty string")
            if not isinstance(body, str) or not body.strip() or len(body) > MAX_BODY:
                raise ToolArgError(
                    f"email {i}: 'body' must be a non-empty string of at most {MAX_BODY} chars"
                )
            priority = e.get("priority", "normal")
            if priority not in ("normal", "high"):
                raise ToolArgError(f"email {i}: priority must be 'normal' or 'high'")
            clean.append({"to": to.strip(), "subject": subject, "body": body, "priority": priority})
        self.sent.extend(clean)
        return f"sent {len(clean)} emails"

    def tool_list_sent(self) -> str:
        """List the emails sent from the shop mailbox so far."""
        if not self.sent:
            return "(no sent emails)"
        return "\n".join(
            f"{i + 1}. to {e['to']} [{e['priority']}] {e['subject']}" for i, e in enumerate(self.sent)
        )

    # helper tools (not in the baseline)
    def tool_stock_position(self, sku: str) -> str:
        """One product's stock arithmetic from the product list: available = on hand - reserved, how it
        compares with the threshold, the units that bring it back to its par level, and that quantity
        rounded up to whole case packs."""
        p = next((x for x in self.world.products if x.sku == sku), None) if isinstance(sku, str) else None
        if p is None:
            raise ToolArgError(f"unknown SKU {str(sku)[:40]!r}")
        avail = p.on_hand - p.reserved
        where = "below it" if avail < p.threshold else "at it, not below" if avail == p.threshold else "above it"
        to_par = max(0, p.par - avail)
        order = math.ceil(to_par / p.case_pack) * p.case_pack
        return (
            f"{p.sku} {p.name} ({p.status}): on hand {p.on_hand} - reserved {p.reserved} = {avail} available; "
            f"threshold {p.threshold}: {avail} is {where}; par level {p.par}: {to_par} units to par; case pack "
            f"{p.case_pack}: {order} units rounded up to whole cases ({order // p.case_pack} cases)"
        )

    def tool_open_alerts(self) -> str:
        """The SKUs that have a row with Status open on the Stock Alert sheet, with their row numbers."""
        rows = self.sheets[SHEET]
        header = rows[0]
        sku, status = header.index("SKU"), header.index("Status")
        hits = [f"{r[sku]} (row {i})" for i, r in enumerate(rows[1:], start=2) if r[status].strip().lower() == "open"]
        return f"{SHEET} rows with Status open: " + (", ".join(hits) if hits else "none")

    def tool_sheet_row(self, sheet: str, values: dict[str, Cell]) -> str:
        """Arrange one row's values, given by column name, in the sheet's column order (a list to pass to
        append_rows). Every column of the sheet must be given."""
        header = self._sheet(sheet)[0]
        if not isinstance(values, dict):
            raise ToolArgError("values must be an object {column: value}")
        unknown = [str(k)[:40] for k in values if k not in header]
        if unknown:
            raise ToolArgError(f"unknown columns {unknown} (columns: {', '.join(header)})")
        missing = [c for c in header if c not in values]
        if missing:
            raise ToolArgError(f"values lacks the columns {missing}")
        if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values.values()):
            raise ToolArgError("every value must be a string or a number")
        return json.dumps([values[c] for c in header]) + f"  (the columns of {sheet}: {', '.join(header)})"

    def tool_fill_template(self, path: str, values: dict[str, Cell]) -> str:
        """Fill a {{placeholder}} template file from the shared drive with the given values: the subject (its
        first line, without 'Subject:') and the body, and any placeholder left unfilled."""
        if not isinstance(path, str) or path not in self.files:
            raise ToolArgError(f"no such file: {str(path)[:200]!r} (files: {', '.join(sorted(self.files))})")
        if not isinstance(values, dict) or not all(
            isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values.values()
        ):
            raise ToolArgError("values must be an object {placeholder: text}")
        text = self.files[path]
        fill = {str(k): norm_cell(v) for k, v in values.items()}
        subject, body = render_template(text, fill)
        left = sorted({m for m in re.findall(r"\{\{(\w+)\}\}", text) if m not in fill})
        out = f"subject: {subject}\nbody:\n{body}"
        return out + (f"\n(unfilled placeholders: {', '.join(left)})" if left else "")


TOOLS = tool_specs(
    StockEnv.tool_list_files,
    StockEnv.tool_read_files,
    StockEnv.tool_list_sheets,
    StockEnv.tool_read_sheet,
    StockEnv.tool_append_rows,
    StockEnv.tool_update_cell,
    StockEnv.tool_list_products,
    StockEnv.tool_send_emails,
    StockEnv.tool_list_sent,
)
HELPER_TOOLS = tool_specs(
    StockEnv.tool_stock_position,
    StockEnv.tool_open_alerts,
    StockEnv.tool_sheet_row,
    StockEnv.tool_fill_template,
)
