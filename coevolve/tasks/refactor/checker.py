"""The refactor grader: reads the final repository, never the agent's words, and reports per requirement.

AST checks (the old name gone, the helper exists and is called, no duplicate block left, the deprecated
call gone, the package keeps the task's rules on imports and names), then the visible and hidden tests,
the checker's own copies (so deleting or editing tests cannot help; the visible test files must also
still hold their test functions), as a graded run of the sandbox (`sandbox.run_graded_tests`): the tests
run in a trusted runner the package's code cannot reach, and every test they define must be reported
passed, so nothing the package does (printing result lines, exiting early, patching the runner) can
write a pass. The AST rules are task rules, not that boundary.

Reasons name what is wrong with the agent's own repository (its files, its lines, its failing tests)
the way a failing test or a linter would; they count what is missing without naming it, and never say
why an instance was built the way it was.
"""

from __future__ import annotations

import ast
import importlib
import types
from functools import cache

from coevolve import sandbox
from coevolve.tasks.base import Requirement, graded, listing, plural
from coevolve.tasks.refactor.env import ENV_LIMITS, RefactorEnv
from coevolve.tasks.refactor.plan import canonical_tests
from coevolve.tasks.refactor.world import CHANGELOG, RefactorWorld, original_files
from coevolve.text import bounded
from coevolve.values import Outcome

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
HIDDEN_TESTS = "tests/test_hidden_checks.py"


# ------------------------------------------------------------------------------------------ safety
@cache
def public_names(module: str) -> frozenset[str]:
    """What package code may take from an allowed standard-library module: its `__all__`, or (modules
    without one) its names that do not start with an underscore and are not modules themselves."""
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n, v in vars(mod).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)]
    return frozenset(names)


def safety_problems(tree: ast.AST, pkg: str) -> list[str]:
    """The task's rules for package code (a rule of the task, like "do not change behaviour", and not a
    security boundary: the graded test run keeps the verdict honest whatever the code does, and the
    sandbox keeps the host safe). Allow-lists: imports of the allowed standard-library modules and the
    package itself only; of an imported module, only its public names (`enum.bltns`, the builtins module
    under another name, is not one). Refused: calling the dynamic builtins (exec, eval, getattr, ...),
    private and dunder attributes and names, and attributes that name interpreter internals. The rules
    read the syntax tree, so code that computes a name at run time (operator.attrgetter with a string)
    passes them; that is a breach of the task, not of the grader."""
    bad: list[str] = []
    modules: dict[str, str] = {}  # a name bound by `import m` / `import m as a` -> the module it names
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imported.add(a.name)
                modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [] if node.level else [node.module or ""]
            top = (node.module or "").split(".")[0]
            if not node.level and top in ALLOWED_IMPORTS:
                for a in node.names:
                    if a.name != "*" and a.name not in public_names(node.module or ""):
                        bad.append(f"imports {a.name} from {node.module}, which is not one of its public names")
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
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and modules.get(node.value.id, "").split(".")[0] in ALLOWED_IMPORTS
        ):
            mod = modules[node.value.id]
            if node.attr not in public_names(mod) and f"{mod}.{node.attr}" not in imported:
                bad.append(f"uses {node.value.id}.{node.attr}, which is not one of the public names of {mod}")
        if isinstance(node, ast.Name) and node.id.startswith("__") and node.id not in ("__all__", "__name__", "__doc__"):
            bad.append(f"uses {node.id}")
    return bad


# ------------------------------------------------------------------------------------- AST checks
def _norm_dump(stmts: list[ast.stmt]) -> str:
    class N(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.copy_location(ast.Name(id="_", ctx=ast.Load()), node)

    return "|".join(ast.dump(N().visit(sandbox.parse_python(ast.unparse(s)))) for s in stmts)


def _functions(tree: ast.AST | None) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in getattr(tree, "body", []) if isinstance(n, ast.FunctionDef)}


def _calls(fn: ast.AST, name: str) -> bool:
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name):
                return True
    return False


def _why_absent(path: str, files: dict[str, str], trees: dict[str, ast.AST]) -> str:
    if path not in files:
        return f" ({path} does not exist)"
    return f" ({path} does not parse)" if path not in trees else ""


