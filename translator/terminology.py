"""A term list (source<TAB>target a line) -> each input line's constraints: the target terms of the
source terms it holds (the WMT 2021 terminology task's setting; Sockeye's and Marian's users feed
constrained decoding this way).

A source term is found as a whole word (or words), ignoring case: "bank" in "The bank." but not
in "embankment". Where terms overlap, the longest wins ("New York" over "York"). Characters of
scripts written without spaces (CJK) need no word boundary.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from translator.data.lines import tsv_rows
from translator.errors import TranslatorError


def load_terms(path: Path) -> list[tuple[str, str]]:
    """The (source, target) pairs of a two-column TSV file, longest source first; blank lines are
    skipped, a row with one side blank is refused."""
    terms = []
    for block in tsv_rows(path, ["source", "target"], skip=0):
        terms += zip(block["source"], block["target"])
    for number, (source, target) in enumerate(terms, start=1):
        if bool(source.strip()) != bool(target.strip()):
            raise TranslatorError(
                "a term with one side blank",
                f"{path}:{number}",
                "give each line as SOURCE<TAB>TARGET",
            )
    pairs = [(s.strip(), t.strip()) for s, t in terms if s.strip()]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def _bounded(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is not part of a longer word: each edge lies next to a non-word
    character, the text's end, or is a character of a script written without spaces."""

    def joins(inner: str, outer: str) -> bool:
        wide = unicodedata.east_asian_width(inner) in "WF"
        return outer.isalnum() and inner.isalnum() and not wide

    before = start > 0 and joins(text[start], text[start - 1])
    after = end < len(text) and joins(text[end - 1], text[end])
    return not (before or after)


def term_constraints(line: str, terms: list[tuple[str, str]]) -> list[str]:
    """The target terms whose source terms `line` holds, in the order they appear; a term inside a
    longer one found is not counted again, nor is one target twice."""
    taken, found = [False] * len(line), []
    for source, target in terms:  # longest first
        for match in re.finditer(re.escape(source), line, re.IGNORECASE):
            start, end = match.span()
            if _bounded(line, start, end) and not any(taken[start:end]):
                taken[start:end] = [True] * (end - start)
                found.append((start, target))
    seen: set[str] = set()
    return [t for _, t in sorted(found) if not (t in seen or seen.add(t))]
