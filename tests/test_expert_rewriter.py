"""The synthetic expert rewriter sees only its inputs (docs/ARCHITECTURE.md §5): the payload, its own knowledge and
the handbook it reads through the handbook tools — never the fact list's wording, nor the instance's
world, plan or traps outside the executor policy's documented simplification (computing a call's
arguments for the state it sees)."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

import pytest

import coevolve.testbed.policy as synthetic
from coevolve.agents.expert import ExpertRewriter
from coevolve.agents.judge import Judge
from coevolve.tasks import get_family
from coevolve.testbed.respond import respond
from tests.rollouts import FunctionClient, proposer_complete, rollout_all

FAMILIES = ("iot", "payroll", "browser")
TEMPLATES = (r"Call \w+ again with every required argument, checked against the tool's schema\.",
             r"Before acting, get the data the next step needs with \w+\.",
             r"Do \w+ next and check its result before going on\.", r"Finish the task\.")


class Spy:
    """The gateway, keeping every (messages, tools, seed, answer) the rewriter's model was asked."""

    def __init__(self):
        self.calls: list[tuple[list, list, int, dict]] = []

    def __call__(self, model, messages, tools, seed):
        comp = proposer_complete(model, messages, tools, seed)
        self.calls.append((json.loads(json.dumps(messages)), tools, seed, comp.message))
        return comp


def _rewrites(family: str, n: int = 4, k: int = 2):
    fam = get_family(family)
    trajs = rollout_all(fam.generate("train", 16), fam.baseline_harness(), "synthetic/weak")
    out = []
    for t in [t for t in trajs if not t.passed][:n]:
        locus = Judge("synthetic/judge", FunctionClient(proposer_complete), retries=0).locate(t)
        spy = Spy()
        cands = ExpertRewriter("synthetic/expert", FunctionClient(spy), fam.handbook).rewrite(t, locus, k=k)
        out.append((t, cands, spy))
    return out


@contextmanager
def answer_key_raises(monkeypatch, family):
    """The family's fact list, plan, world (and so its traps), answer key and full knowledge raise on
    access, except inside the executor policy's `respond` (the documented simplification)."""
    inside = [0]
    real_respond = synthetic.SyntheticPolicy.respond

    def respond(self, *a, **kw):
        inside[0] += 1
        try:
            return real_respond(self, *a, **kw)
        finally:
            inside[0] -= 1

    cls = type(get_family(family))

    def guard(name, value):
        def get(self):
            if not inside[0]:
                raise AssertionError(f"the rewriter read {family}.{name}")
            return value.__get__(self, cls) if hasattr(value, "__get__") and callable(value) else value
        monkeypatch.setattr(cls, name, property(get))

    for name in ("facts", "constraints", "plan", "world", "answer_key", "full_knowledge"):
        guard(name, getattr(cls, name))
    monkeypatch.setattr(synthetic.SyntheticPolicy, "respond", respond)
    yield
    monkeypatch.undo()


@pytest.mark.parametrize("family", FAMILIES)
def test_the_rewriter_s_answers_are_unchanged_when_the_answer_key_raises(family, monkeypatch):
    for _, _, spy in _rewrites(family, n=3):
        expected = [answer for *_, answer in spy.calls]
        with answer_key_raises(monkeypatch, family):
            got = [respond("expert", messages, tools, seed).message for messages, tools, seed, _ in spy.calls]
        assert got == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_the_rewriter_searches_and_reads_the_handbook_and_cites_only_its_words(family):
    fam = get_family(family)
    handbook = " ".join(" ".join(s.text.split()) for s in fam.handbook.sections)
    statements = [f.statement for f in fam.facts] + [c.statement for c in fam.constraints]
    cited = 0
    for t, cands, spy in _rewrites(family, n=6):
        used = [c["function"]["name"] for *_, answer in spy.calls for c in answer.get("tool_calls") or ()]
        assert "search_handbook" in used and "read_handbook" in used
        for c in cands:
            assert "error" not in c
            strategy = c["strategy"]
            assert not any(s in strategy for s in statements)  # never the fact list's wording
            if any(re.fullmatch(p, strategy) for p in TEMPLATES):
                continue
            cited += 1
            # every sentence is the handbook's own (so a rare fact comes only from what it read)
            for sentence in re.split(r"(?<=[.!?])\s+", strategy):
                assert sentence in handbook, sentence
    assert cited  # it does cite the handbook somewhere
