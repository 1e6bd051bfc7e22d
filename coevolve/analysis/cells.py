"""Resumable cells of a long experiment (the benches): one JSON object a line, flushed as each cell
finishes, so a run cut short continues from the cells its file holds. A torn last line (the process
died mid-write) is dropped on reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any


def read_cells(path: Path) -> list[dict[str, Any]]:
    """The whole cells of `path`, in file order (none when it does not exist)."""
    out: list[dict[str, Any]] = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                cell = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(cell, dict):
                out.append(cell)
    return out


def write_cell(fh: IO[str], cell: dict[str, Any]) -> None:
    """One finished cell, on its own line, flushed at once."""
    fh.write(json.dumps(cell, sort_keys=True) + "\n")
    fh.flush()
