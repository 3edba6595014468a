"""sacreBLEU/chrF scoring, the eval run on a split or on --src/--ref files, and checkpoint
averaging."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch

from tests.conftest import other_vocabulary, without_length_warnings
from tests.test_bleu import ZH_HYP, ZH_REF
from translator import averaging, checkpoint, evaluate, loading, translate
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.model.transformer import Transformer

REFS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch."]


def save_tiny(
    prepared,
    path: Path,
    seed: int = 0,
    max_positions: int | None = None,
    tgt_lang: str | None = None,
    bleu_tokenize: str = "",
    **state,
) -> Path:
    """A random 2+2-layer, d_model 32 checkpoint with the prepared tokenizer and data config
    (tgt_lang put in)."""
    cfg = copy.deepcopy(prepared)
    cfg.data.tgt_lang = tgt_lang or cfg.data.tgt_lang
    cfg.train.valid_bleu_tokenize = bleu_tokenize
    tokenizer = Tokenizer(Path(cfg.data.data_dir) / cfg.data.name / "spm.model")
    cfg.model.vocab_size, cfg.model.d_model, cfg.model.d_ff = tokenizer.vocab_size, 32, 64
    cfg.model.max_positions = max_positions or cfg.model.max_positions
    # short outputs: fast
    cfg.decode.beam_size, cfg.decode.max_len_a, cfg.decode.max_len_b = (1, 0.5, 4)
    cfg.decode.device, cfg.decode.dtype = "cpu", "fp32"
    torch.manual_seed(seed)
    checkpoint.save(path, Transformer(cfg.model), cfg, tokenizer, state)
    return path


def test_a_missing_mecab_tokenizer_is_a_one_line_error_before_decoding(
    prepared, tmp_path, monkeypatch
):
    from sacrebleu.tokenizers import tokenizer_ja_mecab

    monkeypatch.setattr(tokenizer_ja_mecab, "MeCab", None)  # as when sacrebleu[ja] is not installed
    with pytest.raises(
        TranslatorError, match=r"data.tgt_lang: .*'ja'.*pip install 'sacrebleu\[ja,ko\]'"
    ):
        evaluate.score([ZH_HYP], [ZH_REF], tgt_lang="ja")
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt", tgt_lang="ja")
    src, ref = tmp_path / "src.en", tmp_path / "ref.ja"
    src.write_text("A dog.\n"), ref.write_text("犬。\n")
    monkeypatch.setattr(
        evaluate, "translate_lines", lambda *a, **k: pytest.fail("decoded before checking BLEU")
    )
    with pytest.raises(TranslatorError, match="MeCab"):
        evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)


def test_eval_scores_bleu_as_the_checkpoint_s_validation_did_unless_told(
    prepared, tmp_path, monkeypatch
):
    """A Thai model trained with train.valid_bleu_tokenize=char is scored with char by eval too
    (as its validation was), and --tokenize still overrides it."""
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt", tgt_lang="th", bleu_tokenize="char")
    hyp, ref = (
        "\u0e09\u0e31\u0e19\u0e0a\u0e2d\u0e1a\u0e41\u0e21\u0e27",
        "\u0e09\u0e31\u0e19\u0e0a\u0e2d\u0e1a\u0e2b\u0e21\u0e32",
    )
    src, ref_file = tmp_path / "src.en", tmp_path / "ref.th"
    src.write_text("I like dogs.\n"), ref_file.write_text(ref + "\n", encoding="utf-8")
    monkeypatch.setattr(
        evaluate, "translate_lines", lambda model, tok, lines, *a, **k: [[(hyp, 0.0)]] * len(lines)
    )
    warned = []
    monkeypatch.setattr(evaluate, "warn_stderr", warned.append)
    scores = evaluate.run(ckpt, src_file=src, ref_file=ref_file, quiet=True)
    assert "tok:char" in scores.bleu_signature and scores.bleu > 0 and not warned
    told = evaluate.run(ckpt, src_file=src, ref_file=ref_file, quiet=True, tokenize="13a")
    assert "tok:13a" in told.bleu_signature and told.bleu == 0.0


def test_references_holding_what_the_training_text_was_cleaned_of_are_warned_about(
    prepared, tmp_path, monkeypatch
):
    """A zero-width space in a reference is a character BLEU and chrF count and the model never
    writes (prepare removes it from training text)."""
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt")
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A dog.\nA cat.\nA man.\n")
    ref.write_text("Ein\u200bHund.\nEine Katze.\nEin Mann.\ufeff\n", encoding="utf-8")
    monkeypatch.setattr(
        evaluate, "translate_lines", lambda model, tok, lines, *a, **k: [[("Ein Hund.", 0.0)]] * 3
    )
    warned = []
    monkeypatch.setattr(evaluate, "warn_stderr", warned.append)
    evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)
    assert any(w.startswith(f"{ref}: 2 of 3 references hold zero-width spaces") for w in warned)
    ref.write_text("Ein Hund.\nEine Katze.\nEin Mann.\n", encoding="utf-8")
    warned.clear()
    evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)
    assert not warned


def test_an_unknown_bleu_tokenizer_is_a_usage_error(tmp_path):
    from typer.testing import CliRunner

    from translator import cli

    result = CliRunner().invoke(
        cli.app, ["eval", str(tmp_path / "m.pt"), "--tokenize", "flores200"]
    )
    assert result.exit_code == 2 and "'flores200' is not one of 13a, intl, char" in result.output


def test_training_with_a_missing_mecab_tokenizer_stops_before_anything_is_done(
    tmp_path, monkeypatch
):
    """Its first validation would need it: refused at the start, not after the first updates."""
    from sacrebleu.tokenizers import tokenizer_ja_mecab

    from translator import config
    from translator.train import loop

    monkeypatch.setattr(tokenizer_ja_mecab, "MeCab", None)
    run_dir = tmp_path / "run"
    cfg = config.load(None, ["data.tgt_lang=jp", f"train.run_dir={run_dir}"])
    with pytest.raises(TranslatorError, match="MeCab"):
        loop.run(cfg, quiet=True)
    assert not run_dir.exists()


def test_eval_scores_in_the_checkpoints_target_language(prepared, tmp_path, monkeypatch):
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt", tgt_lang="zh")
    src, ref = tmp_path / "src.en", tmp_path / "ref.zh"
    src.write_text("I like eating apples.\n"), ref.write_text(ZH_REF + "\n", encoding="utf-8")
    monkeypatch.setattr(
        evaluate,
        "translate_lines",
        lambda model, tok, lines, *a, **k: [[(ZH_HYP, 0.0)]] * len(lines),
    )
    scores = evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)
    assert scores.bleu == pytest.approx(43.47, abs=0.01) and "tok:zh" in scores.bleu_signature
    # --lc-tok's 13a is the Multi30k papers' measure: for Chinese it is none, and says so
    warned = []
    monkeypatch.setattr(evaluate, "warn_stderr", warned.append)
    evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True, lc_tok=True)
    assert any("--lc-tok's BLEU tokenizes with 13a" in w for w in warned)


def test_eval_does_not_write_through_a_link_beside_a_downloaded_checkpoint(prepared, tmp_path):
    """The default hypothesis file is named here, beside the checkpoint: a link planted there
    (a downloaded model's directory) is replaced, not followed; a link given with -o is."""
    ckpt = save_tiny(prepared, tmp_path / "model" / "tiny.pt")
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A man rides a bike.\n"), ref.write_text("Ein Mann fährt Fahrrad.\n")
    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    (tmp_path / "model" / "ref.de.tiny.hyp").symlink_to(precious)
    evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)
    assert precious.read_text() == "mine"
    assert not (tmp_path / "model" / "ref.de.tiny.hyp").is_symlink()
    (tmp_path / "mine.hyp").symlink_to(precious)
    evaluate.run(ckpt, src_file=src, ref_file=ref, hyp_file=tmp_path / "mine.hyp", quiet=True)
    assert precious.read_text() != "mine" and (tmp_path / "mine.hyp").is_symlink()


