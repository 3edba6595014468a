"""Validation computes what it says: the plain (unsmoothed) per-token loss and BLEU of the
hypotheses."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from tests.train.conftest import variant
from translator.data.batching import make_batch
from translator.data.shards import TokenArray
from translator.data.tokenizer import PAD_ID, Tokenizer
from translator.evaluate import score
from translator.model.transformer import Transformer
from translator.prepared import prepared_dir
from translator.train.validate import validate
from translator.translate import translate_lines


def test_validation_loss_and_bleu_are_recomputable(prepared):
    cfg = variant(
        prepared,
        "unused",
        "train.valid_bleu_sentences=16",
        "train.valid_beam_size=1",
        "train.label_smoothing=0.3",
    )
    folder = prepared_dir(cfg.data)
    tokenizer = Tokenizer(folder / "spm.model")
    cfg.model.vocab_size = tokenizer.vocab_size
    torch.manual_seed(0)
    model = Transformer(cfg.model).train()
    result = validate(model, tokenizer, cfg, None)
    assert model.training  # back in train mode, as training expects

    model.eval()
    src, tgt = TokenArray(folder / "valid.src"), TokenArray(folder / "valid.tgt")
    total, tokens = 0.0, 0
    with torch.no_grad():
        # other batches than validate's: the sum does not depend on them
        for start in range(0, len(src), 64):
            rows = range(start, min(start + 64, len(src)))
            batch = make_batch([src[i] for i in rows], [tgt[i] for i in rows])
            logits = model(batch.src, batch.tgt_in, batch.src_mask)
            # no label smoothing, whatever training uses
            total += F.cross_entropy(
                logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID, reduction="sum"
            ).item()
            tokens += batch.n_tgt_tokens
    assert math.isclose(result.loss, total / tokens, rel_tol=1e-4)
    assert math.isclose(result.ppl, math.exp(total / tokens), rel_tol=1e-4)

    sources = (folder / f"valid.{cfg.data.src_lang}").read_text(encoding="utf-8").splitlines()[:16]
    refs = (folder / f"valid.{cfg.data.tgt_lang}").read_text(encoding="utf-8").splitlines()[:16]
    decode = dataclasses.replace(cfg.decode, beam_size=1)
    with torch.no_grad():
        hyps = [h[0][0] for h in translate_lines(model, tokenizer, sources, decode)]
    expected = score(hyps, refs)
    assert (result.bleu, result.chrf) == (expected.bleu, expected.chrf)
    assert [s[1] for s in result.samples] == hyps[: len(result.samples)]


def test_validation_decodes_with_valid_beam_size_else_decode_beam_size(prepared, monkeypatch):
    import translator.train.validate as validate_module

    beams = []
    monkeypatch.setattr(
        validate_module,
        "translate_lines",
        lambda model, tokenizer, lines, decode, data, warn, progress=None: (
            beams.append(decode.beam_size) or [[("", 0.0)]] * len(lines)
        ),
    )
    tokenizer = Tokenizer(prepared_dir(prepared.data) / "spm.model")
    for valid_beam in (1, 0):
        cfg = variant(
            prepared,
            "unused",
            "decode.beam_size=4",
            f"train.valid_beam_size={valid_beam}",
            "train.valid_bleu_sentences=2",
        )
        cfg.model.vocab_size = tokenizer.vocab_size
        validate(Transformer(cfg.model), tokenizer, cfg, None)
    assert beams == [1, 4]


def test_a_stop_request_abandons_the_validation_between_batches(prepared):
    """Checked before each loss batch and after each decoded one: a stop there returns None at
    once, the model back in train mode (torchrun kills a run that does not stop within 30 s)."""
    tokenizer = Tokenizer(prepared_dir(prepared.data) / "spm.model")
    cfg = variant(prepared, "unused", "train.max_tokens=200", "train.valid_bleu_sentences=2")
    cfg.model.vocab_size = tokenizer.vocab_size
    model = Transformer(cfg.model)

    def stop_at(call: int | None, checks: list[int]):
        def stop() -> bool:
            checks.append(1)
            return len(checks) == call

        return stop

    whole: list[int] = []
    assert validate(model, tokenizer, cfg, None, stop=stop_at(None, whole)) is not None
    assert len(whole) > 3  # several loss batches, the check before decoding, a decoded batch
    for call in (2, len(whole)):  # the loss's second batch; the last decoded batch
        checks: list[int] = []
        assert validate(model, tokenizer, cfg, None, stop=stop_at(call, checks)) is None
        assert model.training and len(checks) == call


def test_validation_bleu_is_tokenized_for_the_target_language(prepared, monkeypatch):
    """A Chinese target gets sacreBLEU's zh tokenizer: 13a would see one token per sentence and
    score 0."""
    import translator.train.validate as validate_module

    hyp, ref = "我喜欢吃苹果。", "我喜欢吃香蕉。"
    monkeypatch.setattr(
        validate_module,
        "translate_lines",
        lambda model, tokenizer, lines, decode, data, warn, progress=None: (
            [[(hyp, 0.0)]] * len(lines)
        ),
    )
    monkeypatch.setattr(
        validate_module,
        "read_lines",
        lambda path: [ref if path.suffix == ".zh" else "I like apples."],
    )
    cfg = variant(prepared, "unused", "data.tgt_lang=zh", "train.valid_bleu_sentences=1")
    tokenizer = Tokenizer(prepared_dir(cfg.data) / "spm.model")
    cfg.model.vocab_size = tokenizer.vocab_size
    result = validate(Transformer(cfg.model), tokenizer, cfg, None)
    assert result.bleu == pytest.approx(43.47, abs=0.01) and "tok:zh" in result.signature


def test_valid_pairs_longer_than_the_positions_are_left_out_of_the_loss(prepared):
    cfg = variant(prepared, "unused", "model.max_positions=16", "train.valid_bleu_sentences=4")
    folder = prepared_dir(cfg.data)
    tokenizer = Tokenizer(folder / "spm.model")
    cfg.model.vocab_size = tokenizer.vocab_size
    model = Transformer(cfg.model)
    result = validate(model, tokenizer, cfg, None)  # raised a tensor-size RuntimeError before

    model.eval()
    src, tgt = TokenArray(folder / "valid.src"), TokenArray(folder / "valid.tgt")
    fit = [i for i in range(len(src)) if len(src[i]) < 16 and len(tgt[i]) < 16]  # + EOS / BOS
    assert 0 < len(fit) < len(src) and result.too_long == len(src) - len(fit)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(fit), 50):
            rows = fit[start : start + 50]
            batch = make_batch([src[i] for i in rows], [tgt[i] for i in rows])
            logits = model(batch.src, batch.tgt_in, batch.src_mask)
            total += F.cross_entropy(
                logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID, reduction="sum"
            ).item()
            tokens += batch.n_tgt_tokens
    assert math.isclose(result.loss, total / tokens, rel_tol=1e-4)


def test_training_says_at_start_up_that_valid_pairs_are_too_long_and_validates_anyway(tmp_path):
    """Issue 16's case: training pairs cut to fit max_positions, longer valid pairs crashed the
    first validation."""
    from tests.data.conftest import small_splits, tiny_config, write_text_corpus
    from translator import prepare
    from translator.train import loop

    corpus = write_text_corpus(tmp_path / "corpus", small_splits(300))
    overrides = [
        "data.max_tokens_per_side=23",
        "model.max_positions=24",
        "model.d_model=32",
        "model.d_ff=64",
        "model.n_heads=2",
        "model.n_encoder_layers=1",
        "model.n_decoder_layers=1",
        f"train.run_dir={tmp_path / 'run'}",
        "train.max_updates=2",
        "train.eval_every=2",
        "train.warmup_steps=1",
        "train.max_tokens=256",
        "train.valid_bleu_sentences=4",
        "train.precision=fp32",
        "train.device=cpu",
    ]
    cfg = tiny_config(corpus, tmp_path / "data", *overrides)
    prepare.run(cfg, quiet=True)
    loop.run(cfg, quiet=True)
    log = (tmp_path / "run" / "train.log").read_text()
    start = log.index("valid: ")
    assert start < log.index("validation at update 2")
    over = int(log[start:].split()[1])
    assert 0 < over < 40 and "pairs take more than model.max_positions=24" in log
    assert f"; {over} pairs over model.max_positions not in the loss" in log
    # the BLEU is labelled with what it decoded: not eval's whole split with decode.beam_size
    n_valid = len((tmp_path / "data" / cfg.data.name / "valid.en").read_text().splitlines())
    beam = cfg.train.valid_beam_size or cfg.decode.beam_size
    said = "greedy" if beam == 1 else f"beam {beam}"
    assert f" on 4 of {n_valid:,} sentences, {said}" in log


def test_training_warns_when_validation_bleu_would_split_an_unspaced_target_at_spaces(tmp_path):
    """`eval` warned; training, whose validation BLEU chooses best.pt, said nothing."""
    from types import SimpleNamespace

    from translator import config
    from translator.prepared import prepared_dir
    from translator.train import report

    cfg = config.load(
        None,
        [f"data.data_dir={tmp_path}", "data.name=x", "data.tgt_lang=yue"],  # unmapped code
    )
    folder = prepared_dir(cfg.data)
    folder.mkdir(parents=True)
    (folder / "valid.yue").write_text("我喜欢吃苹果。\n我喜欢吃香蕉。\n", encoding="utf-8")
    said = []
    s = SimpleNamespace(cfg=cfg, metrics=SimpleNamespace(warning=said.append))
    report._valid_bleu_warning(s)
    assert len(said) == 1 and "13a" in said[0] and "validation BLEU chooses best.pt" in said[0]
    cfg.train.valid_bleu_tokenize = "zh"
    said.clear()
    report._valid_bleu_warning(s)
    assert said == []
