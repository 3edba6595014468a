"""A term list (source<TAB>target a line) -> each input line's constraints: the target terms of the
source terms it holds (the WMT 2021 terminology task's setting; Sockeye's and Marian's users feed
constrained decoding this way).

A source term is found as a whole word (or words), ignoring case: "bank" in "The bank." but not
in "embankment" or "bank_note", and "कल" not in "कला" (a combining mark belongs to its word, as in
Unicode's \\w). Where terms overlap, the longest wins ("New York" over "York").
Characters of scripts written without spaces (Chinese, Japanese, Thai, Lao, Khmer, Burmese) need
no word boundary. All terms are one compiled pattern, so a long list costs little per line.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path

from translator.data.join import no_word_spaces_class
from translator.data.lines import tsv_rows
from translator.errors import TranslatorError


@functools.cache
def word_character() -> str:
    """A character that makes a term part of a longer word, as a regular expression: a letter,
    digit, _ or combining mark (Devanagari's vowel signs, Arabic's harakat: Python's \\w leaves
    marks out, yet they belong to the letter before them), but not of a script written without
    spaces between words."""
    marks, start = [], None
    # the planes that hold marks: below U+20000, and the variation selectors U+E0100-E01EF
    for code in [*range(0x20000), *range(0xE0100, 0xE01F1)]:
        mark = unicodedata.category(chr(code)).startswith("M")
        if mark and start is None:
            start = code
        elif not mark and start is not None:
            marks.append(f"\\U{start:08x}-\\U{code - 1:08x}")
            start = None
    return rf"(?:[^\W{no_word_spaces_class()}]|[{''.join(marks)}])"


def load_terms(path: Path) -> list[tuple[str, str]]:
    """The (source, target) pairs of a two-column TSV file, in file order; empty lines are
    skipped, a row with one side blank is refused naming it."""
    terms: list[tuple[str, str]] = []
    for block in tsv_rows(path, ["source", "target"], skip=0):
        terms += zip(block["source"], block["target"])
    for number, (source, target) in enumerate(terms, start=1):
        if bool(source.strip()) != bool(target.strip()):
            raise TranslatorError(
                "a term with one side blank",
                f"{path}:{number}",
                "give each line as SOURCE<TAB>TARGET",
            )
    return [(s.strip(), t.strip()) for s, t in terms if s.strip()]


class Terms:
    """A term list compiled for matching; `clean` is applied to each source term, as it is to the
    lines (data/clean.py's source_text), so that both are compared in one form."""

    def __init__(self, pairs: list[tuple[str, str]], clean: Callable[[str], str] = str) -> None:
        self.clean = clean
        # source as cleaned -> target; of a term's case variants the first in the file
        self.targets: dict[str, str] = {}
        folded: set[str] = set()
        for source, target in pairs:
            if (cleaned := clean(source)).casefold() not in folded:
                folded.add(cleaned.casefold())
                self.targets[cleaned] = target
        self._by_fold = {source.casefold(): t for source, t in self.targets.items()}
        alternatives = "|".join(map(re.escape, sorted(self.targets, key=len, reverse=True)))
        word = word_character()
        self.pattern = re.compile(rf"(?<!{word})(?:{alternatives})(?!{word})", re.IGNORECASE)

    def constraints(self, line: str) -> list[str]:
        """The target terms whose source terms `line` holds (cleaned as the sources are), in the
        order they appear, each once; scanning left to right, the longest term at a place wins."""
        if not self.targets:
            return []
        found = [self._target(m.group()) for m in self.pattern.finditer(line)]
        return list(dict.fromkeys(t for t in found if t is not None))

    def _target(self, matched: str) -> str | None:
        """The target of the term `matched` (the line's spelling of it): found by case folding,
        or, where folding changes a word's length (İ), by matching the terms one by one."""
        if (target := self._by_fold.get(matched.casefold())) is not None:
            return target
        for source, target in self.targets.items():
            if re.fullmatch(re.escape(source), matched, re.IGNORECASE):
                return target
        return None

    def added_to(self, given: list[list[str]] | None, lines: list[str]) -> list[list[str]]:
        """Each line's constraints, `given` (None: none), then the targets of the terms the line
        holds, cleaned as the source terms were; a target already given is not added again."""
        found = [self.constraints(self.clean(line)) for line in lines]
        given = given or [[] for _ in lines]
        return [g + [t for t in f if t not in g] for g, f in zip(given, found)]