def test_each_checkpoint_s_hypotheses_get_a_file_of_their_own(prepared, tmp_path):
    """Scoring avg.pt after best.pt keeps both files, for a paired comparison; an ensemble's
    go to a third."""
    ckpts = [save_tiny(prepared, tmp_path / name) for name in ("best.pt", "avg.pt")]
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A man rides a bike.\n"), ref.write_text("Ein Mann fährt Fahrrad.\n")
    for ckpt in [*ckpts, ckpts]:
        evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)
    names = sorted(p.name for p in tmp_path.glob("*.hyp"))
    assert names == ["ref.de.avg.hyp", "ref.de.best.hyp", "ref.de.ensemble.hyp"]


def test_eval_on_files_writes_hypotheses_and_scores(prepared, tmp_path, capsys, monkeypatch):
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt")
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A man rides a bike.\n\nTwo dogs play in the snow.\n", encoding="utf-8")
    ref.write_text("Ein Mann fährt Fahrrad.\n\nZwei Hunde spielen im Schnee.\n", encoding="utf-8")
    beams = []
    real = evaluate.translate_lines
    monkeypatch.setattr(
        evaluate, "translate_lines", lambda *a, **k: beams.append(a[3].beam_size) or real(*a, **k)
    )
    scores = evaluate.run(ckpt, src_file=src, ref_file=ref, beam=2, lc_tok=True)
    assert beams == [2]  # --beam reached the search
    hyps = (tmp_path / "ref.de.tiny.hyp").read_text(encoding="utf-8").split("\n")
    assert len(hyps) == 4 and hyps[1] == "" and hyps[3] == ""  # three lines, newline-ended
    model, cfg, tokenizer = loading.load(ckpt)
    cfg.decode.beam_size = 2
    expected = [h[0][0] for h in real(model, tokenizer, src.read_text().splitlines(), cfg.decode)]
    assert hyps[:3] == expected  # the file holds the translations, in input order
    rescored = evaluate.score(expected, ref.read_text(encoding="utf-8").splitlines(), lc_tok=True)
    assert (scores.bleu, scores.chrf, scores.lc_tok_bleu) == (
        rescored.bleu,
        rescored.chrf,
        rescored.lc_tok_bleu,
    )
    err = capsys.readouterr().err
    # the checkpoint asks for cpu, fp32
    assert "eval: cpu, fp32\n" in err and "hypotheses written to" in err
    # the result says how it was decoded, also under --quiet (it is the result, on stdout)
    lp = cfg.decode.length_penalty
    assert f"decoded: beam 2, length penalty {lp}, cpu, fp32" in scores.lines()
    n = len(ref.read_text(encoding="utf-8").splitlines())
    assert f"test set: {n} lines of {src} against {ref}" in scores.lines()  # which data it was


