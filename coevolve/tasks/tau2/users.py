"""The customer on the other end of the conversation.

Two users, chosen per rollout by the environment variable `COEVOLVE_TAU2_USER_MODEL`:

- set (any litellm model, e.g. `gemini/gemini-2.5-flash`, `gpt-4.1`): tau2's own LLM user simulator
  (`tau2.user.user_simulator.UserSimulator`, tau2's guidelines and the task's `user_scenario`), called
  through tau2's `generate` (litellm), temperature 0 unless `COEVOLVE_TAU2_USER_ARGS` says otherwise.
  As in tau2's `Orchestrator`, the conversation starts from tau2's greeting (`GREETING`, the agent's first
  message) and the simulator writes the customer's first message itself (`SimulatedUser.opening`); the
  rollout's seed goes into its litellm arguments (`seed`), as tau2's orchestrator does with the per-trial
  seed of `tau2 run` (`BaseUser.set_seed`). This is the user tau2's published numbers use. In a rollout
  its calls go through the model gateway the executor hands over (`CustomerCall`: the gateway's timeout,
  retries of infra failures and redaction of secrets from errors), so an unreachable customer ends the
  rollout as infra, never as the agent's failure; without one (the reference solver, tests) tau2's own
  `generate` calls litellm;
- unset: `ScriptedUser`, an offline stand-in that answers from the task's `Scenario` (never from the
  task's evaluation criteria) by fixed, documented rules and never calls a model: it exists so the
  families run in CI and under the reference solver, not to measure a real agent. It follows the parts of
  tau2's user guidelines that rules can follow: it discloses information progressively (a known fact only
  when the agent asks for that kind of fact), never reads out the scenario's stage directions, and
  confirms only actions its scenario asks for.

Stop semantics are tau2's: a reply containing `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###`
ends the conversation (tau2's `USER_STOP`).
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coevolve.llm.constrained import arguments_object
from coevolve.llm.contract import Completion
from coevolve.tasks.rules import affirmed
from coevolve.tasks.tau2.data import Scenario

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
GREETING = "Hi! How can I help you today?"  # tau2's DEFAULT_FIRST_AGENT_MESSAGE
MAX_SCRIPTED_REPLIES = 30


def is_stop(text: str) -> bool:
    return any(tok in (text or "") for tok in (STOP, TRANSFER, OUT_OF_SCOPE))


# ---------------------------------------------------------------------------------- first person
_OBJECT_BEFORE = (
    r"to|for|with|tell|tells|told|give|gives|gave|ask|asks|asked|help|helps|about|than|from|let|lets|offer|"
    r"offers|offered|send|sends|sent|show|shows|call|calls|contact|contacts|of|at|on|by|charge|charged|"
    r"refund|refunded|remind|reminds|assure|assures|inform|informs|informed|transfer|transfers|upgrade|deny|"
    r"allow|allows|allowed|let|bring|brings|cost|costs|owe|owes|pay|paid|email|emailed|see|saw|meet|met"
)
_RULES = [
    (r"\byou are\b", "I am"),
    (r"\byou were\b", "I was"),
    (r"\byou're\b", "I'm"),
    (r"\byou've\b", "I've"),
    (r"\byou'd\b", "I'd"),
    (r"\byou'll\b", "I'll"),
    (r"\byourself\b", "myself"),
    (r"\byours\b", "mine"),
    (r"\byour\b", "my"),
    (rf"\b({_OBJECT_BEFORE})\s+you\b", r"\1 me"),
    (r"\byou\b", "I"),
]


def first_person(text: str) -> str:
    """The scenario's second-person text as the customer would say it ("You want to cancel your
    flight" -> "I want to cancel my flight"); a mechanical rewrite, good enough for a stand-in."""
    out = " ".join(text.split())
    for pattern, repl in _RULES:
        out = re.sub(pattern, repl, out, flags=re.IGNORECASE)
    out = re.sub(r"\bi\b", "I", out)
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), out)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<!i\.e\.)(?<!e\.g\.)(?<=[.!?])\s+|\n+", text or "") if s.strip() and s.strip(" .")]