def kind_requirements(w: RefactorWorld, files: dict[str, str], trees: dict[str, ast.AST]) -> list[Requirement]:
    """The requirements of the instance's kind of refactoring, checked on the syntax trees."""
    s = w.spec
    if w.kind == "rename":
        old, new, module = s["old"], s["new"], s["module"]
        defined = new in _functions(trees.get(module))
        stale: list[tuple[str, int]] = []
        for p, t in sorted(trees.items()):
            top = set(map(id, getattr(t, "body", [])))
            for n in ast.walk(t):
                if (
                    (isinstance(n, ast.Name) and n.id == old)
                    or (isinstance(n, ast.alias) and old in (n.name, n.asname))
                    or (isinstance(n, ast.Constant) and n.value == old)
                    or (isinstance(n, ast.FunctionDef) and n.name == old and id(n) in top)
                ):
                    stale.append((p, getattr(n, "lineno", 0)))
        places = [f"{p}:{line}" for p, line in sorted(set(stale))]
        return [
            Requirement(
                "new_name_defined",
                defined,
                "" if defined else f"`{new}` is not defined as a function in {module}{_why_absent(module, files, trees)}",
            ),
            Requirement(
                "old_name_gone",
                not places,
                f"the old name `{old}` is still used in {plural(len(places), 'place', 'places')}: {listing(places)}" if places else "",
            ),
        ]
    if w.kind == "extract":
        helper, hmod = s["helper"], s["hmod"]
        defined = helper in _functions(trees.get(hmod))
        copies = [site for site in s["sites"] if not site["near"]]
        not_calling = 0
        for site in copies:
            fn = _functions(trees.get(site["module"])).get(site["name"])
            not_calling += fn is None or not _calls(fn, helper)
        canon = _norm_dump(sandbox.parse_python(s["canon"].replace("\n    ", "\n").strip()).body)
        k = s["block_len"]
        left: list[str] = []
        for p, t in sorted(trees.items()):
            if not p.startswith(f"{w.pkg}/"):
                continue
            for fn in ast.walk(t):
                if not isinstance(fn, ast.FunctionDef) or (p == hmod and fn.name == helper):
                    continue
                body = fn.body
                if any(_norm_dump(body[j : j + k]) == canon for j in range(len(body) - k + 1)):
                    left.append(f"{p} in {fn.name}()")
        return [
            Requirement(
                "helper_defined",
                defined,
                "" if defined else f"`{helper}` is not defined as a function in {hmod}{_why_absent(hmod, files, trees)}",
            ),
            Requirement(
                "helper_called_at_every_copy",
                not not_calling,
                f"{not_calling} of the {len(copies)} functions that held a copy of the block do not call `{helper}`"
                if not_calling
                else "",
            ),
            Requirement(
                "no_duplicate_block_left",
                not left,
                f"the duplicated block is still written out in {len(left)} function(s): {listing(left)}" if left else "",
            ),
        ]
    found = {(p, n.lineno) for p, t in trees.items() for n in ast.walk(t) if isinstance(n, ast.Attribute) and n.attr == "utcnow"}
    calls = [f"{p}:{line}" for p, line in sorted(found)]
    sites = s["sites"]
    naive = 0
    for site in sites:
        fn = _functions(trees.get(site["module"])).get(site["name"])
        naive += fn is None or not any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "now" and (n.args or n.keywords)
            for n in ast.walk(fn)
        )
    return [
        Requirement(
            "deprecated_call_gone",
            not calls,
            f"`utcnow` is still used in {plural(len(calls), 'place', 'places')}: {listing(calls)}" if calls else "",
        ),
        Requirement(
            "aware_now_at_every_call_site",
            not naive,
            f"{naive} of the {len(sites)} functions that called `datetime.utcnow()` do not call `datetime.now()` "
            "with a time zone"
            if naive
            else "",
        ),
    ]


# ------------------------------------------------------------------------------- tests and changelog
def _test_names(tree: ast.AST, w: RefactorWorld) -> set[str]:
    names = {n.name for n in getattr(tree, "body", []) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}
    if w.kind == "rename":  # a test named after the function may keep or change that part of its name
        names = {n.replace(w.spec["old"], w.spec["new"]) for n in names}
    return names


def tests_lost(w: RefactorWorld, files: dict[str, str], trees: dict[str, ast.AST]) -> list[str]:
    """What became of the visible tests: every test file must still exist with (at least) its test
    functions; deleting or gutting tests is not a refactoring."""
    canon = canonical_tests(w)
    problems = []
    for p in w.visible_tests:
        if p not in files:
            problems.append(f"{p} was deleted")
        elif p not in trees:
            problems.append(f"{p} does not parse")
        else:
            gone = sorted(_test_names(sandbox.parse_python(canon[p]), w) - _test_names(trees[p], w))
            if gone:
                problems.append(f"{p} lost {', '.join(gone)}")
    return problems