def test_eval_in_int8_says_so_and_scores_its_own_hypotheses(prepared, tmp_path, capsys):
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt")
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A man rides a bike.\nTwo dogs play in the snow.\n", encoding="utf-8")
    ref.write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n", encoding="utf-8")
    scores = evaluate.run(ckpt, src_file=src, ref_file=ref, dtype="int8")
    model, cfg, tokenizer = loading.load(ckpt, "cpu", "int8")
    expected = [
        h[0][0]
        for h in translate.translate_lines(
            model, tokenizer, ["A man rides a bike.", "Two dogs play in the snow."], cfg.decode
        )
    ]
    assert (tmp_path / "ref.de.tiny.hyp").read_text(encoding="utf-8").splitlines() == expected
    assert scores.chrf == evaluate.score(expected, ref.read_text().splitlines()).chrf
    assert (
        "eval: cpu, int8 (dynamic int8 linear layers, the rest fp32)\n" in capsys.readouterr().err
    )
    decoded = next(line for line in scores.lines() if line.startswith("decoded: "))
    assert decoded.endswith(", cpu, int8 (dynamic int8 linear layers, the rest fp32)")


def test_eval_on_the_prepared_split_quietly(prepared, tmp_path, capsys):
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt")
    out = tmp_path / "out" / "valid.hyp"
    scores = evaluate.run(ckpt, split="valid", hyp_file=out, device="cpu", dtype="bf16", quiet=True)
    sources = (
        (Path(prepared.data.data_dir) / prepared.data.name / "valid.en").read_text().splitlines()
    )
    hyps = out.read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(sources) > 100
    refs = (Path(prepared.data.data_dir) / prepared.data.name / "valid.de").read_text().splitlines()
    assert scores.chrf == evaluate.score(hyps, refs).chrf
    assert without_length_warnings(capsys.readouterr().err) == ""