# ---------------------------------------------------------------------------------- what may be said
# A stage direction is a sentence about the agent, about what (not) to reveal or how to behave, or a
# conditional: "If the agent says ..., insist", "Be persistent", "You are a private person", "Do not ...".
_MARKERS = re.compile(
    r"\b(agent|agents|representative|insist\w*|persist\w*|reveal\w*|if|unless|when|whenever|otherwise|even|"
    r"do not|don't|dont|never|mention\w*|pretend\w*|make up|made up|story|test|incorrect|tactics?|coercion|"
    r"confus\w*|volunteer\w*|information than|halfway|abruptly|sudden\w*|change your mind|ask\w*|tell\w*|"
    r"say|says|said|sound|swear\w*|jokes?|laugh\w*|conversation|call|adamant\w*|admit\w*|attempts?|times|"
    r"emotional|upset|angry|rude|polite|tone|natural|instructions?|scenario|simulat\w*|guess)\b",
    re.IGNORECASE,
)
_PERSONA = re.compile(r"^(you are|you're)\b(?!\s+(also\s+)?(contacting|calling|looking|trying to (book|change|cancel|get|find)))",
                      re.IGNORECASE)
_IMPERATIVE = re.compile(r"^(be|make|try|use|avoid|act|keep|let|ensure|remember|note|do|first|then|after|before|only)\b",
                         re.IGNORECASE)
_ACTION_START = re.compile(r"^(cancel|return|exchange|change|modify|book|upgrade|downgrade|remove|add|update)\b", re.IGNORECASE)
_WANT = re.compile(r"\b(want|wants|wish|wishes|would like|'d like|need|needs|looking to|contacting|calling)\b", re.IGNORECASE)
_CONNECTIVE = re.compile(r"^(also|then|additionally|lastly|finally|first|second|and|but|so)\b,?\s*", re.IGNORECASE)


def is_direction(sentence: str) -> bool:
    """True for a sentence that is not the customer's own words: a stage direction (see `_MARKERS`), a
    persona line ("You are a private person"), or an instruction in the imperative ("Be brief")."""
    s = _CONNECTIVE.sub("", sentence.strip())
    return bool(_MARKERS.search(s) or _PERSONA.match(s) or _IMPERATIVE.match(s))


def _strip_parentheses(sentence: str) -> str:
    """Parenthetical asides that are stage directions ("(but do not reveal it to the agent)") are cut;
    others ("(IFOYYZ and NQNU5R)") stay."""
    out = re.sub(r"\s*\(([^()]*)\)", lambda m: "" if is_direction(m.group(1)) or not m.group(1).strip() else m.group(0), sentence)
    return " ".join(out.split())


def own_words(sentence: str) -> str | None:
    """The part of a scenario sentence the customer may say, or None: the whole sentence when it is no
    stage direction; else its lead clause (up to the last comma before the first marker) when that clause
    is a clean request ("You want to cancel the grill, but if the agent asks ..." -> "You want to cancel
    the grill"); an imperative request ("Also cancel the boot.") becomes a want ("I want to cancel ...")."""
    s = _strip_parentheses(sentence).strip().rstrip(".!;,:")
    s = re.sub(r",?\s+if (at all )?(available|possible|needed|necessary)\b", "", s, flags=re.IGNORECASE)
    if not s or s.count("(") != s.count(")"):
        return None
    body = _CONNECTIVE.sub("", s)
    if _ACTION_START.match(body) and not is_direction(body):
        return "You want to " + body[0].lower() + body[1:]
    if not is_direction(s):
        return s if _WANT.search(s) or not _PERSONA.match(s) else None
    m = _MARKERS.search(s)
    lead = s[: m.start()] if m else ""
    cut = lead.rfind(",")
    if cut <= 0:
        return None
    lead = lead[:cut].strip()
    return lead if len(lead.split()) >= 4 and _WANT.search(lead) and not is_direction(lead) else None


# ---------------------------------------------------------------------------------- facts
@dataclass(frozen=True)
class Fact:
    """One item of the scenario's known info: its kind and its value ("zip", "19122"), or for a fact
    that fits no kind ("other") the sentence itself, said in the first person when asked about."""

    kind: str
    value: str


