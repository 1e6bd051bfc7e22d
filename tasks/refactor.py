"""Code refactoring: rename a function, extract a duplicated block, replace a deprecated API call.

Services: a generated small Python package with tests (an in-memory repository of files) behind
file tools (list, read, search, write, apply a unified diff), a test runner and finish. Every run of
code the agent wrote happens in `tasks.sandbox` (a fresh subprocess with time/memory limits, a temp
directory, no network). The checker reads the final repository, never the agent's words: AST checks
(old name gone, helper exists and is used, no duplicate block left, deprecated call gone, the package
imports only allowed modules) and the visible and hidden tests, run in the sandbox against the
agent's package with the checker's own copies of the tests (so deleting or editing tests cannot help;
the visible test files must also still hold their test functions).

Kinds (one per instance) and their traps, each present with a difficulty-dependent probability:
- rename `old` -> `new` across modules and tests. Traps: `__all__` lists the name as a string
  (fact `string_references`); a class in another module has a method of the same name, which must keep
  it (fact `method_namesake`).
- extract a copy-pasted block into `helper(value)` in a new module. Traps: the block computes a value
  the caller uses afterwards, so the helper must return it and callers assign it (fact
  `block_outputs`); one more block differs in a single constant and must stay (fact `near_duplicate`).
- replace deprecated `datetime.utcnow()` with `datetime.now(timezone.utc)`. Trap: some call sites mix
  the value with naive datetimes or print its isoformat, which need `.replace(tzinfo=None)` (fact
  `aware_datetime`).
- any kind may also ask for a CHANGELOG.md line under `## Unreleased` (constraint `changelog`; the
  careless branch appends it at the end of the file).
The reference plan: list_files, search (literal, with context), [read CHANGELOG.md], apply_patch (one
multi-file unified diff), [write CHANGELOG.md], run_tests, finish. The size knob scales call sites,
modules and unrelated functions (size 8 overflows the weak model's context window).
"""

from __future__ import annotations

import ast
import difflib
import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from harness_store.values import Outcome, TaskInstance, ToolSpec
from tasks import sandbox
from tasks.base import (
    FINISH_TOOL,
    Constraint,
    DomainFact,
    Knowledge,
    PlanStep,
    TaskEnv,
    TaskFamily,
    ToolArgError,
    ToolResult,
)

KINDS = ("rename", "extract", "deprecated")
TRAP_RATE = {1: 0.2, 2: 0.3, 3: 0.5}
CHANGELOG = "CHANGELOG.md"
MAX_FILES = 300
MAX_FILE_CHARS = 200_000
MAX_SEARCH_CHARS = 60_000
PATH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}$")
SLOT = re.compile(r"<<(\w+)>>")
ENV_LIMITS = sandbox.Limits(wall_s=15.0, per_test_s=2.0, cpu_s=10, memory_mb=256)

PACKAGES = ("ledgerly", "shopkit", "fleetops", "clinicdesk", "payflow", "stockroom", "bookwise", "crmlite")
MODULES = (
    "pricing", "orders", "invoices", "customers", "reports", "shipping", "catalog", "accounts",
    "schedule", "audit", "exports", "notify", "metrics", "taxes", "returns", "vendors", "budgets", "loyalty",
)
NOUNS = (
    "cost", "fee", "score", "stock", "rate", "batch", "tier", "slot", "route", "claim", "margin", "volume",
    "weight", "discount", "credit", "refund", "parcel", "seat", "quota", "bonus",
)
VERBS = ("quote", "bill", "price", "summarise", "estimate", "settle", "charge", "tally", "book", "plan")
WORDS = ("invoice", "batch", "north", "express", "priority", "retail", "bulk", "summer", "annual", "member")
CLASSES = ("LineItem", "Voucher", "Parcel", "Booking", "Shipment", "Contract")

# (old, new) name pairs per rename target
TARGETS: dict[str, tuple[tuple[str, str], ...]] = {
    "money": (("calc_total", "compute_total"), ("apply_pct", "apply_percentage"), ("add_markup", "with_markup")),
    "text": (("norm_code", "normalise_code"), ("clean_sku", "canonical_sku"), ("fix_tag", "tidy_tag")),
    "units": (("qty_of", "quantity_of"), ("units_in", "count_units"), ("pack_sum", "total_units")),
}


# ----------------------------------------------------------------------------------------- world
@dataclass(frozen=True)
class RefactorWorld:
    kind: str
    pkg: str
    templates: dict[str, str]  # path -> text with <<slot>> markers (files of the original repository)
    new_templates: dict[str, str]  # files the refactoring creates
    visible_tests: tuple[str, ...]
    hidden_test: str  # template of the checker's hidden test file
    spec: dict[str, Any]  # kind-specific names and sites
    changelog: str  # the original CHANGELOG.md
    entry: str | None  # the changelog line the task asks for, if any
    pattern: str  # what the reference searches for
    context: int
    primary: str  # the file the instruction names
    task: str  # the kind-specific instruction text
    traps: tuple[str, ...]


def _render(text: str, values: dict[str, str]) -> str:
    return SLOT.sub(lambda m: values[m.group(1)], text)


def _lit(v: Any) -> str:
    return repr(v)


def _py(lines: list[str]) -> str:
    return "\n".join(lines).rstrip("\n") + "\n"


class _Names:
    def __init__(self, rng: random.Random, reserved: set[str]):
        self.rng = rng
        self.reserved = {r for r in reserved if len(r) > 5}  # never part of another name (search stays exact)
        self.used = set(reserved)

    def pick(self, make: Any) -> str:
        for attempt in range(10_000):
            name = make() if attempt < 60 else f"{make()}_{attempt}"
            if name not in self.used and not any(r in name or name in r for r in self.reserved):
                self.used.add(name)
                return name
        raise RuntimeError("name space exhausted")  # pragma: no cover

    def module(self) -> str:
        def make() -> str:
            base = self.rng.choice(MODULES)
            return base if base not in self.used else f"{base}{self.rng.randint(2, 99)}"

        return self.pick(make)

    def func(self, prefix: str | None = None) -> str:
        return self.pick(lambda: f"{prefix or self.rng.choice(VERBS)}_{self.rng.choice(NOUNS)}")