def test_eval_quiet_still_warns_about_a_line_too_long_for_the_model(prepared, tmp_path, capsys):
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt", max_positions=12)
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text(
        "A dog.\n" + "A man rides a bike past two dogs that play in the snow. " * 3 + "\n",
        encoding="utf-8",
    )
    ref.write_text("Ein Hund.\nEin Mann.\n", encoding="utf-8")
    evaluate.run(ckpt, src_file=src, ref_file=ref, hyp_file=tmp_path / "hyp", quiet=True)
    # the random model's outputs may also run to the length limit: a warning of their own
    err = without_length_warnings(capsys.readouterr().err).splitlines()
    assert len(err) == 1 and err[0].startswith("warning: line 2: ") and "over the 11" in err[0]
    assert len((tmp_path / "hyp").read_text(encoding="utf-8").splitlines()) == 2


def test_eval_input_errors(prepared, tmp_path):
    ckpt = str(save_tiny(prepared, tmp_path / "tiny.pt"))
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("one\ntwo\n")
    ref.write_text("eins\n")
    with pytest.raises(TranslatorError, match="line-aligned"):
        evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)
    with pytest.raises(TranslatorError, match="--src and --ref go together"):
        evaluate.run(ckpt, src_file=src, quiet=True)
    with pytest.raises(TranslatorError, match="split 'nosuch' not found"):
        evaluate.run(ckpt, split="nosuch", quiet=True)
    ref.write_text("eins\nzwei\n")
    with pytest.raises(TranslatorError, match="would overwrite an input"):
        evaluate.run(ckpt, src_file=src, ref_file=ref, hyp_file=ref, quiet=True)
    assert ref.read_text() == "eins\nzwei\n"
    src.write_text(""), ref.write_text("")
    with pytest.raises(TranslatorError, match="nothing to score"):
        evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)
    # nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.de", "src.en", "tiny.pt"]


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_eval_output_that_cannot_be_written_fails_before_decoding(
    prepared, tmp_path, monkeypatch, where
):
    ckpt = str(save_tiny(prepared, tmp_path / "tiny.pt"))
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("one\n"), ref.write_text("eins\n")
    out = tmp_path if where == "a directory" else src / "out.hyp"
    monkeypatch.setattr(
        evaluate, "translate_lines", lambda *a, **k: pytest.fail("decoded before checking -o")
    )
    with pytest.raises(
        TranslatorError, match="is a directory" if where == "a directory" else "cannot write"
    ):
        evaluate.run(ckpt, src_file=src, ref_file=ref, hyp_file=out, quiet=True)


def test_average_of_identical_checkpoints_is_the_checkpoint(prepared, tmp_path):
    a = save_tiny(prepared, tmp_path / "a.pt", seed=1, optimizer={"step": 7})
    b, c = tmp_path / "b.pt", tmp_path / "c.pt"
    b.write_bytes(a.read_bytes())
    c.write_bytes(a.read_bytes())
    assert averaging.average([a, b, c], tmp_path / "avg.pt") == 3
    original, averaged = checkpoint.read(a), checkpoint.read(tmp_path / "avg.pt")
    assert original["model"].keys() == averaged["model"].keys()
    for key, value in original["model"].items():
        assert torch.equal(averaged["model"][key], value), key
    assert averaged["config"] == original["config"] and "optimizer" not in averaged["state"]
    checkpoint.load(tmp_path / "avg.pt")  # loads as an ordinary checkpoint