KINDS = ("user_id", "name", "email", "zip", "address", "reservation", "order", "payment", "other")
# what the agent's message must mention for the customer to give a fact of that kind
_ASKS = {
    "user_id": r"user[\s_-]?id|user ?name|account (id|number)|\bid\b",
    "name": r"\bname\b",
    "email": r"e-?mail",
    "zip": r"\bzip|postal|post code",
    "address": r"\baddress",
    "reservation": r"reservation|confirmation (number|code)|booking (reference|number|code|id)",
    "order": r"order (id|number)|which order|\border #",
    "payment": r"payment|\bcard\b|pay (with|for|by)",
}
_IDENTITY = r"identity|verify|verification|authenticat\w*|identif\w*|look up your account|locate your (account|profile)|account details"
_LABEL = {"user_id": "user ID", "name": "name", "email": "email address", "zip": "zip code", "address": "address",
          "reservation": "reservation number", "order": "order number", "payment": "payment details"}
_SAY = {
    "user_id": ("My user ID is {v}.", "It's {v}.", "Sure, my user ID is {v}."),
    "name": ("My name is {v}.", "I'm {v}.", "The name is {v}."),
    "email": ("My email is {v}.", "It's {v}.", "Sure, my email address is {v}."),
    "zip": ("My zip code is {v}.", "The zip code is {v}.", "It's {v}."),
    "address": ("My address is {v}.", "It's {v}."),
    "reservation": ("The reservation number is {v}.", "It's {v}.", "My confirmation number is {v}."),
    "order": ("The order number is {v}.", "It's order {v}."),
    "payment": ("{v}.",),
}
_UNKNOWN = ("Sorry, I don't remember my {label}.", "I'm afraid I don't know my {label}.", "I don't have my {label} at hand.")

_USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{3,5}\b")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+\w")
_ZIP = re.compile(r"\b\d{5}\b")
_RESERVATION = re.compile(r"\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6}\b")
_ORDER = re.compile(r"#W\d{7}")
_NAME = re.compile(
    r"\b(?i:you are|you're|your name is|you name is|called)\s+(?:user\s+)?"
    r"([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)(?=\s*(?:[,.(]|$|\s+and\b|\s+in\b|\s+from\b|\s+living\b|\s+residing\b|\s+but\b|\s+with\b))"
)
_ADDRESS = re.compile(r"\b\d+ [A-Z][a-z]+ (?:Drive|Street|St|Avenue|Ave|Road|Rd|Lane|Ln|Boulevard|Blvd|Way|Court)\b[^.]*\d{5}")


def known_facts(known_info: str) -> list[Fact]:
    """The scenario's known info split into typed items (user id, name, email, zip, address, reservation
    and order numbers); a sentence with none of them and no stage direction is one "other" fact."""
    facts: list[Fact] = []

    def add(kind: str, value: str) -> None:
        value = value.strip().strip("'\"")
        if value and Fact(kind, value) not in facts:
            facts.append(Fact(kind, value))

    for s in sentences(known_info):
        found = len(facts)
        for m in _ADDRESS.finditer(s):
            add("address", m.group(0))
        addresses = [f.value for f in facts if f.kind == "address"]
        for kind, pattern in (("name", _NAME), ("user_id", _USER_ID), ("email", _EMAIL), ("zip", _ZIP),
                              ("reservation", _RESERVATION), ("order", _ORDER)):
            for m in pattern.finditer(s):
                value = m.group(pattern.groups)  # _NAME's one group is the name; the others are whole matches
                # a zip inside an address is a fact of its own only when no zip is known yet
                if kind != "zip" or not any(value in a for a in addresses) or not any(f.kind == "zip" for f in facts):
                    add(kind, value)
        if len(facts) == found and not is_direction(s):
            add("other", s.rstrip("."))
    return facts


