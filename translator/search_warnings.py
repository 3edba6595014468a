"""The warnings on what the search gave, each naming its input lines: scores not finite, `<unk>`
tokens dropped from the output, constraints missed, outputs ended by the length limit."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from translator.config import DecodeConfig
from translator.decode import Hypothesis, output_limits
from translator.guided import Guides, missing_constraints
from translator.line_pieces import unk_count
from translator.line_warnings import (
    MISSED_CONSTRAINT,
    NOT_FINITE,
    length_message,
    line_list,
    unk_message,
)


def warn_of_lines(
    results: list[list[Hypothesis]],
    by_line: list[list[int]],
    pieces: list[list[int]],
    owner: list[int],
    guides: Guides,
    decode: DecodeConfig,
    max_out: int,
    warn: Callable[[str], None],
    first_line: int,
) -> None:
    """Each of those warnings once for one call's lines (numbered from `first_line`): `results`
    and `pieces` per piece, `by_line` each line's pieces, `owner` each piece's line."""
    # a line whose search met NaN or inf picked garbage (often <unk>): said as that, not as <unk>
    overflowed = {
        number
        for number, ks in enumerate(by_line)
        if any(not math.isfinite(h.score) for k in ks for h in results[k])
    }
    if overflowed:
        warn(f"{line_list([first_line + n for n in sorted(overflowed)])}: {NOT_FINITE}")
    unknown = {
        first_line + number: n
        for number, ks in enumerate(by_line)
        if number not in overflowed and (n := unk_count([results[k] for k in ks]))
    }
    if unknown:
        warn(unk_message(unknown))
    missed = missing_constraints(guides.required, results, owner) if guides.required else []
    if missed:
        warn(f"{line_list([first_line + number for number in missed])}: {MISSED_CONSTRAINT}")
    # the searches raise a piece's limit to its prefix's or its constraints' length
    at_least, added = guides.limits()
    cut, capped = at_length_limit(pieces, owner, results, decode, max_out, at_least, added)
    cut = [number for number in cut if number not in overflowed]
    if cut:
        warn(length_message([first_line + number for number in cut], capped))


def at_length_limit(
    pieces: list[list[int]],
    owner: list[int],
    results: list[list[Hypothesis]],
    decode: DecodeConfig,
    positions: int,
    at_least: list[int] | None = None,
    added: list[int] | None = None,
) -> tuple[list[int], bool]:
    """The lines (0-based, sorted) where the best output of a piece has as many tokens as the
    length limit allows (at that step only EOS was allowed, so the limit ended it, not the model),
    and whether for one of them the limit was max_positions - 1 rather than max_len_a/b's. A
    piece's prefix raises its limit to `at_least[piece]`, its constraints add `added[piece]`, as
    the searches do."""
    if not pieces:
        return [], False
    lengths = torch.tensor([len(ids) for ids in pieces])
    limits = output_limits(lengths, decode.max_len_a, decode.max_len_b, positions).tolist()
    if at_least:
        limits = [max(limit, min(length, positions)) for limit, length in zip(limits, at_least)]
    if added:
        limits = [min(limit + more, positions) for limit, more in zip(limits, added)]
    hit = [
        (line, limit >= positions)
        for line, hyps, limit in zip(owner, results, limits)
        if len(hyps[0].tokens) >= limit
    ]
    return sorted({line for line, _ in hit}), any(capped for _, capped in hit)