def test_average_of_two_is_their_mean(prepared, tmp_path):
    a, b = (
        save_tiny(prepared, tmp_path / "a.pt", seed=1),
        save_tiny(prepared, tmp_path / "b.pt", seed=2),
    )
    averaging.average([a, b], tmp_path / "avg.pt")
    wa, wb, avg = (checkpoint.read(p)["model"] for p in (a, b, tmp_path / "avg.pt"))
    for key in wa:
        assert avg[key].dtype == wa[key].dtype
        torch.testing.assert_close(avg[key], (wa[key] + wb[key]) / 2, rtol=0, atol=1e-7)
    assert not torch.equal(wa["encoder.0.ff.up.weight"], wb["encoder.0.ff.up.weight"])
    tied = {
        avg[key].untyped_storage().data_ptr()
        for key in ("out_proj.weight", "src_embed.token.weight")
    }
    assert len(tied) == 1  # the tied matrix is stored once, as in the inputs


def test_average_accepts_checkpoints_that_differ_only_in_training_settings(prepared, tmp_path):
    resumed = copy.deepcopy(prepared)
    # as a resume may change them
    resumed.model.dropout, resumed.model.gradient_checkpointing = (0.3, True)
    a, b = (
        save_tiny(prepared, tmp_path / "a.pt", seed=1),
        save_tiny(resumed, tmp_path / "b.pt", seed=2),
    )
    assert averaging.average([a, b], tmp_path / "avg.pt") == 2


def test_average_refuses_other_architectures(prepared, tmp_path):
    a = save_tiny(prepared, tmp_path / "a.pt")
    other = copy.deepcopy(prepared)
    other.model.vocab_size, other.model.d_model, other.model.d_ff = (
        checkpoint.read(a)["config"]["model"]["vocab_size"],
        64,
        64,
    )
    tokenizer = Tokenizer(Path(other.data.data_dir) / other.data.name / "spm.model")
    checkpoint.save(tmp_path / "b.pt", Transformer(other.model), other, tokenizer)
    with pytest.raises(TranslatorError, match=r"architecture differs .*model\.d_model: 32 -> 64"):
        averaging.average([a, tmp_path / "b.pt"], tmp_path / "avg.pt")
    with pytest.raises(TranslatorError, match="no checkpoints"):
        averaging.average([], tmp_path / "avg.pt")
    assert not (tmp_path / "avg.pt").exists()


def test_a_checkpoint_whose_config_does_not_build_its_weights_is_one_line(prepared, tmp_path):
    ckpt = save_tiny(prepared, tmp_path / "a.pt")
    payload = checkpoint.read(ckpt)
    payload["config"]["model"]["d_ff"] += 8  # a hand-edited config, resealed
    torch.save(checkpoint.seal(payload), ckpt)
    with pytest.raises(TranslatorError, match=r"do not fit its model settings \(size mismatch f"):
        checkpoint.load(ckpt)


def test_average_refuses_checkpoints_of_another_tokenizer(prepared, tmp_path):
    a, b = (
        save_tiny(prepared, tmp_path / "a.pt", seed=1),
        save_tiny(prepared, tmp_path / "b.pt", seed=2),
    )
    payload = checkpoint.read(b)
    other_vocabulary(payload)  # same shapes
    torch.save(checkpoint.seal(payload), b)
    with pytest.raises(TranslatorError, match="tokenizer differs"):
        averaging.average([a, b], tmp_path / "avg.pt")
    assert not (tmp_path / "avg.pt").exists()