def unknown_kinds(unknown_info: str) -> list[str]:
    """The kinds of fact the customer says it does not know ("You do not remember your email address");
    conditional sentences there ("If the agent asks for payment, say ...") are not about not knowing."""
    text = " ".join(s for s in sentences(unknown_info) if not re.search(r"\b(if|agent|say)\b", s, re.IGNORECASE)).lower()
    return [k for k, pat in _ASKS.items() if re.search(pat, text)]


def asked_kinds(agent_text: str, known: list[Fact]) -> list[str]:
    """The kinds of fact the agent's message asks for. A request for "your identity" (without naming a
    kind) asks for what identifies the customer: the user id if known, else the email, else name and zip."""
    text = agent_text.lower()
    kinds = [k for k, pat in _ASKS.items() if re.search(pat, text)]
    if "user_id" in kinds and re.search(r"\b(reservation|order|item|product|payment|card)\s+id\b", text) and not re.search(
        r"user[\s_-]?id|user ?name|account", text
    ):
        kinds.remove("user_id")  # "the reservation ID" asks for a reservation, not the account
    if not kinds and re.search(_IDENTITY, text):
        have = {f.kind for f in known}
        kinds = ["user_id"] if "user_id" in have else ["email"] if "email" in have else ["name", "zip"]
    return kinds


# ---------------------------------------------------------------------------------- confirmations
# action words, by class: a confirmation is accepted only if every class the agent's proposal names is
# named in what the customer asked for (its reason for calling and task instructions)
ACTIONS = {
    "cancel": r"cancel\w*",
    "refund": r"refund\w*|reimburs\w*",
    "book": r"\bbook(ing|ed)?\b|reserve a|purchase a new|new reservation",
    "exchange": r"exchang\w*|swap\w*",
    "return": r"\breturn(ing|ed)?\b",
    "modify": r"modif\w*|chang\w*|updat\w*|switch\w*|mov(e|ing)\b|push\w* back|reschedul\w*",
    "upgrade": r"upgrad\w*",
    "downgrade": r"downgrad\w*",
    "remove": r"remov\w*|\bdrop\w*",
    "add": r"\badd(ing|ed)?\b",
    "compensate": r"compensat\w*|certificate|voucher",
    "insurance": r"insurance",
    "bag": r"\bbag(s|gage|gages)?\b|luggage allowance",
    "address": r"\baddress\w*",
    "payment": r"payment method|pay(ing)? with|charge\w* (to|on)",
    "transfer": r"transfer\w*",
}
_CONFIRM = re.compile(
    r"\bconfirm\w*|\bproceed\b|shall i\b|should i\b|would you like me to|do you want me to|go ahead|yes/no|\(yes\)|"
    r"is that (correct|right|ok|okay)|is this (correct|right|ok|okay)|\bcorrect\?|\b(ok|okay)\?|do you agree|"
    r"are you sure|can i (go ahead|proceed)|may i (go ahead|proceed)",
    re.IGNORECASE,
)
_CLOSING = re.compile(r"anything else|is there anything|good ?bye|have a (great|nice|good)|take care", re.IGNORECASE)
_ID_TOKEN = re.compile(r"#W\d{7}|\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6}\b|\b\d{10}\b")


def action_classes(text: str) -> set[str]:
    return {k for k, pat in ACTIONS.items() if re.search(pat, text, re.IGNORECASE)}


def supports(sc: Scenario, proposal: str) -> bool:
    """The lexical check behind a "yes": the agent's proposal names at least one action class, every action
    class it names is affirmed somewhere in the customer's reason for calling or task instructions (not only
    named under a negation: "you do not want to cancel"), and every
    reservation, order or item id it names is one the scenario names (when the scenario names ids)."""
    wanted_text = f"{sc.reason_for_call}\n{sc.task_instructions}"
    proposed = action_classes(proposal)
    if not proposed or not proposed <= action_classes(affirmed(wanted_text)):
        return False
    scenario_ids = set(_ID_TOKEN.findall(f"{wanted_text}\n{sc.known_info}"))
    named = set(_ID_TOKEN.findall(proposal))
    return not (scenario_ids and named and not named <= scenario_ids)


