"""Target prefixes (`translate --prefix`): each translation starts with given text, its pieces
forced before the search goes on (decode.force_prefix_), as CTranslate2's target_prefix, Marian's
--force-decode and fairseq's --prefix-size do. What users do with it: interactive translation
(the user's accepted words, then the model's), a target-language or domain tag the model was
trained with.

Input: `source<TAB>prefix` lines; a line without a TAB has no prefix.
"""

from __future__ import annotations

from collections.abc import Callable

from translator.config import DataConfig
from translator.data.clean import input_text
from translator.data.tokenizer import UNK_ID, Tokenizer
from translator.errors import TranslatorError
from translator.line_warnings import prefix_unk_message


def split_prefixes(lines: list[str], first_line: int) -> tuple[list[str], list[str]]:
    """`source<TAB>prefix` lines -> (sources, prefixes); a line without a TAB has prefix "". A
    second TAB is refused: which one ends the source would be a guess."""
    sources, prefixes = [], []
    for number, line in enumerate(lines, first_line):
        source, _, prefix = line.partition("\t")
        if "\t" in prefix:
            raise TranslatorError(
                "more than one TAB: a --prefix line is `source<TAB>prefix`",
                f"line {number}",
                "replace the other TABs in the line with spaces",
            )
        sources.append(source)
        prefixes.append(prefix)
    return sources, prefixes


def piece_prefixes(
    tokenizer: Tokenizer,
    lines: list[str],
    prefixes: list[str] | None,
    owner: list[int],
    data: DataConfig | None,
    max_positions: int,
    warn: Callable[[str], None] | None,
    first_line: int,
) -> list[list[int]]:
    """Each piece's forced target ids: its line's prefix for the line's first piece, [] for the
    others; [] (no piece forced) without prefixes. A prefix over the positions is refused."""
    if prefixes is None:
        return []
    if isinstance(prefixes, str) or len(prefixes) != len(lines):
        raise ValueError(f"{len(lines)} lines but prefixes is not a list of {len(lines)}")
    if not any(p.strip() for p in prefixes):
        return []
    ids = tokenizer.target_sp.encode([input_text(p, data) for p in prefixes])
    unknown = {first_line + n: c for n, line in enumerate(ids) if (c := line.count(UNK_ID))}
    if unknown and warn is not None:
        warn(prefix_unk_message(unknown))
    for number, line in enumerate(ids):
        if len(line) > max_positions - 1:  # BOS takes a position
            raise TranslatorError(
                f"the target prefix is {len(line)} tokens, over the {max_positions - 1} an output "
                "of this model can hold",
                f"line {first_line + number}",
                "shorten the prefix",
            )
    first = {line: k for k, line in reversed(list(enumerate(owner)))}  # line -> its first piece
    return [ids[line] if first[line] == k else [] for k, line in enumerate(owner)]
