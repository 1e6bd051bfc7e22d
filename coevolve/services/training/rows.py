"""Training rows where they enter training: loaded and validated once (`load_rows`), hashed by the dataset
layer's `dataset_hash` (`coevolve.store.datasets`: one digest for the store and training), written to and
read from the JSONL file a training job's workers read (`write_rows_file`, `read_rows_file`), and what
their provenance says they were collected under (`trained_under`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coevolve.errors import BadInput
from coevolve.values import DecodingPolicy, TrainingRow


class TrainingError(BadInput):
    """Bad rows, a bad base model folder or a bad config: one clear line for the user."""


def _row_from_json(obj: Any, where: str) -> TrainingRow:
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list) or not obj["messages"]:
        raise TrainingError(f"{where}: a training row needs a non-empty 'messages' list")
    for i, m in enumerate(obj["messages"]):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise TrainingError(f"{where}: message {i} has no valid 'role'")
        if m["role"] == "assistant" and not isinstance(m.get("train", False), bool):
            raise TrainingError(f"{where}: message {i}: 'train' must be true or false")
        if m["role"] == "assistant" and m.get("tool_calls") is not None and not isinstance(m["tool_calls"], list):
            raise TrainingError(f"{where}: message {i}: 'tool_calls' must be a list")
    tools = obj.get("tools") or []
    if not isinstance(tools, list):
        raise TrainingError(f"{where}: 'tools' must be a list")
    provenance = obj.get("provenance")
    if provenance is None:
        provenance = {}
    if not isinstance(provenance, dict):
        raise TrainingError(f"{where}: 'provenance' must be an object, not {type(provenance).__name__}")
    return TrainingRow(messages=tuple(obj["messages"]), tools=tuple(tools), provenance=dict(provenance))


def load_rows(source: str | Path | Iterable[TrainingRow | dict[str, Any]]) -> list[TrainingRow]:
    """Rows from a JSONL file (docs/ARCHITECTURE.md §3) or from an iterable of rows/dicts. Raises TrainingError."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise TrainingError(f"cannot read rows file {str(path)!r}: {e.strerror or e}") from None
        try:
            lines = raw.decode("utf-8").split("\n")
        except UnicodeDecodeError as e:
            line_no = raw[: e.start].count(b"\n") + 1
            raise TrainingError(f"{path}:{line_no}: not UTF-8 text (byte {e.start})") from None
        rows = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TrainingError(f"{path}:{n}: not JSON ({e.msg})") from None
            except (ValueError, RecursionError) as e:  # e.g. a number too long to convert, nesting too deep
                raise TrainingError(f"{path}:{n}: not usable JSON ({type(e).__name__})") from None
            rows.append(_row_from_json(obj, f"{path}:{n}"))
    else:
        rows = [
            r if isinstance(r, TrainingRow) else _row_from_json(r, f"row {i}") for i, r in enumerate(source)
        ]
    if not rows:
        raise TrainingError("no training rows")
    require_learnable(rows)
    return rows


def require_learnable(rows: Sequence[TrainingRow]) -> None:
    """TrainingError unless some assistant message carries loss."""
    if not any(m.get("role") == "assistant" and m.get("train") for r in rows for m in r.messages):
        raise TrainingError('no assistant message is marked "train": true: nothing to learn')


def row_decoding(row: TrainingRow) -> dict[str, Any]:
    """The decoding policy the row's rollout ran under (its provenance's `decoding`; {} = the default)."""
    decoding = row.provenance.get("decoding")
    return dict(decoding) if isinstance(decoding, dict) else {}


def trained_under(rows: Sequence[TrainingRow]) -> dict[str, Any]:
    """The harnesses (and so decoding policies) the rows' rollouts ran under, from their provenance
    (`harness_id`, `decoding`: absent means the default policy), with the rows of each: what an
    adapter records (`AdapterRef.trained_under`)."""
    counts: dict[tuple[str, str], int] = {}
    policies: dict[str, dict[str, Any]] = {}
    without = 0
    for r in rows:
        hid = r.provenance.get("harness_id")
        if not isinstance(hid, str) or not hid:
            without += 1
            continue
        decoding = row_decoding(r)
        policy = asdict(DecodingPolicy(**{f: decoding[f] for f in ("tool_calls", "temperature", "max_tokens") if f in decoding}))
        key = (hid, json.dumps(policy, sort_keys=True))
        policies[key[1]] = policy
        counts[key] = counts.get(key, 0) + 1
    harnesses = [{"harness_id": hid, "decoding": policies[p], "rows": n} for (hid, p), n in counts.items()]
    return {**({"harnesses": harnesses} if harnesses else {}), **({"rows_without_harness": without} if without else {})}


def write_rows_file(path: Path, rows: Sequence[TrainingRow]) -> None:
    """Rows as JSONL (atomically), their keys in their own order: the chat template renders tool
    schemas and arguments in that order, so a job's workers read back exactly the rows they were given."""
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r.to_json(), separators=(",", ":")) + "\n" for r in rows))
    os.replace(tmp, path)


def read_rows_file(path: str | Path) -> list[TrainingRow]:
    """Rows from a JSONL file of rows already validated where they entered training (a dataset's
    `rows.jsonl`, or a file `write_rows_file` wrote): read as they are, not validated again."""
    lines = Path(path).read_text().splitlines()
    return [TrainingRow.from_json(json.loads(line)) for line in lines if line.strip()]
