"""The stock grader: reads the final Stock Alert and Suppliers sheets and the sent mail, never the
agent's words, and reports per requirement.

Reasons name what is wrong with the agent's own output (its rows by sheet row number, its emails by
their number in the sent list, the values it wrote) and count what is missing, the way a failing test
would; they never name the products it missed, the values it should have written, or why an instance
was built the way it was. Score: 0 when data the task did not ask to touch was edited, otherwise the
mean of the F1 of the new rows and the F1 of the sent emails (exact matches)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from coevolve.tasks.base import Knowledge, Requirement, graded, listing, plural
from coevolve.tasks.stock.env import StockEnv, norm_cell
from coevolve.tasks.stock.plan import solve
from coevolve.tasks.stock.world import SHEET, SUPPLIER_SHEET, supplier_sheet
from coevolve.values import Outcome

MailKey = tuple[str, str, str, str]


def _norm_ws(s: Any) -> str:
    return " ".join(str(s).split())


def mail_key(e: dict[str, Any]) -> MailKey:
    """What an email is compared on: recipient, subject and body (whitespace-normalised), priority."""
    return (
        str(e.get("to", "")).strip().lower(),
        _norm_ws(e.get("subject", "")),
        _norm_ws(e.get("body", "")),
        str(e.get("priority") or "normal"),
    )


def _f1(want: Counter, have: Counter) -> float:
    tp = sum((want & have).values())
    nw, nh = sum(want.values()), sum(have.values())
    if not nw and not nh:
        return 1.0
    if not tp:
        return 0.0
    p, r = tp / nh, tp / nw
    return 2 * p * r / (p + r)


def _short(s: str, n: int = 60) -> str:
    s = _norm_ws(s)
    return repr(s if len(s) <= n else s[: n - 1] + "…")


# ------------------------------------------------------------------ data the task does not touch
def _edited_rows(now: list[list[str]], before: list[list[str]], columns: Sequence[str], first_row: int) -> list[str]:
    """'row N (Column, ...)' for each row of `now` that differs from the same row of `before`."""
    out = []
    for i, (a, b) in enumerate(zip(now, before)):
        if list(a) != list(b):
            width = max(len(a), len(b), len(columns))
            names = [columns[j] if j < len(columns) else f"column {j + 1}" for j in range(width)]
            changed = [names[j] for j in range(width) if a[j : j + 1] != b[j : j + 1]]
            out.append(f"row {first_row + i} ({', '.join(changed)})")
    return out


def _integrity(env: StockEnv) -> list[Requirement]:
    w = env.world
    sheet = env.sheets[SHEET]
    header_ok = tuple(sheet[0]) == w.header
    n = len(w.existing)
    edited = _edited_rows(sheet[1 : n + 1], [list(r) for r in w.existing], w.header, 2)
    if len(sheet) - 1 < n:
        edited.append(f"{n - (len(sheet) - 1)} rows were removed")
    suppliers_now, suppliers_before = env.sheets[SUPPLIER_SHEET], supplier_sheet(w)
    changed = _edited_rows(suppliers_now, suppliers_before, suppliers_before[0], 1)
    if len(suppliers_now) != len(suppliers_before):
        changed.append(f"it has {len(suppliers_now) - 1} data rows instead of {len(suppliers_before) - 1}")
    return [
        Requirement(
            "stock_alert_header_unchanged",
            header_ok,
            "" if header_ok else f"the header row of the {SHEET} sheet was edited; it now reads: {' | '.join(sheet[0])}",
        ),
        Requirement(
            "earlier_alerts_unchanged",
            not edited,
            f"{plural(len(edited), 'earlier alert row', 'earlier alert rows')} of the {SHEET} sheet "
            f"{'was' if len(edited) == 1 else 'were'} edited, but the task only adds new rows: {listing(edited, sep='; ')}"
            if edited
            else "",
        ),
        Requirement(
            "suppliers_sheet_unchanged",
            not changed,
            f"the {SUPPLIER_SHEET} sheet was edited, but the task does not change it: {listing(changed, sep='; ')}"
            if changed
            else "",
        ),
    ]


def _one_each(
    want: dict[str, Any], numbered: list[tuple[int, str | None]], others: list[str], wrong: list[str], *,
    names: tuple[str, str, str], missed: tuple[str, str, str], other: tuple[str, str, str],
    repeats: tuple[str, str], wrongly: tuple[str, str, str],
) -> list[Requirement]:
    """The three requirements on one new row (or email) per product to reorder: none missing, none for
    another product or repeated, each as required. `numbered` pairs each new row (email) with its product;
    `missed`, `other` and `wrongly` are the words of their reasons: (singular, plural, the rest)."""
    by_sku: dict[str | None, list[int]] = defaultdict(list)
    for number, sku in numbered:
        by_sku[sku].append(number)
    missing = sum(1 for sku in want if sku not in by_sku)
    repeated = [
        f"{sku} {repeats[1].format(len(numbers))} ({', '.join(map(str, numbers))})"
        for sku, numbers in by_sku.items()
        if sku in want and len(numbers) > 1
    ]
    extra = [f"{plural(len(others), *other[:2])} {other[2]}: {listing(others, sep='; ')}"] if others else []
    if repeated:
        extra.append(f"{repeats[0]}: {listing(repeated, sep='; ')}")
    return [
        Requirement(
            names[0],
            not missing,
            f"{missing} of the {len(want)} products that need reordering {missed[missing != 1]} {missed[2]}"
            if missing
            else "",
        ),
        Requirement(names[1], not others and not repeated, "; ".join(extra)),
        Requirement(
            names[2],
            not wrong,
            f"{plural(len(wrong), *wrongly[:2])} {wrongly[2]}: {listing(wrong, sep='; ')}" if wrong else "",
        ),
    ]


# ------------------------------------------------------------------ the new rows
def _row_requirements(env: StockEnv, want: dict[str, tuple[str, ...]]) -> list[Requirement]:
    w = env.world
    sku_col = w.header.index("SKU")
    n = len(w.existing)
    new = [(n + 2 + i, tuple(norm_cell(c) for c in r)) for i, r in enumerate(env.sheets[SHEET][n + 1 :])]
    others = [f"row {rowno} ({r[sku_col] or 'no SKU'})" for rowno, r in new if r[sku_col] not in want]
    wrong = []
    for rowno, r in new:
        expected = want.get(r[sku_col])
        if expected is not None and r != expected:
            cells = [f"{col} is {r[j] or 'empty'}" for j, col in enumerate(w.header) if r[j] != expected[j]]
            wrong.append(f"row {rowno} ({r[sku_col]}): {', '.join(cells)}")
    return _one_each(
        want, [(rowno, r[sku_col]) for rowno, r in new], others, wrong,
        names=("alert_row_for_each_product_to_reorder", "no_other_alert_rows", "alert_row_values_correct"),
        missed=("has", "have", f"no new row in the {SHEET} sheet"),
        other=("new row is for a product that does", "new rows are for products that do", "not need a new alert"),
        repeats=("products with more than one new row", "has {} new rows"),
        wrongly=("new row has", "new rows have", "wrong values"),
    )


# ------------------------------------------------------------------ the sent emails
def _email_requirements(env: StockEnv, want: dict[str, MailKey]) -> list[Requirement]:
    w = env.world
    skus = re.compile(
        r"(?<![A-Za-z0-9])(" + "|".join(re.escape(p.sku) for p in w.products) + r")(?![A-Za-z0-9])"
    )

    def about(e: dict[str, Any]) -> str | None:
        m = skus.search(str(e.get("subject", ""))) or skus.search(str(e.get("body", "")))
        return m.group(1) if m else None

    sent = [(i + 1, about(e), mail_key(e), e) for i, e in enumerate(env.sent)]  # numbered as list_sent shows
    others = [
        f"email {number} ({sku})" if sku else f"email {number} (subject {_short(key[1])}, no product SKU in it)"
        for number, sku, key, _ in sent
        if sku not in want
    ]
    wrong = []
    for number, sku, key, e in sent:
        if sku not in want:
            continue
        expected, problems = want[sku], []
        if key[0] != expected[0]:
            problems.append(f"it is addressed to {key[0]}, who is not the purchasing manager")
        unfilled = sorted(set(re.findall(r"\{\{\s*\w+\s*\}\}", f"{e.get('subject', '')} {e.get('body', '')}")))
        if unfilled:
            problems.append(f"placeholders left unfilled: {', '.join(unfilled)}")
        if key[1] != expected[1]:
            problems.append(f"the subject {_short(key[1])} is not the template's subject filled in for this product")
        if key[2] != expected[2]:
            problems.append("the body is not the template's body filled in for this product")
        if not w.urgent and key[3] != expected[3]:
            problems.append(f"it has priority {key[3]}, which the task does not ask for")
        if problems:
            wrong.append(f"email {number} ({sku}): {', '.join(problems)}")
    reqs = _one_each(
        want, [(number, sku) for number, sku, _, _ in sent], others, wrong,
        names=("email_for_each_product_to_reorder", "no_other_emails", "email_content_correct"),
        missed=("was", "were", "not emailed to the purchasing manager"),
        other=("email is", "emails are", "not about a product that needs a new alert"),
        repeats=("products emailed more than once", "got {} emails"),
        wrongly=("email is", "emails are", "not written as required"),
    )
    if w.urgent:
        normal = [f"email {number} ({sku or 'no SKU'})" for number, sku, key, _ in sent if key[3] != "high"]
        reqs.append(
            Requirement(
                "high_priority",
                not normal,
                f"the task asks for the alert emails to be sent with priority high; "
                f"{len(normal)} of the {len(sent)} emails sent {'has' if len(normal) == 1 else 'have'} "
                f"priority normal: {listing(normal, sep='; ')}"
                if normal
                else "",
            )
        )
    return reqs


# ------------------------------------------------------------------ the grade
def check(env: StockEnv, full: Knowledge) -> Outcome:
    w = env.world
    integrity = _integrity(env)
    if not all(r.passed for r in integrity):
        return graded(integrity, 0.0)
    rows, emails = solve(w, full)
    sku_col = w.header.index("SKU")
    want_rows = {str(r[sku_col]): tuple(norm_cell(c) for c in r) for r in rows}
    want_mail = {str(r[sku_col]): mail_key(e) for r, e in zip(rows, emails, strict=True)}
    reqs = [*integrity, *_row_requirements(env, want_rows), *_email_requirements(env, want_mail)]
    have_rows = Counter(tuple(norm_cell(c) for c in r) for r in env.sheets[SHEET][len(w.existing) + 1 :])
    have_mail = Counter(mail_key(e) for e in env.sent)
    row_f1 = _f1(Counter(want_rows.values()), have_rows)
    mail_f1 = _f1(Counter(want_mail.values()), have_mail)
    exact = have_rows == Counter(want_rows.values()) and have_mail == Counter(want_mail.values())
    outcome = graded(reqs, round((row_f1 + mail_f1) / 2, 4))
    if outcome.passed != exact:  # the requirements restate exact equality; disagreement is a grader bug
        raise AssertionError(f"stock checker: requirements say passed={outcome.passed}, exact match says {exact}")
    return outcome
