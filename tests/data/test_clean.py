"""Cleaning: normalisation properties, one drop count per rule, each rule switchable in config."""

from __future__ import annotations

import unicodedata
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from translator import config
from translator.data.clean import (
    DEBRIS,
    DUPLICATE,
    EMPTY,
    HELD_OUT,
    RATIO,
    RULES,
    TOO_LONG,
    Cleaner,
    is_debris,
    length_filter,
    normalize,
    pair_digest,
)

# letters, combining marks, every kind of space, control and format characters
TEXT = st.text(
    st.sampled_from(
        list("aé e\u0301Zß1 @")
        + [
            "\t",
            "\n",
            "\r",
            "\xa0",
            "\u2009",
            "\u3000",
            "\x00",
            "\x07",
            "\x1f",
            "\x0b",
            "\x0c",
            "\x1c",
            "\x9f",
            "\x85",
            "\u200b",
            "\ufeff",
            "\u2028",
        ]
    ),
    max_size=30,
)


def reference(text: str) -> str:
    """The rule written plainly (no fast path)."""
    # CR, FF, \x1c-\x1f, NEL, U+2028 included
    spaced = "".join(" " if ch.isspace() else ch for ch in text)
    kept = "".join(
        ch for ch in spaced if unicodedata.category(ch) != "Cc" and ch not in "\u200b\ufeff"
    )
    return unicodedata.normalize("NFC", " ".join(kept.split()))


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_normalize_equals_the_plain_rule_and_is_idempotent(text):
    out = normalize(text)
    assert out == reference(text)
    assert normalize(out) == out
    assert "\n" not in out and "  " not in out and out == out.strip()


@settings(max_examples=100, deadline=None)
@given(TEXT)
def test_no_line_break_survives_even_without_space_rules(text):
    assert "\n" not in normalize(text, nfc=False, spaces=False)


def test_normalize_examples():
    assert normalize("Cafe\u0301") == "Café"  # NFC composes
    assert normalize(" a\tb\xa0\xa0c\u3000 ") == "a b c"  # TAB, NO-BREAK SPACE, ideographic space
    assert normalize("zero\u200bwidth\x07bell") == "zerowidthbell"
    assert normalize("Cafe\u0301", nfc=False) == "Cafe\u0301"
    # the control character went, then the mark composed
    assert normalize("Z\x07\u0301") == "\u0179"
    # not glued into one word
    assert normalize("foo\rbar\x0cbaz\x85qux\x1fend") == "foo bar baz qux end"


def test_debris_is_a_side_without_letters_or_digits():
    assert is_debris("@@") and is_debris(" &quot; -- ") and is_debris("<br/> <p>")
    assert (
        not is_debris("")
        and not is_debris("@@ a")
        and not is_debris("42")
        and not is_debris("日本")
    )
    assert not is_debris("<b>Hi</b>") and not is_debris("AT&T") and not is_debris("&amp; Co")


def test_pair_digest_keeps_the_boundary():
    assert pair_digest("a b", "c") != pair_digest("a", "b c")
    assert pair_digest("x", "y") == pair_digest("x", "y")


PAIRS = [  # (src, tgt, rule that drops it or None)
    ("A dog runs.", "Ein Hund rennt.", None),
    ("   ", "Leer.", EMPTY),
    ("A cat.", "@@", DEBRIS),
    ("A valid sentence.", "Irgendwas.", HELD_OUT),
    ("Something.", "Ein\xa0Testsatz.", HELD_OUT),  # matched after normalisation
    ("A dog  runs.", "Ein Hund rennt.", DUPLICATE),  # equal after normalisation
    ("A bird.", "Ein Vogel.", None),
]
HELD = ["A valid sentence.", "Ein Testsatz."]


def run_cleaner(*overrides: str):
    data = config.load(None, list(overrides)).data
    cleaner = Cleaner(data, HELD)
    src, tgt = [], []
    for start in range(0, len(PAIRS), 3):  # several batches: duplicates are found across them
        batch = PAIRS[start : start + 3]
        out = cleaner([p[0] for p in batch], [p[1] for p in batch])
        src += out[0]
        tgt += out[1]
    keep = cleaner.first_occurrences(len(src))
    return [s for s, k in zip(src, keep) if k], cleaner


def test_each_rule_drops_and_counts_its_pairs():
    kept, cleaner = run_cleaner()
    assert kept == [p[0] for p in PAIRS if p[2] is None]
    expected = {rule: sum(p[2] == rule for p in PAIRS) for rule in RULES}
    assert dict(cleaner.drops) == expected
    assert cleaner.pairs_in == len(PAIRS)


