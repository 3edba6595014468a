"""CTranslate2 export: the exported model computes what ours computes (scores and greedy output,
fp32)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch

from translator import checkpoint, export, translate
from translator.data.batching import pad, padding_mask
from translator.data.tokenizer import BOS_ID, EOS_ID, Tokenizer
from translator.errors import TranslatorError
from translator.model.transformer import Transformer

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="the bench extra (ctranslate2) is not installed"
)

LINES = [
    "A man in a blue shirt is playing the guitar on a stage.",
    "Two dogs.",
    "A little girl climbs into a wooden playhouse while her father watches from the porch.",
    "People are walking down the street.",
]


def saved_model(prepared, tmp_path: Path, **model_changes) -> tuple[Path, Transformer, Tokenizer]:
    cfg = copy.deepcopy(prepared)
    tokenizer = Tokenizer(Path(cfg.data.data_dir) / cfg.data.name / "spm.model")
    cfg.model = dataclasses.replace(
        cfg.model,
        vocab_size=tokenizer.vocab_size,
        d_model=32,
        d_ff=64,
        n_encoder_layers=2,
        n_decoder_layers=2,
        max_positions=64,
        **model_changes,
    )
    cfg.decode = dataclasses.replace(cfg.decode, beam_size=1, device="cpu", dtype="fp32")
    torch.manual_seed(0)
    model = Transformer(cfg.model).eval()
    # LayerNorm gains/biases away from 1/0, so a swapped or missing norm shows
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name == "out_proj.bias":
                param.add_(0.3 * torch.randn_like(param))
    path = tmp_path / "model.pt"
    checkpoint.save(path, model, cfg, tokenizer)
    return path, model, tokenizer


def our_log_probs(model: Transformer, src_ids: list[int], tgt_ids: list[int]) -> torch.Tensor:
    """Teacher-forced log-probs of tgt_ids + EOS under our model (plain forward, no search)."""
    src = pad([src_ids], suffix=[EOS_ID])
    tgt_in = torch.tensor([[BOS_ID, *tgt_ids]])
    with torch.no_grad():
        logits = model(src, tgt_in, padding_mask(src))[0].float()
    return logits.log_softmax(-1).gather(1, torch.tensor([*tgt_ids, EOS_ID])[:, None]).squeeze(1)


@pytest.mark.parametrize(
    "changes",
    [
        {},  # pre-LN, sinusoidal, tied
        {
            "norm": "post",
            "positions": "learned",
            "tie_embeddings": False,
            "scale_embeddings": False,
        },
        {"n_kv_heads": 2},
        # what an imported OPUS-MT model uses
        {"activation": "silu", "output_bias": True, "norm": "post"},
        {"activation": "gelu"},
        {"activation": "silu", "gated_ffn": True},
    ],
    ids=["pre-sinusoidal-tied", "post-learned-untied", "gqa", "marian-like", "gelu", "swiglu"],
)
def test_exported_model_scores_and_translates_like_ours(prepared, tmp_path, changes):
    path, model, tokenizer = saved_model(prepared, tmp_path, **changes)
    out = export.export_ctranslate2(path, tmp_path / "ct2")
    assert (out / "spm.model").read_bytes() == tokenizer.proto()
    ct2 = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    src_ids = tokenizer.encode(LINES)
    sp = tokenizer.sp
    sources = [[*sp.id_to_piece(ids), "</s>"] for ids in src_ids]

    # Scores of a given target: the per-token log-probs agree (an independent implementation of the
    # math).
    targets = tokenizer.encode(
        ["Ein Mann spielt Gitarre.", "Zwei Hunde.", "Ein Kind.", "Leute gehen."]
    )
    scored = ct2.score_batch(sources, [sp.id_to_piece(ids) for ids in targets])
    for ids, tgt, result in zip(src_ids, targets, scored):
        torch.testing.assert_close(
            torch.tensor(result.log_probs), our_log_probs(model, ids, tgt), atol=1e-4, rtol=1e-4
        )

    # Greedy output: identical tokens, under the same length limit and with PAD/BOS never generated.
    decode = checkpoint.load(path)[1].decode
    ours = translate.translate_lines(model, tokenizer, LINES, decode)
    limits = [int(decode.max_len_a * len(ids) + decode.max_len_b) for ids in src_ids]
    theirs = [
        ct2.translate_batch(
            [source],
            beam_size=1,
            max_decoding_length=limit,
            suppress_sequences=[["<pad>"], ["<s>"]],
        )[0].hypotheses[0]
        for source, limit in zip(sources, limits)
    ]
    assert [hyps[0][0] for hyps in ours] == tokenizer.decode([sp.piece_to_id(h) for h in theirs])
    assert len({hyps[0][0] for hyps in ours}) > 1  # distinct outputs, so a mix-up would show


def test_rope_is_refused_with_the_option_named(prepared, tmp_path):
    path, _, _ = saved_model(prepared, tmp_path, positions="rope")
    with pytest.raises(TranslatorError, match="model.positions=rope"):
        export.export_ctranslate2(path, tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


def test_every_option_ctranslate2_lacks_is_named_with_the_setting_to_train_with(prepared, tmp_path):
    path, _, _ = saved_model(prepared, tmp_path, positions="relative", attention_window=8)
    with pytest.raises(TranslatorError) as err:
        export.export_ctranslate2(path, tmp_path / "ct2")
    assert "model.positions=relative" in err.value.what
    assert "model.attention_window=8" in err.value.what
    assert err.value.fix.endswith("--set model.positions=sinusoidal --set model.attention_window=0")


def test_export_refuses_a_file_or_a_foreign_directory_and_keeps_it(prepared, tmp_path):
    """Replacing `out` would lose it: refused in one line before any work, nothing touched (the
    file was once moved aside and replaced by the model)."""
    path, _, _ = saved_model(prepared, tmp_path)
    notes, folder = tmp_path / "notes.txt", tmp_path / "folder"
    notes.write_text("keep me")
    folder.mkdir()
    (folder / "important.txt").write_text("keep me too")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for out, message in [
        (notes, "is a file, not a directory"),
        (folder, "not empty and not a CTranslate2 model directory"),
    ]:
        with pytest.raises(TranslatorError, match=message) as err:
            export.export_ctranslate2(path, out)
        assert str(out) in str(err.value) and "\n" not in str(err.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert notes.read_text() == "keep me"
    assert (folder / "important.txt").read_text() == "keep me too"


def test_export_replaces_an_empty_directory_or_an_earlier_export_but_not_files_put_beside(
    prepared, tmp_path
):
    path, _, _ = saved_model(prepared, tmp_path)
    out = tmp_path / "ct2"
    out.mkdir()
    export.export_ctranslate2(path, out, quantization="int8")
    int8_size = (out / "model.bin").stat().st_size
    export.export_ctranslate2(path, out)  # an earlier export: replaced whole
    assert (out / "model.bin").stat().st_size > int8_size  # float32 now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2", "model.pt"]  # no temporaries
    (out / "NOTES.md").write_text("how we deploy it")
    with pytest.raises(TranslatorError, match=r"holds files of its own \(NOTES.md\)"):
        export.export_ctranslate2(path, out)
    assert (out / "NOTES.md").read_text() == "how we deploy it"


def test_unknown_quantization_is_refused_with_the_accepted_types(prepared, tmp_path):
    path, _, _ = saved_model(prepared, tmp_path)
    with pytest.raises(
        TranslatorError, match=r"--quantization: unknown quantization 'int4'"
    ) as err:
        export.export_ctranslate2(path, tmp_path / "ct2", quantization="int4")
    assert "int8, int8_float32" in str(err.value)  # ctranslate2's own list
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


def test_cli_export_writes_a_loadable_model_and_refuses_bad_options(prepared, tmp_path):
    import subprocess
    import sys

    path, _, _ = saved_model(prepared, tmp_path)
    repo = Path(__file__).resolve().parents[1]

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "translator", "export", str(path), *args],
            capture_output=True,
            text=True,
            cwd=repo,
            timeout=300,
        )

    bad = run("--format", "onnx", "-o", str(tmp_path / "x"))
    assert (
        bad.returncode == 1
        and bad.stderr.strip() == "error: --format: unknown export format 'onnx' (use ctranslate2)"
    )
    assert not (tmp_path / "x").exists()
    int4 = run("-o", str(tmp_path / "x"), "--quantization", "int4")
    assert int4.returncode == 1 and int4.stderr.startswith(
        "error: --quantization: unknown quantization 'int4' (use one of int8, "
    )
    assert int4.stderr.count("\n") == 1 and not (tmp_path / "x").exists()
    good = run("-o", str(tmp_path / "int8"), "--quantization", "int8")
    assert good.returncode == 0, good.stderr
    ct2 = ctranslate2.Translator(str(tmp_path / "int8"), device="cpu", compute_type="int8")
    assert (
        len(ct2.translate_batch([["▁A", "▁dog", "</s>"]], max_decoding_length=5)[0].hypotheses[0])
        <= 5
    )
