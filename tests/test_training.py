# ruff: noqa: F811 - pytest fixtures imported from tests.lifecycle_fixtures
"""LoRA training job: loss mask through real chat templates, the Ray Train job, resume after a kill,
the synthetic backend through the same interface."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.lifecycle_fixtures import tiny_model, tiny_tokenizer  # noqa: F401 - fixtures
from tests.lifecycle_fixtures import write_rows as _write_rows
from tests.lifecycle_rows import multi_turn_row, target_rows

REPO = Path(__file__).resolve().parent.parent


def _smollm2_tokenizer():
    try:
        from coevolve.services.serving.models import smollm2_gguf_path, smollm2_tokenizer

        smollm2_gguf_path()
    except (FileNotFoundError, ImportError) as e:
        pytest.skip(f"SmolLM2 not installed: {e}")
    return smollm2_tokenizer()


# ----------------------------------------------------------------------------------- loss mask
def _loss_runs(enc) -> list[list[int]]:
    runs, cur = [], []
    for lab in enc.labels:
        if lab == -100:
            if cur:
                runs.append(cur)
            cur = []
        else:
            cur.append(lab)
    if cur:
        runs.append(cur)
    return runs


def _expected_turn_texts(tokenizer, row) -> list[str]:
    """What each trained assistant turn renders to: after the generation prompt, through <|im_end|>."""
    from coevolve.services.training.tokenise import _render, _template_messages

    msgs = _template_messages(row.messages)
    tools = list(row.tools)
    out = []
    for i, m in enumerate(row.messages):
        if m["role"] == "assistant" and m.get("train"):
            before = _render(tokenizer, msgs[:i], tools, gen=True)
            after = _render(tokenizer, msgs[: i + 1], tools, gen=False)
            turn = after[len(before) :]
            out.append(turn[: turn.index("<|im_end|>") + len("<|im_end|>")])
    return out


@pytest.mark.parametrize("template", ["tiny", "smollm2"])
def test_loss_mask_is_exactly_the_marked_assistant_turns(template, tiny_tokenizer):
    from coevolve.services.training import encode_row, load_rows
    from coevolve.services.training.tokenise import _render, _template_messages

    tok = tiny_tokenizer if template == "tiny" else _smollm2_tokenizer()
    row = load_rows([multi_turn_row()])[0]
    enc = encode_row(row, tok)

    # the token sequence is the whole conversation, rendered by the model's own chat template
    full = _render(tok, _template_messages(row.messages), list(row.tools), gen=False)
    assert tok.decode(enc.input_ids) == full
    # loss falls on exactly two runs of tokens: the two trained turns, each through its end token
    runs = [tok.decode(r) for r in _loss_runs(enc)]
    expected = _expected_turn_texts(tok, row)
    assert runs == expected
    assert "Temperature above 80" in runs[0] and '"name": "query_readings"' in runs[0]
    assert runs[1] == "No anomalies on m3.<|im_end|>"
    # the untrained turn, the prompts and the tool results carry no loss
    assert not any("First the ranges" in r or "<tool_response>" in r or "<|im_start|>" in r for r in runs)
    # and the trained tokens are the very tokens of the sequence at those positions
    assert all(lab in (-100, tid) for lab, tid in zip(enc.labels, enc.input_ids, strict=True))


def _constrained_row(turns: int = 3):
    from coevolve.values import TrainingRow
    from tests.lifecycle_rows import SYSTEM, TOOLS, call

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Audit m3 and report."}]
    for t in range(turns):
        messages.append({"role": "assistant", "content": "", "train": True, "tool_calls": [
            call("query_readings", {"sql": f"SELECT * FROM readings WHERE id > {t * 7}"}, f"c{t}")]})
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": f'[{{"id": {t}, "temp": {80 + t}}}]'})
    return TrainingRow(tuple(messages[:-1]), tuple(TOOLS), {"decoding": {"tool_calls": "constrained"}})


def test_a_constrained_row_is_one_tree_whose_branches_see_exactly_each_turns_own_prompt(tiny_tokenizer):
    """Packed, each trained turn's tokens follow the very prompt its own per-turn sequence has, at the
    same positions; a cut at max_seq_len drops the turns whose context would not fit."""
    from coevolve.services.training import IGNORE, encode_for_training, encode_row, training_sequences

    row = _constrained_row()
    split = [encode_row(s, tiny_tokenizer, max_seq_len=1 << 30) for s in training_sequences(row)]
    (packed,) = encode_for_training(row, tiny_tokenizer, max_seq_len=1 << 30)
    assert len(packed.branches) == 3 and packed.loss_tokens == sum(e.loss_tokens for e in split)
    pos = packed.positions()
    for start, end, attach in packed.branches:
        own = next(e for e in split if e.labels.index(packed.labels[start]) == attach
                   and e.input_ids[attach:attach + end - start] == packed.input_ids[start:end])
        assert packed.context(start) == own.input_ids[:attach]
        assert pos[start:end] == list(range(attach, attach + end - start))
        assert all(lab != IGNORE for lab in packed.labels[start:end])
    assert sum(lab != IGNORE for lab in packed.labels[: packed.branches[0][0]]) == 0  # the trunk carries none

    first, second, _ = sorted(packed.branches, key=lambda b: b[2])
    (cut,) = encode_for_training(row, tiny_tokenizer, max_seq_len=second[2] + 3)
    assert sorted((a, e - s) for s, e, a in cut.branches) == [(first[2], first[1] - first[0]), (second[2], 3)]
    assert min(s for s, _, _ in cut.branches) == second[2]  # the trunk ends where the longest kept context does


def test_a_packed_row_has_the_gradient_of_its_per_turn_sequences(tiny_model, tiny_tokenizer):
    """One tree-packed step equals the per-turn sequences' summed token losses (Hugging Face's own loss on
    each), normalised by the row's loss tokens, in loss and in every gradient; batched with a shorter
    row (padding), the two rows' tokens weigh alike."""
    import torch

    from coevolve.services.training import encode_for_training, encode_row, training_sequences
    from coevolve.services.training.loop import batch_loss, load_for_training

    torch.manual_seed(0)
    model = load_for_training(tiny_model, "float32")  # the loop's model: its attention splits at the trunk
    row = _constrained_row()
    (packed,) = encode_for_training(row, tiny_tokenizer, max_seq_len=1 << 30)

    def grads():
        g = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        return g

    loss = batch_loss(model, [packed], tiny_tokenizer.eos_token_id, "cpu")
    loss.backward()
    got = grads()
    split = [encode_row(s, tiny_tokenizer, max_seq_len=1 << 30) for s in training_sequences(row)]
    ref = sum(model(input_ids=torch.tensor([e.input_ids]), labels=torch.tensor([e.labels])).loss * e.loss_tokens
              for e in split) / packed.loss_tokens
    ref.backward()
    want = grads()
    assert abs(loss.item() - ref.item()) < 1e-5
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4, msg=name)

    plain = encode_row(_constrained_row(turns=1), tiny_tokenizer)
    both = batch_loss(model, [packed, plain], tiny_tokenizer.eos_token_id, "cpu")
    alone = batch_loss(model, [plain], tiny_tokenizer.eos_token_id, "cpu")
    expect = (loss * packed.loss_tokens + alone * plain.loss_tokens) / (packed.loss_tokens + plain.loss_tokens)
    assert abs(both.item() - expect.item()) < 1e-5


