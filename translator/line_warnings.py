"""Warnings that name the input lines they are about: the wording `translate` and `score` share.

Lines are numbered from 1 as the user's file counts them; ten are named, the rest counted.
"""

from __future__ import annotations

from translator.errors import counted

# fp16 above all (CUDA's auto dtype on GPUs without bf16): activations past 65,504 overflow
NOT_FINITE = (
    "the model's scores are not finite (NaN or inf: it overflows in this precision), so the "
    "output is meaningless; use --dtype fp32 or bf16"
)
MISSED_CONSTRAINT = (
    "the translation lacks one of its constraints: no hypothesis the beam kept could place it "
    "before the length limit (a wider --beam, or fewer bans, may)"
)
NARROW_BEAM = (
    "the beam has no more slots than the line's constraint tokens, so the phrases go in first; a "
    "wider --beam places them where the model would"
)
PREFIX_TOO_LONG = (
    "the prefix is longer than the {limit} tokens the model can output, so the line is "
    "translated without it; shorten the prefix"
)
BYTE_FALLBACK = (
    "a model prepared with data.byte_fallback: true spells such characters in bytes instead"
)


def line_list(lines: list[int], shown: int = 10) -> str:
    """'line 4', or 'lines 1, 2, ... 10 and 2 more' (sorted line numbers)."""
    where = ", ".join(map(str, lines[:shown])) + (
        f" and {len(lines) - shown} more" if len(lines) > shown else ""
    )
    return f"line{'s' if len(lines) != 1 else ''} {where}"


def unk_message(counts: dict[int, int], shown: int = 10) -> str:
    """The <unk> tokens dropped from the output, by line number -> count."""
    return _unknown(
        counts,
        "<unk> token",
        "(characters outside the vocabulary) dropped from the output of",
        shown,
    )


def source_unk_message(counts: dict[int, int], shown: int = 10) -> str:
    """The source pieces the model's vocabulary lacks, by line number -> count."""
    return _unknown(
        counts,
        "source piece",
        "outside the model's vocabulary (read as <unk>, their meaning lost) in",
        shown,
    )


def target_unk_message(counts: dict[int, int], shown: int = 10) -> str:
    """The pieces of given translations the model's vocabulary lacks (score), by line -> count."""
    return _unknown(
        counts, "target piece", "outside the model's vocabulary (scored as <unk>) in", shown
    )


def _unknown(counts: dict[int, int], what: str, where: str, shown: int) -> str:
    total = sum(counts.values())
    lines = line_list(sorted(counts), shown)
    return f"{counted(total, what)} {where} {lines}; {BYTE_FALLBACK}"


def length_message(lines: list[int], capped: bool = False, shown: int = 10) -> str:
    """The outputs that the length limit ended, by line number; `capped`: for some, the limit was
    the model's positions, which no flag raises."""
    fix = "raise --max-len-a/--max-len-b if it is cut short"
    if capped:
        fix += " (where the model's max_positions - 1 was the limit, only shorter input lines help)"
    # an output as long as 1.2 x its source + 10 is more often a loop than a cut: say both
    return (
        f"the output of {line_list(lines, shown)} stopped at the length limit "
        f"(decode.max_len_a * source tokens + max_len_b, at most max_positions - 1): such an "
        f"output is cut short or repeating itself (an undertrained model's often loop); {fix}, "
        "or set --no-repeat-ngram-size 3 if it repeats"
    )
