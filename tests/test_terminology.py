"""Term lists -> constraints: whole-word, any-case matches, the longest term winning overlaps."""

from __future__ import annotations

import io

import pytest

from tests.conftest import SENTENCES
from translator import stream, translate
from translator.errors import TranslatorError
from translator.terminology import Terms, load_terms

TERMS = Terms(
    [
        ("bank", "Bank"),
        ("New York", "New York"),
        ("York", "York"),
        ("dog", "Hund"),
        ("hound", "Hund"),
        ("东京", "Tokio"),
        ("iPhone", "iPhone"),
        ("U.S.", "USA"),
        ("한국", "Korea"),
        ("कल", "yesterday"),
        ("किताब", "book"),
    ]
)


@pytest.mark.parametrize(
    "line, expected",
    [
        ("The bank by the embankment.", ["Bank"]),  # a word, not a piece of one
        ("A Dog and a HOUND.", ["Hund"]),  # any case; one target once
        ("From York to New York", ["York", "New York"]),  # in order; "York" inside "New York" not
        ("hot-dog stand, banks", ["Hund"]),  # a hyphen bounds a word, a plural does not
        ("我在东京工作", ["Tokio"]),  # CJK: no word boundaries
        ("iphone東京", ["iPhone"]),  # nor beside CJK
        ("한국어를 배워요", []),  # Korean is written with spaces: a word
        ("bank_note, U.S.A.", []),  # _ and letters after a dot join a word
        # a combining mark joins a word (Unicode's \w, UTS #18): कला is "art", किताबें "books"
        ("मुझे कला पसंद है, मेरी किताबें", []),
        ("कल मेरी किताब", ["yesterday", "book"]),
        ("", []),
    ],
)
def test_a_line_gets_the_targets_of_the_source_terms_it_holds(line, expected):
    assert TERMS.constraints(line) == expected


def test_terms_are_cleaned_as_lines_are_and_a_long_list_is_one_pattern():
    import unicodedata

    def clean(text: str) -> str:
        return " ".join(unicodedata.normalize("NFC", text).split())

    terms = Terms([("café", "Café"), ("New  York", "New York")], clean=clean)
    line = clean(unicodedata.normalize("NFD", "A café in New   York"))
    assert terms.constraints(line) == ["Café", "New York"]
    # a term whose lowercase is longer (İ gains a combining dot) is still found
    assert Terms([("İstanbul", "Istanbul")]).constraints("İstanbul is big, İSTANBUL too") == [
        "Istanbul"
    ]
    many = Terms([(f"term{i}", f"T{i}") for i in range(20_000)])
    assert many.constraints("with term19999 and term7, not term70000") == ["T19999", "T7"]


def test_a_term_file_is_read_longest_first_and_bad_rows_are_refused(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("dog\tHund\n\nNew York\tNew York\n", encoding="utf-8")
    assert load_terms(path) == [("dog", "Hund"), ("New York", "New York")]
    path.write_text("dog\tHund\ncat\t \n", encoding="utf-8")
    with pytest.raises(TranslatorError, match=r"terms.tsv:2: a term with one side blank"):
        load_terms(path)
    path.write_text("dog\tHund\tchien\n", encoding="utf-8")
    with pytest.raises(TranslatorError, match=r"terms.tsv:1: 3 tab-separated fields"):
        load_terms(path)


def test_terms_join_a_lines_own_constraints(tiny):
    """--constraints' phrases and the term list's targets are the line's constraints together:
    the same output as translate_lines given them all."""
    import dataclasses

    decode = dataclasses.replace(tiny.cfg.decode, beam_size=4)
    lines = [f"{SENTENCES[1]}\tspielen", SENTENCES[4], "A dog."]
    out = io.StringIO()
    terms = Terms([("dogs", "Hunde"), ("woman", "Frau")])
    stream.translate_chunks(
        tiny.model, tiny.tokenizer, decode, iter([lines]), out, constraints=True, terms=terms
    )
    expected = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        [SENTENCES[1], SENTENCES[4], "A dog."],
        decode,
        warn=None,
        constraints=[["spielen", "Hunde"], ["Frau"], []],
    )
    assert out.getvalue().split("\n")[:3] == [hyps[0][0] for hyps in expected]
    assert "Hunde" in expected[0][0][0] and "Frau" in expected[1][0][0]


def test_translate_reads_the_term_list_before_the_model(tiny, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from translator import cli

    seen = {}
    monkeypatch.setattr(stream, "translate_chunks", lambda *args, **named: seen.update(named) or 0)
    path = tmp_path / "terms.tsv"
    path.write_text("dog\tHund\n", encoding="utf-8")
    command = ["translate", str(tiny.path), "--terminology", str(path), "-q"]
    result = CliRunner().invoke(cli.app, command, input="A dog.\n")
    assert result.exit_code == 0 and seen["terms"].constraints("A dog.") == ["Hund"], result.output
    # a bad list is refused before minutes of loading: no checkpoint is read
    monkeypatch.setattr(stream, "load_models", lambda *a: pytest.fail("loaded the model"))
    path.write_text("dog\n", encoding="utf-8")
    result = CliRunner().invoke(cli.app, command, input="A dog.\n")
    assert result.exit_code == 1 and "terms.tsv:1: 1 tab-separated field," in str(result.exception)
    # a target the model cannot spell is refused once it is loaded, before any line
    monkeypatch.undo()
    monkeypatch.setattr(stream, "translate_chunks", lambda *a, **k: pytest.fail("translated"))
    path.write_text("dog\tHund\nTokyo\t東京\n", encoding="utf-8")
    result = CliRunner().invoke(cli.app, command, input="A dog.\n")
    assert result.exit_code == 1 and "'東京' holds characters" in str(result.exception)


def test_eval_with_a_term_list_counts_the_term_targets_its_hypotheses_hold(tiny, tmp_path):
    from translator import evaluate

    src, ref, terms = tmp_path / "src.en", tmp_path / "ref.de", tmp_path / "terms.tsv"
    sources = [SENTENCES[1], SENTENCES[4], "A boy jumps."]
    src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    ref.write_text("Zwei Hunde.\nEine Frau.\nEin Junge springt.\n", encoding="utf-8")
    terms.write_text("dogs\tHunde\nwoman\tFrau\nboy\tKnabe\n", encoding="utf-8")
    hyps = tmp_path / "out.hyp"
    scores = evaluate.run(
        tiny.path, src_file=src, ref_file=ref, hyp_file=hyps, beam=4, terminology=terms, quiet=True
    )
    written = hyps.read_text(encoding="utf-8").splitlines()
    # each line's target term is in its hypothesis: 3 of 3; the references hold 2 of the terms
    assert all(t in h for t, h in zip(["Hunde", "Frau", "Knabe"], written)), written
    assert (
        scores.terms
        == "3 of 3 term targets in the hypotheses (100.0%); of the 2 the references hold, 2"
    )
    assert "terms: 3 of 3" in "\n".join(scores.lines())
