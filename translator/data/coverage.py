"""What a vocabulary loses of the text `prepare` encodes, measured so that the summary shows it
and a warning names the setting to change where it matters.

SentencePiece rewrites text by its normalization rule (data.spm_normalization) before splitting
it, and characters it has no piece for become <unk>: a model trained on the ids can never output
what was lost, and BLEU against the untouched references counts every such character.
"""

from __future__ import annotations

import difflib

from translator.data.tokenizer import UNK_ID, Tokenizer

# Of the valid and test references changed: a handful is noise, more is a ceiling on BLEU
WARN_CHANGED = 0.01


def round_trip(tokenizer: Tokenizer, lines: list[str], ids: list[list[int]]) -> dict:
    """How many of `lines` (target text as cleaned, `ids` its encoding) do not decode back as they
    were, and the first change: one the normalization rule made where there is one, since an
    <unk> loses its characters whatever the rule."""
    back = tokenizer.decode(ids)
    changed = [i for i, (line, again) in enumerate(zip(lines, back)) if line != again]
    by_rule = [i for i in changed if UNK_ID not in ids[i]]
    first = (by_rule or changed or [None])[0]
    return {
        "lines": len(lines),
        "changed": len(changed),
        "example": "" if first is None else first_change(lines[first], back[first]),
        "cause": "normalization" if by_rule else "unknown characters" if changed else "",
    }


def first_change(before: str, after: str, most: int = 12) -> str:
    """The first difference of two strings in words, e.g. `'，' became ','` (repr: an invisible
    character shows as its code point, '\\u200c')."""
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        was, now = before[i1:i2][:most], after[j1:j2][:most]
        if tag == "replace":
            return f"{was!r} became {now!r}"
        if tag == "delete":
            return f"{was!r} was dropped"
        if tag == "insert":
            return f"{now!r} was added"
    return ""


def summary_rows(manifest: dict) -> list[tuple[str, str]]:
    """The rows of prepare's summary for what the vocabulary loses (none in an older
    manifest)."""
    trip = manifest.get("spm_round_trip")
    if not trip:
        return []
    valid, test = trip["valid"], trip["test"]
    return [
        (
            "valid / test references SentencePiece changes",
            f"{valid['changed']:,} of {valid['lines']:,} / {test['changed']:,} of "
            f"{test['lines']:,}",
        )
    ]


def warnings(manifest: dict) -> list[str]:
    """One line for each loss large enough to matter, naming an example and the fix."""
    trip = manifest.get("spm_round_trip")
    if not trip:
        return []
    changed = trip["valid"]["changed"] + trip["test"]["changed"]
    lines = trip["valid"]["lines"] + trip["test"]["lines"]
    if changed <= WARN_CHANGED * lines:
        return []
    return [
        f"warning: SentencePiece changes {changed:,} of the {lines:,} valid and test references "
        f"(e.g. {trip['example']}): the model cannot output what it changes, and BLEU counts it; "
        + _round_trip_fix(trip["cause"], bool(manifest.get("settings", {}).get("vocab_from")))
    ]


def _round_trip_fix(cause: str, checkpoint_vocab: bool) -> str:
    if checkpoint_vocab:
        return "the checkpoint's SentencePiece model (train.init_from) decides this"
    if cause == "normalization":
        return "prepare with data.spm_normalization=identity to keep the characters as they are"
    return "prepare with data.byte_fallback=true to spell characters the vocabulary lacks in bytes"
