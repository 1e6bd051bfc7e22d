"""A family's handbook: the domain documentation a company wiki would hold (docs/ARCHITECTURE.md §5).

Each family ships `handbook.md`: a `# title` and `## section` headings, each section a few
paragraphs of prose. Some sections state the facts and constraints the family's tasks turn on, in
their own words; more of them are true but irrelevant to the tasks. Which is which is written
nowhere: roles find out by reading. Proposers (and the expert rewriter) reach it through two tools,
`search_handbook` (BM25 over Snowball-stemmed sections, via `bm25s`) and `read_handbook`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

SNIPPET_CHARS = 240


def stem_words(words: list[str]) -> list[str]:
    """English Snowball stems, so that 'anomalies' meets 'anomaly' and 'overrides' meets 'override'."""
    return [_stem(w) for w in words]


@lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    """One word's stem, kept for the process's next use of it (the handbooks' and the tasks' vocabulary is
    small; the bound holds a long run's queries in real models' words)."""
    import snowballstemmer

    return snowballstemmer.stemmer("english").stemWord(word)


@dataclass(frozen=True)
class HandbookSection:
    id: str
    title: str
    text: str


class Handbook:
    def __init__(self, title: str, sections: tuple[HandbookSection, ...]):
        if not sections:
            raise ValueError("a handbook needs at least one section")
        ids = [s.id for s in sections]
        if len(set(ids)) != len(ids):
            raise ValueError(f"handbook section ids repeat: {ids}")
        self.title = title
        self.sections = sections
        self._by_id = {s.id: s for s in sections}

    @classmethod
    def from_markdown(cls, text: str) -> Handbook:
        title = ""
        sections: list[HandbookSection] = []
        current: tuple[str, list[str]] | None = None

        def close() -> None:
            if current is not None:
                heading, lines = current
                body = "\n".join(lines).strip()
                sections.append(HandbookSection(slug(heading), heading, body))

        for line in text.splitlines():
            if line.startswith("## "):
                close()
                current = (line[3:].strip(), [])
            elif line.startswith("# ") and not title:
                title = line[2:].strip()
            elif current is not None:
                current[1].append(line)
        close()
        return cls(title, tuple(s for s in sections if s.text))

    @classmethod
    def load(cls, path: str | Path) -> Handbook:
        return cls.from_markdown(Path(path).read_text())

    # ------------------------------------------------------------------ the two tools
    def search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The `k` sections that best match `query` (BM25), with a snippet each; no match -> []."""
        import bm25s

        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stem_words, return_ids=False, show_progress=False)
        index = self._index
        known = [t for t in tokens[0] if t in self._vocab]
        if not known:
            return []
        k = max(1, min(int(k), len(self.sections)))
        docs, scores = index.retrieve([known], k=k, show_progress=False)
        out = []
        for i, score in zip(docs[0], scores[0]):
            if score <= 0:
                continue
            s = self.sections[int(i)]
            out.append({"id": s.id, "title": s.title, "score": round(float(score), 3), "snippet": _snippet(s.text)})
        return out

    def read(self, section_id: str) -> HandbookSection:
        try:
            return self._by_id[section_id]
        except (KeyError, TypeError):
            raise ValueError(f"no handbook section {section_id!r} (sections: {', '.join(self._by_id)})") from None

    def contents(self) -> list[dict[str, str]]:
        return [{"id": s.id, "title": s.title} for s in self.sections]

    @cached_property
    def _index(self) -> Any:
        import bm25s

        corpus = [f"{s.title}\n{s.text}" for s in self.sections]
        tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=stem_words, return_ids=False, show_progress=False)
        self._vocab = {t for doc in tokens for t in doc}
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        return retriever


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1].rsplit(" ", 1)[0] + " …"