# ---------------------------------------------------------------------------------- scripted user
_HELLO = ("Hi! ", "Hello! ", "Hi there. ")
_NO_REQUEST = ("I need some help, please.", "I have a question about my account.", "Could you help me with something?")
_YES = ("Yes, please go ahead.", "Yes, that's right, please do it.", "Yes, please proceed.")
_DECLINE = ("No, that's not what I asked for.", "No, please don't do that.", "No, I'd rather not do that.")
_ACK = ("Okay, thank you.", "Alright.", "Okay.")
_DONE = ("No, that's all. Thank you! {stop}", "That's everything, thanks! {stop}", "No, I'm all set. Thank you! {stop}")
_STOPWORDS = set(  # a word list, kept readable
    "the a an and or to of in on for with from at by my your you i is are was were be it that this what which "  # noqa: SIM905
    "would could can will have has had do does please just also about there their them they than then some any "
    "want need like know".split()
)


class ScriptedUser:
    """A deterministic customer built from the `Scenario` alone (`reason_for_call`, `known_info`,
    `unknown_info`, `task_instructions`; the task's gold actions are never seen). Its rules, by the agent's
    last message (`reply`):

    - after a transfer: `###TRANSFER###`; after `MAX_SCRIPTED_REPLIES` replies: goodbye with `###STOP###`;
    - the agent asks for facts (`asked_kinds`: user id, name, email, zip, address, reservation or order
      number, payment, or "your identity"): the known facts of exactly those kinds (`known_facts`), and
      "I don't remember my ..." for an asked kind the unknown info names; nothing else is disclosed;
    - the agent asks to confirm an action (`_CONFIRM`): "yes" only if `supports` finds the action in the
      customer's own request, else a refusal that restates the request;
    - a closing question ("anything else?") or any other message: the next of the customer's requests not
      yet said (a question that shares a content word with a background sentence not yet said gets that
      sentence), else goodbye with `###STOP###`.

    What it says comes from `own_words` over the scenario's sentences: stage directions, persona lines,
    imperatives and conditionals are never said (a clean lead clause of a conditional sentence may be);
    known-info values inside a request sentence are left out until asked for. `opening()` is the first
    request (or a neutral line when the scenario states none in the customer's words). The seed picks
    among equivalent wordings (`random.Random(seed)`): one seed always gives the same conversation.
    """

    kind = "scripted"

    def __init__(self, sc: Scenario, seed: int = 0):
        if not isinstance(sc, Scenario):
            raise TypeError(f"ScriptedUser takes a tau2 Scenario, got {type(sc).__name__}")
        self.scenario = sc
        self.rng = random.Random(seed)
        self.known = known_facts(sc.known_info)
        self.unknown = unknown_kinds(sc.unknown_info)
        self.disclosed: set[Fact] = set()
        wants, background = [], []
        for s in sentences(_join_lists(sc.reason_for_call)) + sentences(_join_lists(sc.task_instructions)):
            if (words := own_words(s)) is not None:
                (wants if _WANT.search(words) else background).append(words)
        if not wants and background:
            wants.append(background.pop(0))  # a reason for calling with no "want" in it is still the reason
        self.requests = wants
        said = " ".join(wants + background)
        self.request_ids = [Fact("reservation", v) for v in dict.fromkeys(_RESERVATION.findall(said))]
        self.request_ids += [Fact("order", v) for v in dict.fromkeys(_ORDER.findall(said))]
        self.pending = list(wants)
        self.background = background
        self.replies = 0
        self.cost_usd = 0.0
        self._opening: str | None = None

    # ------------------------------------------------------------------ speech
    def _say(self, text: str) -> str:
        """A scenario sentence in the customer's words, without known facts it has not given yet."""
        for f in self.known:
            if f.kind != "other" and f not in self.disclosed and f.value in text:
                text = text.replace(f.value, "")
        text = re.sub(r"\s+([,.;:])", r"\1", " ".join(text.split())).rstrip(" ,;:")
        out = first_person(text)
        return out if out.endswith((".", "!", "?")) else out + "."

    def _pick(self, options: tuple[str, ...]) -> str:
        return options[self.rng.randrange(len(options))]

    def opening(self) -> str:
        """The first message: a greeting and the first request (the same text on every call)."""
        if self._opening is None:
            first = self._say(self.pending.pop(0)) if self.pending else self._pick(_NO_REQUEST)
            self._opening = self._pick(_HELLO) + first
        return self._opening

    def _facts(self, kinds: list[str]) -> str:
        parts = []
        for kind in kinds:
            have = [f for f in self.known if f.kind == kind] or [f for f in self.request_ids if f.kind == kind]
            for f in have:
                self.disclosed.add(f)
                parts.append(self._pick(_SAY[kind]).format(v=f.value))
            if not have and (kind in self.unknown or kind in _IDENTITY_KINDS):
                parts.append(self._pick(_UNKNOWN).format(label=_LABEL[kind]))
        return " ".join(parts)

    def _relevant(self, text: str) -> str | None:
        """The not-yet-said request, background sentence or "other" fact that shares the most content words
        with the agent's question (ties: the earliest), said and removed; None when none shares one."""
        asked = _content_words(text)
        found: list[tuple[Any, str]] = [((pool, i), s) for pool in (self.pending, self.background) for i, s in enumerate(pool)]
        found += [(f, f.value) for f in self.known if f.kind == "other" and f not in self.disclosed]
        n, best = max(((len(asked & _content_words(s)), what) for what, s in found), key=lambda c: c[0], default=(0, None))
        if not n:
            return None
        if isinstance(best, Fact):
            self.disclosed.add(best)
            return self._say(best.value)
        pool, i = best
        return self._say(pool.pop(i))

    def _next_request(self) -> str:
        if self.pending:
            return self._say(self.pending.pop(0))
        return self._pick(_DONE).format(stop=STOP)

    def reply(self, agent_text: str, transferred: bool = False) -> str:
        self.replies += 1
        text = agent_text or ""
        if transferred:
            return TRANSFER
        if self.replies > MAX_SCRIPTED_REPLIES:
            return f"I have to go now. {STOP}"
        if _CONFIRM.search(text) and action_classes(text) - _OBJECTS:
            if supports(self.scenario, text):
                return self._pick(_YES)
            restate = self._say(self.requests[0]) if self.requests else ""
            return f"{self._pick(_DECLINE)} {restate}".strip()
        facts = self._facts(asked_kinds(text, self.known))
        if facts:
            return facts
        if _CLOSING.search(text):
            return self._next_request()
        if "?" in text:
            if said := self._relevant(text):
                return said
            if not self.pending:
                return self._pick(_ACK) if self.replies <= 1 else self._pick(_DONE).format(stop=STOP)
        return self._next_request() if self.pending else self._pick(_ACK)


