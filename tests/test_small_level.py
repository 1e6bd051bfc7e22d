"""The small-model level (`size=0`) and the families' helper tools (issue 22, point 2;
docs/results/real-weights-design.md).

Per family: a small instance generates and round-trips its id, its observations stay under the level's
bound, the reference plan passes, a wrong answer fails (every rule, left out, fails some instance), and
each helper tool's answer equals the value computed by hand from the base tools' observations of the
same instance. Worlds at sizes 1 and up are pinned by a fingerprint taken before the level existed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from coevolve.edits import apply_edit, edit_from_json
from coevolve.tasks import get_family
from coevolve.tasks.base import Knowledge
from coevolve.tasks.helpers import (
    LEVELS,
    SMALL_LEVEL_FAMILIES,
    add_tool_ops,
    footprint,
    optional_tools,
    oracle_edit,
    selection_harnesses,
)
from tests.rollouts import pass_rate, rollout_all

SMALL = {"size": 0}
MAX_OBSERVATION = 1_600  # characters, any one observation of the reference plan at size 0
MAX_OBSERVATIONS = 3_200  # characters, all of them in one rollout
MAX_INSTRUCTION = 800
FINGERPRINTS = Path(__file__).parent / "fixtures" / "world_fingerprints.json"


def small_val(name: str, difficulty: int = 3, n: int | None = None):
    return get_family(name).generate("val", n, size=0, difficulty=difficulty)


def run(env, tool: str, **args) -> str:
    result = env.call(tool, args)
    assert not result.error, result.content
    return result.content


def solve(fam, inst, knowledge: Knowledge):
    env = fam.make_env(inst)
    impl = {t.name: t.impl for t in env.tool_specs()}
    for step in fam.plan(inst, knowledge):
        env.call(impl.get(step.tool, step.tool), dict(step.args))
    return env


def table(text: str, header_prefix: str = "") -> list[list[str]]:
    """The rows of a ' | '-separated table observation (header first), without the '(n rows)' line."""
    lines = [ln for ln in text.splitlines() if " | " in ln and ln.startswith(header_prefix)]
    return [[c.strip() for c in ln.split(" | ")] for ln in lines]


# ------------------------------------------------------------------ sizes 1 and up are unchanged
def world_digest(name: str, params: dict) -> str:
    fam = get_family(name)
    h = hashlib.sha256()
    for split, size in fam.split_sizes.items():
        for i in range(size):
            inst = fam.instance_at(split, i, **params)
            plan = fam.plan(inst, fam.full_knowledge())
            h.update(repr(fam.world(inst.seed, inst.params)).encode())
            h.update(inst.id.encode() + inst.instruction.encode())
            h.update(json.dumps([(s.tool, s.args, s.facts, s.uses, s.constraint) for s in plan], sort_keys=True,
                                default=str).encode())  # fmt: skip
    return h.hexdigest()


PINNED = [(n, p) for n in SMALL_LEVEL_FAMILIES for p in ({}, {"difficulty": 0}, {"difficulty": 3, "size": 3})]


@pytest.mark.parametrize(("name", "params"), PINNED, ids=[f"{n}-{json.dumps(p)}" for n, p in PINNED])
def test_worlds_at_size_one_and_up_are_the_ones_from_before_the_small_level(name, params):
    """Digests of every instance's world, id, instruction and reference plan, taken on the code before the
    small level existed (d44c5e3)."""
    pinned = json.loads(FINGERPRINTS.read_text())["digests"]
    assert world_digest(name, params) == pinned[f"{name} {json.dumps(params, sort_keys=True)}"]


def test_default_params_and_baseline_tools_are_unchanged():
    for name in SMALL_LEVEL_FAMILIES:
        fam = get_family(name)
        assert fam.default_params == {"difficulty": 2, "size": 1}
        assert [t.name for t in fam.baseline_harness().tools] == [*(t.name for t in fam.baseline_tools()), "finish"]


# ------------------------------------------------------------------ the level
def test_the_ladder_runs_from_the_small_level_to_the_default():
    assert list(LEVELS) == ["L0", "L1", "L2", "L3"]
    assert LEVELS["L0"] == {"size": 0, "difficulty": 1}
    assert LEVELS["L3"] == get_family("iot").default_params


@pytest.mark.parametrize("name", SMALL_LEVEL_FAMILIES)
def test_a_small_instance_generates_and_round_trips(name):
    fam = get_family(name)
    insts = fam.generate("test", 5, seed=3, size=0) + [fam.instance_at("train", 7, size=0, difficulty=1)]
    for inst in insts:
        assert inst.id.endswith("size=0") and inst.params["size"] == 0
        assert fam.instance(inst.id) == inst
    assert {i.seed for i in fam.generate("val", 10, size=0)}.isdisjoint({i.seed for i in fam.generate("val", 10)})


@pytest.mark.parametrize("name", SMALL_LEVEL_FAMILIES)
@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_small_observations_are_short_and_the_reference_plan_passes(name, difficulty):
    rows = footprint(name, {"size": 0, "difficulty": difficulty})
    assert len(rows) == get_family(name).split_sizes["val"]
    assert all(r["passed"] for r in rows), [r["id"] for r in rows if not r["passed"]]
    assert max(r["largest_observation"] for r in rows) <= MAX_OBSERVATION
    assert max(r["observations"] for r in rows) <= MAX_OBSERVATIONS
    assert max(r["instruction"] for r in rows) <= MAX_INSTRUCTION
    default = footprint(name, {"difficulty": difficulty}, n=10)
    assert sum(r["observations"] for r in rows[:10]) < sum(r["observations"] for r in default)


@pytest.mark.parametrize("name", SMALL_LEVEL_FAMILIES)
def test_every_split_and_difficulty_generates_and_passes_at_size_zero(name):
    fam = get_family(name)
    for difficulty in (0, 1, 2, 3):
        for split, size in fam.split_sizes.items():
            for i in range(0, size, 3):
                outcome, _ = fam.reference_solve(fam.instance_at(split, i, size=0, difficulty=difficulty))
                assert outcome.passed, (split, i, difficulty)


@pytest.mark.parametrize("name", SMALL_LEVEL_FAMILIES)
def test_a_wrong_answer_fails_at_the_small_level(name):
    """The empty agent scores 0 everywhere, and leaving out any one rule fails some instance."""
    fam = get_family(name)
    val = small_val(name)
    for inst in val[:20]:
        outcome = fam.check(fam.make_env(inst))
        assert not outcome.passed and outcome.score == 0.0, inst.id
    full = fam.full_knowledge()
    for item in (*fam.facts, *fam.constraints):
        lacking = Knowledge(full.facts - {item.id}, full.constraints - {item.id})
        failed = [i.id for i in val if not fam.check(solve(fam, i, lacking)).passed]
        assert failed, f"{name}: knowing all but {item.id} passes every small instance"


@pytest.mark.parametrize("name", SMALL_LEVEL_FAMILIES)
def test_the_fully_informed_synthetic_executor_passes_at_the_small_level(name):
    """Through the real executor and gateway, under both harnesses of the selection rule (the oracle's
    calls constrained)."""
    val = small_val(name, difficulty=2, n=10)
    for harness in selection_harnesses(name).values():
        assert pass_rate(rollout_all(val, harness, "synthetic/oracle-stepwise")) == 1.0, harness.decoding


def test_the_selection_harnesses_differ_only_as_the_rule_says():
    for name in SMALL_LEVEL_FAMILIES:
        fam = get_family(name)
        h = selection_harnesses(name)
        base, oracle = fam.baseline_harness(), h["oracle"]
        assert (h["baseline"].system_prompt, h["baseline"].tools) == (base.system_prompt, base.tools)
        assert h["baseline"].decoding.tool_calls == "free" and oracle.decoding.tool_calls == "constrained"
        assert h["baseline"].decoding.temperature == oracle.decoding.temperature == 0.7
        assert h["baseline"].decoding.max_tokens == oracle.decoding.max_tokens == 512
        assert [t.name for t in oracle.tools] == [*(t.name for t in base.tools), *(t["name"] for t in optional_tools(name))]
        assert {r.name for r in oracle.recipes} == {i.id for i in (*fam.facts, *fam.constraints)}
        assert oracle_edit(name, decoding=None).ops[-1].__class__.__name__ == "AddTool"


# ------------------------------------------------------------------ the helper-tool catalogue
@pytest.mark.parametrize("name", SMALL_LEVEL_FAMILIES)
def test_helper_tools_are_offered_by_the_env_but_not_by_the_baseline(name):
    fam = get_family(name)
    catalogue = optional_tools(name)
    assert catalogue and all(set(t) == {"name", "description", "parameters", "impl"} for t in catalogue)
    baseline = {t.name for t in fam.baseline_harness().tools}
    assert not baseline & {t["name"] for t in catalogue}
    env = fam.make_env(fam.instance_at("val", 0, size=0))
    assert {t["impl"] for t in catalogue} <= {t.impl for t in env.tool_specs()}
    # an add_tool edit, as a proposer writes it, puts them in the harness
    edited = apply_edit(fam.baseline_harness(), edit_from_json({"rationale": "helpers", "ops": add_tool_ops(name)}))
    assert [t.name for t in edited.tools][-len(catalogue):] == [t["name"] for t in catalogue]
    oracle = apply_edit(fam.baseline_harness(), oracle_edit(fam)).render_system()
    assert all(i.stated_in(oracle) for i in (*fam.facts, *fam.constraints))


def test_families_without_a_catalogue_offer_none():
    assert optional_tools("refactor") == []
    with pytest.raises(ValueError, match="no helper tools"):
        add_tool_ops("iot", ["no_such_tool"])


@pytest.mark.parametrize("name", SMALL_LEVEL_FAMILIES)
def test_helper_tools_reject_bad_arguments_with_an_error_observation(name):
    env = get_family(name).make_env(get_family(name).instance_at("val", 0, size=0))
    for tool in optional_tools(name):
        for args in ({"bogus": 1}, {k: None for k in tool["parameters"]["properties"]}, "x"):
            result = env.call(tool["impl"], args)
            if tool["parameters"].get("required") or args == "x" or "bogus" in args:
                assert result.error and result.content.startswith("error"), (tool["name"], args, result.content)


# ------------------------------------------------------------------ each helper against the value found by hand
def test_iot_helpers_equal_the_hand_computation_and_carry_the_task():
    fam = get_family("iot")
    for inst in small_val("iot"):
        env = fam.make_env(inst)
        sheet = run(env, "read_parameters").splitlines()
        cut = sheet.index("")
        ranges = {r.split(",")[0]: tuple(map(float, r.split(",")[1:])) for r in sheet[2:cut]}
        overrides = {tuple(r.split(",")[:2]): tuple(map(float, r.split(",")[2:])) for r in sheet[cut + 3:]}
        rows = table(run(env, "sql_query", query="SELECT machine, sensor, ts, value FROM readings ORDER BY machine, sensor, ts"))[1:]
        cells: dict[tuple[str, str], list[tuple[str, float | None]]] = {}
        for m, s, ts, v in rows:
            cells.setdefault((m, s), []).append((ts, None if v == "NULL" else float(v)))
        report = []
        for (m, s), series in cells.items():
            lo, hi = overrides.get((m, s), ranges[s])
            got = run(env, "applicable_range", machine=m, sensor=s)
            assert re.search(rf"min {lo:g}, max {hi:g} ", got), got
            want, i = [], 0
            while i < len(series):
                j = i
                while j < len(series) and series[j][1] is not None and not lo <= series[j][1] <= hi:
                    j += 1
                if j - i >= 3:
                    peak = max((v for _, v in series[i:j]), key=lambda v: abs(v - (lo + hi) / 2))
                    want.append((series[i][0], series[j - 1][0], j - i, peak))
                i = max(j, i + 1)
            out = run(env, "out_of_range_runs", machine=m, sensor=s, min=lo, max=hi, min_length=3)
            listed = re.findall(r"- start (\S+), end (\S+), (\d+) readings, peak (\S+)", out)
            assert [(a, b, int(c), float(p)) for a, b, c, p in listed] == want, out
            for start, _, _, peak in want:
                report.append({"machine": m, "sensor": s, "start": start, "peak": peak})
        w = fam.world(inst.seed, inst.params)
        run(env, "upload_report", key=w.key, content=json.dumps(report))
        assert fam.check(env).passed, inst.id  # the helper tools' answers carry the whole computation


def test_payroll_helpers_equal_the_hand_computation():
    fam = get_family("payroll")
    for inst in small_val("payroll"):
        env = fam.make_env(inst)
        policy = run(env, "read_policy")
        premiums = {k: float(v) for k, v in re.findall(r"(none|single|family) (\d+\.\d\d)", policy)}
        lines = policy.splitlines()
        holidays = set(re.findall(r"\d{4}-\d\d-\d\d", lines[lines.index("## Company holidays") + 1]))
        out = run(env, "sql_query", query="SELECT * FROM employees; SELECT * FROM pay_rates; SELECT * FROM timesheets")
        emp_block, rate_block, ts_block = out.split("\n\n")
        employees = {r[0]: r for r in table(emp_block)[1:]}
        rates = table(rate_block)[1:]
        sheets = table(ts_block)[1:]
        for eid, emp in employees.items():
            for period in sorted({p for e, p, _, _ in sheets if e == eid}):
                days = [(d, float(h)) for e, p, d, h in sheets if e == eid and p == period]
                hol = sum(h for d, h in days if d in holidays)
                work = [h for d, h in days if d not in holidays]
                for limit in (None, 8.0):
                    daily = sum(max(0.0, h - limit) for h in work) if limit else 0.0
                    ot = daily + max(0.0, sum(work) - daily - 40)
                    args = {"employee_id": eid, "period": period} | ({"daily_limit": limit} if limit else {})
                    got = run(env, "week_hours", **args)
                    assert f"Regular {sum(work) - ot:g} h, overtime {ot:g} h" in got and f"holiday {hol:g} h." in got, got
                rate = float(emp[4])
                gross = round(rate * ((sum(work) - ot) + 1.5 * ot + 2 * hol) + 1e-9, 2)
                got = run(env, "gross_pay", rate=rate, regular_hours=sum(work) - ot, overtime_hours=ot, holiday_hours=hol)
                assert got.startswith(f"gross {gross:.2f} "), got
                k401 = round(gross * float(emp[8]) / 100 + 1e-9, 2)
                net = round(gross - premiums[emp[7]] - k401 + 1e-9, 2)
                assert run(env, "net_pay", employee_id=eid, gross=gross).endswith(f"= net {net:.2f}")
                in_effect = [float(r) for e, eff, r in rates if e == eid and eff <= period]
                if in_effect:
                    assert f"rate {in_effect[-1]:g} " in run(env, "rate_on", employee_id=eid, date=period)


def test_budget_helpers_equal_the_hand_computation():
    fam = get_family("budget")
    for inst in small_val("budget"):
        env = fam.make_env(inst)
        fx = {c: float(r) for c, r in re.findall(r"- 1 (\w+) = ([\d.]+) USD", run(env, "read_policy"))} | {"USD": 1.0}
        head, *reqs = table(run(env, "list_requests"))
        reqs = [dict(zip(head, r, strict=True)) for r in reqs]
        balances = {d: float(b) for d, b, _ in table(run(env, "get_department_budget"))[1:]}
        usd = {r["id"]: round(float(r["amount"]) * fx[r["currency"]] + 1e-9, 2) for r in reqs}
        for r in reqs:
            got = run(env, "usd_amount", request_id=r["id"])
            assert got.endswith(f"{usd[r['id']]:,.2f} USD") or f"= {usd[r['id']]:,.2f} USD " in got, got
            same = [x["id"] for x in reqs if x["department"] == r["department"] and x["vendor_tax_id"] == r["vendor_tax_id"]]
            got = run(env, "vendor_requests", department=r["department"], vendor_tax_id=r["vendor_tax_id"])
            assert f"{round(sum(usd[i] for i in same) + 1e-9, 2):,.2f} USD in total" in got
            assert re.findall(r"- (PR-\d+)", got) == same
        for dept, balance in balances.items():
            mine = [r["id"] for r in reqs if r["department"] == dept]
            for ids in (mine, mine[:1], []):
                left = round(balance - round(sum(usd[i] for i in ids) + 1e-9, 2) + 1e-9, 2)
                assert run(env, "remaining_budget", department=dept, request_ids=ids).endswith(f"= {left:,.2f} USD left")


def test_stock_helpers_equal_the_hand_computation():
    fam = get_family("stock")
    for inst in small_val("stock"):
        env = fam.make_env(inst)
        head, *products = table(run(env, "list_products"))
        for p in (dict(zip(head, r, strict=True)) for r in products):
            avail = int(p["on_hand"]) - int(p["reserved"])
            to_par = max(0, int(p["par_level"]) - avail)
            order = math.ceil(to_par / int(p["case_pack"])) * int(p["case_pack"])
            got = run(env, "stock_position", sku=p["sku"])
            assert f"= {avail} available" in got and f"{to_par} units to par" in got, got
            assert f": {order} units rounded up" in got and (f"{avail} is below it" in got) == (avail < int(p["threshold"]))
        w = fam.world(inst.seed, inst.params)
        sheet = table(run(env, "read_sheet", sheet="Stock Alert"), "")
        cols = sheet[0][1:]
        open_skus = [r[1:][cols.index("SKU")] for r in sheet[1:] if r[1:][cols.index("Status")] == "open"]
        assert re.findall(r"([A-Z]{2}-\d+) \(row \d+\)", run(env, "open_alerts")) == open_skus
        values = {c: f"v{i}" for i, c in enumerate(cols)}
        assert json.loads(run(env, "sheet_row", sheet="Stock Alert", values=values).split("  (")[0]) == [values[c] for c in cols]
        template = run(env, "read_files", paths=[w.template_path]).split("\n", 1)[1]
        fill = {"sku": "AB-1", "product": "Mug", "available": "3", "threshold": "9", "reorder_qty": "12",
                "supplier": "S", "manager_name": "N", "shop": "Shop"}  # fmt: skip
        filled = re.sub(r"\{\{(\w+)\}\}", lambda m, fill=fill: fill[m.group(1)], template)
        subject, _, body = filled.partition("\n")
        got = run(env, "fill_template", path=w.template_path, values=fill)
        assert got == f"subject: {subject.removeprefix('Subject:').strip()}\nbody:\n{body.strip()}", got


def test_website_helpers_equal_the_hand_computation():
    fam = get_family("website")
    for inst in small_val("website"):
        env = fam.make_env(inst)
        pages = {r[1]: r for r in table(run(env, "list_pages"))[1:]}  # path -> id, path, title, status, ...
        redirects = {f: t for f, t, _ in table(run(env, "list_redirects"))[1:]}
        w = fam.world(inst.seed, inst.params)
        for start in [*redirects, *(r[1] for r in w.report), *pages]:
            cur, hops = start, 0
            while cur in redirects and hops < 20:
                cur, hops = redirects[cur], hops + 1
            got = run(env, "resolve_path", path=start)
            where = "no page" if cur not in pages else f"a {'published' if pages[cur][3] == 'published' else 'draft'} page"
            assert got.endswith(where) or f": {where} (id {pages[cur][0]}," in got, got
            assert (f"-> {cur} (" in got) if hops else got.startswith(f"{start} is not redirected"), got
        for title in {r[2] for r in pages.values()}:
            assert re.findall(r"^(\d+) \| ", run(env, "find_pages", title=title), re.MULTILINE) == sorted(
                (r[0] for r in pages.values() if r[2].lower() == title.lower()), key=int)
        bodies = {p: run(env, "get_page", path=p).split("\nbody:\n", 1)[1] for p in pages}
        menus = {m: json.loads(run(env, "get_menu", menu=m)) for m in ("main", "footer")}
        for path in pages:
            below = sorted(p for p in pages if p.startswith(path.rstrip("/") + "/") and p != path)
            assert run(env, "page_tree", path=path).endswith(": " + (", ".join(below) or "none"))
            got = run(env, "links_to", path=path)
            linking = sorted(p for p, b in bodies.items() if f"]({path})" in b)
            items = [f"{m}: {n['label']!r}" for m, its in menus.items() for it in its
                     for n in (it, *it["children"]) if n["target"] == path]  # fmt: skip
            assert f"page bodies: {', '.join(linking) or 'none'}" in got
            assert f"menu items: {', '.join(items) or 'none'}" in got
            assert got.endswith(f"redirects with this target: {', '.join(sorted(f for f, t in redirects.items() if t == path)) or 'none'}")


def test_browser_helpers_equal_the_hand_computation():
    fam = get_family("browser")
    for inst in small_val("browser"):
        env = fam.make_env(inst)
        run(env, "goto", url="/admin/orders")
        grid = re.findall(r"row: (\d{9}) \| ([^|]+) \| ([^|]+) \| (\$[\d,.]+) \| ([^|]+) \| \[link \"View\" #order-(\d+)-view",
                          run(env, "read_page"))
        for number, placed, name, total, status, eid in grid:
            got = run(env, "find_order", order_number=f"#{number}")
            assert got == (f"order #{number}: entity id {eid}, admin page /admin/orders/{eid}; placed {placed.strip()}, "
                           f"status {status.strip()}, bill-to {name.strip()}, grand total {total}")
        run(env, "goto", url="/admin/customers")
        customers = re.findall(r"row: (\d+) \| ([^|]+) \| ([^|]+) \| (\d+) \|", run(env, "read_page"))
        for cid, name, email, n_orders in customers:
            got = run(env, "find_customers", query=email.strip())
            assert f"{cid} | {name.strip()} | {email.strip()} | /admin/customers/{cid} | {n_orders}" in got
            run(env, "goto", url=f"/admin/customers/{cid}")
            mine = re.findall(r"row: (\d{9}) \| ([^|]+) \| ([^|]+) \| (\$[\d,.]+) \|", run(env, "read_page"))
            got = run(env, "latest_order", customer_id=int(cid))
            if mine:  # the customer page lists the most recent order first
                number, placed, status, total = max(mine, key=lambda r: r[1])
                assert got.endswith(f"is #{number}, placed {placed.strip()}, status {status.strip()}, grand total {total}")
        run(env, "goto", url="/forum")
        for name, href in re.findall(r"\[link \"([^\"]+)\" #forum-\w+ href=(/f/\w+)\]", run(env, "read_page")):
            assert run(env, "forum_form", forum=name).endswith(f"new-post form at {href}/submit")


@pytest.mark.parametrize("name", SMALL_LEVEL_FAMILIES)
def test_helper_tools_change_nothing(name):
    """Calling every helper leaves the instance's grade as it was (they compute; they never act)."""
    fam = get_family(name)
    for inst in small_val(name, n=10):
        env, fresh = fam.make_env(inst), fam.make_env(inst)
        for tool in optional_tools(name):
            for args in _plausible_args(name, tool["name"], fam.world(inst.seed, inst.params)):
                env.call(tool["impl"], args)
        assert fam.check(env) == fam.check(fresh)
        done = solve(fam, inst, fam.full_knowledge())
        for tool in optional_tools(name):
            for args in _plausible_args(name, tool["name"], fam.world(inst.seed, inst.params)):
                done.call(tool["impl"], args)
        assert fam.check(done).passed