def test_average_reports_each_checkpoint_read_and_checks_its_output_first(
    prepared, tmp_path, monkeypatch
):
    a, b = (save_tiny(prepared, tmp_path / f"{n}.pt", seed=s) for n, s in (("a", 1), ("b", 2)))
    seen = []
    averaging.average([a, b], tmp_path / "avg.pt", lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]
    (tmp_path / "notes").write_text("kept\n")
    monkeypatch.setattr(averaging, "read", lambda path: pytest.fail("read before the output"))
    with pytest.raises(TranslatorError, match="is a file, not a directory"):
        averaging.average([a, b], tmp_path / "notes" / "avg.pt")


def test_average_refuses_another_direction_and_its_own_inputs_as_output(prepared, tmp_path):
    a, b = (
        save_tiny(prepared, tmp_path / "a.pt", seed=1),
        save_tiny(prepared, tmp_path / "b.pt", seed=2),
    )
    payload = checkpoint.read(b)
    data = payload["config"]["data"]
    data["src_lang"], data["tgt_lang"] = data["tgt_lang"], data["src_lang"]
    torch.save(
        checkpoint.seal(payload), b
    )  # the same joint vocabulary and shapes, the other direction
    with pytest.raises(TranslatorError, match="translates de->en, the first checkpoint en->de"):
        averaging.average([a, b], tmp_path / "avg.pt")
    assert not (tmp_path / "avg.pt").exists()
    before = a.read_bytes()
    with pytest.raises(TranslatorError, match="one of the checkpoints it averages"):
        averaging.average([a, tmp_path / "." / "a.pt"], a)
    assert a.read_bytes() == before


def test_average_refuses_one_checkpoint_given_twice_or_by_two_names(prepared, tmp_path):
    """best.pt is a hard link of the step-N.pt it was saved as: the pair would weigh it twice."""
    a = save_tiny(prepared, tmp_path / "step-3.pt", seed=1)
    b = save_tiny(prepared, tmp_path / "step-6.pt", seed=2)
    os.link(b, tmp_path / "best.pt")
    for given, dup, first in (
        ([a, b, tmp_path / "best.pt"], tmp_path / "best.pt", b),
        ([a, b, tmp_path / "." / "step-3.pt"], tmp_path / "." / "step-3.pt", a),
    ):
        with pytest.raises(TranslatorError) as refused:
            averaging.average(given, tmp_path / "avg.pt")
        assert refused.value.where == str(dup) and refused.value.fix == "give each checkpoint once"
        assert (
            refused.value.what
            == f"is the same checkpoint as {first} (given twice, or a hard link of it)"
        )
    assert not (tmp_path / "avg.pt").exists()


def test_eval_flags_reach_the_run(monkeypatch):
    """Every `translator eval` flag lands in its own keyword of evaluate.run (none swapped, none
    dropped)."""
    from typer.testing import CliRunner

    from translator import cli

    seen = []
    monkeypatch.setattr(
        evaluate, "run", lambda *a, **k: seen.append((a, k)) or evaluate.score(REFS, REFS)
    )
    flags = [
        "--split",
        "valid",
        "--src",
        "s.en",
        "--ref",
        "r.de",
        "-o",
        "h.txt",
        "--beam",
        "3",
        "--max-len-a",
        "0.5",
        "--max-len-b",
        "7",
        "--min-len",
        "2",
        "--no-repeat-ngram-size",
        "3",
        "--unk-penalty",
        "2.5",
        "--length-penalty",
        "1.5",
        "--batch-tokens",
        "99",
        "--device",
        "cpu",
        "--dtype",
        "bf16",
        "--no-cuda-graphs",
        "--lc-tok",
        "--tokenize",
        "char",
        "--channel",
        "back.pt",
        "--channel-weight",
        "0.7",
        "--channel-candidates",
        "5",
        "--terminology",
        "t.tsv",
        "-q",
    ]
    for args in (flags, []):
        result = CliRunner().invoke(cli.app, ["eval", "m.pt", *args])
        assert result.exit_code == 0, result.output
        assert "BLEU = 100.00" in result.output
    assert seen == [
        (
            ([Path("m.pt")],),  # a list: several checkpoints are an ensemble
            dict(
                split="valid",
                src_file=Path("s.en"),
                ref_file=Path("r.de"),
                hyp_file=Path("h.txt"),
                beam=3,
                max_len_a=0.5,
                max_len_b=7,
                min_len=2,
                no_repeat_ngram_size=3,
                unk_penalty=2.5,
                length_penalty=1.5,
                batch_tokens=99,
                lc_tok=True,
                tokenize="char",
                device="cpu",
                dtype="bf16",
                cuda_graphs=False,
                channel=[Path("back.pt")],
                channel_weight=0.7,
                channel_candidates=5,
                terminology=Path("t.tsv"),
                quiet=True,
            ),
        ),
        (
            ([Path("m.pt")],),
            dict(
                split=None,
                src_file=None,
                ref_file=None,
                hyp_file=None,
                beam=None,
                max_len_a=None,
                max_len_b=None,
                min_len=None,
                no_repeat_ngram_size=None,
                unk_penalty=None,
                length_penalty=None,
                batch_tokens=None,
                lc_tok=False,
                tokenize=None,
                device=None,
                dtype=None,
                cuda_graphs=None,
                channel=None,
                channel_weight=None,
                channel_candidates=None,
                terminology=None,
                quiet=False,
            ),
        ),
    ]