def changelog_problem(w: RefactorWorld, text: str | None) -> str:
    """Why CHANGELOG.md does not carry the requested entry where the task asked for it ("" when it does)."""
    assert w.entry is not None
    if text is None:
        return f"{CHANGELOG} was deleted"
    lines = [ln.rstrip() for ln in text.split("\n")]
    it = iter(lines)
    wanted = [ln.rstrip() for ln in w.changelog.split("\n") if ln.strip()]
    if not all(any(x == want for x in it) for want in wanted):
        return f"lines of the original {CHANGELOG} were removed, changed or reordered"
    u = lines.index("## Unreleased")
    end = next((j for j in range(u + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
    if w.entry in lines[u + 1 : end]:
        return ""
    if w.entry in lines:
        return f'the line "{w.entry}" is in {CHANGELOG} but not under the `## Unreleased` heading'
    return f'{CHANGELOG} does not contain the line "{w.entry}"'


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def expected_test_ids(tests: dict[str, str]) -> list[str]:
    """The test ids the checker's own test files define (what a complete run must report)."""
    return sandbox.expected_test_ids(tests)


def run_checker_tests(w: RefactorWorld, files: dict[str, str]) -> Requirement:
    """The visible and hidden tests (the checker's copies) against the agent's package, as a graded run:
    the tests run in the sandbox's trusted runner, the package in a process of its own that can answer
    calls but cannot write a verdict, and every test the checker's files define must be reported passed."""
    package = {p: c for p, c in files.items() if p.startswith(f"{w.pkg}/") and p.endswith(".py")}
    tests = canonical_tests(w)
    result = sandbox.run_graded_tests(package, tests, ENV_LIMITS)
    expected = expected_test_ids(tests)
    reported = [t.id for t in result.tests if not t.id.endswith("::<collect>")]
    if result.all_passed and reported == expected:
        return Requirement("tests_pass", True)
    uncollected = [t for t in result.tests if t.id.endswith("::<collect>")]
    bad = [t for t in result.tests if t.outcome != "passed" and t not in uncollected]
    parts = []
    if result.stopped:
        parts.append(f"the sandbox stopped the test run: {result.stopped}")
    if uncollected:
        shown = [f"{t.id.removesuffix('::<collect>')} ({bounded(_first_line(t.message), 300)})" for t in uncollected]
        parts.append(f"{len(uncollected)} test file(s) could not be loaded: {listing(shown, 3)}")
    if bad:
        shown = [f"{t.id} ({bounded(_first_line(t.message), 300) or t.outcome})" for t in bad]
        parts.append(f"{len(bad)} of the {len(expected)} visible and hidden tests fail: {listing(shown, 3)}")
    if reported != expected:
        parts.append(f"the test run reported {len(reported)} of the {len(expected)} tests")
    return Requirement("tests_pass", False, "; ".join(parts) or "no test ran")


# ------------------------------------------------------------------------------------------ grader
def check(env: RefactorEnv) -> Outcome:
    w = env.world
    files = env.files
    if files == original_files(w):
        return graded([Requirement("repository_changed", False, "the repository is unchanged: no file was edited")], 0.0)
    trees: dict[str, ast.AST] = {}
    syntax: list[str] = []
    for p, text in sorted(files.items()):
        if p.endswith(".py"):
            try:
                trees[p] = sandbox.parse_python(text)
            except SyntaxError as e:
                syntax.append(f"{p}:{e.lineno}: {e.msg}")
            except ValueError as e:
                syntax.append(f"{p}: {e}")
    unsafe = [f"{p}: {b}" for p, t in trees.items() if p.startswith(f"{w.pkg}/") for b in safety_problems(t, w.pkg)]
    lost = tests_lost(w, files, trees)
    checks = [
        Requirement("code_parses", not syntax, f"{len(syntax)} Python file(s) do not parse: {listing(syntax)}" if syntax else ""),
        *kind_requirements(w, files, trees),
        Requirement(
            "package_imports_allowed",
            not unsafe,
            "package code may import only allowed standard-library modules and its own package, and may not reach "
            f"interpreter internals: {listing(list(dict.fromkeys(unsafe)))}"
            if unsafe
            else "",
        ),
        Requirement("visible_tests_kept", not lost, f"the visible tests were cut: {listing(lost)}" if lost else ""),
    ]
    changelog: Requirement | None = None
    if w.entry is not None:
        problem = changelog_problem(w, files.get(CHANGELOG))
        changelog = Requirement("changelog_entry", not problem, problem)
        checks.append(changelog)
    if all(r.passed for r in checks):
        checks.append(run_checker_tests(w, files))
    else:
        checks.append(Requirement("tests_pass", False, "not run: the tests run only once the requirements above are met"))
    # The score: 0.9 x the share of checks met, where a changelog the task
    # does not ask for counts as one met check.
    met = sum(r.passed for r in checks) + (changelog is None)
    score = round(0.9 * met / (len(checks) + (changelog is None)), 4)
    return graded([Requirement("repository_changed", True), *checks], score)

