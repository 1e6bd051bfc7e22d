"""An adapter records the harness and decoding policy it was trained under (issue 22.4): read from its
rows' provenance by the training job, kept in its store record (`AdapterRef.trained_under`), shown by
`coevolve models list`; a record without it (a registered folder, an older store) reads and encodes as
before."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from coevolve.agents.correction import correction_row, full_row
from coevolve.agents.executor import Executor
from coevolve.cli import models as cli_models
from coevolve.cli.app import app
from coevolve.codec import decode, encode
from coevolve.edits import apply_edit, edit_from_json
from coevolve.services.gateway import Gateway
from coevolve.services.training import train_adapter
from coevolve.store.store import HarnessStore
from coevolve.tasks import get_family
from coevolve.values import AdapterRef, DecodingPolicy, FailureLocus

CONSTRAINED = {"tool_calls": "constrained", "temperature": 0.7, "max_tokens": 512}


def rollouts(harness, n=2):
    ex = Executor(Gateway(), tool_threads=0)

    async def run():
        return await asyncio.gather(*(ex.rollout(i, harness, "synthetic/weak", 0)
                                      for i in get_family("iot").generate("train", n)))

    return asyncio.run(run())


def rows_under(harness):
    out = []
    for t in rollouts(harness):
        best = {"tool_call": {"name": "finish", "arguments": {}}, "strategy": "", "score": 1.0, "valid": True}
        out.append(correction_row(t, harness, FailureLocus(t.id, 0, "test"), best, [best], None))
        out.append(full_row(t, harness, "self-pass"))
    return out


def test_an_adapter_records_the_harnesses_and_decoding_its_rows_ran_under(tmp_path, monkeypatch):
    base = get_family("iot").baseline_harness()
    constrained = apply_edit(base, edit_from_json({"ops": [{"op": "set_decoding", **CONSTRAINED}]}))
    rows = rows_under(constrained) + rows_under(base)[:1]
    store = HarnessStore(tmp_path / "store")
    ref = train_adapter(rows, "synthetic/weak", "mixed", store=store, backend="synthetic")

    assert ref.trained_under == {"harnesses": [
        {"harness_id": constrained.id, "decoding": CONSTRAINED, "rows": 4},
        {"harness_id": base.id, "decoding": {"tool_calls": "free", "temperature": None, "max_tokens": None}, "rows": 1},
    ]}
    assert ref.decodings() == [DecodingPolicy(**CONSTRAINED), DecodingPolicy()]
    assert HarnessStore(tmp_path / "store").get_adapter("mixed") == ref  # through the store and the codec
    assert store.check().ok  # the store's checker reads the record back

    res = CliRunner().invoke(app, ["models", "list", "--store", str(tmp_path / "store"), "--json"])
    assert res.exit_code == 0, res.output
    (listed,) = json.loads(res.output)
    assert listed["trained_under"] == ref.trained_under
    monkeypatch.setattr(cli_models.console, "width", 400)
    res = CliRunner().invoke(app, ["models", "list", "--store", str(tmp_path / "store")])
    assert res.exit_code == 0, res.output
    assert constrained.id[:12] in res.output and base.id[:12] in res.output
    assert "tool_calls=constrained temperature=0.7 max_tokens=512" in res.output


def test_rows_without_a_harness_are_counted_and_an_old_record_is_unchanged(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello", "train": True}], "tools": [], "provenance": {}}]
    ref = train_adapter(rows, "synthetic/weak", "handmade", store=HarnessStore(tmp_path / "s"), backend="synthetic")
    assert ref.trained_under == {"rows_without_harness": 1} and ref.decodings() == []

    old = AdapterRef("a", "base", "/p", "h", {"backend": "peft"}, {"steps": 1})
    assert b"trained_under" not in encode(old)  # an adapter recorded before the field: the same bytes
    assert decode(encode(old)) == old and old.trained_under == {}
