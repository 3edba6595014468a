"""What SentencePiece does to the text `prepare` gives it: which side's model failed to train."""

from __future__ import annotations

import pytest

from tests.data.conftest import tiny_config, write_text_corpus
from translator import prepare
from translator.errors import TranslatorError

# 40 distinct letters: more than a 20-piece vocabulary can hold (SentencePiece refuses to train)
MANY_LETTERS = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之"[:40]
)


def spelled(number: int, letters: str, width: int) -> str:
    """`number` in base len(letters), one letter a digit: a distinct word for each number."""
    digits = []
    for _ in range(width):
        number, digit = divmod(number, len(letters))
        digits.append(letters[digit])
    return "".join(digits)


def alphabet_splits(small: str, large: str) -> dict[str, tuple[list[str], list[str]]]:
    """Distinct pairs (no split repeats another's) of words in `small`'s and `large`'s letters."""
    splits, start = {}, 0
    for split, count in (("train", 200), ("valid", 20), ("test", 20)):
        numbers = range(start, start + count)
        splits[split] = (
            [f"{spelled(n, small, 6)} {spelled(n * 7, small, 6)}" for n in numbers],
            [spelled(n * 13, large, 3) + spelled(n, large, 3) for n in numbers],
        )
        start += count
    return splits


@pytest.mark.parametrize("side", ["source", "target"])
def test_a_failed_sentencepiece_training_names_its_side(tmp_path, side):
    splits = alphabet_splits("abc", MANY_LETTERS)
    if side == "source":
        splits = {split: (many, few) for split, (few, many) in splits.items()}
    corpus = write_text_corpus(tmp_path / "corpus", splits)
    cfg = tiny_config(corpus, tmp_path / "data", "data.joint_vocab=false", "data.vocab_size=20")
    with pytest.raises(TranslatorError) as err:
        prepare.run(cfg, quiet=True)
    name = {"source": "spm.src.model", "target": "spm.tgt.model"}[side]
    assert f"SentencePiece training of the {side} model ({name}) failed" in err.value.what
    assert "smaller than required_chars" in err.value.what
