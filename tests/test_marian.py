"""import-hf: a MarianMT model (OPUS-MT layout) becomes a checkpoint computing what Hugging Face
computes.

The Marian model is built here, offline: two SentencePiece models trained on Multi30k lines, a
shared vocab.json, random weights with LayerNorms and the logits bias moved off their defaults.
Hugging Face's own tokenizer and `generate` are the reference.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from translator import checkpoint, marian, translate
from translator.data.batching import pad, padding_mask
from translator.data.tokenizer import BOS_ID, EOS_ID
from translator.errors import TranslatorError

transformers = pytest.importorskip(
    "transformers", reason="the bench extra (transformers) is not installed"
)

REPO = Path(__file__).resolve().parents[1]
SOURCES = [
    "A man in a blue shirt is playing the guitar.",
    "Two dogs run.",
    "A girl climbs into a playhouse.",
    "People are walking down the street.",
]
TARGETS = ["Ein Mann spielt Gitarre.", "Zwei Hunde.", "Ein Kind.", "Leute gehen."]


def spm_model(lines: list[str]) -> bytes:
    """A unigram model with SentencePiece's default ids (unk 0, s 1, /s 2, no pad), as OPUS-MT
    ships."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=300,
        model_type="unigram",
        minloglevel=2,
        num_threads=1,
    )
    return model.getvalue()


@pytest.fixture(scope="module")
def opus(multi30k, tmp_path_factory):
    """An OPUS-MT style directory with a random MarianMT model; returns (dir, HF model, HF
    tokenizer)."""
    root = tmp_path_factory.mktemp("opus")
    en = (multi30k / "train.en").read_text(encoding="utf-8").splitlines()[:600]
    de = (multi30k / "train.de").read_text(encoding="utf-8").splitlines()[:600]
    protos = {"source.spm": spm_model(en), "target.spm": spm_model(de)}
    pieces: dict[str, None] = {}
    for proto in protos.values():
        sp = spm.SentencePieceProcessor(model_proto=proto)
        pieces.update((sp.id_to_piece(i), None) for i in range(sp.get_piece_size()))
    words = [p for p in pieces if p not in ("<unk>", "<s>", "</s>")]
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(words)}}
    vocab["<pad>"] = len(vocab)
    for name, proto in protos.items():
        (root / name).write_bytes(proto)
    (root / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    config = transformers.MarianConfig(
        vocab_size=len(vocab),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=128,
        pad_token_id=vocab["<pad>"],
        eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"],
        forced_eos_token_id=0,
        dropout=0.1,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layer_norm" in name:
                param.add_(0.3 * torch.randn_like(param))
            elif "embed_tokens" in name or "shared" in name:
                param.mul_(20.0)  # random weights with a clear preference per step: no near-ties
        model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias))
    model.save_pretrained(root)
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(root / "source.spm"),
        target_spm=str(root / "target.spm"),
        vocab=str(root / "vocab.json"),
    )
    return root, model, tokenizer


def test_imported_logits_equal_hugging_face(opus, tmp_path):
    root, hf_model, hf_tok = opus
    cfg = marian.import_marian(root, tmp_path / "opus.pt")
    model, _, tokenizer = checkpoint.load(tmp_path / "opus.pt")
    assert cfg.model.activation == "silu" and cfg.model.norm == "post"
    for source, target in zip(SOURCES, TARGETS):
        batch = hf_tok([source], text_target=[target], return_tensors="pt")
        labels = batch["labels"][0]  # target ids + </s>
        decoder_in = torch.cat(
            [torch.tensor([hf_model.config.decoder_start_token_id]), labels[:-1]]
        )
        with torch.no_grad():
            theirs = hf_model(
                input_ids=batch["input_ids"], decoder_input_ids=decoder_in[None]
            ).logits[0]
            src = pad(tokenizer.encode([source]), suffix=[EOS_ID])
            tgt = tokenizer.target_sp.encode(target)
            ours = model(src, torch.tensor([[BOS_ID, *tgt]]), padding_mask(src))[0]
        # the same pieces on both sides: our ids spell the same text as Marian's
        assert tokenizer.sp.id_to_piece(src[0].tolist()) == hf_tok.convert_ids_to_tokens(
            batch["input_ids"][0]
        )
        assert [*tokenizer.target_sp.id_to_piece(tgt), "</s>"] == hf_tok.convert_ids_to_tokens(
            labels
        )
        # every logit of Marian's vocabulary, read through our ids for the same pieces
        vocab = hf_tok.get_vocab()
        our_pieces = [
            tokenizer.target_sp.id_to_piece(i) for i in range(tokenizer.target_vocab_size)
        ]
        columns = [i for i, p in enumerate(our_pieces) if p in vocab and p != "<pad>"]
        torch.testing.assert_close(
            ours[:, columns],
            theirs[:, [vocab[our_pieces[i]] for i in columns]],
            atol=2e-4,
            rtol=2e-4,
        )


@pytest.mark.parametrize("beam", [1, 4])
def test_imported_model_generates_what_hugging_face_generates(opus, tmp_path, beam):
    root, hf_model, hf_tok = opus
    marian.import_marian(root, tmp_path / "opus.pt")
    model, cfg, tokenizer = checkpoint.load(tmp_path / "opus.pt")
    decode = dataclasses.replace(
        cfg.decode, beam_size=beam, length_penalty=0.0, device="cpu", dtype="fp32"
    )
    ours = [hyps[0][0] for hyps in translate.translate_lines(model, tokenizer, SOURCES, decode)]
    theirs = []
    for source, ids in zip(SOURCES, tokenizer.encode(SOURCES)):
        # our a*|src|+b tokens, then EOS
        limit = int(decode.max_len_a * len(ids) + decode.max_len_b)
        inputs = hf_tok([source], return_tensors="pt")
        out = hf_model.generate(
            **inputs,
            num_beams=beam,
            do_sample=False,
            length_penalty=0.0,
            early_stopping=True,
            max_new_tokens=limit + 1,
            bad_words_ids=[[hf_model.config.pad_token_id]],
        )
        theirs.append(hf_tok.decode(out[0], skip_special_tokens=True))
    assert ours == theirs
    assert len(set(ours)) > 1


def test_unsupported_marian_option_is_named(opus, tmp_path):
    root, _, _ = opus
    broken = tmp_path / "pre"
    broken.mkdir()
    for name in ("source.spm", "target.spm", "vocab.json", "model.safetensors"):
        (broken / name).write_bytes((root / name).read_bytes())
    config = json.loads((root / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "normalize_before": True}))
    with pytest.raises(TranslatorError, match="normalize_before=true"):
        marian.import_marian(broken, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def test_cli_import_hf_then_translate(opus, tmp_path):
    root, _, _ = opus
    ckpt = tmp_path / "opus.pt"
    done = subprocess.run(
        [sys.executable, "-m", "translator", "import-hf", str(root), "-o", str(ckpt)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = subprocess.run(
        [sys.executable, "-m", "translator", "translate", str(ckpt), "--device", "cpu", "-q"],
        input="Two dogs run.\n\nA girl.\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == "" and lines[0]
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "translator",
            "import-hf",
            str(tmp_path / "nope"),
            "-o",
            str(tmp_path / "y.pt"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert (
        missing.returncode == 1
        and missing.stderr.count("\n") == 1
        and "config.json" in missing.stderr
    )