def test_eval_decode_overrides_reach_the_search(prepared, tmp_path, monkeypatch):
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt")
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A dog.\n"), ref.write_text("Ein Hund.\n")
    seen = []
    real = evaluate.translate_lines
    monkeypatch.setattr(
        evaluate, "translate_lines", lambda *a, **k: seen.append(a[3]) or real(*a, **k)
    )
    for beam, alpha, graphs in ((None, None, None), (3, 0.0, False), (2, 1.5, True)):
        evaluate.run(
            ckpt,
            src_file=src,
            ref_file=ref,
            beam=beam,
            length_penalty=alpha,
            cuda_graphs=graphs,
            quiet=True,
        )
    saved = checkpoint.read(ckpt)["config"]["decode"]
    assert [(d.beam_size, d.length_penalty, d.cuda_graphs) for d in seen] == [
        (saved["beam_size"], saved["length_penalty"], saved["cuda_graphs"]),
        (3, 0.0, False),
        (2, 1.5, True),
    ]
    limits = dict(
        max_len_a=0.5,
        max_len_b=7,
        min_len=1,
        no_repeat_ngram_size=2,
        unk_penalty=3.0,
        batch_tokens=50,
    )
    evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True, **limits)
    assert {key: getattr(seen[-1], key) for key in limits} == limits


def test_eval_refuses_a_split_beside_src_and_ref(prepared, tmp_path):
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt")
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A dog.\n"), ref.write_text("Ein Hund.\n")
    with pytest.raises(TranslatorError, match="--split and --src/--ref"):
        evaluate.run(ckpt, split="valid", src_file=src, ref_file=ref, quiet=True)
    assert not list(tmp_path.glob("*.hyp"))


def test_eval_quiet_draws_no_bar_even_on_a_terminal(prepared, tmp_path, capsys, monkeypatch):
    from translator import console

    # stderr a terminal to rich (for the bar's drawing) and to the live-bar check
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setattr(console, "live_terminal", lambda stream: True)
    ckpt = str(save_tiny(prepared, tmp_path / "tiny.pt"))
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A dog.\nTwo dogs.\n"), ref.write_text("Ein Hund.\nZwei Hunde.\n")
    evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=False)
    assert "\x1b[" in capsys.readouterr().err  # the setup does draw a bar when not quiet
    evaluate.run(ckpt, src_file=src, ref_file=ref, quiet=True)
    assert without_length_warnings(capsys.readouterr().err) == ""