@pytest.mark.parametrize(
    ("switch", "rule"),
    [
        ("data.drop_empty=false", EMPTY),
        ("data.drop_debris=false", DEBRIS),
        ("data.drop_held_out=false", HELD_OUT),
        ("data.dedup=false", DUPLICATE),
    ],
)
def test_each_rule_can_be_switched_off(switch, rule):
    kept, cleaner = run_cleaner(switch)
    assert cleaner.drops[rule] == 0
    assert len(kept) == sum(p[2] in (None, rule) for p in PAIRS)


def test_dedup_keeps_the_first_occurrence():
    data = config.load(None, []).data
    cleaner = Cleaner(data)
    src, _ = cleaner(["b", "a", "b", "c", "a"], ["1", "2", "1", "3", "2"])
    assert cleaner.first_occurrences(len(src)).tolist() == [True, True, False, True, False]
    assert cleaner.drops[DUPLICATE] == 2


def test_length_rules_count_and_zero_means_off():
    src, tgt = np.array([5, 300, 10, 4, 1]), np.array([6, 10, 40, 4, 3])
    drops = {TOO_LONG: 0, RATIO: 0}
    assert length_filter(src, tgt, 250, 3.0, drops).tolist() == [True, False, False, True, True]
    assert drops == {TOO_LONG: 1, RATIO: 1}
    assert length_filter(src, tgt, 0, 0.0, drops).all()


def test_held_out_sentences_are_normalised_like_the_training_text():
    # as a raw test file may have it
    cleaner = Cleaner(config.load(None, []).data, ["Zwei\xa0Hunde  spielen."])
    src, _ = cleaner(["Two dogs play.", "A cat."], ["Zwei Hunde spielen.", "Eine Katze."])
    assert src == ["A cat."] and cleaner.drops[HELD_OUT] == 1


@pytest.mark.parametrize(
    "nfc, spaces", [(True, True), (False, True), (True, False), (False, False)]
)
def test_normalisation_switches_reach_the_cleaner(nfc, spaces):
    data = config.load(
        None, [f"data.nfc={str(nfc).lower()}", f"data.normalize_spaces={str(spaces).lower()}"]
    ).data
    src, _ = Cleaner(data)(["Cafe\u0301\xa0au lait"], ["Milchkaffee"])
    assert src == [("Caf\u00e9" if nfc else "Cafe\u0301") + (" " if spaces else "\xa0") + "au lait"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), max_size=40),
    st.integers(0, 30),
    st.sampled_from([0.0, 1.5, 3.0]),
)
def test_length_filter_is_the_per_pair_rule_on_either_side(pairs, max_tokens, max_ratio):
    """A side longer than max_tokens (not equal) drops the pair, whichever side it is; the rules are
    symmetric."""
    src, tgt = (np.array([p[i] for p in pairs], dtype=np.int64) for i in (0, 1))
    drops = Counter()
    keep = length_filter(src, tgt, max_tokens, max_ratio, drops)
    too_long = [bool(max_tokens) and max(s, t) > max_tokens for s, t in pairs]
    skewed = [
        bool(max_ratio) and not long and max(s, t) > max_ratio * min(s, t)
        for (s, t), long in zip(pairs, too_long)
    ]
    assert keep.tolist() == [not (a or b) for a, b in zip(too_long, skewed)]
    assert (drops[TOO_LONG], drops[RATIO]) == (sum(too_long), sum(skewed))
    assert length_filter(tgt, src, max_tokens, max_ratio, Counter()).tolist() == keep.tolist()


def test_a_duplicate_is_the_whole_pair_not_one_side():
    cleaner = Cleaner(config.load(None, []).data)
    # same source or same target alone
    src, _ = cleaner(["a", "a", "b", "c", "a"], ["1", "2", "2", "2", "1"])
    assert cleaner.first_occurrences(len(src)).tolist() == [True, True, True, True, False]
    assert cleaner.drops[DUPLICATE] == 1


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12), st.integers(0, 12), st.integers(0, 12))
def test_pair_digest_tells_where_source_ends(text, i, j):
    """Pairs whose concatenation is the same text differ unless they cut it at the same place."""
    i, j = min(i, len(text)), min(j, len(text))
    assert (pair_digest(text[:i], text[i:]) == pair_digest(text[:j], text[j:])) == (i == j)