def _plausible_args(family: str, tool: str, w) -> list[dict]:
    """Valid arguments for each helper tool of an instance (what the hand-computation tests call)."""
    if family == "iot":
        cells = [{"machine": m, "sensor": s} for m in w.machines for s in w.sensors]
        return cells if tool == "applicable_range" else [{**c, "min": 0, "max": 1, "min_length": 1} for c in cells]
    if family == "payroll":
        e = w.employees[0]
        return {"week_hours": [{"employee_id": e.id, "period": w.periods[0], "daily_limit": 8}],
                "gross_pay": [{"rate": 20, "regular_hours": 40, "overtime_hours": 1}],
                "net_pay": [{"employee_id": e.id, "gross": 1000}],
                "rate_on": [{"employee_id": e.id, "date": w.periods[0]}]}[tool]  # fmt: skip
    if family == "budget":
        r = w.requests[0]
        return {"usd_amount": [{"request_id": r.id}],
                "remaining_budget": [{"department": r.department, "request_ids": [r.id]}],
                "vendor_requests": [{"department": r.department, "vendor_tax_id": r.vendor_tax_id}]}[tool]  # fmt: skip
    if family == "stock":
        return {"stock_position": [{"sku": p.sku} for p in w.products], "open_alerts": [{}],
                "sheet_row": [{"sheet": "Stock Alert", "values": {c: 1 for c in w.header}}],
                "fill_template": [{"path": w.template_path, "values": {"sku": "X"}}]}[tool]  # fmt: skip
    if family == "website":
        paths = [w.path(p.id) for p in w.pages]
        return [{"title": p.title} for p in w.pages] if tool == "find_pages" else [{"path": p} for p in paths]
    return {"find_order": [{"order_number": o.number} for o in w.orders],
            "find_customers": [{"query": c.email} for c in w.customers],
            "latest_order": [{"customer_id": c.id} for c in w.customers],
            "forum_form": [{"forum": f.name} for f in w.forums]}[tool]  # fmt: skip
