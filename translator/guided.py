"""Guided decoding's inputs, line by line: a prefix each translation starts with (its last word
spelled as text: decode/completion.py), phrases each must hold (decode/constrained.py); encoded
for the pieces translate_lines decodes, checked, and the outputs checked against them."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import sentencepiece as spm
import torch
from sentencepiece import sentencepiece_model_pb2 as sp_pb2

from translator.config import DataConfig
from translator.data.clean import source_text
from translator.data.join import no_word_spaces
from translator.data.tokenizer import UNK_ID, Tokenizer
from translator.decode import Hypothesis
from translator.decode.completion import Spelling, WordCompletion, inside_word, piece_texts
from translator.errors import TranslatorError
from translator.line_warnings import NARROW_BEAM, PREFIX_TOO_LONG, line_list


def prefix_pieces(
    tokenizer: Tokenizer,
    prefixes: list[str] | None,
    lines: list[str],
    owner: list[int],
    data: DataConfig | None,
    limit: int,
    warn: Callable[[str], None] | None,
    first_line: int,
) -> tuple[list[list[int]], list[str]] | None:
    """Each piece's forced output ids and the characters typed after them (split_prefix): its
    line's prefix, on the line's first piece; none elsewhere. None when no line has a prefix. A
    line whose prefix is longer than `limit`, the model's output positions, is translated without
    it, with a warning: a stream goes on, one line out per line in."""
    if prefixes is None:
        return None
    if not any(p.strip() for p in prefixes):
        return None
    split = [split_prefix(tokenizer, p, data, limit) for p in prefixes]
    too_long = [number for number, (_, _, tokens) in enumerate(split) if tokens > limit]
    for number in too_long:
        split[number] = ([], "", 0)
    if too_long and warn is not None:
        numbers = [first_line + number for number in too_long]
        warn(f"{line_list(numbers)}: {PREFIX_TOO_LONG.format(limit=limit)}")
    # owner runs in line order: a piece is its line's first where the line changes
    first = [k == 0 or owner[k - 1] != line for k, line in enumerate(owner)]
    return (
        [split[line][0] if is_first else [] for line, is_first in zip(owner, first)],
        [split[line][1] if is_first else "" for line, is_first in zip(owner, first)],
    )


def split_prefix(
    tokenizer: Tokenizer, prefix: str, data: DataConfig | None, limit: int
) -> tuple[list[int], str, int]:
    """A prefix -> the output ids forced for its whole words, the characters of its last word
    (in piece spelling, from ▁: decode/completion.py) and its length in tokens.

    The last word is matched as text, not forced as pieces: "Ein Ma" goes on as "Mann" or
    "Markt", whichever pieces spell them. A prefix ending in a space ends its word: the next piece
    starts a new one. One whose last word the vocabulary cannot spell (<unk>), or that might not
    fit in the model's `limit` output positions spelled a character a piece, is forced whole.
    """
    text = source_text(prefix, data)
    if not text:
        return [], "", 0
    sp = tokenizer.target_sp
    if prefix[-1].isspace() and len(sp.encode(text)) < limit:
        ids = sp.encode(text)
        return ids, "▁", len(ids) + 1
    cut = max(text.rfind(" "), text.rfind("\t")) + 1
    head, tail = text[:cut], text[cut:]
    tail_ids = sp.encode(tail)
    ids = sp.encode(head) if head.strip() else []
    typed = "".join(sp.id_to_piece(tail_ids))
    if UNK_ID in tail_ids or len(ids) + len(typed) > limit:
        ids = sp.encode(text)
        return ids, "", len(ids)
    return ids, typed, len(ids) + len(tail_ids)


def constraint_pieces(
    tokenizer: Tokenizer,
    constraints: list[list[str]] | None,
    lines: list[str],
    owner: list[int],
    data: DataConfig | None,
    limit: int,
    warn: Callable[[str], None] | None,
    first_line: int,
) -> list[list[list[int]]] | None:
    """Each piece's constraints, encoded as the target side (blank phrases dropped); None when no
    line has one. A line split into pieces, or whose constraints the model cannot spell or outgrow
    its outputs, is translated without them, with a warning: a stream goes on, one line out per
    line in."""
    if constraints is None:
        return None
    if not all(isinstance(c, list) and all(isinstance(p, str) for p in c) for c in constraints):
        raise TypeError("constraints takes a list of phrases (strings) per line: [['Hund'], []]")
    # a phrase given twice is one constraint (fairseq would want it twice); one that cleaning
    # leaves empty (control characters) is none
    cleaned = [[source_text(p, data) for p in phrases] for phrases in constraints]
    texts = [list(dict.fromkeys(p for p in phrases if p)) for phrases in cleaned]
    if not any(texts):
        return None
    encoded = [encode_phrases(tokenizer, phrases) for phrases in texts]
    parts = Counter(owner)  # pieces per line
    dropped: dict[str, list[int]] = {}  # why -> line numbers
    for number, phrases in enumerate(encoded):
        why = ""
        if phrases and parts[number] > 1:
            why = "too long to translate at once, so its constraints cannot be placed"
        elif any(UNK_ID in ids for ids in phrases):
            why = "a constraint holds characters the model's vocabulary lacks (<unk>)"
        elif sum(map(len, phrases)) > limit:
            why = f"the constraints are longer than the {limit} tokens the model can output"
        if why:
            dropped.setdefault(why, []).append(first_line + number)
            encoded[number] = []
    for why, numbers in dropped.items():
        if warn is not None:
            warn(f"{line_list(numbers)}: {why}; translated without them")
    if not any(encoded):
        return None
    return [encoded[line] for line in owner]


def encode_phrases(tokenizer: Tokenizer, phrases: list[str]) -> list[list[int]]:
    """Each phrase's target ids as it stands inside a sentence. SentencePiece marks the start of
    a text's first word (▁, which decodes to a space), as a phrase inside a sentence has it after
    a space; a phrase in a script written without spaces (Chinese, Japanese, Thai) follows the
    text before it directly, so it is encoded without that mark (else the output would gain a
    space before it)."""
    ids = tokenizer.target_sp.encode(phrases)
    glued = [k for k, phrase in enumerate(phrases) if phrase and no_word_spaces(phrase[0])]
    if glued:
        inner = _without_word_start(tokenizer.target_proto() or tokenizer.proto())
        for k in glued:
            ids[k] = inner.encode(phrases[k])
    return ids


@functools.lru_cache(maxsize=4)  # the model is parsed once, not at every request of a server
def _without_word_start(proto: bytes) -> spm.SentencePieceProcessor:
    """The SentencePiece model `proto` without the mark it adds before a text's first word."""
    model = sp_pb2.ModelProto.FromString(proto)
    model.normalizer_spec.add_dummy_prefix = False
    return spm.SentencePieceProcessor(model_proto=model.SerializeToString())