def test_a_checkpoint_gives_back_its_config(prepared, tmp_path):
    """The decode.* and model.* values saved with the weights are the ones loading returns (not the
    defaults)."""
    ckpt = save_tiny(prepared, tmp_path / "tiny.pt")
    for _, cfg, _ in (checkpoint.load(ckpt), loading.load(ckpt)):
        assert (
            cfg.decode.beam_size,
            cfg.decode.max_len_a,
            cfg.decode.max_len_b,
            cfg.decode.device,
            cfg.decode.dtype,
            cfg.model.d_model,
        ) == (1, 0.5, 4, "cpu", "fp32", 32)
        assert cfg.data.name == prepared.data.name


def test_average_last_n_takes_the_newest_step_checkpoints_by_update(prepared, tmp_path):
    """step-10 is newer than step-9 (not an alphabetical pick); --last N needs N of them."""
    import subprocess
    import sys

    run = tmp_path / "run"
    run.mkdir()
    for step, seed in ((2, 1), (9, 2), (10, 3)):
        save_tiny(prepared, run / f"step-{step}.pt", seed=seed)
    (run / "step-x.pt").write_bytes(b"")  # not a step checkpoint: ignored
    assert averaging.latest_steps(run, 2) == [run / "step-9.pt", run / "step-10.pt"]
    cli = [
        sys.executable,
        "-m",
        "translator",
        "average",
        str(run),
        "--last",
        "2",
        "-o",
        str(tmp_path / "avg.pt"),
    ]
    done = subprocess.run(
        cli, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300
    )
    assert done.returncode == 0, done.stderr
    w9, w10, avg = (
        checkpoint.read(p)["model"]
        for p in (run / "step-9.pt", run / "step-10.pt", tmp_path / "avg.pt")
    )
    torch.testing.assert_close(
        avg["encoder.0.ff.up.weight"],
        (w9["encoder.0.ff.up.weight"] + w10["encoder.0.ff.up.weight"]) / 2,
    )
    with pytest.raises(TranslatorError, match="3 step checkpoints found, 4 asked for"):
        averaging.latest_steps(run, 4)
    with pytest.raises(TranslatorError, match="--last takes a run directory") as err:
        averaging.latest_steps(run / "step-9.pt", 2)
    assert err.value.where == str(run / "step-9.pt")


def test_references_not_in_nfc_are_warned_about(tiny, tmp_path):
    import unicodedata

    from typer.testing import CliRunner

    from translator import cli

    refs = ["Zwei Hunde über der Wiese.", "Ein Mann.", "Männer spielen."]
    (tmp_path / "src").write_text("Two dogs.\nA man.\nMen play.\n", encoding="utf-8")
    nfd = [unicodedata.normalize("NFD", r) for r in refs]
    assert sum(a != b for a, b in zip(refs, nfd)) == 2
    said = {}
    for name, lines in (("nfc", refs), ("nfd", nfd)):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        args = ["eval", str(tiny.path), "--src", str(tmp_path / "src"), "--ref"]
        result = CliRunner().invoke(cli.app, [*args, str(tmp_path / name), "-q"])
        assert result.exit_code == 0, result.output
        said[name] = result.stderr
    assert "NFC" not in said["nfc"]
    assert f"{tmp_path / 'nfd'}: 2 of 3 references are not in Unicode NFC" in said["nfd"]


def test_a_split_not_found_under_a_relative_data_dir_says_relative_to_where(
    prepared, tmp_path, monkeypatch
):
    import os

    # the checkpoint's data_dir as a relative path, as configs write it ("data")
    relative = copy.deepcopy(prepared)
    monkeypatch.chdir(Path(prepared.data.data_dir).parent)
    relative.data.data_dir = os.path.relpath(prepared.data.data_dir)
    ckpt = save_tiny(relative, tmp_path / "tiny.pt")
    evaluate.run(str(ckpt), split="valid", quiet=True, hyp_file=tmp_path / "hyp")  # found here
    monkeypatch.chdir(tmp_path)  # elsewhere
    with pytest.raises(TranslatorError, match=f"not found \\(a path relative to {tmp_path}\\)"):
        evaluate.run(str(ckpt), split="valid", quiet=True)
