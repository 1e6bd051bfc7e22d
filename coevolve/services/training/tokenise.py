"""Training rows rendered to token ids and loss labels through the base model's own chat template, so that
the model is trained on what it saw and wrote:

- A row's messages and tools are what the rollout sent the server for its turns (the correction
  row's prefix is the context policy's view, and the tools those the environment offered:
  `coevolve.agents.correction`). vLLM's OpenAI server normalises the messages before its chat template sees
  them (`vllm.renderers.chat_utils._postprocess_messages`): a tool call's `arguments` string is
  parsed, and arguments that are not a JSON object (not JSON, a list, a number) or are empty become
  `{}`; an empty `tool_calls` list is dropped. `_template_messages` does the same.
- The prompt of the first loss-bearing turn is the chat template's rendering of everything before
  it with the generation prompt, tokenised in one piece (vLLM tokenises a chat prompt whole,
  without special tokens): token for token the prompt the server built for that turn.
- A loss-bearing turn is what the model writes: in free mode the template's rendering of the message
  (the `<tool_call>` form the server's tool parser reads); in constrained mode (the row's provenance
  names `decoding.tool_calls: constrained`) the one call as the JSON text the structured-output
  grammar makes it write (`constrained_answer`). Either way through its end-of-turn token.
- In constrained mode the server shows an earlier call in its `<tool_call>` form, not as the JSON
  written, so a row with several loss-bearing turns cannot be one plain sequence: each such turn's
  context is the server's prompt for it (`training_sequences`). `encode_for_training` packs them
  into one tree-shaped sequence: the last turn's prompt is the trunk (every earlier turn's prompt is
  a token prefix of it), and each turn's answer is a branch that attends to the trunk up to its own
  prompt's length and to itself, at the positions it had after that prompt (`EncodedRow.branches`).
  The shared prefix is then computed once per row, not once per turn, with the same per-token loss.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coevolve.llm.constrained import arguments_object
from coevolve.services.training.rows import TrainingError, row_decoding
from coevolve.values import TrainingRow

CONSTRAINED = "constrained"
IGNORE = -100  # the label of a token that carries no loss


def is_constrained(row: TrainingRow) -> bool:
    return row_decoding(row).get("tool_calls") == CONSTRAINED


@dataclass(frozen=True)
class EncodedRow:
    """A training sequence: tokens, and labels (the token itself where it carries loss, else IGNORE).

    A tree-packed sequence has `branches`: branch `(start, end, attach)` is the tokens
    `input_ids[start:end]`, which follow `input_ids[:attach]` (the trunk, everything before the first
    branch) and nothing else: they attend to the trunk's first `attach` tokens and to their own branch,
    at positions `attach, attach + 1, ...`, and the first is predicted from the trunk's token
    `attach - 1`."""

    input_ids: list[int]
    labels: list[int]
    branches: tuple[tuple[int, int, int], ...] = ()

    @property
    def loss_tokens(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE)

    def positions(self) -> list[int]:
        pos = list(range(len(self.input_ids)))
        for start, end, attach in self.branches:
            pos[start:end] = range(attach, attach + end - start)
        return pos

    def predictors(self) -> list[int]:
        """For each token, the index of the token whose logits predict it (-1 for the first)."""
        pred = [i - 1 for i in range(len(self.input_ids))]
        for start, _, attach in self.branches:
            pred[start] = attach - 1
        return pred

    def context(self, i: int) -> list[int]:
        """The tokens the model sees before token `i`."""
        for start, end, attach in self.branches:
            if start <= i < end:
                return self.input_ids[:attach] + self.input_ids[start:i]
        return self.input_ids[:i]


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
                    fn["arguments"] = arguments_object(fn.get("arguments"))
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
    arguments = _schema_order(arguments_object(fn.get("arguments")), by_name.get(fn.get("name")))
    return json.dumps({"name": fn.get("name"), "arguments": arguments}, separators=(",", ":"), ensure_ascii=False)


def training_sequences(row: TrainingRow) -> list[TrainingRow]:
    """The rows a row is trained as: itself, or, for a constrained row with several loss-bearing turns,
    one row per such turn (everything before it, with no loss, and the turn), so that each turn's
    context is the prompt the server rendered for it (module docstring)."""
    trained = [i for i, m in enumerate(row.messages) if m.get("role") == "assistant" and m.get("train")]
    if len(trained) <= 1 or not is_constrained(row):
        return [row]
    out = []
    for i in trained:
        messages = tuple({**m, "train": False} if m.get("role") == "assistant" else m for m in row.messages[:i])
        out.append(TrainingRow((*messages, row.messages[i]), row.tools, {**row.provenance, "turn_of_row": i}))
    return out


def _loss_span(enc: EncodedRow) -> tuple[int, int] | None:
    """The first and one past the last loss-bearing index of `enc`, or None when nothing carries loss."""
    at = [i for i, x in enumerate(enc.labels) if x != IGNORE]
    return (at[0], at[-1] + 1) if at else None


def encode_for_training(row: TrainingRow, tokenizer: Any, max_seq_len: int) -> list[EncodedRow]:
    """The sequences `row` is trained as, each cut at `max_seq_len` tokens of context and after its
    last loss-bearing token (what follows it changes no loss): `encode_row`'s one sequence or, for a
    constrained row with several loss-bearing turns, one tree-packed sequence (module docstring). A turn
    whose prompt is not a token prefix of the last turn's (no chat template seen so far does that)
    is a sequence of its own."""
    parts = training_sequences(row)
    if len(parts) == 1:
        enc = encode_row(row, tokenizer, max_seq_len)
        span = _loss_span(enc)
        return [EncodedRow(enc.input_ids[: span[1]], enc.labels[: span[1]]) if span else enc]
    turns = []  # (prompt, answer ids, answer labels)
    for part in parts:
        enc = encode_row(part, tokenizer, max_seq_len=1 << 30)
        span = _loss_span(enc)
        if span:
            a, b = span
            turns.append((enc.input_ids[:a], enc.input_ids[a:b], enc.labels[a:b]))
    if not turns:
        return []
    last = turns[-1][0]
    tree = [t for t in turns if last[: len(t[0])] == t[0]]  # the last turn's own is always one
    out = [EncodedRow((p + a)[:max_seq_len], ([IGNORE] * len(p) + lab)[:max_seq_len])
           for p, a, lab in turns if last[: len(p)] != p]
    kept = [(p, a[:k], lab[:k]) for p, a, lab in [tree[-1], *tree[:-1]] if (k := min(len(a), max_seq_len - len(p))) > 0]
    if kept:
        ids = last[: max(len(p) for p, _, _ in kept)]
        labels, branches = [IGNORE] * len(ids), []
        for prompt, answer, lab in kept:
            branches.append((len(ids), len(ids) + len(answer), len(prompt)))
            ids += answer
            labels += lab
        out.insert(0, EncodedRow(ids, labels, tuple(branches)))
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
        i = tokenizer.convert_tokens_to_ids(tok) if tok else None
        if i is not None and tokenizer.convert_ids_to_tokens(i) == tok:  # an unknown token maps to unk
            ids.add(i)
    return ids


def prompt_ids(row: TrainingRow, tokenizer: Any) -> list[int]:
    """The tokens before the row's first loss-bearing turn: what the server's prompt for that turn is."""
    enc = encode_row(row, tokenizer, max_seq_len=1 << 30)
    return enc.input_ids[: next(i for i, x in enumerate(enc.labels) if x != IGNORE)]


def encode_row(row: TrainingRow, tokenizer: Any, max_seq_len: int = 4096) -> EncodedRow:
    """Tokens and labels for one row through the tokenizer's chat template (module docstring).

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