def _filler(rng: random.Random, names: _Names) -> tuple[str, str, list[str], list[str]]:
    """A small unrelated function: (name, source, visible asserts, hidden asserts)."""
    kind = rng.randrange(6)
    if kind == 0:
        name, k = names.func("scaled"), rng.choice([0.5, 0.9, 1.1, 1.25, 1.5, 2.0])
        src = f'def {name}(values: list[float]) -> float:\n    """Sum of the values scaled by {k}."""\n    return round(sum(values) * {k}, 2)\n'

        def case() -> str:
            vals = [round(rng.uniform(1, 90), 2) for _ in range(3)]
            return f"assert {name}({vals!r}) == {round(sum(vals) * k, 2)!r}"
    elif kind == 1:
        name, k = names.func("short"), rng.randint(3, 8)
        src = f'def {name}(text: str) -> str:\n    """The first {k} characters, upper-cased."""\n    return text.strip().upper()[:{k}]\n'

        def case() -> str:
            t = f"  {rng.choice(WORDS)} {rng.choice(WORDS)} "
            return f"assert {name}({t!r}) == {t.strip().upper()[:k]!r}"
    elif kind == 2:
        name, k = names.func("adjusted"), rng.randint(2, 9)
        src = f'def {name}(a: int, b: int) -> int:\n    """{k} times a, minus b."""\n    return a * {k} - b\n'

        def case() -> str:
            a, b = rng.randint(-50, 50), rng.randint(-50, 50)
            return f"assert {name}({a}, {b}) == {a * k - b}"
    elif kind == 3:
        name, k = names.func("keys_over"), rng.randint(3, 7)
        src = (
            f'def {name}(items: dict[str, int]) -> list[str]:\n    """Keys whose value is at least {k}, sorted."""\n'
            f"    return sorted(key for key, value in items.items() if value >= {k})\n"
        )

        def case() -> str:
            d = {w: rng.randint(0, 10) for w in rng.sample(WORDS, 4)}
            return f"assert {name}({d!r}) == {sorted(x for x, v in d.items() if v >= k)!r}"
    elif kind == 4:
        name, k = names.func("multiples"), rng.randint(2, 9)
        src = f'def {name}(n: int) -> list[int]:\n    """The first n multiples of {k}."""\n    return [i * {k} for i in range(n)]\n'

        def case() -> str:
            n = rng.randint(0, 6)
            return f"assert {name}({n}) == {[i * k for i in range(n)]!r}"
    else:
        name, sep = names.func("joined"), rng.choice(["-", "_", ".", "/"])
        src = f'def {name}(words: list[str]) -> str:\n    """Lower-case words joined by {sep!r}."""\n    return {sep!r}.join(word.lower() for word in words)\n'

        def case() -> str:
            ws = [rng.choice(WORDS).title() for _ in range(rng.randint(1, 3))]
            return f"assert {name}({ws!r}) == {sep.join(w.lower() for w in ws)!r}"
    return name, src, [case()], [case()]


def _module(doc: str, imports: list[str], bodies: list[str]) -> str:
    head = [f'"""{doc}"""', "", "from __future__ import annotations"]
    if imports:
        head += [""] + imports
    return "\n".join(head) + "\n\n\n" + "\n\n".join(b.rstrip("\n") + "\n" for b in bodies)


def _test_file(imports: list[str], cases: list[tuple[str, list[str]]]) -> str:
    out = list(imports) + [""]
    for name, lines in cases:
        out += ["", f"def {name}():"] + [f"    {ln}" for ln in lines] + [""]
    return _py(out)


@lru_cache(maxsize=512)
def _world(seed: int, params_json: str) -> RefactorWorld:
    params = json.loads(params_json)
    rng = random.Random(seed)
    difficulty, size = int(params["difficulty"]), max(1, int(params["size"]))
    rate = TRAP_RATE.get(difficulty, 0.5)
    kind = rng.choice(KINDS)
    pkg = rng.choice(PACKAGES)
    reserved = {pkg} | {n for pairs in TARGETS.values() for p in pairs for n in p}
    names = _Names(rng, reserved)
    build = {"rename": _build_rename, "extract": _build_extract, "deprecated": _build_deprecated}[kind]
    b = build(rng, names, pkg, size, rate)
    # unrelated modules that scale with size
    templates: dict[str, str] = dict(b["templates"])
    tests: dict[str, str] = dict(b["tests"])
    hidden: list[tuple[str, list[str]]] = list(b["hidden"])
    hidden_imports: list[str] = list(b["hidden_imports"])
    fill_mods = [m for m in b["modules"]] + [names.module() for _ in range(size)]
    for mod in fill_mods:
        fillers = [_filler(rng, names) for _ in range(2 * size)]
        path = f"{pkg}/{mod}.py"
        if path in templates:
            templates[path] = templates[path].rstrip("\n") + "\n\n\n" + "\n\n".join(f[1].rstrip("\n") + "\n" for f in fillers)
        else:
            templates[path] = _module(f"{mod.title()} helpers.", [], [f[1] for f in fillers])
        tpath = f"tests/test_{mod}.py"
        imp = f"from {pkg}.{mod} import {', '.join(f[0] for f in fillers)}"
        cases = [(f"test_{f[0]}", f[2]) for f in fillers]
        if tpath in tests:
            tests[tpath] = tests[tpath].replace("\n\n", f"\n{imp}\n\n", 1).rstrip("\n") + "\n" + _test_file([], cases)
        else:
            tests[tpath] = _test_file([imp], cases)
        hidden_imports.append(imp)
        hidden += [(f"test_hidden_{f[0]}", f[3]) for f in fillers]
    templates.setdefault(f"{pkg}/__init__.py", f'"""{pkg}: business helpers."""\n')
    changelog_asked = rng.random() < rate
    version = f"1.{rng.randint(2, 9)}.{rng.randint(0, 5)}"
    changelog = _py(
        [
            "# Changelog",
            "",
            "## Unreleased",
            "",
            f"## {version} - 2026-{rng.randint(1, 9):02d}-{rng.randint(10, 28)}",
            f"- Added `{rng.choice(sorted(names.used - reserved))}`.",
            "- Fixed rounding in reports.",
            "",
            "## 1.0.0 - 2025-11-03",
            "- Initial release.",
        ]
    )
    traps = tuple(b["traps"]) + (("changelog",) if changelog_asked else ())
    readme = f"# {pkg}\n\nSmall business helpers. Run the tests with `pytest tests/`.\n"
    templates = {**templates, **tests, "README.md": readme, CHANGELOG: changelog}
    hidden_file = _test_file(["import time", "from datetime import datetime", "", "import pytest", *sorted(set(hidden_imports))], hidden)
    return RefactorWorld(
        kind=kind,
        pkg=pkg,
        templates=dict(sorted(templates.items())),
        new_templates=b.get("new_templates", {}),
        visible_tests=tuple(sorted(tests)),
        hidden_test=hidden_file,
        spec=b["spec"],
        changelog=changelog,
        entry=b["entry"] if changelog_asked else None,
        pattern=b["pattern"],
        context=b["context"],
        primary=b["primary"],
        task=b["task"],
        traps=traps,
    )


