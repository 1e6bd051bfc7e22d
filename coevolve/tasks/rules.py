"""The rules engine of the task families: domain facts and instruction constraints (`Rule`, loaded
from each family's `facts.yaml` by `load_rules`), the concepts that state them, and the sentence-level
reading that decides whether a text states a rule: a concept carried within a window of sentences and
not negated (`affirmed`, `Concept`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from coevolve.errors import BadInput

_WINDOW = 2  # a concept must be carried within this many adjacent sentences
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


@lru_cache(maxsize=8192)
def _sentences(text: str) -> tuple[str, ...]:
    """Lower-cased sentences (lines and sentence ends split; whitespace normalised)."""
    return tuple(" ".join(s.split()) for s in _SENTENCE_END.split(text.lower()) if s.strip())


@lru_cache(maxsize=8192)
def sentence_windows(text: str) -> tuple[str, ...]:
    """Lower-cased single sentences, then runs of up to `_WINDOW` adjacent ones (lines and sentence
    ends split; whitespace normalised), so the smallest window that carries a concept is found first."""
    sentences = list(_sentences(text))
    runs = [
        " ".join(sentences[i : i + w]) for w in range(2, _WINDOW + 1) for i in range(max(0, len(sentences) - w + 1))
    ]
    return tuple(sentences + runs)


@lru_cache(maxsize=4096)
def _term_pattern(terms: tuple[str, ...]) -> re.Pattern[str]:
    """Terms match at a word start, as prefixes ('consecutiv' matches 'consecutively'); a term that
    ends in a digit matches whole numbers only ('3' does not match '30'). Longer terms are tried
    first, so a match covers the longest term that starts at its position."""
    ordered = sorted(terms, key=len, reverse=True)
    parts = [re.escape(t.lower()) + (r"(?!\d)" if t[-1:].isdigit() else "") for t in ordered]
    return re.compile(r"(?<![a-z0-9])(?:" + "|".join(parts) + ")")


# ---------------------------------------------------------------- polarity: how a sentence can deny a concept
# A negator puts what follows it, up to the end of its clause, in its scope ("NULL readings must *not be
# ignored*", "*never CC the controller*"); a sentence negator puts what precedes it in its clause in its
# scope ("*that NULL readings are offline* is false").
_WORD = r"(?<![a-z0-9'’])(?:{})(?![a-z0-9])"
_NEGATOR = re.compile(
    _WORD.format(
        r"not|never|no|none|nothing|nobody|neither|nor|without|cannot|[a-z]+n['’]t|no longer|rather than"
        r"|instead of|as opposed to|false that|untrue that|wrong to|incorrect to|a mistake to"
    )
)
_SENTENCE_NEGATOR = re.compile(
    _WORD.format(
        r"(?:is|are) (?:false|wrong|incorrect|untrue|a myth|a misconception)|not true|not correct"
        r"|not the case|isn['’]t true|isn['’]t the case|isn['’]t correct"
    )
)
# Phrases whose negator negates nothing: idioms ("not only", "no matter") and bounds ("not after the
# period's start" is "on or before it", "no fewer than three").
_NOT_NEGATING = re.compile(
    _WORD.format(
        r"no matter|not only|not just|not least|if not|whether or not|or not|without exception|no exceptions?"
        r"|(?:no|not) (?:later|earlier|fewer|less|more|sooner|greater|smaller|lower|higher) than"
        r"|not (?:after|before|beyond|past|above|below|under|over|exceeding)"
    )
)
# A negator followed closely by one of these affirms (double negation: "don't forget", "never omit").
_PRIVATIVE = re.compile(
    _WORD.format(
        r"forg[eo]t\w*|omit\w*|skip\w*|miss\w*|overlook\w*|neglect\w*|fail\w*|leave out|leave off|prevent\w*"
        r"|forbid\w*|prohibit\w*|stop\w* (?:\w+ )?from|keep\w* (?:\w+ )?from"
    )
)
_PRIVATIVE_REACH = 3  # at most this many words between a negator and the privative that cancels it
# Where a negator's scope ends: punctuation that closes a clause, and clause-opening conjunctions.
_CLAUSE_END = re.compile(
    r"[,;:()\[\]]|\s[-–—]\s|[–—]|->|→"
    + _WORD.format(
        r"but|whereas|while|although|though|so that|so|because|otherwise|then|except|unless|instead"
    )
)
# A contrastive negator opens a clause and names the alternative the clause before it rejects ("point the
# menu at the page, never at a redirect", "match the tax id, not the name"): read as a rule, it denies that
# alternative (a reversal), not the rule.
_CONTRASTIVE = re.compile(
    r"(?:[,;]|\s[-–—]\s|[–—]|\bbut)\s*(?:not|never)\s+(?:at|by|on|in|to|from|via|through|with|the|a|an|its"
    r"|their|his|her|for|as|under|into|onto|over|after|before)\b"
)
_ANY_NEGATOR = re.compile(f"{_NEGATOR.pattern}|{_SENTENCE_NEGATOR.pattern}")
_STRONG_END = re.compile(r"[;:]|\s[-–—]\s|[–—]")
# The sentence without a negator, to test what the negator denies ("don't" -> "do", "never" -> "").
_UNNEGATED = {"can't": "can", "cannot": "can", "won't": "will", "shan't": "shall", "without": "with"}

Span = tuple[int, int]


class Reading(NamedTuple):
    """A window of sentences that carries a concept: its first and last sentence (indices into the
    text's sentences), whether it states the concept (else it denies it), and its lower-cased text."""

    first: int
    last: int
    stated: bool
    text: str


def _negations(sentence: str, covered: Sequence[Span], contrastive: bool = True) -> list[tuple[Span, Span]]:
    """Each negator of `sentence` that negates something, with its scope (both character spans). A negator
    inside a concept's matched term (`covered`: "no overtime", "not out of range") is part of what the
    concept says, not a denial of it; one in a non-negating phrase, or cancelled by a privative that is not
    itself a concept term (double negation), negates nothing; with `contrastive` False, neither does a
    contrastive negator."""

    def inside(a: int, b: int) -> bool:
        return any(s <= a and b <= e for s, e in covered)

    idle = [m.span() for m in _NOT_NEGATING.finditer(sentence)]
    if not contrastive:
        idle += [m.span() for m in _CONTRASTIVE.finditer(sentence)]
    ends = sorted({m.start() for m in _CLAUSE_END.finditer(sentence)} | {len(sentence)})
    starts = sorted({m.end() for m in _STRONG_END.finditer(sentence)} | {0})
    out = []
    for m in _NEGATOR.finditer(sentence):
        a, b = m.span()
        if inside(a, b) or any(s <= a and b <= e for s, e in idle):
            continue
        end = next(e for e in ends if e >= b)
        privative = _PRIVATIVE.search(sentence, b, end)
        if (
            privative
            and len(sentence[b : privative.start()].split()) <= _PRIVATIVE_REACH
            and not inside(*privative.span())
        ):
            continue
        out.append(((a, b), (b, end)))
    for m in _SENTENCE_NEGATOR.finditer(sentence):
        a, b = m.span()
        if not inside(a, b):
            out.append(((a, b), (max(s for s in starts if s <= a), a)))
    return out


def affirmed(text: str) -> str:
    """`text` (lower-cased, sentence by sentence) with what each negator denies taken out: "you do not want
    to cancel it under any circumstances" keeps "you do", so a word search over the result finds only what
    the text affirms."""
    out = []
    for sentence in _sentences(text):
        cut = sorted(span for negator, scope in _negations(sentence, ()) for span in (negator, scope))
        kept, at = [], 0
        for a, b in cut:
            if a > at:
                kept.append(sentence[at:a])
            at = max(at, b)
        kept.append(sentence[at:])
        out.append(" ".join("".join(kept).split()))
    return "\n".join(out)


def _unnegated(sentence: str, span: Span) -> str:
    """`sentence` with the negator at `span` taken out ("do not ignore" -> "do ignore", "isn't" -> "is")."""
    word = sentence[span[0] : span[1]].replace("’", "'")
    plain = _UNNEGATED.get(word, word[:-3] if word.endswith("n't") else "")
    return " ".join((sentence[: span[0]] + plain + sentence[span[1] :]).split())


def _fields_only(obj: Any) -> dict[str, Any]:
    """An object's state without its cached helpers (compiled patterns, memos): what pickling keeps."""
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def _denies(sentence: str, negator: Span, opposites: tuple[Concept, ...]) -> bool:
    """Whether the negator at span `negator` denies one of `opposites`: without it the sentence states
    the opposite, with it it does not. What a negator denies is read whole: an opposite's `unless` guards
    statements of it, not denials."""
    if sentence[negator[0] : negator[1]] in ("rather than", "instead of", "as opposed to"):
        return False
    plain = _unnegated(sentence, negator)
    return any(
        o._reading((plain,), heed_unless=False) and not o._reading((sentence,), heed_unless=False)
        for o in opposites
    )


@dataclass(frozen=True)
class Concept:
    """What a text must say for an idea to count as stated: one term of *every* synonym group within
    two adjacent sentences, said and not denied.

    Polarity. A sentence *states* the concept when every group has a matched term outside the scope of
    every negator (`_negations`); it *denies* it when every group is matched but some group only inside a
    negator's scope ("NULL readings must not be ignored", "Never CC the controller"). A negator that is part
    of a matched term ("not out of range", "no overtime") belongs to the concept's own wording. Double
    negation: a negator cancelled by a privative ("don't forget to CC", "never omit the peak") affirms;
    two plain negators ("it is not true that X is never done") still deny, the conservative reading.
    Read as a rule (`Rule`, with the rule's reversals as `opposites`), a negator that denies the *wrong*
    rule ("don't mark a refunded order Canceled") affirms, and a contrastive one ("point the menu at the
    page, never at a redirect") denies only the alternative it names. Windows: single sentences first;
    two adjacent sentences count only when neither carries the concept alone, and can state it but not
    deny it (a denial is read within one sentence)."""

    groups: tuple[tuple[str, ...], ...]
    unless: tuple[str, ...] = ()  # terms that void it (neither stated nor denied) in the same window

    def __post_init__(self) -> None:
        if len(self.groups) < 2 or any(not g or any(not t.strip() for t in g) for g in self.groups):
            raise ValueError(f"a concept needs at least two non-empty synonym groups: {self.groups!r}")

    def __getstate__(self) -> dict[str, Any]:
        return _fields_only(self)

    @cached_property
    def _patterns(self) -> tuple[re.Pattern[str], ...]:
        return tuple(_term_pattern(g) for g in self.groups)

    @cached_property
    def _memo(self) -> dict[tuple[str, tuple[Concept, ...] | None], tuple[tuple[bool, bool], ...] | None]:
        return {}

    def _sentence(
        self, sentence: str, opposites: tuple[Concept, ...] | None = None
    ) -> tuple[tuple[bool, bool], ...] | None:
        """Per group (matched, matched outside every negation's scope), or None when no group matches.
        With `opposites` the concept is read as a rule whose reversals they are: a negator that denies one
        of them (its sentence without it states the opposite, with it does not) affirms the rule and
        negates nothing ("don't mark a refunded order Canceled"), and so does a contrastive one."""
        key = (sentence, opposites)
        if key in self._memo:
            return self._memo[key]
        matches = [[m.span() for m in p.finditer(sentence)] for p in self._patterns]
        result = None
        if any(matches):
            covered = [s for spans in matches for s in spans]
            negating = _ANY_NEGATOR.search(sentence)
            negations = _negations(sentence, covered, contrastive=opposites is None) if negating else []
            affirming = [n for n, _ in negations if opposites and _denies(sentence, n, opposites)]
            scopes = [scope for n, scope in negations if n not in affirming]
            result = tuple(
                (bool(spans), any(not any(a <= s < b for a, b in scopes) for s, _ in spans))
                for spans in matches
            )
        if len(self._memo) < 20_000:
            self._memo[key] = result
        return result

    def _reading(
        self, sentences: Sequence[str], opposites: tuple[Concept, ...] | None = None, heed_unless: bool = True
    ) -> bool | None:
        """True: the sentences state the concept; False: they deny it; None: they do not carry it."""
        parts = [r for r in (self._sentence(s, opposites) for s in sentences) if r is not None]
        if not parts or not all(any(p[g][0] for p in parts) for g in range(len(self.groups))):
            return None
        if heed_unless and self.unless and _term_pattern(self.unless).search(" ".join(sentences)):
            return None
        stated = all(any(p[g][1] for p in parts) for g in range(len(self.groups)))
        return True if stated else (False if len(sentences) == 1 else None)

    def readings(
        self, text: str, opposites: tuple[Concept, ...] | None = None, pairs: bool = True
    ) -> list[Reading]:
        """Every window that carries the concept, single sentences first, then (with `pairs`) pairs of
        adjacent sentences neither of which carries it alone."""
        if not text:
            return []
        sentences = _sentences(text)
        single = [self._reading((s,), opposites) for s in sentences]
        out = [Reading(i, i, r, s) for i, (s, r) in enumerate(zip(sentences, single, strict=True))
               if r is not None]
        for i in range(len(sentences) - 1 if pairs else 0):
            if single[i] is None and single[i + 1] is None:
                r = self._reading(sentences[i : i + 2], opposites)
                if r is not None:
                    out.append(Reading(i, i + 1, r, " ".join(sentences[i : i + 2])))
        return out

    def where(self, text: str) -> str | None:
        """The first sentence window that states the concept, or None."""
        return next((r.text for r in self.readings(text) if r.stated), None)

    def denied_where(self, text: str) -> str | None:
        """The first sentence that carries the concept denied, or None."""
        return next((r.text for r in self.readings(text) if not r.stated), None)

    def stated_in(self, text: str) -> bool:
        return self.where(text) is not None

    def denied_in(self, text: str) -> bool:
        return self.denied_where(text) is not None


@dataclass(frozen=True)
class Rule:
    """A rule a harness can state or contradict. Its concept states it; the concept denied, or any of its
    `reversals` (the opposite rule in meaning, e.g. "a reading at the limit is an anomaly") stated within
    one sentence, contradicts it. A window that carries a reversal does not state the rule even when it
    also carries the concept. A negator whose removal would make its sentence state a reversal denies the
    wrong rule, so it affirms this one ("never mark a refunded order Canceled: it is Closed")."""

    id: str
    statement: str
    concept: Concept

    if TYPE_CHECKING:
        reversals: tuple[Concept, ...]

    def __getstate__(self) -> dict[str, Any]:
        return _fields_only(self)

    @cached_property
    def _stance_memo(self) -> dict[str, tuple[list[Reading], list[Reading]]]:
        return {}

    def _stances(self, text: str) -> tuple[list[Reading], list[Reading]]:
        """(windows stating the rule, windows contradicting it), in the text's order within each kind."""
        memo = self._stance_memo
        if text not in memo:
            if len(memo) >= 512:
                memo.clear()
            memo[text] = self._read_stances(text)
        return memo[text]

    def _read_stances(self, text: str) -> tuple[list[Reading], list[Reading]]:
        contradicting = [w for r in self.reversals for w in r.readings(text, pairs=False) if w.stated]
        reversed_at = {w.last for w in contradicting}
        stating = []
        for w in self.concept.readings(text, self.reversals):
            if not w.stated:
                contradicting.append(w)
            elif not reversed_at & set(range(w.first, w.last + 1)):
                stating.append(w)
        return stating, contradicting

    def stance(self, text: str) -> bool | None:
        """True when the text states the rule, False when it contradicts it, None when it says neither.
        When it does both, the later statement wins (a correction appended after a wrong rule takes
        effect, as does a wrong rule appended after a right one); on a tie the contradiction wins."""
        stating, contradicting = self._stances(text)
        if not contradicting:
            return True if stating else None
        if not stating:
            return False
        return max(w.last for w in stating) > max(w.last for w in contradicting)

    def where(self, text: str) -> str | None:
        """The last window that states the rule when the text's stance is that it holds, else None."""
        stating, _ = self._stances(text)
        return max(stating, key=lambda w: w.last).text if stating and self.stance(text) else None

    def stated_in(self, text: str) -> bool:
        """The text states the rule (and does not contradict it later)."""
        return self.stance(text) is True

    def contradicted_in(self, text: str) -> bool:
        """Somewhere the text denies the rule or states its reversal."""
        return bool(self._stances(text)[1])


@dataclass(frozen=True)
class DomainFact(Rule):
    """A piece of domain knowledge; `statement` is the catalogue's wording, `concept` what counts as
    stating it, `reversals` what counts as stating its opposite."""

    common: bool = False  # a weak model knows it without being told
    rare: bool = False  # specialist knowledge even a strong model may lack (the expert's gaps)
    reversals: tuple[Concept, ...] = ()


@dataclass(frozen=True)
class Constraint(Rule):
    """An instruction constraint a careless agent skips unless the harness reinforces it; `reversals`
    describe the opposite instruction."""

    reversals: tuple[Concept, ...] = ()


# ---------------------------------------------------------------- a family's rules as data
RULES_FILE = "facts.yaml"  # beside a family's module: its domain facts and instruction constraints
_NEGATIONS = ("not", "never", "don't", "doesn't", "won't", "shouldn't", "isn't", "aren't", "can't", "cannot")


class RulesFileError(BadInput):
    """A family's rules file is malformed; the message names the file and the place."""


def negated_forms(*verbs: str) -> tuple[str, ...]:
    """Negated forms of each verb ('not reorder', "don't reorder", ...), straight apostrophes, then curly."""
    out = [f"{n} {v}" for v in verbs for n in _NEGATIONS]
    return (*out, *(t.replace("'", "\u2019") for t in out if "'" in t))


def load_rules(path: Path) -> tuple[tuple[DomainFact, ...], tuple[Constraint, ...]]:
    """A family's domain facts and instruction constraints from its YAML file.

    The file has `facts` and `constraints`, lists of rules: `id`, `statement`, `concept`, optional
    `reversals` (a list of concepts) and, for a fact, optional `common` and `rare` flags. A concept is
    `groups` (lists of synonym terms, see `Concept`) and optional `unless` terms. Within a term list an item
    may also be a list of terms (spliced in: a named list of the optional `terms` section, through a YAML
    alias `*name`) or `{negated: [verbs]}` (their `negated_forms`). A malformed file raises ValueError
    naming the file and the place (`RulesFileError`)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        top = _fields(data, "the file", required=(), optional=("terms", "facts", "constraints"))
        for name, terms in _mapping(top.get("terms", {}), "terms").items():
            _terms(terms, f"terms.{name}")
        facts = tuple(_rule(DomainFact, r, f"facts[{i}]") for i, r in enumerate(_items(top.get("facts", []), "facts")))
        constraints = tuple(
            _rule(Constraint, r, f"constraints[{i}]") for i, r in enumerate(_items(top.get("constraints", []), "constraints"))
        )
        ids = [r.id for r in (*facts, *constraints)]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise RulesFileError(f"rule ids {repeated} are given more than once")
    except (OSError, yaml.YAMLError, RulesFileError) as e:
        raise RulesFileError(f"malformed rules file {path}: {e}") from e
    return facts, constraints


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RulesFileError(f"{where}: expected a mapping, got {value!r}")
    return value


def _fields(value: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    """`value` as a mapping with every `required` key and no key outside `required` and `optional`."""
    fields = _mapping(value, where)
    problems = [f"missing {k!r}" for k in required if k not in fields]
    problems += [f"unknown key {k!r}" for k in fields if k not in required + optional]
    if problems:
        raise RulesFileError(f"{where}: {', '.join(problems)}")
    return fields


def _items(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise RulesFileError(f"{where}: expected a list, got {value!r}")
    return value


def _terms(value: Any, where: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, item in enumerate(_items(value, where)):
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list):
            out += _terms(item, f"{where}[{i}]")
        elif isinstance(item, dict):
            out += negated_forms(*_terms(_fields(item, f"{where}[{i}]", ("negated",), ())["negated"], f"{where}[{i}]"))
        else:
            raise RulesFileError(f"{where}[{i}]: a term must be a string, got {item!r}")
    return tuple(out)


def _concept(value: Any, where: str) -> Concept:
    fields = _fields(value, where, required=("groups",), optional=("unless",))
    groups = tuple(_terms(g, f"{where}.groups[{i}]") for i, g in enumerate(_items(fields["groups"], f"{where}.groups")))
    try:
        return Concept(groups, unless=_terms(fields.get("unless", []), f"{where}.unless"))
    except ValueError as e:  # the concept's own check
        raise RulesFileError(f"{where}: {e}") from None


def _rule(kind: type[DomainFact | Constraint], value: Any, where: str) -> DomainFact | Constraint:
    flags = ("common", "rare") if kind is DomainFact else ()
    fields = _fields(value, where, required=("id", "statement", "concept"), optional=("reversals", *flags))
    for key in ("id", "statement"):
        if not isinstance(fields[key], str) or not fields[key].strip():
            raise RulesFileError(f"{where}.{key}: expected a non-empty string, got {fields[key]!r}")
    for flag in flags:
        if not isinstance(fields.get(flag, False), bool):
            raise RulesFileError(f"{where}.{flag}: expected true or false, got {fields[flag]!r}")
    reversals = tuple(
        _concept(r, f"{where}.reversals[{i}]") for i, r in enumerate(_items(fields.get("reversals", []), f"{where}.reversals"))
    )
    set_flags = {flag: fields[flag] for flag in flags if flag in fields}
    return kind(fields["id"], fields["statement"], _concept(fields["concept"], f"{where}.concept"),
                reversals=reversals, **set_flags)
