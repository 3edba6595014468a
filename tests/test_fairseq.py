"""import-fairseq: a fairseq Transformer checkpoint becomes one of ours that scores as fairseq does.

The references are Hugging Face's ports of fairseq's Transformer (sinusoidal positions counted from
padding_idx + 1, decoding from </s>): FSMT (post-norm) and M2M100 (pre-norm). Their random weights,
renamed as fairseq names them, with an argparse Namespace of settings, make the fairseq
checkpoint; its dictionaries lack a few of the SentencePiece model's pieces, which
fairseq-preprocess would have written as <unk>.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from translator import checkpoint, fairseq, fairseq_files, translate
from translator.data.tokenizer import train_sentencepiece
from translator.decode.forced import target_log_probs
from translator.errors import TranslatorError

transformers = pytest.importorskip(
    "transformers", reason="the bench extra (transformers) is not installed"
)

REPO = Path(__file__).resolve().parents[1]
SOURCES = ["a man rides a bike", "two dogs play in the snow", "a woman reads a red book"]
TARGETS = ["ein mann fährt fahrrad", "zwei hunde spielen im schnee", "eine frau liest ein buch"]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
LEFT_OUT = 3  # the SentencePiece model's last pieces, not in fairseq's dictionaries


def fairseq_ids(sp, symbols: list[str], text: str) -> list[int]:
    """fairseq-preprocess's ids of a line cut by `sp` (no </s>)."""
    index = {s: i for i, s in enumerate(symbols)}
    return [index.get(p, index["<unk>"]) for p in sp.encode(text, out_type=str)]


# fairseq layouts, each with its reference: FSMT (post-norm, sinusoids) with the output matrix its
# own or the decoder's embeddings, or with its sinusoid tables saved as learned position tables
# (fairseq's --encoder-learned-pos layout: padding_idx + 1 rows before position 0); M2M100, the
# port of fairseq's pre-norm m2m_100 (a final LayerNorm a side; embeddings all shared)
LAYOUTS = ["separate", "shared", "learned", "pre-norm"]


def reference_model(layout: str, vocab_size: int):
    sizes = dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="relu",
        max_position_embeddings=64,
        scale_embedding=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    torch.manual_seed(0)
    if layout == "pre-norm":
        cfg = transformers.M2M100Config(vocab_size=vocab_size, **sizes)
        model = transformers.M2M100ForConditionalGeneration(cfg)
    else:
        cfg = transformers.FSMTConfig(
            langs=["en", "de"],
            src_vocab_size=vocab_size,
            tgt_vocab_size=vocab_size,
            tie_word_embeddings=layout == "shared",
            **sizes,
        )
        model = transformers.FSMTForConditionalGeneration(cfg)
    with torch.no_grad():  # LayerNorms and biases off their defaults
        for name, p in model.named_parameters():
            if "layer_norm" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def fairseq_weights(reference, layout: str) -> dict[str, torch.Tensor]:
    """The reference's weights under fairseq's names."""
    weights = {}
    for name, tensor in reference.state_dict().items():
        name = name.removeprefix("model.").replace("lm_head.", "decoder.output_projection.")
        if name == "shared.weight" or ("embed_positions" in name and layout != "learned"):
            continue  # fairseq computes its sinusoids; M2M100's shared table is the embeddings
        weights[name] = tensor
    return weights


@pytest.fixture(scope="module", params=LAYOUTS)
def made(request, tmp_path_factory):
    """A fairseq checkpoint directory (checkpoint.pt, dict.en.txt, dict.de.txt, spm.model) of a
    random reference model in one of the LAYOUTS; and the reference model."""
    tmp = tmp_path_factory.mktemp("fairseq")
    model_file = train_sentencepiece((SOURCES + TARGETS) * 30, tmp / "spm", vocab_size=60)
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    pieces = [
        sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i))
    ]
    kept = pieces[:-LEFT_OUT]
    for lang in ("en", "de"):
        lines = [f"{p} {1000 - i}\n" for i, p in enumerate(kept)]
        (tmp / f"dict.{lang}.txt").write_text("".join(lines), encoding="utf-8")
    reference = reference_model(request.param, len(SPECIALS) + len(kept))
    settings = argparse.Namespace(
        arch="transformer",
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        activation_fn="relu",
        max_source_positions=64,
        max_target_positions=64,
        source_lang="en",
        target_lang="de",
        dropout=0.3,
    )
    checkpoint_file = tmp / "checkpoint.pt"
    weights = fairseq_weights(reference, request.param)
    torch.save({"args": settings, "model": weights, "extra_state": {}}, checkpoint_file)
    return tmp, reference, sp, SPECIALS + kept, request.param


