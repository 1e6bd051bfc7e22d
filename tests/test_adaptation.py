"""Weight adaptation: the judge and expert roles (recorded answers), the correction and imitation rows,
the replay check, datasets, the information boundary, and actor loss during a build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.agents.correction import BuildConfig, DatasetBuilder
from coevolve.agents.executor import assistant_positions
from coevolve.agents.expert import ExpertRewriter
from coevolve.agents.judge import Judge
from coevolve.agents.local import LocalBackend, LocalEvaluator
from coevolve.llm.contract import Completion
from coevolve.services.gateway import Gateway
from coevolve.tasks import get_family
from coevolve.testbed.counterfactual import with_counterfactuals
from coevolve.values import FailureLocus
from tests.rollouts import _GATEWAY, FunctionClient, proposer_complete, rollout_all

FIXTURES = Path(__file__).parent / "fixtures" / "roles"
FAM = get_family("iot")
H = FAM.baseline_harness()


class Recorded:
    """Replays recorded answers in order (then the last one); keeps what it was sent."""

    def __init__(self, *texts: str):
        self.texts = list(texts)
        self.sent: list[str] = []

    def __call__(self, model, messages, tools, seed):
        self.sent.append(json.dumps(messages))
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        return Completion({"role": "assistant", "content": text}, 100, 20, 0.001)


@pytest.fixture(scope="module")
def weak_failures():
    trajs = rollout_all(FAM.generate("train", 40), H, "synthetic/weak")
    return with_counterfactuals([t for t in trajs if not t.passed], H, client=Gateway())  # with the whole answer key, to leak


# ------------------------------------------------------------------ recorded answers
def test_judge_parses_a_fenced_answer_with_prose(weak_failures):
    t = next(t for t in weak_failures if len(t.turns) > 2)
    locus = Judge("x/recorded", FunctionClient(Recorded((FIXTURES / "judge_locate_fenced.txt").read_text()))).locate(t)
    assert locus.turn_index == 2 and "spikes" in locus.reason


def test_judge_retries_an_invalid_answer_then_records_unknown_with_the_rule_based_guess(weak_failures):
    t = weak_failures[0]
    rec = Recorded((FIXTURES / "judge_locate_out_of_range.txt").read_text())
    judge = Judge("x/recorded", FunctionClient(rec), retries=2)
    locus = judge.locate(t)
    assert len(rec.sent) == 3 and judge.usage.unparseable == 3
    assert locus.reason.startswith("unknown") and 0 <= locus.turn_index < len(t.turns)


def test_expert_parses_candidates_and_marks_the_unparseable_one(weak_failures):
    t = weak_failures[0]
    rec = Recorded((FIXTURES / "expert_rewrite_gemini.txt").read_text())
    cands = ExpertRewriter("x/recorded", FunctionClient(rec)).rewrite(t, FailureLocus(t.id, 0, "r"), k=3)
    assert cands[0]["tool_call"]["name"] == "upload_report" and "consecutive" in cands[0]["strategy"]
    assert cands[1]["tool_call"]["arguments"] == {"query": "SELECT 1"}  # arguments given as a JSON string
    assert "error" in cands[2]  # an empty strategy is not a rewrite


def test_judge_scores_a_schema_breaking_candidate_zero_without_asking(weak_failures):
    t = weak_failures[0]
    rec = Recorded('{"score": 1.0}')
    verdict = Judge("x/recorded", FunctionClient(rec)).score(t, FailureLocus(t.id, 0, "r"),
                                             {"strategy": "s", "tool_call": {"name": "upload_report", "arguments": {}}})
    assert verdict["score"] == 0.0 and not verdict["valid"] and rec.sent == []


def test_a_trajectory_whose_model_wrote_markdown_fences_reaches_the_synthetic_roles_whole(weak_failures):
    from dataclasses import replace

    t = weak_failures[0]
    first = assistant_positions(t.messages)[0]
    fenced = {**t.messages[first], "content": "Here is my plan:\n```sql\nSELECT 1; -- `a`\n```\ndone"}
    t = replace(t, messages=t.messages[:first] + (fenced,) + t.messages[first + 1 :])
    locus = Judge("synthetic/judge", FunctionClient(proposer_complete), retries=0).locate(t)  # a cut payload raised here before
    assert not locus.reason.startswith("unknown") and 0 <= locus.turn_index < len(t.turns)
    cands = ExpertRewriter("synthetic/expert", FunctionClient(proposer_complete), FAM.handbook, retries=0).rewrite(t, locus, k=2)
    assert len(cands) == 2 and all("error" not in c for c in cands)


# ------------------------------------------------------------------ the arms' rows
@pytest.fixture(scope="module")
def built():
    evaluator = LocalEvaluator(_GATEWAY)
    judge = Judge("synthetic/judge", FunctionClient(proposer_complete))
    expert = ExpertRewriter("synthetic/expert", FunctionClient(proposer_complete), FAM.handbook)
    out = {}
    for arm in ("correction", "imitation"):
        cfg = BuildConfig(arm, "iot", "synthetic/weak", "synthetic/expert", "synthetic/judge", rows=60, samples=3)
        builder = DatasetBuilder(cfg, H, FAM.generate("train"), LocalBackend(evaluator, judge, expert))
        student = builder.sample(cfg.model)
        experts = builder.sample(cfg.expert) if arm == "imitation" else []
        out[arm] = (builder.build(student, experts), student, evaluator)
    return out


def test_a_correction_row_carries_loss_on_exactly_one_assistant_turn_the_last(built):
    (rows, stats), _, _ = built["correction"]
    corrected = [r for r in rows if r.provenance["kind"] == "corrected"]
    assert corrected and stats["by_kind"]["corrected"] == len(corrected)
    for r in corrected:
        trained = [i for i, m in enumerate(r.messages) if m.get("role") == "assistant" and m.get("train")]
        assert trained == [len(r.messages) - 1]  # one turn, and nothing after it
        assert len(r.messages[-1]["tool_calls"]) == 1 and r.messages[-1]["content"]


def test_the_prefix_is_the_weak_models_own_text_unchanged(built):
    (rows, _), student, _ = built["correction"]
    by_id = {t.id: t for t in student}
    for r in (r for r in rows if r.provenance["kind"] == "corrected"):
        source = by_id[r.provenance["trajectory"]]
        turn = r.provenance["locus"]["turn"]
        prefix = source.messages[: assistant_positions(source.messages)[turn]]
        assert [{k: v for k, v in m.items() if k != "train"} for m in r.messages[:-1]] == list(prefix)
        assert all(m.get("train") is False for m in r.messages[:-1] if m.get("role") == "assistant")


def test_the_replay_really_resumes_from_the_corrected_turn(built):
    (rows, _), student, evaluator = built["correction"]
    by_id = {t.id: t for t in student}
    row = next(r for r in rows if r.provenance["kind"] == "corrected" and r.provenance["locus"]["turn"] > 0)
    source = by_id[row.provenance["trajectory"]]
    turn = row.provenance["locus"]["turn"]
    corrected = {k: v for k, v in row.messages[-1].items() if k != "train"}
    replay = evaluator.replay(source, H, turn, corrected)
    pos = assistant_positions(replay.messages)[turn]
    assert replay.messages[:pos] == source.messages[:pos]
    assert replay.messages[pos]["tool_calls"] == corrected["tool_calls"]
    assert replay.passed == row.provenance["replay_passed"]


def test_provenance_and_self_pass_rows(built):
    (rows, stats), student, _ = built["correction"]
    for r in rows:
        if r.provenance["kind"] == "corrected":
            p = r.provenance
            assert {"trajectory", "locus", "candidates", "replay_passed", "verified"} <= set(p)
            assert len(p["candidates"]) == 3 and all("score" in c for c in p["candidates"])
    self_pass = [r for r in rows if r.provenance["kind"] == "self-pass"]
    assert 0 < len(self_pass) <= round(60 * 0.1)
    runs = {}
    for t in student:
        runs.setdefault(t.instance.id, []).append(t.passed)
    for r in self_pass:  # only instances at the capability boundary, only their passing rollouts
        assert 0 < sum(runs[r.provenance["instance"]]) < len(runs[r.provenance["instance"]])
        assert all(m.get("train") for m in r.messages if m.get("role") == "assistant")
    assert stats["usage"]["expert"]["tokens"] > 0 and stats["usage"]["judge"]["calls"] > 0


def test_imitation_rows_are_the_experts_passing_rollouts_with_loss_everywhere(built):
    (rows, stats), _, _ = built["imitation"]
    full = [r for r in rows if r.provenance["kind"] == "expert-full"]
    assert full and stats["by_kind"]["expert-full"] == len(full)
    for r in full:
        assert r.provenance["model"] == "synthetic/expert"
        assert all(m.get("train") for m in r.messages if m.get("role") == "assistant")
    assert any(len(m.get("tool_calls") or ()) > 1 for r in full for m in r.messages)  # the expert batches


def test_datasets_load_unchanged_with_hugging_face(built, tmp_path):
    import datasets

    from coevolve.store.datasets import read_rows, write_dataset

    (rows, stats), _, _ = built["correction"]
    rec = write_dataset(tmp_path, rows, {"arm": "correction", **stats})
    assert write_dataset(tmp_path, rows, {"arm": "again"}).id == rec.id  # content-addressed
    assert read_rows(tmp_path, rec.id) == rows
    jsonl = datasets.load_dataset("json", data_files=str(rec.jsonl), split="train")
    parquet = datasets.load_dataset("parquet", data_files=str(rec.parquet), split="train")
    assert len(jsonl) == len(parquet) == len(rows)
    assert jsonl[0]["messages"][-1]["role"] == "assistant"
    assert json.loads(parquet[0]["provenance"])["kind"] == rows[0].provenance["kind"]


def test_the_judge_and_the_expert_never_receive_the_answer_key(weak_failures):
    from tests.test_boundaries import answer_key_leaks

    judge_rec, expert_rec = Recorded('{"turn": 0, "reason": "r"}'), Recorded('{"candidates": []}')
    judge, expert = Judge("x/j", FunctionClient(judge_rec), retries=0), ExpertRewriter("x/e", FunctionClient(expert_rec), retries=0)
    for t in weak_failures[:10]:
        assert t.ground_truth.get("deviations")  # there is something to leak
        locus = judge.locate(t)
        expert.rewrite(t, locus, k=2)
        judge.score(t, locus, {"strategy": "s", "tool_call": {"name": "list_objects", "arguments": {}}})
    assert judge_rec.sent and expert_rec.sent
    for text in judge_rec.sent + expert_rec.sent:
        assert answer_key_leaks(text, FAM) == []


def test_a_build_resumed_from_its_journal_gives_the_same_rows_in_the_same_order(built):
    _, student, evaluator = built["correction"]
    judge = Judge("synthetic/judge", FunctionClient(proposer_complete))
    expert = ExpertRewriter("synthetic/expert", FunctionClient(proposer_complete), FAM.handbook)
    cfg = BuildConfig("correction", "iot", "synthetic/weak", "synthetic/expert", "synthetic/judge", rows=24, samples=3,
                      concurrency=2)
    journal: dict[str, dict | None] = {}
    through = DatasetBuilder(cfg, H, FAM.generate("train"), LocalBackend(evaluator, judge, expert),
                             journal=lambda kind, p: journal.setdefault(p["trajectory"], p["row"]))
    expected, _ = through.build(student)
    # a crash mid-build leaves some failures handled, not necessarily a prefix (they run concurrently)
    done = {tid: row for i, (tid, row) in enumerate(journal.items()) if i % 3 != 1}
    redone: list[str] = []
    resumed = DatasetBuilder(cfg, H, FAM.generate("train"), LocalBackend(evaluator, judge, expert),
                             journal=lambda kind, p: redone.append(p["trajectory"]), done=done)
    rows, _ = resumed.build(student)
    assert len(done) < len(journal) and not set(redone) & set(done)  # finished work is not redone
    assert [r.to_json() for r in rows] == [r.to_json() for r in expected]


# ------------------------------------------------------------------ one transfer per failure
def test_a_failures_trajectory_is_encoded_once_for_all_its_role_calls(monkeypatch):
    """The judge's locate and k scores and the expert's rewrite of one failure read one object-store copy
    of its trajectory, not k + 2 encodings of it."""
    from collections import Counter

    from coevolve.services.pools import backend as ray_backend
    from coevolve.values import Trajectory
    from tests.test_experiment_params import InProcessPool, InProcessRoles

    encoded: Counter[str] = Counter()
    encode = ray_backend.encode

    def counted(value):
        if isinstance(value, Trajectory):
            encoded[value.id] += 1
        return encode(value)

    class Roles(InProcessRoles):
        calls = 0

        def call(self, method, *args):
            Roles.calls += 1
            return super().call(method, *args)

    monkeypatch.setattr(ray_backend, "encode", counted)
    cfg = BuildConfig("correction", "iot", "synthetic/weak", "synthetic/expert", "synthetic/judge", rows=8, samples=1, k=3)
    backend = ray_backend.RayBackend(InProcessPool(), Roles("judge", cfg.judge), Roles("expert", cfg.expert))
    builder = DatasetBuilder(cfg, H, FAM.generate("train", 24), backend)
    _, stats = builder.build(builder.sample(cfg.model))
    assert stats["by_kind"].get("corrected"), stats  # failures were located, rewritten and scored
    assert encoded and set(encoded.values()) == {1}
    assert Roles.calls >= (2 + cfg.k) * stats["by_kind"]["corrected"]  # each copy served its failure's k + 2 calls


# ------------------------------------------------------------------ actor loss during a build
@pytest.mark.slow  # ~30 s of actor kills and replacements
def test_killing_judge_and_expert_actors_mid_build_loses_nothing(ray_session, tmp_path):
    import threading

    import ray

    from coevolve.services.pools.backend import RayBackend
    from coevolve.services.pools.roles import RolePool
    from coevolve.services.pools.rollouts import RolloutPool

    cfg = BuildConfig("correction", "iot", "synthetic/weak", "synthetic/expert", "synthetic/judge", rows=12, samples=1,
                      concurrency=4)
    pool = RolloutPool(2)
    judges, experts = RolePool("judge", cfg.judge, 2), RolePool("expert", cfg.expert, 2)
    try:
        backend = RayBackend(pool, judges, experts)
        calm = DatasetBuilder(cfg, H, FAM.generate("train"), backend)
        student = calm.sample(cfg.model)
        expected, _ = calm.build(student)

        killed = threading.Event()
        journal = []

        def kill_once(kind, payload):
            journal.append(payload["trajectory"])
            if not killed.is_set():
                killed.set()
                ray.kill(judges.actors[0], no_restart=True)
                ray.kill(experts.actors[1], no_restart=True)

        stormy = DatasetBuilder(cfg, H, FAM.generate("train"), backend, journal=kill_once)
        rows, _ = stormy.build(student)
    finally:
        for p in (pool, judges, experts):
            p.shutdown()
    assert killed.is_set() and judges.replacements >= 1 and experts.replacements >= 1
    assert [r.to_json() for r in rows] == [r.to_json() for r in expected]
    assert len(journal) == len(set(journal))  # nothing handled twice


# ------------------------------------------------------------------ judge accuracy
def test_locus_accuracy_scores_each_guesser_on_all_failures_and_where_the_first_error_rule_is_wrong():
    from coevolve.analysis.rollouts import locus_accuracy

    def row(truth, judge, first_error, observed, turns=5):
        return {"truth": truth, "turns": turns, "judge": judge, "first_error": first_error,
                "first_error_observed": observed, "first_error_wrong": not observed or first_error != truth,
                "rule_wrong": first_error != truth, "unknown": False}

    rows = [row(1, 1, 1, True),  # the first error is the decisive turn
            row(2, 2, 1, True), row(3, 2, 0, True),  # the first error is not decisive
            row(3, 3, 3, False), row(0, 4, 3, False)]  # no error observation: the rule's fallback guess
    out = locus_accuracy(rows)
    assert out["all"]["n"] == 5 and out["first_error_wrong"]["n"] == 4
    wrong = out["first_error_wrong"]
    assert (wrong["no_error_observation"], wrong["first_error_not_decisive"]) == (2, 2)
    assert out["all"]["judge"]["exact"] == 0.6 and out["all"]["judge"]["within_one"] == 0.8
    assert out["all"]["first_error"]["exact"] == 0.4  # right once by observation, once by its fallback
    assert out["first_error_wrong"]["first_error"]["exact"] == 0.25  # only the fallback's lucky guess
    assert out["first_error_wrong"]["judge"]["exact"] == 0.5
    assert out["all"]["random"]["exact"] == 0.2  # 1 / 5 turns, expected, not drawn
    assert out["all"]["random"]["within_one"] == round(14 / 25, 4)  # 3 turns within one, 2 for turn 0
    lo, hi = out["all"]["judge"]["exact_ci95"]
    assert lo < 0.6 < hi and 0 <= lo and hi <= 1
    rule = out["rule_wrong"]  # the fallback's lucky guess is off this subset: the rule scores 0 here
    assert (rule["n"], rule["no_error_observation"]) == (3, 1)
    assert rule["first_error"]["exact"] == 0 and rule["judge"]["exact"] == round(1 / 3, 4)
    empty = locus_accuracy([row(1, 1, 1, True)])["first_error_wrong"]
    assert empty["n"] == 0 and empty["judge"]["exact"] is None


def test_judge_accuracy_per_family_beside_both_baselines_with_counterfactuals_from_the_store(
    ray_session, tmp_path, capsys
):
    from coevolve.agents.judge import rule_based_guess
    from coevolve.agents.transcript import first_error_turn
    from coevolve.cli.adapt import print_judge_accuracy
    from coevolve.cli.app import app  # noqa: F401 — the CLI first: it registers cli_adapt's commands
    from coevolve.jobs.adapt import judge_accuracy, judge_families
    from coevolve.store.store import HarnessStore
    from coevolve.testbed.counterfactual import merge_counterfactuals

    assert judge_families("all") == ["payroll", "budget", "stock", "iot", "browser", "website", "refactor"]
    assert judge_families("iot, payroll,iot") == ["iot", "payroll"]
    with pytest.raises(ValueError, match="unknown task family"):
        judge_families("iot,nope")
    out = judge_accuracy(tmp_path / "store", "iot,payroll", "synthetic/judge", split="test", n=6, repeats=2,
                         workers=1)
    assert set(out["families"]) == {"iot", "payroll"}
    store = HarnessStore(tmp_path / "store", create=False)
    for family, r in out["families"].items():
        trajs = store.get_trajectories(out["run_id"], f"rollouts:{family}")
        assert len(trajs) == r["rollouts"] == 12 and all(t.instance.family == family for t in trajs)
        failed = [t for t in trajs if not t.passed and t.error != "infra"]
        assert r["failures"] == len(failed) > 0
        assert "decisive_turn" not in failed[0].ground_truth  # stored as rolled out; the key is in the cache
        h = get_family(family).baseline_harness()
        cached = store.get_counterfactuals([(t.id, h.id) for t in failed])
        assert len(cached) == len(failed)  # every failure's counterfactual was computed once and kept
        keyed = [t for t in merge_counterfactuals(failed, {tid: v for (tid, _), v in cached.items()})
                 if t.ground_truth["decisive_turn"] is not None]
        assert r["with_decisive_turn"] == len(keyed) == r["loci"]["all"]["n"] > 0
        wrong = [t for t in keyed if first_error_turn(t) != t.ground_truth["decisive_turn"]]
        sub = r["loci"]["first_error_wrong"]
        assert sub["n"] == len(wrong)
        missed = [t for t in keyed if rule_based_guess(t)[0] != t.ground_truth["decisive_turn"]]
        assert r["loci"]["rule_wrong"]["n"] == len(missed) <= len(wrong)
        assert r["loci"]["rule_wrong"]["first_error"]["exact"] in (0, None)
        assert sub["no_error_observation"] == sum(first_error_turn(t) is None for t in wrong)
        # off the subset the rule is right by definition: its hits everywhere are those plus its subset hits
        everywhere, there = r["loci"]["all"]["first_error"]["exact"], sub["first_error"]["exact"] or 0.0
        assert round(everywhere * len(keyed) - there * len(wrong)) == len(keyed) - len(wrong)
        for guesser in ("judge", "first_error", "random"):
            a = r["loci"]["all"][guesser]
            assert 0 <= a["exact"] <= a["within_one"] <= 1
            assert a["exact_ci95"][0] <= a["exact"] <= a["exact_ci95"][1]
    assert "offline testbed" in out["notice"]
    capsys.readouterr()
    print_judge_accuracy(out)
    text = capsys.readouterr().out
    assert "first error wrong" in text and "iot" in text and "payroll" in text and "offline testbed" in text
