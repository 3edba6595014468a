"""Separate source/target vocabularies, from prepare to a translated line."""

from __future__ import annotations

import pytest

from tests.train.conftest import variant
from translator import checkpoint, prepare
from translator.config import ModelConfig
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.model.transformer import Transformer
from translator.train import loop, startup
from translator.translate import translate_lines


def test_untied_source_embeddings_with_separate_vocabularies():
    model = Transformer(
        ModelConfig(
            vocab_size=50,
            src_vocab_size=70,
            d_model=16,
            n_heads=2,
            n_encoder_layers=1,
            n_decoder_layers=1,
            d_ff=32,
        )
    )
    assert model.src_embed.token.weight.shape == (70, 16) and model.out_proj.weight.shape == (
        50,
        16,
    )
    assert model.out_proj.weight is model.tgt_embed.token.weight  # target side still tied
    joint = Transformer(
        ModelConfig(
            vocab_size=50, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32
        )
    )
    assert joint.src_embed.token.weight is joint.tgt_embed.token.weight is joint.out_proj.weight


def test_separate_vocabularies_train_and_translate(prepared, tmp_path):
    run_dir = tmp_path / "run"
    cfg = variant(
        prepared,
        run_dir,
        f"data.data_dir={tmp_path / 'data'}",
        "data.joint_vocab=false",
        "data.vocab_size=800",
        "train.max_updates=3",
    )
    out = prepare.run(cfg, quiet=True)
    src_spm, tgt_spm = Tokenizer(out / "spm.src.model"), Tokenizer(out / "spm.tgt.model")
    loop.run(cfg, quiet=True)

    model, saved, tokenizer = checkpoint.load(run_dir / "last.pt")
    assert not tokenizer.joint and saved.model.src_vocab_size == src_spm.vocab_size
    assert (
        saved.model.vocab_size == tgt_spm.vocab_size
        and model.out_proj.weight.shape[0] == tgt_spm.vocab_size
    )
    lines = ["A man is riding a bike.", "", "Two dogs play in the snow."]
    assert tokenizer.encode(lines) == src_spm.encode(lines)  # sources through the source model
    ids = tgt_spm.encode(["Ein Mann fährt Fahrrad."])
    assert tokenizer.decode(ids) == tgt_spm.decode(ids)  # hypotheses through the target model
    translated = translate_lines(model, tokenizer, lines, saved.decode)
    assert len(translated) == len(lines) and translated[1][0][0] == ""
    # resuming and averaging compare this checksum: it covers both models, not just the source one
    assert (
        checkpoint.read(run_dir / "last.pt")["tokenizer"]["sha256"]
        == tokenizer.checksum()
        != src_spm.checksum()
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [("model.vocab_size=5", r"has \d+ pieces"), ("model.src_vocab_size=5", "is joint")],
)
def test_vocabulary_sizes_that_disagree_with_the_data_are_refused(
    prepared, tmp_path, override, message
):
    with pytest.raises(
        TranslatorError, match=f"model.*=5 but the prepared data's vocabulary {message}"
    ):
        startup.setup(variant(prepared, tmp_path / "run", override), quiet=True)
