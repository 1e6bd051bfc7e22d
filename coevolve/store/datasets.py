"""Training datasets in the store: `<store>/datasets/<id>/` with `rows.jsonl` (one `TrainingRow` per
line, docs/ARCHITECTURE.md §3), `rows.parquet` and `manifest.json`. The id is content-addressed (`ds-` + the first
16 hex digits of the JSONL's sha256), so the same rows are one dataset however often they are built.

Both files load unchanged with Hugging Face `datasets` (`load_dataset("json"|"parquet", ...)`). In
the Parquet file `tools` and `provenance` are JSON text, because their shapes differ from row to row
(tool schemas, candidate arguments) and columnar types cannot hold that; `messages` keep their
structure (role, content, tool_calls, tool_call_id, train).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.errors import BadInput
from coevolve.values import TrainingRow

DATASETS_DIR = "datasets"


class DatasetError(BadInput):
    pass


@dataclass(frozen=True)
class DatasetRecord:
    id: str
    path: Path  # the dataset's folder
    manifest: dict[str, Any]

    @property
    def jsonl(self) -> Path:
        return self.path / "rows.jsonl"

    @property
    def parquet(self) -> Path:
        return self.path / "rows.parquet"


def _root(store_root: str | Path) -> Path:
    return Path(store_root) / DATASETS_DIR


def _jsonl(rows: Sequence[TrainingRow]) -> str:
    """The rows' canonical JSONL (keys sorted, no spaces): what a dataset's `rows.jsonl` holds and its id hashes."""
    return "".join(json.dumps(r.to_json(), sort_keys=True, separators=(",", ":")) + "\n" for r in rows)


def dataset_hash(rows: Sequence[TrainingRow]) -> str:
    """The sha256 of the rows' canonical JSONL: a dataset's manifest `sha256`, and an adapter's
    `dataset_hash` (the rows it was trained on, however they reached training)."""
    return hashlib.sha256(_jsonl(rows).encode()).hexdigest()


def _parquet_rows(rows: Sequence[TrainingRow]) -> list[dict[str, Any]]:
    def message(m: dict[str, Any]) -> dict[str, Any]:
        calls = [
            {"id": c.get("id", ""), "type": c.get("type", "function"),
             "function": {"name": c["function"]["name"], "arguments": c["function"].get("arguments") or "{}"}}
            for c in m.get("tool_calls") or ()
        ]
        return {"role": m["role"], "content": m.get("content") or "", "tool_calls": calls,
                "tool_call_id": m.get("tool_call_id"), "train": m.get("train")}

    return [
        {"messages": [message(m) for m in r.messages], "tools": json.dumps(list(r.tools), sort_keys=True),
         "provenance": json.dumps(r.provenance, sort_keys=True, default=str)}
        for r in rows
    ]


def write_dataset(store_root: str | Path, rows: Sequence[TrainingRow], manifest: dict[str, Any]) -> DatasetRecord:
    """Write rows (atomically: a temp folder renamed into place); an existing id is reused as is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise DatasetError("a dataset needs at least one row")
    text = _jsonl(rows)
    digest = hashlib.sha256(text.encode()).hexdigest()
    dataset_id = f"ds-{digest[:16]}"
    final = _root(store_root) / dataset_id
    if (final / "manifest.json").exists():
        return read_manifest(store_root, dataset_id)
    _root(store_root).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dataset_id}-", dir=_root(store_root)))
    try:
        (tmp / "rows.jsonl").write_text(text)
        pq.write_table(pa.Table.from_pylist(_parquet_rows(rows)), tmp / "rows.parquet")
        full = {**manifest, "id": dataset_id, "sha256": digest, "rows": len(rows)}
        (tmp / "manifest.json").write_text(json.dumps(full, indent=2, sort_keys=True, default=str))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (final / "manifest.json").exists():
            raise
        # written meanwhile by another process: same content, same id
    return read_manifest(store_root, dataset_id)


def read_manifest(store_root: str | Path, ref: str) -> DatasetRecord:
    """A dataset by id or unique id prefix."""
    root = _root(store_root)
    matches = sorted(p for p in root.glob(f"{ref}*") if (p / "manifest.json").exists()) if root.exists() else []
    exact = [p for p in matches if p.name == ref]
    if exact:
        matches = exact
    if not matches:
        raise DatasetError(f"no dataset {ref!r} in {root}")
    if len(matches) > 1:
        raise DatasetError(f"dataset prefix {ref!r} is ambiguous: {', '.join(p.name for p in matches[:5])}")
    path = matches[0]
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DatasetError(f"dataset {path.name}: unreadable manifest ({e})") from None
    return DatasetRecord(path.name, path, manifest)


def read_rows(store_root: str | Path, ref: str) -> list[TrainingRow]:
    rec = read_manifest(store_root, ref)
    text = rec.jsonl.read_text()
    if hashlib.sha256(text.encode()).hexdigest() != rec.manifest.get("sha256"):
        raise DatasetError(f"dataset {rec.id}: rows.jsonl does not match its recorded hash")
    return [TrainingRow.from_json(json.loads(line)) for line in text.splitlines() if line.strip()]


def list_datasets(store_root: str | Path) -> list[DatasetRecord]:
    root = _root(store_root)
    if not root.exists():
        return []
    return [read_manifest(store_root, p.name) for p in sorted(root.iterdir()) if (p / "manifest.json").exists()]