_IDENTITY_KINDS = ("user_id", "name", "email", "zip")
_OBJECTS = {"address", "payment", "bag", "insurance"}  # nouns: a confirmation names an action besides them
_COMMON = _STOPWORDS | set(
    "flight flights reservation reservations order orders item items help today upcoming sure okay thanks thank "  # noqa: SIM905
    "details information provide confirm check look moment please".split()
)


def _join_lists(text: str) -> str:
    """A bulleted list ("you want to:\\n- add 3 bags\\n- change ...") as one sentence."""
    text = re.sub(r":\s*\n\s*[-*]\s+", " ", text or "")
    return re.sub(r"\s*\n\s*[-*]\s+", ", ", text)


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _COMMON}


# ---------------------------------------------------------------------------------- LLM user
# How the LLM customer reaches its model in a rollout: the model gateway's call, from the executor that
# runs the rollout: (litellm model, OpenAI messages, OpenAI tools, seed, further litellm arguments).
CustomerCall = Callable[[str, list[dict[str, Any]], list[dict[str, Any]], int, dict[str, Any]], Completion]
# the litellm argument under which a simulator's `llm_args` carry its `CustomerCall` to `generate`
_CALL_ARG = "_coevolve_customer_call"
_generate_lock = threading.Lock()


def _route_generate_through_calls(t: Any) -> None:
    """Make tau2's user simulator send its model calls through the `CustomerCall` in its `llm_args`, when
    it has one (tau2's `generate` otherwise). Installed once per process; tau2's message handling
    (role flipping, tool calls) is unchanged."""
    with _generate_lock:
        module = t.user_simulator
        if getattr(module.generate, "routes_customer_calls", False):
            return
        original = module.generate

        def generate(model: str, messages: list[Any], tools: list[Any] | None = None, tool_choice: str | None = None, **kw: Any) -> Any:
            call = kw.pop(_CALL_ARG, None)
            if call is None:
                return original(model, messages, tools, tool_choice, **kw)
            from tau2.utils.llm_utils import to_litellm_messages

            seed = int(kw.pop("seed", 0) or 0)
            kw.pop("num_retries", None)  # the gateway retries
            schemas = [tool.openai_schema for tool in tools] if tools else []
            done = call(model, to_litellm_messages(messages), schemas, seed, kw)
            return assistant_message(t, done)

        generate.routes_customer_calls = True  # type: ignore[attr-defined]
        module.generate = generate


