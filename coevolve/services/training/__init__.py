"""LoRA SFT of the weak model on training rows: one job interface, two backends.

`train_adapter(rows, base, adapter_id, config, store, backend)` is the only entry point:

- `backend="peft"`: a Ray Train `TorchTrainer` job (`ScalingConfig(num_workers=1, use_gpu=False)` on
  CPU) running a peft LoRA loop. Each `TrainingRow` is rendered with the base model's own chat template
  as vLLM renders it at inference: the prompt before its first loss-bearing turn is token for token the
  server's prompt for that turn, and the tokens that carry loss are exactly the assistant turns the row
  marks `"train": true` (up to and including the turn's end token), written as the model writes them
  under the row's decoding policy ("tokenisation" below). Every epoch ends with a checkpoint (adapter, optimizer, step count); rerunning a job
  with the same adapter id and store resumes from the last one. The final adapter folder is a plain
  peft folder that vLLM loads unchanged; it lands in `<store>/adapters/<adapter_id>/`, the folder the
  Serve app loads adapters from by id, and an `AdapterRef` goes into the store, recording the harnesses
  and decoding policies the rows were collected under (`trained_under`, from the rows' provenance).
- `backend="synthetic"`: `coevolve.testbed.policy.learn_adapter(rows, base_model)` learns a synthetic adapter
  (DESIGN §5) from the same rows; the result is written as `synthetic_adapter.json` in the adapter
  folder and registered the same way.

Heavy imports (torch, transformers, peft, ray.train) stay inside the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, field_validator

from coevolve.values import AdapterRef, TrainingRow

log = structlog.get_logger(role="trainer")

ADAPTERS_DIR = "adapters"
TRAIN_RUNS_DIR = "train_runs"
SYNTHETIC_ADAPTER_FILE = "synthetic_adapter.json"
BACKENDS = ("peft", "synthetic")
IGNORE = -100


class TrainingError(ValueError):
    """Bad rows, a bad base model folder or a bad config: one clear line for the user."""


class TrainConfig(BaseModel):
    """LoRA SFT settings (pydantic, so YAML files and `key=value` overrides validate the same way)."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(16, ge=1, le=256, description="LoRA rank r")
    alpha: int = Field(32, ge=1, description="LoRA alpha")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="LoRA dropout")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="module names LoRA wraps (vLLM serves LoRA on these)",
    )
    lr: float = Field(1e-4, gt=0, description="AdamW learning rate (constant)")
    epochs: int = Field(2, ge=1, description="passes over the rows; one checkpoint after each")
    max_seq_len: int = Field(2048, ge=16, description="rows longer than this are truncated (loss too)")
    batch_size: int = Field(1, ge=1, description="rows per optimizer step")
    repeat: int = Field(1, ge=1, description="copies of the row set per epoch (small sets, memorising)")
    weight_decay: float = Field(0.0, ge=0.0)
    seed: int = 0
    num_workers: int = Field(1, ge=1, description="Ray Train workers (data parallel)")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs per Train worker; torch threads follow it")
    use_gpu: bool = False
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="base weights' dtype (bfloat16 on GPUs; the LoRA weights train in float32)"
    )

    @field_validator("target_modules")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("target_modules must name at least one module")
        return v

    def steps_per_epoch(self, n_rows: int) -> int:
        per_worker = -(-n_rows * self.repeat // self.num_workers)
        return -(-per_worker // self.batch_size)


# ------------------------------------------------------------------------------------------- rows
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
    """Rows from a JSONL file (DESIGN §3) or from an iterable of rows/dicts. Raises TrainingError."""
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
    if not any(m.get("role") == "assistant" and m.get("train") for r in rows for m in r.messages):
        raise TrainingError('no assistant message is marked "train": true: nothing to learn')
    return rows


def trained_under(rows: Sequence[TrainingRow]) -> dict[str, Any]:
    """The harnesses (and so decoding policies) the rows' rollouts ran under, from their provenance
    (`harness_id`, `decoding`: absent means the default policy), with the rows of each: what an
    adapter records (`AdapterRef.trained_under`)."""
    from dataclasses import asdict

    from coevolve.values import DecodingPolicy

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


def row_to_json(row: TrainingRow) -> dict[str, Any]:
    return row.to_json()


def dataset_hash(rows: Sequence[TrainingRow]) -> str:
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps(row_to_json(r), sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


# --------------------------------------------------------------------------------- tokenisation
# What a row is rendered to, so that the model is trained on what it saw and wrote (issue 22.4):
#
# - A row's messages and tools are what the rollout sent the server for its turns (the correction
#   row's prefix is the context policy's view, and the tools those the environment offered:
#   `coevolve.agents.correction`). vLLM's OpenAI server normalises the messages before its chat template sees
#   them (`vllm.renderers.chat_utils._postprocess_messages`): a tool call's `arguments` string is
#   parsed, and arguments that are not a JSON object (not JSON, a list, a number) or are empty become
#   `{}`; an empty `tool_calls` list is dropped. `_template_messages` does the same.
# - The prompt of the first loss-bearing turn is the chat template's rendering of everything before
#   it with the generation prompt, tokenised in one piece (vLLM tokenises a chat prompt whole,
#   without special tokens): token for token the prompt the server built for that turn.
# - A loss-bearing turn is what the model writes: in free mode the template's rendering of the message
#   (the `<tool_call>` form the server's tool parser reads); in constrained mode (the row's provenance
#   names `decoding.tool_calls: constrained`) the one call as the JSON text the structured-output
#   grammar makes it write (`constrained_answer`). Either way through its end-of-turn token.
# - In constrained mode the server shows an earlier call in its `<tool_call>` form, not as the JSON
#   written, so a row with several loss-bearing turns is trained as one sequence per such turn
#   (`training_sequences`): each turn's context is then the server's, at the price of the shared
#   prefix's tokens once per turn.

CONSTRAINED = "constrained"


def row_decoding(row: TrainingRow) -> dict[str, Any]:
    """The decoding policy the row's rollout ran under (its provenance's `decoding`; {} = the default)."""
    decoding = row.provenance.get("decoding")
    return dict(decoding) if isinstance(decoding, dict) else {}


def is_constrained(row: TrainingRow) -> bool:
    return row_decoding(row).get("tool_calls") == CONSTRAINED


def _arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as vLLM hands them to the chat template: a JSON object, else {}."""
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    return raw if isinstance(raw, dict) else {}


@dataclass(frozen=True)
class EncodedRow:
    input_ids: list[int]
    labels: list[int]  # IGNORE where no loss

    @property
    def loss_tokens(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE)


def _template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as vLLM hands them to the chat template: no `train` key, tool-call arguments parsed
    (a JSON object, else {}), no empty `tool_calls`, no `None` content."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if k != "train"}
        if m.get("role") == "assistant" and "tool_calls" in m:
            if not m["tool_calls"]:
                del m["tool_calls"]
            else:
                calls = []
                for tc in m["tool_calls"]:
                    tc = dict(tc)
                    fn = dict(tc.get("function") or {})
                    fn["arguments"] = _arguments(fn.get("arguments"))
                    tc["function"] = fn
                    calls.append(tc)
                m["tool_calls"] = calls
        if m.get("content") is None:
            m["content"] = ""
        out.append(m)
    return out


def _schema_order(arguments: dict[str, Any], tool: dict[str, Any] | None) -> dict[str, Any]:
    """`arguments` with the tool schema's properties first, in the schema's order (the order the
    grammar writes them in), then any others as they come."""
    props = list(((tool or {}).get("function") or {}).get("parameters", {}).get("properties") or {})
    first = {k: arguments[k] for k in props if k in arguments}
    return {**first, **{k: v for k, v in arguments.items() if k not in first}}


def constrained_answer(message: dict[str, Any], tools: Sequence[dict[str, Any]]) -> str:
    """The text a constrained reply making `message`'s one tool call is (`coevolve.llm.constrained`): the
    object `{"name": ..., "arguments": {...}}` as compact JSON (the Serve app's guidance backend allows
    no free whitespace), properties in the schema's order. TrainingError when the message does not
    make exactly one call: a constrained reply cannot be anything else."""
    calls = message.get("tool_calls") or []
    if len(calls) != 1:
        raise TrainingError(f"a constrained row's trained turn makes {len(calls)} tool calls, not 1")
    fn = calls[0].get("function") or {}
    by_name = {(t.get("function") or {}).get("name"): t for t in tools}
    arguments = _schema_order(_arguments(fn.get("arguments")), by_name.get(fn.get("name")))
    return json.dumps({"name": fn.get("name"), "arguments": arguments}, separators=(",", ":"), ensure_ascii=False)


def training_sequences(row: TrainingRow) -> list[TrainingRow]:
    """The rows a row is trained as: itself, or, for a constrained row with several loss-bearing turns,
    one row per such turn (everything before it, with no loss, and the turn), so that each turn's
    context is the prompt the server rendered for it (module comment above)."""
    trained = [i for i, m in enumerate(row.messages) if m.get("role") == "assistant" and m.get("train")]
    if len(trained) <= 1 or not is_constrained(row):
        return [row]
    out = []
    for i in trained:
        messages = tuple({**m, "train": False} if m.get("role") == "assistant" else m for m in row.messages[:i])
        out.append(TrainingRow((*messages, row.messages[i]), row.tools, {**row.provenance, "turn_of_row": i}))
    return out


def _render(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool
) -> str:
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, tokenize=False, add_generation_prompt=gen
    )


def _end_token_ids(tokenizer: Any) -> set[int]:
    ids = set()
    for tok in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", tokenizer.eos_token):
        if tok and tok in tokenizer.get_vocab():
            ids.add(tokenizer.convert_tokens_to_ids(tok))
    return ids


def prompt_ids(row: TrainingRow, tokenizer: Any) -> list[int]:
    """The tokens before the row's first loss-bearing turn: what the server's prompt for that turn is."""
    enc = encode_row(row, tokenizer, max_seq_len=1 << 30)
    return enc.input_ids[: next(i for i, x in enumerate(enc.labels) if x != IGNORE)]


def encode_row(row: TrainingRow, tokenizer: Any, max_seq_len: int = 4096) -> EncodedRow:
    """Tokens and labels for one row through the tokenizer's chat template (module comment above).

    Everything before the first loss-bearing turn is tokenised in one piece, as the server tokenised
    that turn's prompt; from there the conversation is rendered prefix by prefix and each piece
    tokenised on its own, as the model's generated tokens follow its prompt. Loss falls on an
    assistant turn's tokens (after the generation prompt, up to and including its end-of-turn token)
    when the turn has `train: true`. A constrained row takes one loss-bearing turn
    (`training_sequences` splits the others).
    """
    msgs = _template_messages(row.messages)
    tools = list(row.tools) or None
    constrained = is_constrained(row)
    trained = [i for i, m in enumerate(row.messages) if m.get("role") == "assistant" and m.get("train")]
    if constrained and len(trained) > 1:
        raise TrainingError("a constrained row with several trained turns is trained turn by turn (training_sequences)")
    if constrained and trained:  # the trained turn as the answer the grammar makes the model write
        i = trained[0]
        msgs[i] = {"role": "assistant", "content": constrained_answer(row.messages[i], row.tools)}
    ends = _end_token_ids(tokenizer)
    ids: list[int] = []
    labels: list[int] = []
    done = ""

    def add(text: str, train: bool) -> None:
        nonlocal done
        if not text.startswith(done):
            raise TrainingError(
                "the chat template is not prefix-stable (rendering more messages changed earlier text); "
                "per-turn loss masking needs a template that only appends"
            )
        piece = text[len(done) :]
        done = text
        toks = tokenizer(piece, add_special_tokens=False)["input_ids"] if piece else []
        lab = [IGNORE] * len(toks)
        if train and toks:
            last = max((i for i, t in enumerate(toks) if t in ends), default=len(toks) - 1)
            lab[: last + 1] = toks[: last + 1]
        ids.extend(toks)
        labels.extend(lab)

    for i, m in enumerate(row.messages):
        if m.get("role") == "assistant" and (i >= trained[0] if trained else True):
            add(_render(tokenizer, msgs[:i], tools, gen=True), False)
            add(_render(tokenizer, msgs[: i + 1], tools, gen=False), bool(m.get("train")))
    add(_render(tokenizer, msgs, tools, gen=False), False)
    return EncodedRow(ids[:max_seq_len], labels[:max_seq_len])


# ------------------------------------------------------------------------------- the peft loop
def _collate(batch: list[EncodedRow], pad_id: int) -> dict[str, Any]:
    import torch

    width = max(len(r.input_ids) for r in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    lab = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    att = torch.zeros((len(batch), width), dtype=torch.long)
    for i, r in enumerate(batch):
        n = len(r.input_ids)
        ids[i, :n] = torch.tensor(r.input_ids)
        lab[i, :n] = torch.tensor(r.labels)
        att[i, :n] = 1
    if bool(att.all()):  # no padding: let attention take its unmasked (faster) path
        return {"input_ids": ids, "labels": lab}
    return {"input_ids": ids, "labels": lab, "attention_mask": att}


def run_peft_loop(
    loop: dict[str, Any],
    *,
    restore: Callable[[], str | None],
    report: Callable[[dict[str, Any], str], None],
    rank: int = 0,
    world: int = 1,
    wrap_model: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """The LoRA SFT loop, shared by the Ray Train worker and the in-process bench baseline.

    `loop` holds: base, rows (JSON dicts), config (TrainConfig dict), progress_path (optional).
    `restore()` returns a checkpoint folder to resume from (or None); `report(metrics, folder)` is called
    after each epoch with a folder holding `adapter/` and `trainer_state.pt` (the caller persists it).
    """
    import torch
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = TrainConfig.model_validate(loop["config"])
    torch.set_num_threads(max(1, int(cfg.cpus_per_worker)))
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(loop["base"])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows = [_row_from_json(r, f"row {i}") for i, r in enumerate(loop["rows"])]
    encoded = [encode_row(s, tokenizer, cfg.max_seq_len) for r in rows for s in training_sequences(r)]
    # a sequence cut at max_seq_len before its loss-bearing turn has nothing to learn (and a loss over
    # no tokens is NaN): it is left out, and counted
    cut = sum(1 for e in encoded if not e.loss_tokens)
    encoded = [e for e in encoded if e.loss_tokens]
    if not encoded:
        raise TrainingError(
            f"every one of the {cut} training sequences is longer than max_seq_len {cfg.max_seq_len} before its"
            " trained turn: raise max_seq_len"
        )

    device = torch.device("cuda", torch.cuda.current_device()) if cfg.use_gpu else torch.device("cpu")
    model = AutoModelForCausalLM.from_pretrained(loop["base"], dtype=getattr(torch, cfg.dtype)).to(device)
    lora = LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora)  # autocast_adapter_dtype: LoRA weights stay float32 on a bf16 base
    optim = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
    )
    state = {"epoch": 0, "step": 0, "losses": [], "tokens": 0, "resumed_from_epoch": None,
             "sequences": len(encoded), "sequences_cut": cut}
    ckpt = restore()
    if ckpt:
        ck = Path(ckpt)
        set_peft_model_state_dict(
            model, load_file(str(ck / "adapter" / "adapter_model.safetensors"), device=str(device))
        )
        trainer_state = torch.load(ck / "trainer_state.pt", weights_only=False, map_location=device)
        optim.load_state_dict(trainer_state["optimizer"])  # moves its state to the parameters' device
        state.update(json.loads((ck / "state.json").read_text()))
        state["resumed_from_epoch"] = state["epoch"]
    if wrap_model is not None:
        model = wrap_model(model)
    model.train()

    per_epoch = cfg.steps_per_epoch(len(encoded))
    total = per_epoch * cfg.epochs
    progress_path = loop.get("progress_path")
    t_train = 0.0
    tokens_run = 0
    for epoch in range(state["epoch"], cfg.epochs):
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
        order = torch.randperm(len(encoded) * cfg.repeat, generator=gen).tolist()
        order = [order[i] % len(encoded) for i in range(rank, len(order), world)]
        epoch_losses = []
        for b in range(per_epoch):
            batch = [encoded[j] for j in order[b * cfg.batch_size : (b + 1) * cfg.batch_size]] or [encoded[0]]
            t0 = time.perf_counter()
            out = model(**{k: v.to(device) for k, v in _collate(batch, pad_id).items()})
            out.loss.backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
            t_train += time.perf_counter() - t0
            n_tok = sum(len(r.input_ids) for r in batch)
            tokens_run += n_tok
            state["tokens"] += n_tok
            state["step"] += 1
            epoch_losses.append(float(out.loss.detach()))
            if progress_path and rank == 0 and (b % 5 == 0 or b == per_epoch - 1):
                tmp = f"{progress_path}.tmp"
                Path(tmp).write_text(
                    json.dumps(
                        {"step": state["step"], "total": total, "epoch": epoch, "loss": epoch_losses[-1]}
                    )
                )
                os.replace(tmp, progress_path)
        state["epoch"] = epoch + 1
        state["losses"].append(sum(epoch_losses) / len(epoch_losses))
        with tempfile.TemporaryDirectory(prefix="coevolve-ckpt-") as d:
            base_model = model.module if hasattr(model, "module") else model
            if rank == 0:
                base_model.save_pretrained(Path(d) / "adapter")
                torch.save({"optimizer": optim.state_dict()}, Path(d) / "trainer_state.pt")
                (Path(d) / "state.json").write_text(json.dumps(state))
            metrics = {
                "epoch": state["epoch"],
                "step": state["step"],
                "loss": state["losses"][-1],
                "tokens": state["tokens"],
                "train_s": t_train,
                "tokens_per_s": tokens_run / t_train if t_train else 0.0,
            }
            report(metrics, d if rank == 0 else None)
    return {**state, "train_s": t_train, "tokens_run": tokens_run, "steps_total": total}


def _ray_train_loop(loop: dict[str, Any]) -> None:
    """Runs in each Ray Train worker."""
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    world = ctx.get_world_size()

    def restore() -> str | None:
        ck = ray.train.get_checkpoint()
        if ck is None:
            return None
        local = tempfile.mkdtemp(prefix="coevolve-restore-")
        return ck.to_directory(local)

    def report(metrics: dict[str, Any], folder: str | None) -> None:
        ck = ray.train.Checkpoint.from_directory(folder) if folder else None
        ray.train.report(metrics, checkpoint=ck)

    wrap = ray.train.torch.prepare_model if world > 1 else None
    run_peft_loop(
        loop, restore=restore, report=report, rank=ctx.get_world_rank(), world=world, wrap_model=wrap
    )


# ------------------------------------------------------------------------------ job interface
def store_root(store: Any) -> Path:
    return Path(getattr(store, "root", store))


def adapter_dir(store: Any, adapter_id: str) -> Path:
    return store_root(store) / ADAPTERS_DIR / adapter_id


def _check_base(base: str | Path) -> Path:
    p = Path(base)
    if not (p / "config.json").is_file():
        raise TrainingError(
            f"base model folder {str(p)!r} has no config.json (make one: coevolve models make-tiny)"
        )
    return p.resolve()


def _check_adapter_id(adapter_id: str) -> None:
    if not adapter_id or not all(c.isalnum() or c in "-_." for c in adapter_id) or adapter_id[0] == ".":
        raise TrainingError(f"adapter id {adapter_id!r} must be letters, digits, '-', '_' or '.'")


ProgressFn = Callable[[dict[str, Any]], None]


def train_adapter(
    rows: str | Path | Iterable[TrainingRow | dict[str, Any]],
    base: str | Path,
    adapter_id: str,
    config: TrainConfig | dict[str, Any] | None = None,
    store: Any = None,
    backend: str = "peft",
    *,
    progress: ProgressFn | None = None,
) -> AdapterRef:
    """Train an adapter from rows and register it in the store (module docstring).

    `store` is a `HarnessStore` (or its directory). The peft backend needs Ray running
    (`coevolve.cluster.runtime.start_ray`); rerunning after a crash resumes from the last epoch checkpoint.
    """
    if backend not in BACKENDS:
        raise TrainingError(f"unknown training backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if store is None:
        raise TrainingError("train_adapter needs a store")
    cfg = config if isinstance(config, TrainConfig) else TrainConfig.model_validate(config or {})
    _check_adapter_id(adapter_id)
    row_list = load_rows(rows)
    digest = dataset_hash(row_list)
    if not hasattr(store, "put_adapter"):
        from coevolve.store.store import HarnessStore

        store = HarnessStore(store)
    out = adapter_dir(store, adapter_id)
    if out.exists():
        raise TrainingError(f"adapter {adapter_id!r} already exists in the store ({out})")

    if backend == "synthetic":
        ref = _train_synthetic(row_list, str(base), adapter_id, cfg, out, digest)
    else:
        ref = _train_peft(row_list, _check_base(base), adapter_id, cfg, store, out, digest, progress)
    store.put_adapter(ref)
    log.info("adapter registered", adapter=adapter_id, backend=backend, path=ref.path)
    return ref


def _train_synthetic(
    rows: list[TrainingRow], base: str, adapter_id: str, cfg: TrainConfig, out: Path, digest: str
) -> AdapterRef:
    from coevolve.testbed.policy import learn_adapter

    learned = learn_adapter(rows, base_model=base)
    out.mkdir(parents=True)
    (out / SYNTHETIC_ADAPTER_FILE).write_text(json.dumps(learned, indent=2, sort_keys=True, default=str))
    return AdapterRef(
        id=adapter_id,
        base_model=base,
        path=str(out),
        dataset_hash=digest,
        train_config={"backend": "synthetic", **cfg.model_dump()},
        metrics={"rows": len(rows)},
        trained_under=trained_under(rows),
    )


def _train_peft(
    rows: list[TrainingRow],
    base: Path,
    adapter_id: str,
    cfg: TrainConfig,
    store: Any,
    out: Path,
    digest: str,
    progress: ProgressFn | None,
) -> AdapterRef:
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    runs = (store_root(store) / TRAIN_RUNS_DIR).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    progress_path = runs / f"{adapter_id}.progress.json"
    progress_path.unlink(missing_ok=True)  # an earlier, interrupted job's figures are not this job's progress
    loop = {
        "base": str(base),
        "rows": [row_to_json(r) for r in rows],
        "config": cfg.model_dump(),
        "progress_path": str(progress_path),
    }
    trainer = TorchTrainer(
        _ray_train_loop,
        train_loop_config=loop,
        scaling_config=ScalingConfig(
            num_workers=cfg.num_workers,
            use_gpu=cfg.use_gpu,
            resources_per_worker={"CPU": cfg.cpus_per_worker},
        ),
        run_config=RunConfig(
            name=adapter_id,
            storage_path=str(runs),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    stop = threading.Event()
    watcher = None
    if progress is not None:
        n_seq = sum(len(training_sequences(r)) for r in rows)
        progress({"step": 0, "total": cfg.steps_per_epoch(n_seq) * cfg.epochs, "epoch": 0, "loss": None})

        def watch() -> None:
            last = None
            while not stop.wait(0.5):
                try:
                    text = progress_path.read_text()
                except OSError:
                    continue
                if text != last:
                    last = text
                    try:
                        progress(json.loads(text))
                    except json.JSONDecodeError:
                        pass

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    t0 = time.perf_counter()
    try:
        result = trainer.fit()
    finally:
        stop.set()
        if watcher is not None:
            watcher.join(timeout=2)
    if result.error is not None:
        raise RuntimeError(f"training job {adapter_id!r} failed: {result.error}")
    if result.checkpoint is None:
        raise RuntimeError(f"training job {adapter_id!r} reported no checkpoint")
    with result.checkpoint.as_directory() as d:
        state = json.loads((Path(d) / "state.json").read_text())
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.parent / f".{adapter_id}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(Path(d) / "adapter", staging)
    os.replace(staging, out)
    metrics = {
        "steps": state["step"],
        "epochs": state["epoch"],
        "loss_curve": state["losses"],
        "tokens": state["tokens"],
        "resumed_from_epoch": state.get("resumed_from_epoch"),
        "sequences": state.get("sequences"),
        **({"sequences_cut": state["sequences_cut"]} if state.get("sequences_cut") else {}),
        "wall_s": round(time.perf_counter() - t0, 3),
        "tokens_per_s": (result.metrics or {}).get("tokens_per_s"),
    }
    if progress is not None:
        progress(
            {
                "step": state["step"],
                "total": state["step"],
                "epoch": state["epoch"],
                "loss": state["losses"][-1],
            }
        )
    return AdapterRef(
        id=adapter_id,
        base_model=str(base),
        path=str(out),
        dataset_hash=digest,
        train_config={"backend": "peft", **cfg.model_dump()},
        metrics=metrics,
        trained_under=trained_under(rows),
    )