def test_a_loop_stopped_mid_epoch_resumes_from_its_step_checkpoint_to_the_same_adapter(tmp_path, tiny_model):
    """Checkpoints every 2 steps; a run killed after its second mid-epoch checkpoint, restored from it,
    ends with the uninterrupted run's adapter, losses and step count (dropout on: the RNG resumes too)."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from coevolve.config import TrainConfig
    from coevolve.services.training import load_rows, run_peft_loop

    rows = load_rows([*target_rows(), multi_turn_row(), _constrained_row()])
    cfg = TrainConfig(epochs=2, lr=1e-3, dropout=0.1, checkpoint_every=2, repeat=2)

    def run(out, restore_from=None, stop_at=None):
        seen = []

        def report(metrics, folder):
            seen.append(metrics["step"])
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(folder, out)
            if stop_at is not None and len(seen) == stop_at:
                raise KeyboardInterrupt

        state = run_peft_loop(str(tiny_model), rows, cfg, restore=lambda: restore_from, report=report)
        return state, seen

    whole, steps = run(tmp_path / "whole")
    per_epoch = cfg.steps_per_epoch(whole["sequences"])
    assert per_epoch > 4
    epoch = [*range(2, per_epoch, 2), per_epoch]
    assert steps == epoch + [per_epoch + k for k in epoch]
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", stop_at=len(epoch) + 1)  # after step per_epoch + 2, mid-way through epoch 2
    resumed, steps = run(tmp_path / "end", restore_from=str(tmp_path / "cut"))
    assert steps == [per_epoch + k for k in epoch[1:]]
    assert (resumed["resumed_from_epoch"], resumed["resumed_from_step"]) == (1, per_epoch + 2)
    assert resumed["step"] == whole["step"] and resumed["tokens"] == whole["tokens"]
    assert resumed["losses"] == pytest.approx(whole["losses"], rel=1e-5)
    a = load_file(str(tmp_path / "whole" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "end" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k)


def test_tool_call_turn_tokens_match_what_vllm_would_prompt(tiny_tokenizer):
    """The prompt part of an encoded row equals the tokenised generation prompt vLLM builds."""
    from coevolve.services.training import encode_row, load_rows
    from coevolve.services.training.tokenise import _render, _template_messages

    row = load_rows([target_rows()[0]])[0]
    enc = encode_row(row, tiny_tokenizer)
    first_loss = next(i for i, lab in enumerate(enc.labels) if lab != -100)
    prompt = _render(tiny_tokenizer, _template_messages(row.messages[:-1]), list(row.tools), gen=True)
    assert enc.input_ids[:first_loss] == tiny_tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert tiny_tokenizer.decode(enc.input_ids[first_loss:]).startswith("<tool_call>\n{")


def test_rows_file_errors_are_one_clear_line(tmp_path):
    from coevolve.services.training import TrainingError, dataset_hash, load_rows

    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"messages": []}\n')
    with pytest.raises(TrainingError, match="rows.jsonl:1: a training row needs"):
        load_rows(bad)
    bad.write_text("not json\n")
    with pytest.raises(TrainingError, match="not JSON"):
        load_rows(bad)
    untrained = target_rows()[0]
    untrained["messages"][-1]["train"] = False
    with pytest.raises(TrainingError, match="nothing to learn"):
        load_rows([untrained])
    with pytest.raises(TrainingError, match="cannot read"):
        load_rows(tmp_path / "missing.jsonl")
    a, b = load_rows(target_rows()), load_rows(list(reversed(target_rows())))
    assert dataset_hash(a) != dataset_hash(b) and dataset_hash(a) == dataset_hash(load_rows(target_rows()))


# ------------------------------------------------------------------------- rows into the job, once
class _JobStopped(Exception):
    pass


@pytest.fixture
def job_config(monkeypatch):
    """The config a Ray Train job is given, and the rows its workers would read from it; the job itself
    never starts (its `fit()` stops at once)."""
    seen: dict = {}

    class Trainer:
        def __init__(self, loop, *, train_loop_config, run_config, **_):
            seen["config"] = train_loop_config
            seen["worker_env"] = run_config.worker_runtime_env

        def fit(self):
            from coevolve.services.training.rows import read_rows_file

            seen["rows"] = read_rows_file(seen["config"]["rows_path"])
            raise _JobStopped

    monkeypatch.setattr("ray.train.torch.TorchTrainer", Trainer)
    return seen


def test_the_job_is_told_where_the_rows_are_and_its_workers_read_them_unchanged(tmp_path, store, tiny_model,
                                                                                job_config):
    from coevolve.services.training import TRAIN_RUNS_DIR, load_rows, train_adapter

    rows = [multi_turn_row(), *target_rows()]
    with pytest.raises(_JobStopped):
        train_adapter(_write_rows(tmp_path / "rows.jsonl", rows), tiny_model, "copied", None, store)
    config = job_config["config"]
    assert set(config) == {"base", "rows_path", "config", "progress_path"}  # no rows inline
    assert Path(config["rows_path"]) == (store.root / TRAIN_RUNS_DIR / "copied.rows.jsonl").resolve()
    # the rows the workers read are the rows given, keys in their own order (the template renders tools so)
    assert [json.dumps(r.to_json()) for r in job_config["rows"]] == [json.dumps(r) for r in rows]
    assert job_config["rows"] == load_rows(rows)
    assert not Path(config["rows_path"]).exists()  # the job's copy goes with the job
    assert job_config["worker_env"] == {"env_vars": {"MALLOC_MMAP_THRESHOLD_": "1048576"}}  # a CPU job's heap


def test_a_dataset_is_read_by_the_dataset_layer_and_the_job_reads_its_own_file(tmp_path, store, tiny_model,
                                                                               job_config, monkeypatch):
    """Rows from a dataset are neither validated nor hashed again: the dataset's hash is the adapter's,
    and the job's workers read the dataset's rows.jsonl."""
    from coevolve.services.training import dataset_hash, load_rows, train_adapter
    from coevolve.services.training import job as training_job
    from coevolve.store.datasets import write_dataset

    rows = load_rows([multi_turn_row(), *target_rows()])
    rec = write_dataset(store.root, rows, {"arm": "correction"})

    def never(*_):
        raise AssertionError("dataset rows validated or hashed again")

    monkeypatch.setattr(training_job, "load_rows", never)
    monkeypatch.setattr(training_job, "dataset_hash", never)
    with pytest.raises(_JobStopped):
        train_adapter(rec, tiny_model, "from-dataset", None, store)
    assert Path(job_config["config"]["rows_path"]) == rec.jsonl.resolve()
    assert job_config["rows"] == rows
    ref = train_adapter(rec, "synthetic/weak", "syn-ds", None, store, backend="synthetic")
    assert ref.dataset_hash == rec.manifest["sha256"] == dataset_hash(rows)
    assert ref.metrics["rows"] == len(rows)


# ------------------------------------------------------------------------- Ray Train, kill/resume
KILL_CONFIG = {"lr": 3e-3, "epochs": 3, "repeat": 60, "dropout": 0.0, "rank": 8}

_KILL_SCRIPT = textwrap.dedent(
    """
    import sys
    from coevolve.cluster.runtime import start_ray
    from coevolve.store.store import HarnessStore
    from coevolve.services.training import train_adapter
    rows, base, store, cfg = sys.argv[1], sys.argv[2], sys.argv[3], __import__("json").loads(sys.argv[4])
    start_ray(None, 1)
    train_adapter(rows, base, "resumed", cfg, HarnessStore(store))
    """
)


@pytest.mark.slow
def test_killed_job_resumes_from_last_checkpoint_with_same_step_count(tmp_path, tiny_model, ray_session):
    """Kill -9 the training driver after its first epoch checkpoint; the rerun resumes from it and ends
    with the same number of optimizer steps as the plan (and as an uninterrupted run would)."""
    from coevolve.services.training import TRAIN_RUNS_DIR, TrainConfig, train_adapter
    from coevolve.store.store import HarnessStore

    rows = _write_rows(tmp_path / "rows.jsonl", target_rows())
    store_dir = tmp_path / "store"
    store = HarnessStore(store_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _KILL_SCRIPT,
            str(rows),
            str(tiny_model),
            str(store_dir),
            json.dumps(KILL_CONFIG),
        ],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run_dir = store_dir / TRAIN_RUNS_DIR / "resumed"
    progress = store_dir / TRAIN_RUNS_DIR / "resumed.progress.json"

    def checkpointed_and_past_it() -> bool:
        # the controller has recorded the first checkpoint and the worker is into the second epoch
        if not (run_dir / "checkpoint_manager_snapshot.json").is_file():
            return False
        try:
            return json.loads(progress.read_text())["epoch"] >= 1
        except (OSError, ValueError, KeyError):
            return False

    deadline = time.monotonic() + 300
    try:
        while not checkpointed_and_past_it():
            assert proc.poll() is None, "training process ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    last = json.loads(max(run_dir.glob("checkpoint_*/state.json")).read_text())
    cfg = TrainConfig.model_validate(KILL_CONFIG)
    plan = cfg.steps_per_epoch(len(target_rows())) * cfg.epochs
    assert last["epoch"] < cfg.epochs, "the job finished before it was killed"
    with pytest.raises(Exception):  # noqa: B017 - the store has no record of the killed job
        store.get_adapter("resumed")

    ref = train_adapter(rows, tiny_model, "resumed", cfg, store)
    assert ref.metrics["resumed_from_epoch"] is not None and ref.metrics["resumed_from_epoch"] >= 1
    assert ref.metrics["steps"] == plan
    assert len(ref.metrics["loss_curve"]) == cfg.epochs
    assert store.get_adapter("resumed").metrics["steps"] == plan
    assert (Path(ref.path) / "adapter_model.safetensors").is_file()


# ------------------------------------------------------------------------------- synthetic
def test_synthetic_backend_goes_through_the_same_job_interface(tmp_path, store):
    synthetic = pytest.importorskip("coevolve.testbed.policy")
    if not hasattr(synthetic, "learn_adapter"):
        pytest.skip("coevolve.testbed.policy.learn_adapter is not written yet")
    from coevolve.services.training import SYNTHETIC_ADAPTER_FILE, train_adapter

    rows = _write_rows(tmp_path / "rows.jsonl", [multi_turn_row(), *target_rows()])
    ref = train_adapter(rows, "synthetic/weak", "syn-1", None, store, backend="synthetic")
    learned = json.loads((Path(ref.path) / SYNTHETIC_ADAPTER_FILE).read_text())
    assert isinstance(learned, dict)
    assert store.get_adapter("syn-1") == ref
    assert ref.train_config["backend"] == "synthetic"


def test_bad_backend_and_existing_adapter_are_rejected(tmp_path, store, tiny_model):
    from coevolve.services.training import TrainingError, adapter_dir, train_adapter

    rows = _write_rows(tmp_path / "rows.jsonl", target_rows())
    with pytest.raises(TrainingError, match="unknown training backend"):
        train_adapter(rows, tiny_model, "a", None, store, backend="magic")
    with pytest.raises(TrainingError, match="must be letters"):
        train_adapter(rows, tiny_model, "bad id/..", None, store)
    with pytest.raises(TrainingError, match="no config.json"):
        train_adapter(rows, tmp_path, "a", None, store)
    adapter_dir(store, "taken").mkdir(parents=True)
    with pytest.raises(TrainingError, match="already exists"):
        train_adapter(rows, tiny_model, "taken", None, store)