# ------------------------------------------------------------------------------------------ rename
def _build_rename(rng: random.Random, names: _Names, pkg: str, size: int, rate: float) -> dict[str, Any]:
    target = rng.choice(sorted(TARGETS))
    old, new = rng.choice(TARGETS[target])
    has_all = rng.random() < rate
    namesake = rng.random() < rate
    mod_a = names.module()
    callers = [(names.module(), [names.func() for _ in range(size)]) for _ in range(1 + size)]
    c = rng.choice([5, 7, 12, 20])
    if target == "money":
        sig, doc, body = "amount: float, pct: float) -> float", "The amount increased by `pct` percent.", "return round(amount * (1 + pct / 100), 2)"

        def fn(a: float, p: float) -> float:
            return round(a * (1 + p / 100), 2)

        def fcase(f: str) -> str:
            a, p = round(rng.uniform(1, 500), 2), rng.choice([5.0, 8.0, 12.5, 19.0])
            return f"assert {f}({a!r}, {p!r}) == {fn(a, p)!r}"

        csrc = "prices: list[float]) -> float:\n    \"\"\"Total of the prices with {c}% added.\"\"\"\n    return <<fn>>(sum(prices), {c})"

        def ccase(f: str) -> str:
            ps = [round(rng.uniform(1, 90), 2) for _ in range(3)]
            return f"assert {f}({ps!r}) == {fn(sum(ps), c)!r}"
    elif target == "text":
        sig, doc, body = "code: str) -> str", "Upper-case code with single dashes between words.", 'return "-".join(code.strip().upper().split())'

        def fn_t(s: str) -> str:
            return "-".join(s.strip().upper().split())

        def fcase(f: str) -> str:
            s = f" {rng.choice(WORDS)}  {rng.choice(WORDS)} {rng.randint(1, 99)}"
            return f"assert {f}({s!r}) == {fn_t(s)!r}"

        csrc = "codes: list[str]) -> list[str]:\n    \"\"\"Normalised codes, skipping blank entries.\"\"\"\n    return [<<fn>>(code) for code in codes if code.strip()]"

        def ccase(f: str) -> str:
            cs = [f"{rng.choice(WORDS)} {rng.randint(1, 9)}", "  ", f" {rng.choice(WORDS)}"]
            return f"assert {f}({cs!r}) == {[fn_t(x) for x in cs if x.strip()]!r}"
    else:
        sig, doc, body = "packs: int, per_pack: int) -> int", "Units in `packs` packs (negative counts as zero).", "return max(0, packs) * per_pack"

        def fn_u(p: int, q: int) -> int:
            return max(0, p) * q

        def fcase(f: str) -> str:
            p, q = rng.randint(-3, 40), rng.randint(1, 24)
            return f"assert {f}({p}, {q}) == {fn_u(p, q)}"

        csrc = "orders: dict[str, int]) -> int:\n    \"\"\"Units across all orders at {c} per pack.\"\"\"\n    return sum(<<fn>>(n, {c}) for n in orders.values())"

        def ccase(f: str) -> str:
            d = {w: rng.randint(-2, 30) for w in rng.sample(WORDS, 3)}
            return f"assert {f}({d!r}) == {sum(fn_u(n, c) for n in d.values())}"

    templates: dict[str, str] = {}
    tests: dict[str, str] = {}
    hidden: list[tuple[str, list[str]]] = []
    hidden_imports: list[str] = []
    templates[f"{pkg}/{mod_a}.py"] = _module(
        f"{mod_a.title()} rules.", [], [f'def <<fn>>({sig}:\n    """{doc}"""\n    {body}\n']
    )
    tests[f"tests/test_{mod_a}.py"] = _test_file(
        [f"from {pkg}.{mod_a} import <<fn>>"], [("test_<<fn>>", [fcase("<<fn>>"), fcase("<<fn>>")])]
    )
    hidden_imports.append(f"from {pkg}.{mod_a} import <<fn>>")
    hidden.append(("test_hidden_<<fn>>", [fcase("<<fn>>")]))
    for mod, funcs in callers:
        templates[f"{pkg}/{mod}.py"] = _module(
            f"{mod.title()} calculations.",
            [f"from {pkg}.{mod_a} import <<fn>>"],
            [f"def {caller}({csrc.format(c=c)}\n" for caller in funcs],
        )
        tests[f"tests/test_{mod}.py"] = _test_file(
            [f"from {pkg}.{mod} import {', '.join(funcs)}"], [(f"test_{caller}", [ccase(caller)]) for caller in funcs]
        )
        hidden_imports.append(f"from {pkg}.{mod} import {', '.join(funcs)}")
        hidden += [(f"test_hidden_{caller}", [ccase(caller), ccase(caller)]) for caller in funcs]
    init = [f'"""{pkg}: business helpers."""', "", f"from {pkg}.{mod_a} import <<fn>>"]
    if has_all:
        init += ["", '__all__ = ["<<fn_str>>"]']
        hidden.append(
            ("test_hidden_public_names", [f"import {pkg}", f"for name in {pkg}.__all__:", f"    assert hasattr({pkg}, name), name"])
        )
    hidden.append(("test_hidden_reexport", [f"import {pkg}", f"assert {pkg}.<<fn>> is <<fn>>"]))
    templates[f"{pkg}/__init__.py"] = _py(init)
    modules = [mod_a] + [m for m, _ in callers]
    if namesake:
        mod_c, cls, user = names.module(), rng.choice(CLASSES), names.func()
        k = rng.choice([2, 3, 4])
        templates[f"{pkg}/{mod_c}.py"] = _module(
            f"{mod_c.title()} records.",
            [],
            [
                (
                    f'class {cls}:\n    """One {cls.lower()} and its amount."""\n\n    def __init__(self, amount: float) -> None:\n'
                f"        self.amount = amount\n\n    def <<meth>>(self, factor: float) -> float:\n"
                f'        """This record\'s amount times `factor`."""\n        return round(self.amount * factor, 2)\n'
                ),
                (
                    f'def {user}(amounts: list[float]) -> float:\n    """Sum of the records, each scaled by {k}."""\n'
                f"    return round(sum({cls}(a).<<meth>>({k}) for a in amounts), 2)\n"
                ),
            ],
        )
        amt = round(rng.uniform(1, 50), 1)
        vals = [round(rng.uniform(1, 50), 1) for _ in range(3)]
        want = round(sum(round(a * k, 2) for a in vals), 2)
        tests[f"tests/test_{mod_c}.py"] = _test_file(
            [f"from {pkg}.{mod_c} import {cls}, {user}"],
            [(f"test_{cls.lower()}", [f"assert {cls}({amt!r}).<<meth>>(2) == {round(amt * 2, 2)!r}"]),
             (f"test_{user}", [f"assert {user}({vals!r}) == {want!r}"])],
        )
        hidden_imports.append(f"from {pkg}.{mod_c} import {cls}, {user}")
        hidden.append((f"test_hidden_{cls.lower()}_method", [f"assert {cls}(10.0).<<meth>>(3) == 30.0", f"assert {user}([1.0]) == {float(k)!r}"]))
        modules.append(mod_c)
    return {
        "templates": templates,
        "tests": tests,
        "hidden": hidden,
        "hidden_imports": hidden_imports,
        "modules": modules,
        "spec": {"old": old, "new": new, "module": f"{pkg}/{mod_a}.py"},
        "entry": f"- Renamed `{old}` to `{new}`.",
        "pattern": old,
        "context": 3,
        "primary": f"{pkg}/{mod_a}.py",
        "task": (
            f"In the repository of package `{pkg}`, rename the function `{old}` (defined in `{pkg}/{mod_a}.py`) to "
            f"`{new}` everywhere: its definition and every reference to it, the tests included. Behaviour must not "
            "change: the visible tests and further hidden tests must pass."
        ),
        "traps": (["all_list"] if has_all else []) + (["namesake"] if namesake else []),
    }


# ----------------------------------------------------------------------------------------- extract
def _validate_block(v: str, maxlen: int) -> list[str]:
    return [
        f"    if not isinstance({v}, str) or not {v}.strip():",
        '        raise ValueError("expected a non-empty string")',
        f"    if len({v}) > {maxlen}:",
        '        raise ValueError("value is too long")',
    ]


def _slug_block(v: str, out: str, sep: str, maxlen: int) -> list[str]:
    return [
        f"    {out} = {v}.strip().lower()",
        f'    {out} = re.sub(r"[^a-z0-9]+", "{sep}", {out}).strip("{sep}")',
        f"    {out} = {out}[:{maxlen}]",
    ]


def _slug(s: str, sep: str, maxlen: int) -> str:
    return re.sub(r"[^a-z0-9]+", sep, s.strip().lower()).strip(sep)[:maxlen]


VALIDATE_TAILS = (
    ("{v}.strip().title()", lambda s: s.strip().title()),
    ("{v}.strip().upper()", lambda s: s.strip().upper()),
    ('"#" + {v}.strip()', lambda s: "#" + s.strip()),
    ("{v}.strip()[::-1]", lambda s: s.strip()[::-1]),
)


