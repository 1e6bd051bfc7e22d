"""Refactor world generation: a small generated Python package with tests, the refactoring task of one
kind (rename, extract, deprecated), the checker's hidden tests, the CHANGELOG, and the traps of the
instance (a pure function of seed and knobs).

Files are stored as templates with `<<slot>>` markers; `original_files` renders the repository as the
agent finds it, `coevolve.tasks.refactor.plan` renders it after a refactoring.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

KINDS = ("rename", "extract", "deprecated")
TRAP_RATE = {1: 0.2, 2: 0.3, 3: 0.5}
CHANGELOG = "CHANGELOG.md"
SLOT = re.compile(r"<<(\w+)>>")

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


def build_world(seed: int, params: dict[str, Any]) -> RefactorWorld:
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


# ------------------------------------------------------------------------------- original repository
def original_values(w: RefactorWorld) -> dict[str, str]:
    """Slot values of the repository as the agent finds it."""
    s = w.spec
    if w.kind == "rename":
        return {"fn": s["old"], "fn_str": s["old"], "meth": s["old"]}
    if w.kind == "extract":
        vals: dict[str, str] = {f"blk{i}": s["blocks"][f"blk{i}"] for i in range(len(s["sites"]))}
        for site in s["sites"]:
            vals[f"imp_{site['mod']}"] = ""
        vals["rtype"] = "None"
        vals["ret"] = ""
        return vals
    vals = {f"dt_{m}": names for m, names in s["dt_names"].items()}
    for i in range(len(s["sites"])):
        vals[f"now{i}"] = "datetime.utcnow()"
    return vals


def original_files(w: RefactorWorld) -> dict[str, str]:
    """The repository as the agent finds it (path -> text)."""
    vals = original_values(w)
    return {p: _render(t, vals) for p, t in w.templates.items()}
