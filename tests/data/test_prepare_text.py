"""What SentencePiece does to the text `prepare` gives it: the references its normalization rule
changes (data.spm_normalization), the <unk> of a checkpoint's vocabulary that lacks the data's
script, and which side's model failed to train."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from tests.data.conftest import (
    multi30k_lines,
    small_splits,
    tiny_config,
    write_text_corpus,
)
from translator import __version__, prepare, vocab_source
from translator.config import to_dict
from translator.data.shards import TokenArray
from translator.data.tokenizer import Tokenizer, train_sentencepiece
from translator.errors import TranslatorError
from translator.prepared import (
    FORMAT,
    config_hash,
    load_manifest,
    prepared_dir,
    source_fingerprint,
)

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


# Chinese punctuation is full width: NFKC (SentencePiece's default rule) makes it ASCII
FULL_WIDTH = "，？！："


def full_width_splits() -> dict[str, tuple[list[str], list[str]]]:
    """Chinese-like targets, each with full-width punctuation inside and at its end."""
    splits = alphabet_splits("abc", MANY_LETTERS)
    for split, (src, tgt) in splits.items():
        punctuated = [
            f"{t[:3]}{FULL_WIDTH[i % 4]}{t[3:]}{FULL_WIDTH[(i + 1) % 4]}" for i, t in enumerate(tgt)
        ]
        splits[split] = (src, punctuated)
    return splits


def prepare_zh(tmp_path, *overrides):
    corpus = write_text_corpus(tmp_path / "corpus", full_width_splits(), ("en", "zh"))
    cfg = tiny_config(corpus, tmp_path / "data", "data.tgt_lang=zh", *overrides)
    said = []
    out = prepare.run(cfg, log=said.append)
    return cfg, out, said


def test_the_default_normalization_is_counted_and_warned_about_and_identity_keeps_the_text(
    tmp_path,
):
    references = full_width_splits()["test"][1]
    cfg, out, said = prepare_zh(tmp_path / "default")
    trip = json.loads((out / "manifest.json").read_text())["spm_round_trip"]
    assert trip["valid"] == {"lines": 20, "changed": 20} and trip["test"]["changed"] == 20
    assert "valid / test references SentencePiece changes: 20 of 20 / 20 of 20" in said
    warning = [line for line in said if line.startswith("warning: ")]
    assert len(warning) == 1 and "40 of the 40 valid and test references" in warning[0]
    # the first valid reference's first change: its comma
    assert "(e.g. '，' became ',')" in warning[0]
    assert "data.spm_normalization=identity" in warning[0]
    ids = TokenArray(out / "test.tgt")
    decoded = Tokenizer(out / "spm.model").decode([ids[i] for i in range(len(ids))])
    assert decoded != references and all(c not in "".join(decoded) for c in FULL_WIDTH)

    cfg, out, said = prepare_zh(tmp_path / "identity", "data.spm_normalization=identity")
    trip = json.loads((out / "manifest.json").read_text())["spm_round_trip"]
    assert trip["valid"]["changed"] == trip["test"]["changed"] == 0
    assert "valid / test references SentencePiece changes: 0 of 20 / 0 of 20" in said
    assert not [line for line in said if line.startswith("warning: ")]
    ids = TokenArray(out / "test.tgt")
    decoded = Tokenizer(out / "spm.model").decode([ids[i] for i in range(len(ids))])
    assert decoded == references


def test_data_prepared_before_the_setting_keeps_its_hash_and_another_rule_is_refused(tmp_path):
    cfg, out, _ = prepare_zh(tmp_path)
    manifest = load_manifest(cfg.data)
    # settings added since, left at their defaults
    later = ("spm_normalization", "spm_threads", "user_symbols")
    assert not set(later) & manifest["settings"].keys()
    # the hash as prepare computed it before the settings existed
    # (the given models' paths, added since, never count: their checksum, vocab_from, does)
    skipped = ("data_dir", "name", "spm_model", "tgt_spm_model")
    settings = {k: v for k, v in to_dict(cfg.data).items() if k not in skipped}
    for name in later:
        del settings[name]
    before = [__version__, FORMAT, settings, source_fingerprint(cfg.data)]
    assert (
        config_hash(cfg.data)
        == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
    )

    identity = tiny_config(
        cfg.data.source, tmp_path / "data", "data.tgt_lang=zh", "data.spm_normalization=identity"
    )
    with pytest.raises(
        TranslatorError, match="data.spm_normalization: 'nmt_nfkc' there, 'identity' here"
    ):
        load_manifest(identity.data)
    prepare.run(identity, quiet=True)
    with pytest.raises(
        TranslatorError, match="data.spm_normalization: 'identity' there, 'nmt_nfkc' here"
    ):
        load_manifest(cfg.data)


@pytest.fixture
def english_checkpoint(tmp_path, monkeypatch) -> str:
    """train.init_from naming a checkpoint whose SentencePiece model knows English text only."""
    english = multi30k_lines("train", "en", 1000)
    tokenizer = Tokenizer(train_sentencepiece(english, tmp_path / "en", vocab_size=300))
    monkeypatch.setattr(vocab_source.checkpoint, "read_tokenizer", lambda path: (tokenizer, {}))
    return f"train.init_from={tmp_path / 'en.pt'}"


# the length rule on (it drops every pair, and was blamed), or off (<unk> was trained on)
@pytest.mark.parametrize("ratio", ["3", "0"])
def test_a_checkpoint_vocabulary_without_the_data_script_is_refused_naming_the_cause(
    tmp_path, english_checkpoint, ratio
):
    # English sentences, Chinese-like words: "▁ <unk>" each, far shorter than their sources
    splits, start = small_splits(), 0
    for split, (en, _) in splits.items():
        splits[split] = (en, [spelled(start + n, MANY_LETTERS, 5) for n in range(len(en))])
        start += len(en)
    corpus = write_text_corpus(tmp_path / "corpus", splits, ("en", "zh"))
    cfg = tiny_config(
        corpus,
        tmp_path / "data",
        "data.tgt_lang=zh",
        english_checkpoint,
        f"data.max_length_ratio={ratio}",
    )
    with pytest.raises(TranslatorError) as err:
        prepare.run(cfg, quiet=True)
    assert err.value.where == "train.init_from" and re.fullmatch(
        r"\d\d% of the target side's training tokens are <unk> \([\d,]+ of [\d,]+\): "
        r"the checkpoint's vocabulary does not cover this data",
        err.value.what,
    )
    assert "fine-tune from a checkpoint trained on this language" in err.value.fix
    assert not prepared_dir(cfg.data).exists()


def test_a_checkpoint_vocabulary_missing_a_few_letters_is_a_warning(
    tmp_path, corpus, english_checkpoint
):
    """English pieces for German text: its umlauts and ß become <unk>."""
    said = []
    out = prepare.run(tiny_config(corpus, tmp_path / "data", english_checkpoint), log=said.append)
    unk = json.loads((out / "manifest.json").read_text())["unk"]
    german = "".join(small_splits()["train"][1])
    assert unk["tgt"]["unk"] >= sum(german.count(c) for c in "äöüß") / 3 > 0
    assert unk["src"]["unk"] < unk["tgt"]["unk"]
    row = next(line for line in said if line.startswith("train <unk> src / tgt: "))
    assert re.fullmatch(r"train <unk> src / tgt: \d\.\d\d% / \d\.\d\d%", row)
    warning = [line for line in said if "side's training tokens are <unk>" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: ")
    assert (
        "of the target side's" in warning[0]
        and "a checkpoint trained on this language" in warning[0]
    )


def test_the_normalization_warning_reaches_stderr_under_quiet(tmp_path, capsys):
    """`train --quiet` prepares quietly: a warning that explains a capped BLEU still shows."""
    corpus = write_text_corpus(tmp_path / "corpus", full_width_splits(), ("en", "zh"))
    prepare.run(tiny_config(corpus, tmp_path / "data", "data.tgt_lang=zh"), quiet=True)
    err = capsys.readouterr().err
    assert err.count("warning: ") == 1 and "data.spm_normalization=identity" in err
