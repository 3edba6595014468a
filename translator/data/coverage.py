"""What a vocabulary loses of the text `prepare` encodes, measured so that the summary shows it
and a warning names the setting to change where it matters.

SentencePiece rewrites text by its normalization rule (data.spm_normalization) before splitting
it, and characters it has no piece for become <unk>: a model trained on the ids can never output
what was lost, and BLEU against the untouched references counts every such character. A
checkpoint's vocabulary (train.init_from) that lacks the data's script makes <unk> of most of it:
refused, as training on it would teach nothing.
"""

from __future__ import annotations

import difflib

from translator.data.tokenizer import UNK_ID, Tokenizer
from translator.errors import TranslatorError

# Of the valid and test references changed: a handful is noise, more is a ceiling on BLEU
WARN_CHANGED = 0.01
# Of a side's training tokens. A run of characters the vocabulary lacks is one <unk> between
# word-boundary and punctuation pieces, so a script it lacks entirely gives about half its tokens
# as <unk> (Chinese 50%, Russian 42% with an English vocabulary), never all of them
REFUSE_UNK, WARN_UNK = 0.2, 0.01
SIDES = {"src": "source", "tgt": "target"}


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


def check_unk(unk: dict, where: str, given: str) -> None:
    """Refuses training data with a side over REFUSE_UNK <unk> (`unk`: side -> counts of
    encode_to_ids), naming the cause before the length rules, which drop its pairs, are blamed.
    `given`: the setting whose SentencePiece model(s) encoded the data ("" for trained ones)."""
    for side, count in unk.items():
        if _rate(count) <= REFUSE_UNK:
            continue
        raise TranslatorError(
            f"{_rate(count):.0%} of the {SIDES[side]} side's training tokens are <unk> "
            f"({count['unk']:,} of {count['tokens']:,}): {_whose(given)} does not cover this "
            "data",
            where,
            GIVEN_FIX.get(
                given, "prepare with data.byte_fallback=true or data.character_coverage=1"
            ),
        )


# how to cover the data when a given vocabulary does not
GIVEN_FIX = {
    "train.init_from": "fine-tune from a checkpoint trained on this language, or train from "
    "scratch without train.init_from",
    "data.spm_model": "give a SentencePiece model made for these languages, or leave "
    "data.spm_model empty to train one",
}


def _whose(given: str) -> str:
    if given == "train.init_from":
        return "the checkpoint's vocabulary"
    return f"the vocabulary of {given}" if given else "SentencePiece's vocabulary"


def given_by(manifest: dict) -> str:
    """The setting whose SentencePiece model(s) encoded prepared data ("" for trained ones)."""
    if not manifest.get("settings", {}).get("vocab_from"):
        return ""
    return (
        "data.spm_model" if "spm_model" in (manifest.get("vocab_from") or {}) else "train.init_from"
    )


def _rate(count: dict) -> float:
    return count["unk"] / max(count["tokens"], 1)


def summary_rows(manifest: dict) -> list[tuple[str, str]]:
    """The rows of prepare's summary for what the vocabulary loses (none in an older
    manifest)."""
    rows = []
    if unk := manifest.get("unk"):
        rows.append(("train <unk> src / tgt", f"{_rate(unk['src']):.2%} / {_rate(unk['tgt']):.2%}"))
    if trip := manifest.get("spm_round_trip"):
        valid, test = trip["valid"], trip["test"]
        rows.append(
            (
                "valid / test references SentencePiece changes",
                f"{valid['changed']:,} of {valid['lines']:,} / {test['changed']:,} of "
                f"{test['lines']:,}",
            )
        )
    return rows


def warnings(manifest: dict) -> list[str]:
    """One line for each loss large enough to matter, naming an example and the fix."""
    given = given_by(manifest)
    cover = {
        "train.init_from": "a checkpoint trained on this language covers it",
        "data.spm_model": "a SentencePiece model made for this language covers it",
    }
    lines = [
        f"warning: {_rate(count):.1%} of the {SIDES[side]} side's training tokens are <unk>: "
        "the model learns <unk> for what the vocabulary lacks; "
        + cover.get(given, "prepare with data.byte_fallback=true to spell it in bytes")
        for side, count in manifest.get("unk", {}).items()
        if _rate(count) > WARN_UNK
    ]
    return lines + _round_trip_warnings(manifest, given)


def _round_trip_warnings(manifest: dict, given: str) -> list[str]:
    if given == "data.spm_model" and not manifest.get("joint_vocab", True):
        given = "data.tgt_spm_model"  # the references are the target side's
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
        + _round_trip_fix(trip["cause"], given)
    ]


def _round_trip_fix(cause: str, given: str) -> str:
    if given == "train.init_from":
        return "the checkpoint's SentencePiece model (train.init_from) decides this"
    if given:
        return f"the SentencePiece model of {given} decides this"
    if cause == "normalization":
        return "prepare with data.spm_normalization=identity to keep the characters as they are"
    return "prepare with data.byte_fallback=true to spell characters the vocabulary lacks in bytes"