def reference_log_probs(reference, sp, symbols, sources, targets) -> list[float]:
    """FSMT's log p(target + </s> | source + </s>), decoding from </s> as fairseq does; the
    causal mask is FSMT's only with use_cache=False."""
    scores = []
    for source, target in zip(sources, targets):
        src = torch.tensor([fairseq_ids(sp, symbols, source) + [2]])
        tgt = fairseq_ids(sp, symbols, target) + [2]
        with torch.no_grad():
            logits = reference(
                input_ids=src,
                attention_mask=torch.ones_like(src),
                decoder_input_ids=torch.tensor([[2] + tgt[:-1]]),
                use_cache=False,
            ).logits[0]
        chosen = torch.log_softmax(logits.double(), -1).gather(1, torch.tensor(tgt)[:, None])
        scores.append(chosen.sum().item())
    return scores


def test_imported_scores_equal_fairseqs(made, tmp_path):
    folder, reference, sp, symbols, layout = made
    fairseq.import_fairseq(
        folder / "checkpoint.pt", folder, folder / "spm.model", tmp_path / "x.pt"
    )
    model, cfg, tokenizer = checkpoint.load(tmp_path / "x.pt")
    unknown = [p for t in TARGETS + SOURCES for p in sp.encode(t, out_type=str) if p not in symbols]
    assert unknown, "some line should hold a piece fairseq's dictionary lacks"
    ours = target_log_probs(
        model, tokenizer.encode(SOURCES), [tokenizer.target_sp.encode(t) for t in TARGETS]
    )
    theirs = reference_log_probs(reference, sp, symbols, SOURCES, TARGETS)
    assert ours == pytest.approx(theirs, abs=1e-4)
    assert cfg.model.tie_embeddings == (layout in ("shared", "pre-norm"))
    assert cfg.model.norm == ("pre" if layout == "pre-norm" else "post")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "de") and cfg.model.dropout == 0.3
    assert cfg.data.name == "imported-x"  # its own: eval --split finds no other corpus's data


def test_imported_greedy_search_follows_fairseqs_argmax(made, tmp_path):
    """Greedy decoding, step by step against FSMT's argmax over the outputs fairseq allows (its
    <pad> masked, as fairseq's generator does)."""
    folder, reference, sp, symbols, layout = made
    fairseq.import_fairseq(
        folder / "checkpoint.pt", folder, folder / "spm.model", tmp_path / "x.pt"
    )
    model, cfg, tokenizer = checkpoint.load(tmp_path / "x.pt")
    decode = dataclasses.replace(cfg.decode, beam_size=1, max_len_a=0.0, max_len_b=6)
    found = translate.search(model, tokenizer.encode(SOURCES), decode)
    for source, hyps in zip(SOURCES, found):
        src = torch.tensor([fairseq_ids(sp, symbols, source) + [2]])
        out = [2]
        while len(out) <= 6:
            with torch.no_grad():
                logits = reference(
                    input_ids=src,
                    attention_mask=torch.ones_like(src),
                    decoder_input_ids=torch.tensor([out]),
                    use_cache=False,
                ).logits[0, -1]
            logits[1] = -torch.inf
            out.append(int(logits.argmax()))
            if out[-1] == 2:
                break
        theirs = [symbols[i] for i in out[1:] if i != 2]
        ours = [tokenizer.target_sp.id_to_piece(i) for i in hyps[0].tokens]
        assert ours == [s if s != "<s>" else fairseq.FAIRSEQ_BOS for s in theirs]


