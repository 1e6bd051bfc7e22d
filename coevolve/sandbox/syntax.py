"""Parsing Python on the host (the runs' records, the graded tests' ids, the refactor checker's trees),
safe from the AST race of CPython 3.11.7."""

from __future__ import annotations

import ast
import threading
import time

_AST_LOCK = threading.Lock()


def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """`ast.parse` that survives CPython 3.11.7's AST race. Before 3.11.8 the AST constructor keeps its
    recursion depth per interpreter (gh-106905), so a parse that overlaps another thread's (ours run on
    the executor's tool threads; Python's traceback formatting parses source lines to place its carets)
    can fail with "SystemError: AST constructor recursion depth mismatch". Ours go one at a time and a
    parse that lost the race is repeated: the depth is reset at the start of every parse."""
    for attempt in range(8):
        with _AST_LOCK:
            try:
                return ast.parse(source, mode=mode)
            except SystemError as e:
                if "recursion depth mismatch" not in str(e) or attempt == 7:
                    raise
        time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")