def _build_extract(rng: random.Random, names: _Names, pkg: str, size: int, rate: float) -> dict[str, Any]:
    slug = rng.random() < rate  # the block computes a value the caller uses afterwards
    near = rng.random() < rate  # a block that looks the same but differs in one constant
    helper = names.pick(lambda: rng.choice(["check_text", "require_text", "validate_text"] if not slug else ["slugify", "make_slug", "to_slug"]))
    hmod = names.pick(lambda: rng.choice(["textutil", "_shared", "normalize", "common"]))
    maxlen = rng.choice([24, 32, 40])
    sep = rng.choice(["-", "_"])
    mods = [names.module() for _ in range(1 + size)]
    n_sites = len(mods) * size
    sites: list[dict[str, Any]] = []
    for i in range(n_sites + (1 if near else 0)):
        is_near = i == n_sites
        mod = mods[0] if is_near else mods[i // size]
        sites.append(
            {
                "name": names.func(),
                "module": f"{pkg}/{mod}.py",
                "mod": mod,
                "v": rng.choice(["name", "title", "label", "city", "handle", "text"]),
                "out": rng.choice(["slug", "key", "token", "ident"]),
                "near": is_near,
                "maxlen": maxlen + rng.choice([8, 16, 24]) if is_near and not slug else maxlen,
                "sep": ("_" if sep == "-" else "-") if is_near and slug else sep,
                "tail": rng.randrange(len(VALIDATE_TAILS)),
                "prefix": rng.choice(WORDS),
            }
        )
    templates: dict[str, str] = {}
    tests: dict[str, str] = {}
    hidden: list[tuple[str, list[str]]] = []
    hidden_imports: list[str] = []
    bodies: dict[str, list[str]] = {m: [] for m in mods}
    blocks: dict[str, str] = {}
    for i, s in enumerate(sites):
        v = s["v"]
        if slug:
            block = _slug_block(v, s["out"], s["sep"], s["maxlen"])
            tail = f'    return "{s["prefix"]}/" + {s["out"]}'
            doc = f"The {s['prefix']} path for `{v}`."
        else:
            block = _validate_block(v, s["maxlen"])
            tail = "    return " + VALIDATE_TAILS[s["tail"]][0].format(v=v)
            doc = f"The display form of `{v}`."
        blocks[f"blk{i}"] = "\n".join(block)
        bodies[s["mod"]].append(f'def {s["name"]}({v}: str) -> str:\n    """{doc}"""\n<<blk{i}>>\n{tail}\n')

        def result(x: str, s: dict[str, Any] = s) -> str:
            if slug:
                return f"{s['prefix']}/{_slug(x, s['sep'], s['maxlen'])}"
            return VALIDATE_TAILS[s["tail"]][1](x)

        f = s["name"]
        sample = f" {rng.choice(WORDS).title()}, {rng.choice(WORDS)} {rng.randint(1, 99)} "
        vis = [f"assert {f}({sample!r}) == {result(sample)!r}"]
        hid = [f"assert {f}({sample.upper()!r}) == {result(sample.upper())!r}"]
        if slug:
            long = " ".join(rng.choice(WORDS).title() for _ in range(9)) + "!"
            hid.append(f"assert {f}({long!r}) == {result(long)!r}")
        elif s["near"]:
            mid = "y" * (maxlen + 4)
            hid.append(f"assert {f}({mid!r}) == {result(mid)!r}")
        else:
            hid += ["with pytest.raises(ValueError):", f'    {f}("  ")', "with pytest.raises(ValueError):", f"    {f}({'x' * (maxlen + 1)!r})"]
        tpath = f"tests/test_{s['mod']}.py"
        tests.setdefault(tpath, _test_file([f"from {pkg}.{s['mod']} import <<names_{s['mod']}>>"], []))
        tests[tpath] += _test_file([], [(f"test_{f}", vis)])
        hidden_imports.append(f"from {pkg}.{s['mod']} import {f}")
        hidden.append((f"test_hidden_{f}", hid))
    for m in mods:
        tpath = f"tests/test_{m}.py"
        tests[tpath] = tests[tpath].replace(f"<<names_{m}>>", ", ".join(s["name"] for s in sites if s["mod"] == m))
        imports = ["import re", "<<imp_" + m + ">>"] if slug else ["<<imp_" + m + ">>"]
        src = _module(f"{m.title()} formatting.", imports, bodies[m]).replace(f"<<imp_{m}>>\n\n", f"<<imp_{m}>>\n")
        templates[f"{pkg}/{m}.py"] = src.replace(f"annotations\n\n<<imp_{m}>>", f"annotations\n<<imp_{m}>>")
    if slug:
        helper_src = _module(
            "Shared text helpers.",
            ["import re"],
            [
                f'def {helper}(value: str) -> <<rtype>>:\n    """Normalise `value` to a lower-case slug of at most {maxlen} characters."""\n'
                + "\n".join(_slug_block("value", "text", sep, maxlen))
                + "\n<<ret>>"
            ],
        )
        sample = f" {rng.choice(WORDS).title()} & {rng.choice(WORDS)} "
        hidden.append((f"test_hidden_{helper}", [f"assert {helper}({sample!r}) == {_slug(sample, sep, maxlen)!r}"]))
        desc = "slug normalisation"
    else:
        helper_src = _module(
            "Shared input checks.",
            [],
            [
                f'def {helper}(value: str) -> None:\n    """Raise ValueError unless `value` is a non-empty string of at most {maxlen} characters."""\n'
                + "\n".join(_validate_block("value", maxlen))
            ],
        )
        hidden.append(
            (f"test_hidden_{helper}", [f'assert {helper}("ok") is None', "with pytest.raises(ValueError):", f'    {helper}("")'])
        )
        desc = "input validation"
    hidden_imports.append(f"from {pkg}.{hmod} import {helper}")
    pattern = 're.sub(r"[^a-z0-9]+"' if slug else "isinstance("
    return {
        "templates": templates,
        "new_templates": {f"{pkg}/{hmod}.py": helper_src},
        "tests": tests,
        "hidden": hidden,
        "hidden_imports": hidden_imports,
        "modules": mods,
        "spec": {
            "helper": helper,
            "hmod": f"{pkg}/{hmod}.py",
            "hmod_name": hmod,
            "slug": slug,
            "blocks": blocks,
            "sites": [{k: s[k] for k in ("name", "module", "mod", "v", "out", "near")} for s in sites],
            "block_len": 3 if slug else 2,
            "canon": "\n".join(_slug_block("value", "text", sep, maxlen) if slug else _validate_block("value", maxlen)),
        },
        "entry": f"- Extracted the duplicated {desc} into `{helper}`.",
        "pattern": pattern,
        "context": 4,
        "primary": f"{pkg}/{mods[0]}.py",
        "task": (
            f"Package `{pkg}` has the same {desc} block copy-pasted into several functions (search for `{pattern}`; "
            f"the first copy is in `{sites[0]['name']}` in `{pkg}/{mods[0]}.py`). Extract it into one helper function "
            f"`{helper}(value)` in a new module `{pkg}/{hmod}.py` and replace every copy of the block with a call to "
            "it. Behaviour must not change: the visible tests and further hidden tests must pass."
        ),
        "traps": (["outputs"] if slug else []) + (["near_dup"] if near else []),
    }


# -------------------------------------------------------------------------------------- deprecated
DT_SITES: dict[str, tuple[str, str, list[str], list[str], bool]] = {
    # key: (name base, source after the def name, visible asserts, hidden asserts, needs timedelta)
    "today": (
        "today",
        '() -> str:\n    """Today\'s UTC date as YYYY-MM-DD."""\n    return <<now>>.strftime("%Y-%m-%d")',
        ['assert len({f}()) == 10 and {f}()[4] == "-"'],
        ['assert {f}() == time.strftime("%Y-%m-%d", time.gmtime())'],
        False,
    ),
    "year": (
        "year_reached",
        '(year: int) -> bool:\n    """Whether the current UTC year is at least `year`."""\n    return <<now>>.year >= year',
        ["assert {f}(2000) is True"],
        ["assert {f}(9999) is False"],
        False,
    ),
    "due": (
        "due_date",
        '(days: int) -> str:\n    """The UTC date `days` days from now."""\n    return (<<now>> + timedelta(days=days)).strftime("%Y-%m-%d")',
        ["assert len({f}(3)) == 10"],
        ['assert {f}(0) == time.strftime("%Y-%m-%d", time.gmtime())'],
        True,
    ),
    "hour": (
        "hour_now",
        '() -> int:\n    """The current UTC hour."""\n    return <<now>>.hour',
        ["assert 0 <= {f}() < 24"],
        ["h = time.gmtime().tm_hour", "assert {f}() in (h, (h + 1) % 24)"],
        False,
    ),
}
DT_TRAPS: dict[str, tuple[str, str, list[str], list[str], bool]] = {
    "age": (
        "age_seconds",
        '(created: datetime) -> float:\n    """Seconds since `created`, a naive UTC datetime."""\n    return (<<now>> - created).total_seconds()',
        ["assert {f}(datetime(2000, 1, 1)) > 0"],
        ["assert {f}(datetime(2020, 1, 1)) > 10**8"],
        False,
    ),
    "iso": (
        "stamp",
        '() -> str:\n    """The current UTC time, ISO-8601 without offset."""\n    return <<now>>.isoformat(timespec="seconds")',
        ["assert len({f}()) == 19"],
        ['assert "+" not in {f}() and {f}()[10] == "T"'],
        False,
    ),
    "overdue": (
        "overdue",
        '(deadline: datetime) -> bool:\n    """Whether the naive UTC `deadline` has passed."""\n    return <<now>> > deadline',
        ["assert {f}(datetime(2000, 1, 1)) is True"],
        ["assert {f}(datetime(9999, 1, 1)) is False"],
        False,
    ),
}


def _build_deprecated(rng: random.Random, names: _Names, pkg: str, size: int, rate: float) -> dict[str, Any]:
    naive = rng.random() < rate
    n = 2 + size * size
    n_traps = (1 + (size - 1) // 2) if naive else 0
    mods = [names.module() for _ in range(max(2, (n + 1) // 2))]
    kinds = [("site", k) for k in rng.choices(sorted(DT_SITES), k=n - n_traps)] + [
        ("trap", k) for k in rng.choices(sorted(DT_TRAPS), k=n_traps)
    ]
    rng.shuffle(kinds)
    sites: list[dict[str, Any]] = []
    bodies: dict[str, list[str]] = {m: [] for m in mods}
    tdelta: dict[str, bool] = {m: False for m in mods}
    cases: dict[str, list[tuple[str, list[str]]]] = {m: [] for m in mods}
    hidden: list[tuple[str, list[str]]] = []
    hidden_imports: list[str] = []
    for i, (what, key) in enumerate(kinds):
        base, src, vis, hid, needs_td = (DT_SITES if what == "site" else DT_TRAPS)[key]
        mod = mods[i % len(mods)]
        f = names.pick(lambda base=base: f"{rng.choice(NOUNS)}_{base}")
        sites.append({"name": f, "module": f"{pkg}/{mod}.py", "trap": what == "trap"})
        bodies[mod].append(f"def {f}{src.replace('<<now>>', f'<<now{i}>>')}\n")
        tdelta[mod] |= needs_td
        cases[mod].append((f"test_{f}", [x.format(f=f) for x in vis]))
        hidden.append((f"test_hidden_{f}", [x.format(f=f) for x in hid]))
        hidden_imports.append(f"from {pkg}.{mod} import {f}")
    templates: dict[str, str] = {}
    tests: dict[str, str] = {}
    dt_names: dict[str, str] = {}
    for m in mods:
        dt_names[m] = "datetime, timedelta" if tdelta[m] else "datetime"
        templates[f"{pkg}/{m}.py"] = _module(f"{m.title()} dates.", [f"from datetime import <<dt_{m}>>"], bodies[m])
        fnames = ", ".join(s["name"] for s in sites if s["module"] == f"{pkg}/{m}.py")
        tests[f"tests/test_{m}.py"] = _test_file(
            ["from datetime import datetime", "", f"from {pkg}.{m} import {fnames}"], cases[m]
        )
    return {
        "templates": templates,
        "tests": tests,
        "hidden": hidden,
        "hidden_imports": hidden_imports,
        "modules": mods,
        "spec": {"sites": sites, "dt_names": dt_names, "mods": mods},
        "entry": "- Replaced the deprecated `datetime.utcnow()` calls.",
        "pattern": "datetime",
        "context": 2,
        "primary": f"{pkg}/{mods[0]}.py",
        "task": (
            f"`datetime.utcnow()` is deprecated. In package `{pkg}`, replace every call of it with the "
            "timezone-aware `datetime.now(timezone.utc)`. Behaviour must not change: the visible tests and "
            "further hidden tests must pass."
        ),
        "traps": ["naive_mix"] if naive else [],
    }


# ------------------------------------------------------------------------------------- refactoring
def _values(w: RefactorWorld, k: Knowledge | None) -> dict[str, str]:
    """Slot values of the original repository (k None) or of the refactoring an agent with `k` makes."""
    s = w.spec
    if w.kind == "rename":
        if k is None:
            return {"fn": s["old"], "fn_str": s["old"], "meth": s["old"]}
        return {
            "fn": s["new"],
            "fn_str": s["new"] if "string_references" in k.facts else s["old"],
            "meth": s["old"] if "method_namesake" in k.facts else s["new"],
        }
    if w.kind == "extract":
        vals: dict[str, str] = {}
        replaced_mods: set[str] = set()
        for i, site in enumerate(s["sites"]):
            replace_it = k is not None and (not site["near"] or "near_duplicate" not in k.facts)
            if not replace_it:
                vals[f"blk{i}"] = s["blocks"][f"blk{i}"]
                continue
            replaced_mods.add(site["mod"])
            if s["slug"] and "block_outputs" in k.facts:  # type: ignore[union-attr]
                vals[f"blk{i}"] = f"    {site['out']} = {s['helper']}({site['v']})"
            else:
                vals[f"blk{i}"] = f"    {s['helper']}({site['v']})"
        for site in s["sites"]:
            m = site["mod"]
            lead = "" if s["slug"] else "\n"  # validation modules have no other import above the slot
            vals[f"imp_{m}"] = f"{lead}from {w.pkg}.{s['hmod_name']} import {s['helper']}\n" if m in replaced_mods else ""
        outputs = k is not None and "block_outputs" in k.facts
        vals["rtype"] = "str" if outputs else "None"
        vals["ret"] = "    return text" if outputs else ""
        return vals
    vals = {}
    for m, names in s["dt_names"].items():
        vals[f"dt_{m}"] = names if k is None else f"{names}, timezone"
    for i, site in enumerate(s["sites"]):
        if k is None:
            vals[f"now{i}"] = "datetime.utcnow()"
        elif site["trap"] and "aware_datetime" in k.facts:
            vals[f"now{i}"] = "datetime.now(timezone.utc).replace(tzinfo=None)"
        else:
            vals[f"now{i}"] = "datetime.now(timezone.utc)"
    return vals


def original_files(w: RefactorWorld) -> dict[str, str]:
    vals = _values(w, None)
    return {p: _render(t, vals) for p, t in w.templates.items()}


def refactored_files(w: RefactorWorld, k: Knowledge) -> dict[str, str]:
    """The whole repository after the refactoring an agent with knowledge `k` makes."""
    vals = _values(w, k)
    files = {p: _render(t, vals) for p, t in w.templates.items()}
    files.update({p: _render(t, vals) for p, t in w.new_templates.items()})
    if 1 in k.cut:  # the search results were not visible: only the file the instruction names is changed
        before = original_files(w)
        files = {p: (c if p == w.primary else before[p]) for p, c in files.items() if p in before}
    return files


def canonical_tests(w: RefactorWorld) -> dict[str, str]:
    """The checker's own copies: the visible tests as a correct refactoring leaves them, and the hidden tests."""
    vals = _values(w, FULL)
    out = {p: _render(w.templates[p], vals) for p in w.visible_tests}
    out["tests/test_hidden_checks.py"] = _render(w.hidden_test, vals)
    return out


def make_patch(before: dict[str, str], after: dict[str, str]) -> str:
    parts = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        parts.extend(
            difflib.unified_diff(
                (a or "").splitlines(keepends=True),
                (b or "").splitlines(keepends=True),
                "/dev/null" if a is None else f"a/{path}",
                "/dev/null" if b is None else f"b/{path}",
            )
        )
    return "".join(parts)


def changelog_after(w: RefactorWorld, k: Knowledge, cut: bool) -> str:
    assert w.entry is not None
    if cut:  # the file was not visible: written from scratch
        return f"# Changelog\n\n## Unreleased\n\n{w.entry}\n"
    if "changelog" in k.constraints:
        return w.changelog.replace("## Unreleased\n", f"## Unreleased\n\n{w.entry}\n", 1)
    return w.changelog + f"{w.entry}\n"


# ------------------------------------------------------------------------------------- unified diff
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_prefix(path: str) -> str | None:
    path = path.split("\t")[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return path


def apply_patch(files: dict[str, str], patch: str) -> tuple[dict[str, str], list[str]]:
    """Apply a (multi-file) unified diff atomically. Returns (new files, changed paths); raises
    ToolArgError naming the first hunk that does not apply."""
    lines = patch.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = dict(files)
    changed: list[str] = []
    i = 0
    n_files = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        src, dst = _strip_prefix(lines[i][4:]), _strip_prefix(lines[i + 1][4:])
        i += 2
        n_files += 1
        path = dst if dst is not None else src
        if path is None:
            raise ToolArgError("a file header names /dev/null on both sides")
        _check_path(path)
        if src is None:
            if path in out:
                raise ToolArgError(f"{path} already exists (the patch creates it)")
            text = ""
        else:
            if src not in out:
                raise ToolArgError(f"{src}: no such file")
            text = out[src]
        cur = text.split("\n")
        ends_nl = text.endswith("\n")
        if ends_nl:
            cur.pop()
        elif text == "":
            cur = []
        offset = 0
        hunk_no = 0
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise ToolArgError(f"bad hunk header {lines[i][:80]!r}")
            hunk_no += 1
            old_start, old_n = int(m.group(1)), int(m.group(2) or 1)
            new_n = int(m.group(4) or 1)
            i += 1
            old_seg: list[str] = []
            new_seg: list[str] = []
            seen_old = seen_new = 0
            while i < len(lines):
                ln = lines[i]
                if ln.startswith("@@") or (ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
                    break
                if seen_old >= old_n and seen_new >= new_n and not ln.startswith(("+", "-", " ")):
                    break
                if ln.startswith("\\"):
                    i += 1
                    continue
                tag, body = (ln[:1], ln[1:]) if ln else (" ", "")
                if tag == " ":
                    old_seg.append(body)
                    new_seg.append(body)
                    seen_old += 1
                    seen_new += 1
                elif tag == "-":
                    old_seg.append(body)
                    seen_old += 1
                elif tag == "+":
                    new_seg.append(body)
                    seen_new += 1
                else:
                    break
                i += 1
            at = old_start - 1 + offset if old_seg else old_start + offset
            pos = _find(cur, old_seg, at)
            if pos is None:
                raise ToolArgError(
                    f"hunk {hunk_no} for {path} does not apply: its context/removed lines do not match the file "
                    f"near line {old_start}"
                )
            cur[pos : pos + len(old_seg)] = new_seg
            offset += len(new_seg) - len(old_seg)
        if dst is None:
            out.pop(path, None)
        else:
            if src is not None and src != dst:
                out.pop(src, None)
            out[path] = "\n".join(cur) + ("\n" if cur and (ends_nl or src is None) else "")
        changed.append(path)
    if not n_files:
        raise ToolArgError("no file headers (--- a/path / +++ b/path) found in the patch")
    return out, changed


def _find(cur: list[str], seg: list[str], at: int) -> int | None:
    if not seg:
        return min(max(at, 0), len(cur))
    n = len(seg)
    order = sorted(range(len(cur) - n + 1), key=lambda p: abs(p - at))
    for p in order:
        if cur[p : p + n] == seg:
            return p
    stripped = [s.rstrip() for s in seg]
    for p in order:
        if [c.rstrip() for c in cur[p : p + n]] == stripped:
            return p
    return None


def _check_path(path: Any) -> str:
    if not isinstance(path, str) or not PATH_RE.match(path) or ".." in path.split("/") or "//" in path:
        raise ToolArgError(f"bad path {str(path)[:80]!r}: use a relative path like pkg/module.py")
    return path


# ------------------------------------------------------------------------------------------ checks
ALLOWED_IMPORTS = frozenset(
    {"__future__", "re", "math", "json", "datetime", "decimal", "fractions", "statistics", "string", "textwrap",
     "itertools", "functools", "collections", "dataclasses", "typing", "enum", "operator", "abc"}
)
BANNED_CALLS = frozenset(
    {"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr", "delattr", "open",
     "input", "breakpoint", "exit", "quit", "memoryview"}
)
BANNED_ATTRS = frozenset(
    {"sys", "os", "modules", "builtins", "subprocess", "socket", "gc", "inspect", "importlib", "f_globals",
     "f_locals", "f_back", "gi_frame", "cr_frame", "tb_frame"}
)


def safety_problems(tree: ast.AST, pkg: str) -> list[str]:
    """Package code may only import allowed stdlib modules and its own package, and may not reach
    the interpreter's internals: this keeps the checker's test run honest (defence in depth on top of
    the sandbox, which protects the host)."""
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [] if node.level else [node.module or ""]
        else:
            mods = []
        for m in mods:
            top = m.split(".")[0]
            if top not in ALLOWED_IMPORTS and top != pkg:
                bad.append(f"imports {m}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BANNED_CALLS:
            bad.append(f"calls {node.func.id}()")
        if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in BANNED_ATTRS):
            bad.append(f"uses attribute .{node.attr}")
        if isinstance(node, ast.Name) and node.id.startswith("__") and node.id not in ("__all__", "__name__", "__doc__"):
            bad.append(f"uses {node.id}")
    return bad


def _norm_dump(stmts: list[ast.stmt]) -> str:
    class N(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.copy_location(ast.Name(id="_", ctx=ast.Load()), node)

    return "|".join(ast.dump(N().visit(ast.parse(ast.unparse(s)))) for s in stmts)


def _functions(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in getattr(tree, "body", []) if isinstance(n, ast.FunctionDef)}


def _calls(fn: ast.AST, name: str) -> bool:
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name):
                return True
    return False


def ast_checks(w: RefactorWorld, trees: dict[str, ast.AST]) -> dict[str, bool]:
    s = w.spec
    pkg_trees = {p: t for p, t in trees.items() if p.startswith(f"{w.pkg}/")}
    checks: dict[str, bool] = {}
    if w.kind == "rename":
        old, new = s["old"], s["new"]
        checks["new name defined"] = new in _functions(trees.get(s["module"], ast.Module(body=[], type_ignores=[])))
        stale = []
        for p, t in trees.items():
            for n in ast.walk(t):
                if (
                    (isinstance(n, ast.Name) and n.id == old)
                    or (isinstance(n, ast.alias) and old in (n.name, n.asname))
                    or (isinstance(n, ast.Constant) and n.value == old)
                    or (isinstance(n, ast.FunctionDef) and n.name == old and n in getattr(t, "body", []))
                ):
                    stale.append(p)
        checks["old name gone"] = not stale
    elif w.kind == "extract":
        helper = s["helper"]
        hfns = _functions(trees[s["hmod"]]) if s["hmod"] in trees else {}
        checks["helper exists"] = helper in hfns
        used = True
        for site in s["sites"]:
            if site["near"]:
                continue
            fn = _functions(trees.get(site["module"], ast.Module(body=[], type_ignores=[]))).get(site["name"])
            used &= fn is not None and _calls(fn, helper)
        checks["helper used at every copy"] = used
        canon = _norm_dump(ast.parse(s["canon"].replace("\n    ", "\n").strip()).body)
        k = s["block_len"]
        dup = False
        for p, t in pkg_trees.items():
            for fn in ast.walk(t):
                if not isinstance(fn, ast.FunctionDef) or (p == s["hmod"] and fn.name == helper):
                    continue
                body = fn.body
                for j in range(len(body) - k + 1):
                    if _norm_dump(body[j : j + k]) == canon:
                        dup = True
        checks["no duplicate block left"] = not dup
    else:
        stale = [p for p, t in trees.items() for n in ast.walk(t) if isinstance(n, ast.Attribute) and n.attr == "utcnow"]
        checks["deprecated call gone"] = not stale
        ok = True
        for site in s["sites"]:
            fn = _functions(trees.get(site["module"], ast.Module(body=[], type_ignores=[]))).get(site["name"])
            ok &= fn is not None and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "now" and (n.args or n.keywords)
                for n in ast.walk(fn)
            )
        checks["aware API used at every call site"] = ok
    return checks


def _test_names(tree: ast.AST, w: RefactorWorld) -> set[str]:
    names = {n.name for n in getattr(tree, "body", []) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}
    if w.kind == "rename":  # a test named after the function may keep or change that part of its name
        names = {n.replace(w.spec["old"], w.spec["new"]) for n in names}
    return names


def tests_kept(w: RefactorWorld, trees: dict[str, ast.AST]) -> bool:
    """Every visible test file still exists with (at least) its test functions: deleting or gutting
    tests is not a refactoring."""
    canon = canonical_tests(w)
    return all(p in trees and _test_names(ast.parse(canon[p]), w) <= _test_names(trees[p], w) for p in w.visible_tests)


def changelog_ok(w: RefactorWorld, text: str | None) -> bool:
    if w.entry is None:
        return True
    if text is None:
        return False
    lines = [ln.rstrip() for ln in text.split("\n")]
    it = iter(lines)
    if not all(any(x == want for x in it) for want in (ln.rstrip() for ln in w.changelog.split("\n") if ln.strip())):
        return False  # an original line was lost or reordered
    try:
        u = lines.index("## Unreleased")
    except ValueError:
        return False
    end = next((j for j in range(u + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
    return w.entry in lines[u + 1 : end]


# ------------------------------------------------------------------------------------------ family
FACTS = (
    DomainFact(
        "string_references",
        "Renaming a function includes its string references: names listed in `__all__` and other string "
        "literals that name it must be renamed too.",
        ("string references", "names listed in __all__", "__all__ entries"),
    ),
    DomainFact(
        "method_namesake",
        "Only references to the function itself are renamed: a method of the same name on a class is a "
        "different symbol and keeps its name (as do its calls).",
        ("method of the same name", "different symbol", "same-named method"),
    ),
    DomainFact(
        "near_duplicate",
        "A block that differs from the duplicated one in any constant (a limit, a separator) is not a copy: "
        "leave it in place instead of replacing it with the helper.",
        ("not a copy", "differs in any constant", "near-duplicate"),
    ),
    DomainFact(
        "block_outputs",
        "An extracted helper must return every value the block computes that the caller uses afterwards, and "
        "each caller must assign the returned value.",
        ("return every value", "assign the returned value", "values the block computes"),
    ),
    DomainFact(
        "aware_datetime",
        "`datetime.now(timezone.utc)` returns an aware datetime: comparing or subtracting it with naive "
        "datetimes raises TypeError and its isoformat() ends in +00:00. Where the code works with naive UTC "
        "values, use `datetime.now(timezone.utc).replace(tzinfo=None)`.",
        ("aware datetime", "replace(tzinfo=none)", "naive utc"),
    ),
)
KIND_FACTS = {
    "rename": ("string_references", "method_namesake"),
    "extract": ("near_duplicate", "block_outputs"),
    "deprecated": ("aware_datetime",),
}
FULL = Knowledge(frozenset(f.id for f in FACTS), frozenset({"changelog"}))


class RefactorFamily(TaskFamily):
    name = "refactor"
    title = "code refactoring"
    facts = FACTS
    constraints = (
        Constraint(
            "changelog",
            "When the task asks for a changelog entry, it goes under the `## Unreleased` heading, with every "
            "existing line kept.",
            ("exact location the task names", "under the unreleased heading", "changelog entry goes under"),
        ),
    )

    # ------------------------------------------------------------------ generation
    def world(self, seed: int, params: dict[str, Any]) -> RefactorWorld:
        return _world(seed, json.dumps(params, sort_keys=True))

    def instruction(self, world: RefactorWorld, instance_id: str) -> str:
        text = world.task
        if world.entry:
            text += f' Also record the change in {CHANGELOG}: add the line "{world.entry}" under the `## Unreleased` heading.'
        return text + " Then call finish."

    def make_env(self, instance: TaskInstance) -> RefactorEnv:
        return RefactorEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    # ------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return list(_plan(instance.seed, json.dumps(instance.params, sort_keys=True), knowledge))

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, RefactorEnv)
        w = env.world
        files = env.files
        if files == original_files(w):
            return Outcome(False, 0.0, {"reason": "the repository is unchanged", "traps": list(w.traps)})
        trees: dict[str, ast.AST] = {}
        syntax: list[str] = []
        for p, text in files.items():
            if p.endswith(".py"):
                try:
                    trees[p] = ast.parse(text)
                except (SyntaxError, ValueError) as e:
                    syntax.append(f"{p}: {e}")
        checks = {"code parses": not syntax}
        checks.update(ast_checks(w, trees))
        unsafe = [f"{p}: {b}" for p, t in trees.items() if p.startswith(f"{w.pkg}/") for b in safety_problems(t, w.pkg)]
        checks["package uses only allowed modules"] = not unsafe
        checks["visible tests kept"] = tests_kept(w, trees)
        checks["changelog entry"] = changelog_ok(w, files.get(CHANGELOG))
        detail: dict[str, Any] = {"traps": list(w.traps), "syntax": syntax[:5], "unsafe": unsafe[:5]}
        if all(checks.values()):
            tree = {p: c for p, c in files.items() if p.startswith(f"{w.pkg}/") and p.endswith(".py")}
            tree.update(canonical_tests(w))
            result = sandbox.run_tests(tree, sorted(p for p in tree if p.startswith("tests/")), ENV_LIMITS)
            checks["visible and hidden tests pass"] = result.all_passed
            detail["failed_tests"] = [t.id for t in result.tests if t.outcome != "passed"][:10]
            detail["sandbox"] = result.stopped
        else:
            checks["visible and hidden tests pass"] = False
            detail["failed_tests"] = ["not run: an AST check failed"]
        passed = all(checks.values())
        score = 1.0 if passed else round(0.9 * sum(checks.values()) / len(checks), 4)
        detail["checks"] = checks
        return Outcome(passed, score, detail)


@lru_cache(maxsize=4096)
def _plan(seed: int, params_json: str, k: Knowledge) -> tuple[PlanStep, ...]:
    w = _world(seed, params_json)
    before = original_files(w)
    after = refactored_files(w, k)
    after.pop(CHANGELOG, None)
    before_code = {p: c for p, c in before.items() if p != CHANGELOG}
    steps = [
        PlanStep("list_files", {}),
        PlanStep("search", {"pattern": w.pattern, "context": w.context}),
    ]
    if w.entry:
        steps.append(PlanStep("read_file", {"path": CHANGELOG}))
    steps.append(PlanStep("apply_patch", {"patch": make_patch(before_code, after)}, facts=KIND_FACTS[w.kind], uses=(1,)))
    if w.entry:
        steps.append(
            PlanStep(
                "write_file",
                {"path": CHANGELOG, "content": changelog_after(w, k, 2 in k.cut)},
                uses=(2,),
                constraint="changelog",
            )
        )
    steps.append(PlanStep("run_tests", {}))
    steps.append(PlanStep("finish", {"summary": f"{w.kind} refactoring done"}))
    return tuple(steps)


# --------------------------------------------------------------------------------------------- env
class RefactorEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: RefactorWorld):
        super().__init__(instance)
        self.world = world
        self.files: dict[str, str] = original_files(world)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL)

    def _file(self, path: Any) -> str:
        _check_path(path)
        if path not in self.files:
            raise ToolArgError(f"{path}: no such file (list_files shows the repository)")
        return path

    def tool_list_files(self) -> str:
        return "\n".join(f"{p} ({c.count(chr(10))} lines)" for p, c in sorted(self.files.items()))

    def tool_read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        text = self.files[self._file(path)]
        if start_line is None and end_line is None:
            return text
        for v in (start_line, end_line):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ToolArgError("start_line and end_line must be positive integers")
        lines = text.split("\n")
        return "\n".join(lines[(start_line or 1) - 1 : end_line or len(lines)])

    def tool_search(self, pattern: str, context: int = 0, path: str | None = None) -> str:
        if not isinstance(pattern, str) or not pattern or len(pattern) > 200:
            raise ToolArgError("pattern must be a non-empty string of at most 200 characters")
        if not isinstance(context, int) or isinstance(context, bool) or not 0 <= context <= 10:
            raise ToolArgError("context must be an integer from 0 to 10")
        if path is not None and (not isinstance(path, str) or len(path) > 200):
            raise ToolArgError("path must be a string prefix such as pkg/ or tests/")
        out: list[str] = []
        hits = 0
        for p, text in sorted(self.files.items()):
            if path and not p.startswith(path):
                continue
            lines = text.split("\n")
            idx = [i for i, ln in enumerate(lines) if pattern in ln]
            if not idx:
                continue
            hits += len(idx)
            shown: set[int] = set()
            for i in idx:
                shown.update(range(max(0, i - context), min(len(lines), i + context + 1)))
            prev = None
            for j in sorted(shown):
                if prev is not None and j != prev + 1:
                    out.append("--")
                sep = ":" if j in idx else "-"
                out.append(f"{p}{sep}{j + 1}{sep}{lines[j]}")
                prev = j
            out.append("--")
        text = "\n".join(out[:-1]) if out else f"no matches for {pattern!r}"
        if len(text) > MAX_SEARCH_CHARS:
            text = text[:MAX_SEARCH_CHARS] + "\n...[truncated]"
        return text + (f"\n({hits} matching lines)" if hits else "")

    def tool_write_file(self, path: str, content: str) -> str:
        _check_path(path)
        if not isinstance(content, str):
            raise ToolArgError("content must be a string")
        if len(content) > MAX_FILE_CHARS:
            raise ToolArgError(f"content is longer than {MAX_FILE_CHARS} characters")
        if path not in self.files and len(self.files) >= MAX_FILES:
            raise ToolArgError(f"the repository already has {MAX_FILES} files")
        self.files[path] = content
        return f"wrote {len(content)} characters to {path}"

    def tool_apply_patch(self, patch: str) -> str:
        if not isinstance(patch, str) or not patch.strip():
            raise ToolArgError("patch must be a non-empty unified diff")
        new, changed = apply_patch(self.files, patch)
        if len(new) > MAX_FILES or any(len(c) > MAX_FILE_CHARS for c in new.values()):
            raise ToolArgError("the patch makes the repository too large")
        self.files = new
        return f"patched {len(changed)} file(s): {', '.join(changed)}"

    def tool_run_tests(self, path: str | None = None) -> ToolResult:
        if path is not None:
            self._file(path)
            tests = [path]
        else:
            tests = sorted(p for p in self.files if p.startswith("tests/") and p.rsplit("/", 1)[-1].startswith("test_") and p.endswith(".py"))
        if not tests or not all(t.endswith(".py") for t in tests):
            raise ToolArgError("no test files (tests/test_*.py) to run")
        try:
            result = sandbox.run_tests(self.files, tests, ENV_LIMITS)
        except sandbox.SandboxError as e:
            raise ToolArgError(str(e)) from e
        if result.stopped:
            return ToolResult(f"error: the sandbox stopped the test run: {result.stopped}\n{result.report()}", error=True)
        return ToolResult(result.report())


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("list_files", "List the repository's files with their line counts.", _obj({}, []), "list_files"),
    ToolSpec(
        "read_file",
        "Read a file of the repository, optionally only lines start_line..end_line (1-based, inclusive).",
        _obj(
            {"path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 1}, "end_line": {"type": "integer", "minimum": 1}},
            ["path"],
        ),
        "read_file",
    ),
    ToolSpec(
        "search",
        "Find lines containing a literal string in the repository (like grep -F -n), with `context` lines "
        "around each match; `path` limits the search to paths starting with it.",
        _obj(
            {
                "pattern": {"type": "string", "minLength": 1, "maxLength": 200},
                "context": {"type": "integer", "minimum": 0, "maximum": 10},
                "path": {"type": "string"},
            },
            ["pattern"],
        ),
        "search",
    ),
    ToolSpec(
        "write_file",
        "Create or overwrite a file with the given content.",
        _obj({"path": {"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_./-]*$"}, "content": {"type": "string"}}, ["path", "content"]),
        "write_file",
    ),
    ToolSpec(
        "apply_patch",
        "Apply a unified diff (as produced by `diff -u` / `git diff`, one or more files, paths a/... b/..., "
        "/dev/null to create a file). All hunks apply or none does.",
        _obj({"patch": {"type": "string", "minLength": 1}}, ["patch"]),
        "apply_patch",
    ),
    ToolSpec(
        "run_tests",
        "Run the repository's tests (all tests/test_*.py, or one file) in a sandbox and report the results.",
        _obj({"path": {"type": "string"}}, []),
        "run_tests",
    ),
)