def assistant_message(t: Any, done: Completion) -> Any:
    """tau2's `AssistantMessage` of a gateway completion (what tau2's `generate` returns)."""
    M = t.message
    calls = [
        M.ToolCall(id=c.get("id") or f"call_{i}", name=c["function"]["name"], arguments=arguments_object(c["function"].get("arguments")))
        for i, c in enumerate(done.message.get("tool_calls") or [])
    ]
    return M.AssistantMessage(
        role="assistant", content=done.message.get("content"), tool_calls=calls or None, cost=done.cost_usd,
        usage={"prompt_tokens": done.prompt_tokens, "completion_tokens": done.completion_tokens},
        raw_data=dict(done.message),
    )


class SimulatedUser:
    """tau2's LLM user simulator, from the start of the conversation: tau2's greeting is the first message
    and the simulator writes the customer's first message (`opening`), as in tau2's `Orchestrator`."""

    kind = "llm"

    def __init__(self, task: Any, model: str, llm_args: dict[str, Any], seed: int | None = None, attempts: int = 4,
                 tools: list[Any] | None = None, call: CustomerCall | None = None):
        """`tools`: the customer's own tools (tau2's user tools, telecom's phone), None where it has none.
        `call`: the gateway's call (it retries, so a failure here is final); None: tau2's `generate`,
        `attempts` tries."""
        from coevolve.tasks.tau2.data import tau2

        self.t = t = tau2()
        self.model = model
        self.attempts = 1 if call is not None else attempts
        args = dict(llm_args)
        if call is not None:
            _route_generate_through_calls(t)
            args[_CALL_ARG] = call
        self.sim = t.user_simulator.UserSimulator(
            tools=tools, instructions=str(task.user_scenario), llm=model, llm_args=args
        )
        if seed is not None:
            self.sim.set_seed(int(seed))  # tau2's orchestrator: user.set_seed(seed) -> llm_args["seed"]
        self.state = self.sim.get_init_state()
        self.cost_usd = 0.0
        self.first: Any = None

    def opening(self) -> str:
        """The customer's first message, generated by the simulator in answer to tau2's greeting (the same
        text on every call; model errors are retried, then raised as RuntimeError)."""
        if self.first is None:
            self.first = self.reply_message(self.t.message.AssistantMessage(role="assistant", content=GREETING))
        return self.first.content or ""

    def reply_message(self, assistant_message: Any) -> Any:
        """The user's tau2 `UserMessage` answering `assistant_message`; model errors are retried, then raised."""
        last: Exception | None = None
        for attempt in range(self.attempts):
            snapshot = self.state.model_copy(deep=True)
            try:
                msg, self.state = self.sim.generate_next_message(assistant_message, self.state)
                self.cost_usd += float(msg.cost or 0.0)
                return msg
            except Exception as e:  # noqa: BLE001 — transport/provider errors: retried, then reported
                last = e
                self.state = snapshot
                if attempt + 1 < self.attempts:
                    time.sleep(min(4.0, 0.5 * 2**attempt))
        times = f" {self.attempts} times" if self.attempts > 1 else ""
        raise RuntimeError(f"user model {self.model} failed{times}: {type(last).__name__}: {last}")
