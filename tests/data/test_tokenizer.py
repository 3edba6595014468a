"""SentencePiece with byte fallback: a character the training text never had comes back out
whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.conftest import multi30k_lines
from translator import config
from translator.data.tokenizer import (
    BATCH_FROM,
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    size_note,
    train_sentencepiece,
)

REPO = Path(__file__).resolve().parents[2]
UNSEEN = (
    "Ein Hund (犬) für 5 € 😀."  # Multi30k's German and English have no Han, euro sign or emoji
)


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return multi30k_lines("train", "de", 1500) + multi30k_lines("train", "en", 1500)


@pytest.mark.parametrize("byte_fallback", [True, False])
def test_byte_fallback_spells_an_unseen_character_in_bytes(sentences, tmp_path, byte_fallback):
    assert not any(ch in line for line in sentences for ch in "犬€😀")
    path = train_sentencepiece(
        sentences,
        tmp_path / "spm",
        vocab_size=600,
        character_coverage=0.9999,
        byte_fallback=byte_fallback,
    )
    tokenizer = Tokenizer(path)
    ids = tokenizer.encode([UNSEEN])[0]
    if byte_fallback:  # as a model emitting these ids would have them decoded
        assert UNK_ID not in ids and tokenizer.decode([ids]) == [UNSEEN]
        assert tokenizer.sp.id_to_piece(ids).count("<0xE2>") == 1  # € is E2 82 AC in UTF-8
    else:  # the old WMT setting: each unseen character is one <unk>, and decoding drops it
        assert ids.count(UNK_ID) == 3 and tokenizer.decode([ids]) == ["Ein Hund () für 5  ."]


@pytest.mark.parametrize("name", ["base.yaml", "big.yaml"])
def test_the_wmt_configs_use_byte_fallback(name):
    data = config.load(REPO / "configs" / name, []).data
    assert data.byte_fallback and data.character_coverage == 0.9999


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(143)])
def test_an_interrupt_while_sentencepiece_reads_stays_an_interrupt(sentences, tmp_path, stop):
    # Ctrl-C, or SIGTERM through the CLI's handler, landing while SentencePiece pulls lines
    def interrupted():
        yield from sentences[:500]
        raise stop

    with pytest.raises(type(stop)) as raised:
        train_sentencepiece(interrupted(), tmp_path / "spm", vocab_size=200)
    assert raised.value is stop and not (tmp_path / "spm.model").exists()


@pytest.mark.parametrize("count", [1, BATCH_FROM - 1, BATCH_FROM, 3 * BATCH_FROM])
def test_a_few_lines_and_a_batch_encode_and_decode_as_sentencepiece_does_line_by_line(
    sentences, tmp_path, count
):
    # a few lines go through SentencePiece one at a time, a batch in one call: the same results
    tokenizer = Tokenizer(train_sentencepiece(sentences, tmp_path / "spm", vocab_size=300))
    lines = ([""] + sentences[::7])[:count]
    ids = tokenizer.encode(lines)
    assert ids == [tokenizer.sp.encode(line) for line in lines]
    with_specials = [[BOS_ID, *seq, EOS_ID, PAD_ID] for seq in ids]  # as a search returns them
    assert tokenizer.decode(with_specials) == [tokenizer.sp.decode(seq) for seq in ids]


def test_a_vocabulary_smaller_than_requested_says_so(sentences, tmp_path):
    # hard_vocab_limit=False: 300 pairs support far fewer than 50,000 pieces, and training succeeds
    made = Tokenizer(train_sentencepiece(sentences[:600], tmp_path / "spm", vocab_size=50_000))
    assert made.vocab_size < 50_000
    assert size_note(50_000, made.vocab_size) == (
        " (50,000 requested: the training text gives SentencePiece no more pieces)"
    )
    assert size_note(made.vocab_size, made.vocab_size) == "" and size_note(None, 10) == ""
