"""Target prefixes through translate_lines, the `translate --prefix` stream and serve's "prefix"
(the searches' own prefix tests are in decode/test_prefix.py)."""

from __future__ import annotations

import dataclasses
import io

import pytest

from tests.conftest import SENTENCES
from tests.test_serve import call, server  # noqa: F401 (a fixture)
from translator import stream, translate
from translator.errors import TranslatorError
from translator.prefixes import split_prefixes

PREFIX = "Ein Mann"


def test_split_prefixes_takes_the_first_tab_and_refuses_a_second():
    assert split_prefixes(["a b\tEin Mann", "c d", "\tx", ""], 1) == (
        ["a b", "c d", "", ""],
        ["Ein Mann", "", "x", ""],
    )
    with pytest.raises(TranslatorError, match="line 12: more than one TAB"):
        split_prefixes(["a\tb", "a\tb\tc"], 11)


@pytest.mark.parametrize("beam", [1, 3])
def test_each_translation_starts_with_its_prefix_and_the_others_are_untouched(tiny, beam):
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam)
    lines = SENTENCES[:4]
    prefixes = [PREFIX, "", "Zwei", ""]
    got = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, nbest=beam, prefixes=prefixes, warn=None
    )
    free = translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, beam, warn=None)
    for hyps, prefix, unforced in zip(got, prefixes, free):
        assert all(text.startswith(prefix) for text, _ in hyps)
        if not prefix:  # a line without one translates as without --prefix, batched or not
            assert [text for text, _ in hyps] == [text for text, _ in unforced]
            assert [s for _, s in hyps] == pytest.approx([s for _, s in unforced], abs=1e-4)
    assert not free[0][0][0].startswith(PREFIX)  # so the prefix did change the first line


def test_an_over_long_line_gets_its_prefix_once_and_an_empty_line_stays_empty(tiny):
    long_line = " ".join(SENTENCES * 2)  # translated in pieces (test_translate)
    got = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        [long_line, "  "],
        tiny.cfg.decode,
        prefixes=[PREFIX, PREFIX],
        warn=None,
    )
    assert got[0][0][0].startswith(PREFIX) and got[0][0][0].count(PREFIX) == 1
    assert got[1] == [("", 0.0)]


def test_a_prefix_over_the_positions_is_refused_and_lists_must_align(tiny):
    too_long = " ".join(["Mann"] * tiny.cfg.model.max_positions)
    with pytest.raises(TranslatorError, match=r"line 3: the target prefix is \d+ tokens, over"):
        translate.translate_lines(
            tiny.model,
            tiny.tokenizer,
            ["a", "b"],
            tiny.cfg.decode,
            prefixes=["", too_long],
            first_line=2,
        )
    with pytest.raises(ValueError, match="2 lines"):
        translate.translate_lines(
            tiny.model, tiny.tokenizer, ["a", "b"], tiny.cfg.decode, prefixes=[PREFIX]
        )


def test_prefix_pieces_outside_the_vocabulary_are_counted_in_a_warning(tiny):
    warnings: list[str] = []
    translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        ["a", "b"],
        tiny.cfg.decode,
        prefixes=["", "Ein \u4e00\u4e01"],  # CJK: not in a Multi30k vocabulary
        warn=warnings.append,
    )
    # SentencePiece reads a run of unknown characters as one <unk>
    assert any(w.startswith("1 prefix piece outside") and "line 2" in w for w in warnings)


def test_the_prefixed_stream_writes_a_line_per_line_in_order(tiny):
    lines = [f"{SENTENCES[0]}\t{PREFIX}", SENTENCES[1], f"{SENTENCES[2]}\tZwei", ""]
    out = io.StringIO()
    count = stream.translate_chunks(
        tiny.model, tiny.tokenizer, tiny.cfg.decode, [lines[:2], lines[2:]], out, prefixed=True
    )
    written = out.getvalue().split("\n")[:-1]
    assert count == 4 and len(written) == 4
    assert written[0].startswith(PREFIX) and written[2].startswith("Zwei") and written[3] == ""
    alone = translate.translate_lines(
        tiny.model, tiny.tokenizer, [SENTENCES[1]], tiny.cfg.decode, warn=None
    )
    assert written[1] == alone[0][0][0]
    with pytest.raises(TranslatorError, match="line 3: more than one TAB"):
        stream.translate_chunks(
            tiny.model,
            tiny.tokenizer,
            tiny.cfg.decode,
            [["a", "b", "c\td\te"]],
            io.StringIO(),
            prefixed=True,
        )


def test_serve_takes_a_prefix_a_line(tiny, server):  # noqa: F811
    status, reply = call(server + "/translate", {"text": SENTENCES[:2], "prefix": [PREFIX, ""]})
    assert status == 200
    expected = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        SENTENCES[:2],
        tiny.cfg.decode,
        warn=None,
        data=tiny.cfg.data,
        prefixes=[PREFIX, ""],
    )
    assert reply["translations"] == [hyps[0][0] for hyps in expected]
    assert reply["translations"][0].startswith(PREFIX)
    status, one = call(server + "/translate", {"text": SENTENCES[0], "prefix": PREFIX})
    assert status == 200 and one["translations"] == reply["translations"][:1]
    for bad in (
        {"text": SENTENCES[:2], "prefix": [PREFIX]},
        {"text": [SENTENCES[0]], "prefix": PREFIX},
    ):
        status, error = call(server + "/translate", bad)
        assert status == 400 and "'prefix'" in error["error"]


def test_the_command_reads_prefixes_and_refuses_a_second_tab_in_one_line(tiny):
    from tests.test_cli import run_cli

    text = f"{SENTENCES[0]}\t{PREFIX}\n{SENTENCES[1]}\n"
    done = run_cli("translate", str(tiny.path), "--prefix", "--quiet", stdin=text)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(PREFIX)
    bad = run_cli("translate", str(tiny.path), "--prefix", "--quiet", stdin="a\tb\tc\n")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "error: line 1: more than one TAB: a --prefix line is `source<TAB>prefix` (replace the "
        "other TABs in the line with spaces)"
    ]