@pytest.mark.parametrize("made", ["separate"], indirect=True)
def test_a_pre_norm_encoder_beside_a_post_norm_decoder_is_refused_as_that_alone(made, tmp_path):
    """The decoder is post-norm: its lack of a final LayerNorm is no fault of its own."""
    folder, *_ = made
    saved = torch.load(folder / "checkpoint.pt", weights_only=False)
    saved["args"].encoder_normalize_before = True
    torch.save(saved, tmp_path / "mixed.pt")
    with pytest.raises(TranslatorError, match="pre-norm on one side") as err:
        fairseq.import_fairseq(
            tmp_path / "mixed.pt", folder, folder / "spm.model", tmp_path / "x.pt"
        )
    assert "no_decoder_final_norm" not in str(err.value)


@pytest.mark.parametrize("made", ["pre-norm"], indirect=True)
def test_a_pre_norm_checkpoint_that_lost_its_decoder_s_final_norm_is_refused(made, tmp_path):
    """Its settings do not say pre-norm (older checkpoints): the final LayerNorms tell, and one
    on the encoder alone is a model ours cannot express."""
    folder, *_ = made
    saved = torch.load(folder / "checkpoint.pt", weights_only=False)
    assert not hasattr(saved["args"], "encoder_normalize_before")
    for name in ("decoder.layer_norm.weight", "decoder.layer_norm.bias"):
        saved["model"].pop(name)
    torch.save(saved, tmp_path / "bad.pt")
    with pytest.raises(TranslatorError, match="pre-norm on one side"):
        fairseq.import_fairseq(tmp_path / "bad.pt", folder, folder / "spm.model", tmp_path / "x.pt")