def missing_constraints(
    required: list[list[list[int]]], results: list[list[Hypothesis]], owner: list[int]
) -> list[int]:
    """The lines (0-based, sorted) whose best output lacks one of its constraints: the beam kept
    no hypothesis that placed it before the length limit."""

    return sorted(
        {
            line
            for line, phrases, hyps in zip(owner, required, results)
            if not all(holds(hyps[0].tokens, phrase) for phrase in phrases)
        }
    )


def holding(hyps: list[Hypothesis], phrases: list[list[int]]) -> list[Hypothesis]:
    """The hypotheses that hold every phrase, if any does; else all of them."""
    return [h for h in hyps if all(holds(h.tokens, p) for p in phrases)] or hyps


def holds(tokens: list[int], phrase: list[int]) -> bool:
    """Whether `phrase` is a contiguous run of `tokens`."""
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


@dataclass
class Guides:
    """Per piece of translate_lines: the ids its outputs start with and the characters typed
    after them, the phrases they must hold; and what the searches need for them."""

    forced: list[list[int]] | None = None
    typed: list[str] | None = None
    spelling: Spelling | None = None  # when some piece has typed characters
    required: list[list[list[int]]] | None = None
    word_inner: torch.Tensor | None = None  # (V,): with constraints, the ids inside a word

    def for_batch(
        self, batch: list[int]
    ) -> tuple[list[list[int]] | None, WordCompletion | None, list[list[list[int]]] | None]:
        """The prefixes, the completion and the constraints of the pieces `batch`; a batch
        without constraints gets None, so that it takes the plain search (which finds the same,
        faster)."""
        prefixes = [self.forced[i] for i in batch] if self.forced else None
        completion = None
        if self.spelling is not None and prefixes is not None:
            typed = [self.typed[i] for i in batch]
            completion = WordCompletion(self.spelling, typed, [len(p) for p in prefixes])
        required = [self.required[i] for i in batch] if self.required else []
        return prefixes, completion, required if any(required) else None

    def limits(self) -> tuple[list[int] | None, list[int] | None]:
        """Per piece, the length its limit is raised to (a prefix) and the tokens added to it
        (constraints), as the searches do."""
        at_least = None
        if self.forced:
            at_least = [len(ids) + len(text) for ids, text in zip(self.forced, self.typed)]
        added = [sum(map(len, p)) for p in self.required] if self.required else None
        return at_least, added


def line_guides(
    tokenizer: Tokenizer,
    prefixes: list[str] | None,
    constraints: list[list[str]] | None,
    lines: list[str],
    owner: list[int],
    data: DataConfig | None,
    limit: int,
    width: int,
    sampling: bool,
    warn: Callable[[str], None] | None,
    first_line: int,
) -> Guides:
    """The prefixes and constraints of translate_lines' pieces (prefix_pieces, constraint_pieces)
    for a search `width` beams wide. Constraints are refused beside a prefix or sampling; lines
    with no more beam slots than constraint tokens are named in a warning."""
    guides = Guides()
    if split := prefix_pieces(tokenizer, prefixes, lines, owner, data, limit, warn, first_line):
        guides.forced, guides.typed = split
    required = constraint_pieces(
        tokenizer, constraints, lines, owner, data, limit, warn, first_line
    )
    if required is not None and (split is not None or sampling):
        raise TranslatorError(
            "constraints do not combine with a prefix or sampling",
            "--constraints",
            "leave out --prefix and --sampling",
        )
    typing = bool(guides.typed) and any(guides.typed)
    texts = piece_texts(tokenizer.target_sp) if typing or required else []
    guides.spelling = Spelling(texts) if typing else None
    if required:
        guides.required = required
        guides.word_inner = inside_word(texts)  # a term stays a whole word
        narrow = {
            first_line + line for line, p in zip(owner, required) if width <= sum(map(len, p))
        }
        if narrow and warn is not None:
            warn(f"{line_list(sorted(narrow))}: {NARROW_BEAM}")
    return guides