@pytest.mark.parametrize("made", ["separate"], indirect=True)  # the layouts: above
def test_cli_import_fairseq_then_translate(made, tmp_path):
    folder, *_ = made
    ckpt = tmp_path / "fs.pt"
    command = [sys.executable, "-m", "translator", "import-fairseq", str(folder / "checkpoint.pt")]
    command += ["--dicts", str(folder), "--spm", str(folder / "spm.model"), "-o", str(ckpt)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "(en->de, 2+2 layers, d_model 32)" in done.stdout
    out = subprocess.run(
        [sys.executable, "-m", "translator", "translate", str(ckpt), "--device", "cpu", "-q"],
        input="two dogs play\n\na man\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.split("\n")) == 4 and out.stdout.split("\n")[1] == ""


@pytest.mark.parametrize("made", ["separate"], indirect=True)
@pytest.mark.parametrize(
    "change, what",
    [
        (lambda c: c["args"].__setattr__("activation_fn", "tanh"), "activation_fn='tanh'"),
        (lambda c: c["args"].__setattr__("encoder_attention_heads", 3), "different widths"),
        (lambda c: c["model"].pop("decoder.layers.1.fc2.bias"), "decoder.layers.1.fc2.bias"),
        (lambda c: c.pop("model"), "no model weights"),
        (  # pre-norm layers without the decoder's final LayerNorm (--no-decoder-final-norm)
            lambda c: c["args"].__dict__.update(
                encoder_normalize_before=True, decoder_normalize_before=True
            ),
            "no_decoder_final_norm",
        ),
        (
            lambda c: c["args"].__delattr__("target_lang"),
            "does not record its target lang",
        ),
    ],
)
def test_a_checkpoint_we_cannot_import_is_named_in_one_line(made, tmp_path, change, what):
    folder, *_ = made
    saved = torch.load(folder / "checkpoint.pt", weights_only=False)
    change(saved)
    torch.save(saved, tmp_path / "bad.pt")
    with pytest.raises(TranslatorError) as err:
        fairseq.import_fairseq(tmp_path / "bad.pt", folder, folder / "spm.model", tmp_path / "x.pt")
    assert what in str(err.value) and "\n" not in str(err.value)
    assert err.value.where == str(tmp_path / "bad.pt") and not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize("made", ["separate"], indirect=True)  # the layouts: above
def test_missing_or_wrong_dictionaries_and_spm_are_named(made, tmp_path):
    folder, *_ = made
    ckpt, spm_file = folder / "checkpoint.pt", folder / "spm.model"
    with pytest.raises(TranslatorError, match="fairseq-preprocess wrote"):
        fairseq.import_fairseq(ckpt, tmp_path, spm_file, tmp_path / "x.pt")
    with pytest.raises(TranslatorError, match="--spm: .*: not found"):
        fairseq.import_fairseq(ckpt, folder, tmp_path / "none.model", tmp_path / "x.pt")
    # a model that did not cut this text: its pieces are not the dictionary's
    other = train_sentencepiece(["xylophones quizzed jokers"] * 50, tmp_path / "o", vocab_size=40)
    with pytest.raises(TranslatorError, match="--spm: .*symbols are not pieces of this Sentence"):
        fairseq.import_fairseq(ckpt, folder, other, tmp_path / "x.pt")
    # one of our own checkpoints
    fairseq.import_fairseq(ckpt, folder, spm_file, tmp_path / "ours.pt")
    with pytest.raises(TranslatorError, match="is a translator checkpoint already"):
        fairseq.import_fairseq(tmp_path / "ours.pt", folder, spm_file, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()
    for name in ("en", "de"):
        (tmp_path / f"dict.{name}.txt").write_text((folder / f"dict.{name}.txt").read_text())
    with open(tmp_path / "dict.de.txt", "a") as more:  # more symbols than the embeddings' rows
        more.write("".join(f"extra{i} 1\n" for i in range(30)))
    with pytest.raises(TranslatorError, match="decoder's dictionary has .* symbols but its embed"):
        fairseq.import_fairseq(ckpt, tmp_path, spm_file, tmp_path / "x.pt")
    for text, message in (
        ("just-one-field\n", "line 1 is not 'SYMBOL COUNT'"),
        ("a 3\nb 2\na 1\n", "line 3: 'a' is given twice"),
        ("a 3\ncaf\xe9 2\n".encode("latin-1"), "line 2 is not UTF-8"),
    ):
        write = (tmp_path / "dict.de.txt").write_bytes if isinstance(text, bytes) else None
        (write or (tmp_path / "dict.de.txt").write_text)(text)
        with pytest.raises(TranslatorError, match=message):
            fairseq.import_fairseq(ckpt, tmp_path, spm_file, tmp_path / "x.pt")


@pytest.mark.parametrize("made", ["separate"], indirect=True)  # the layouts: above
def test_an_lstm_or_convolutional_checkpoint_is_named_as_not_a_transformer(made, tmp_path):
    folder, *_ = made
    saved = torch.load(folder / "checkpoint.pt", weights_only=False)
    saved["model"] = {k: v for k, v in saved["model"].items() if ".layers." not in k}
    torch.save(saved, tmp_path / "lstm.pt")
    with pytest.raises(TranslatorError, match="not a fairseq Transformer: no weight"):
        fairseq.import_fairseq(tmp_path / "lstm.pt", folder, folder / "spm.model", tmp_path / "x")


def test_dictionary_symbols_are_read_as_fairseqs_dictionary_reads_them(tmp_path):
    """fairseq's Dictionary.add_from_file: specials first; a line ending in #fairseq:overwrite
    adds its symbol again, on a new row."""
    path = tmp_path / "dict.de.txt"
    path.write_text("▁a 5\n<unk> 4 #fairseq:overwrite\n▁b 3\n", encoding="utf-8")
    assert fairseq_files.read_dictionary(path) == [*SPECIALS, "▁a", "<unk>", "▁b"]


def test_a_symbol_only_the_dictionary_has_keeps_its_row_on_both_sides(made, tmp_path):
    """spm_encode writes a character its model lacks as itself, and fairseq-preprocess gave it a
    row: that row is what the character reads on the source side and what it scores on the target
    side."""
    folder, reference, sp, symbols, _ = made
    extra = "Ö"  # a character the SentencePiece model has never seen
    assert sp.piece_to_id(extra) == sp.unk_id()
    for lang in ("en", "de"):  # the dictionary's last row becomes it: sizes stay the same
        lines = (folder / f"dict.{lang}.txt").read_text(encoding="utf-8").splitlines()
        (tmp_path / f"dict.{lang}.txt").write_text(
            "\n".join(lines[:-1] + [f"{extra} 1"]) + "\n", encoding="utf-8"
        )
    changed = symbols[:-1] + [extra]
    fairseq.import_fairseq(folder / "checkpoint.pt", tmp_path, folder / "spm.model", tmp_path / "x")
    model, _, tokenizer = checkpoint.load(tmp_path / "x")
    sources, targets = ["Öl a man"], ["ein Öl"]
    assert sp.encode(sources[0], out_type=str).count(extra) == 1
    ours = target_log_probs(
        model, tokenizer.encode(sources), [tokenizer.target_sp.encode(t) for t in targets]
    )
    theirs = reference_log_probs(reference, sp, changed, sources, targets)
    # the source reads what spm_encode wrote (the character, not <unk>)
    ids = tokenizer.encode(sources)[0]
    assert [tokenizer.sp.id_to_piece(i) for i in ids] == sp.encode(sources[0], out_type=str)
    assert ours == pytest.approx(theirs, abs=1e-4)


@pytest.mark.parametrize("made", ["separate"], indirect=True)  # the layouts: above
def test_a_checkpoint_with_fairseqs_own_classes_loads_without_fairseq(made, tmp_path):
    """fairseq pickles classes of its own beside the weights (here one of a module that does not
    exist); they are stubbed, the weights and settings read."""
    folder, *_ = made
    saved = torch.load(folder / "checkpoint.pt", weights_only=False)
    module = type(sys)("fairseq_not_installed")
    Meter = type("Meter", (), {"__module__": "fairseq_not_installed"})
    module.Meter = Meter
    sys.modules["fairseq_not_installed"] = module
    try:
        saved["extra_state"] = {"metrics": Meter()}
        torch.save(saved, tmp_path / "own.pt")
    finally:
        del sys.modules["fairseq_not_installed"]
    read = fairseq.read_checkpoint(tmp_path / "own.pt")
    assert (
        read["settings"]["source_lang"] == "en" and "encoder.embed_tokens.weight" in read["weights"]
    )


@pytest.mark.parametrize("made", ["shared", "pre-norm"], indirect=True)
def test_an_imported_model_exported_to_ctranslate2_scores_as_fairseq(made, tmp_path):
    """fairseq -> translator -> CTranslate2, the deployment path: CTranslate2's own scores of the
    exported model against the reference's."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the bench extra is not installed")
    from translator import export

    folder, reference, sp, symbols, _ = made
    fairseq.import_fairseq(folder / "checkpoint.pt", folder, folder / "spm.model", tmp_path / "x")
    _, _, tokenizer = checkpoint.load(tmp_path / "x")
    out = export.export_ctranslate2(tmp_path / "x", tmp_path / "ct2")
    ct2 = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    sources = [[*tokenizer.sp.id_to_piece(ids), "</s>"] for ids in tokenizer.encode(SOURCES)]
    targets = [tokenizer.target_sp.encode(t, out_type=str) for t in TARGETS]
    scored = ct2.score_batch(sources, targets)
    theirs = reference_log_probs(reference, sp, symbols, SOURCES, TARGETS)
    assert [sum(r.log_probs) for r in scored] == pytest.approx(theirs, abs=1e-4)


@pytest.mark.parametrize("made", ["separate"], indirect=True)
def test_a_damaged_checkpoint_is_one_line_as_ours_are(made, tmp_path):
    folder, *_ = made
    data = (folder / "checkpoint.pt").read_bytes()
    for name, content in (("text.pt", b"garbage\n"), ("cut.pt", data[: len(data) // 2])):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(TranslatorError) as err:
            fairseq.read_checkpoint(tmp_path / name)
        assert "cut short, damaged or not PyTorch" in err.value.what and "\n" not in str(err.value)
