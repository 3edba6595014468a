"""import-hf: a MarianMT model (OPUS-MT layout) becomes a checkpoint computing what Hugging Face
computes.

The Marian model is built offline (the `opus` and `opus_separate` fixtures of tests/conftest.py):
two SentencePiece models trained on Multi30k lines, a shared vocab.json (or separate source and
target vocabularies and embeddings), random weights with LayerNorms and the logits bias moved off
their defaults. Hugging Face's own tokenizer and `generate` are the reference.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from translator import checkpoint, marian, translate
from translator.data.batching import pad, padding_mask
from translator.data.tokenizer import BOS_ID, EOS_ID
from translator.decode import search as decode_search
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


@pytest.fixture(params=["shared", "separate"])
def any_opus(request):
    """Each model layout: one vocabulary for both sides, or one per side."""
    return request.getfixturevalue("opus" if request.param == "shared" else "opus_separate")


def vocabularies(hf_tok) -> tuple[dict[str, int], dict[str, int]]:
    """Marian's source and target piece -> id tables (the same table unless separate)."""
    source = hf_tok.encoder
    return source, hf_tok.target_encoder if hf_tok.separate_vocabs else source


def test_imported_logits_equal_hugging_face(any_opus, tmp_path):
    root, hf_model, hf_tok = any_opus
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
        source_vocab, vocab = vocabularies(hf_tok)
        source_pieces = {i: p for p, i in source_vocab.items()}
        their_source = [source_pieces[i] for i in batch["input_ids"][0].tolist()]
        assert tokenizer.sp.id_to_piece(src[0].tolist()) == their_source
        assert [*tokenizer.target_sp.id_to_piece(tgt), "</s>"] == hf_tok.convert_ids_to_tokens(
            labels
        )
        # every logit of Marian's vocabulary, read through our ids for the same pieces
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


def score_under(model, src_ids: list[int], tgt_ids: list[int]) -> float:
    """Sum of log p(tgt_ids, then EOS | src) under our model, teacher-forced: a beam's score at
    length penalty 0."""
    src = pad([src_ids], suffix=[EOS_ID])
    with torch.no_grad():
        logits = model(src, torch.tensor([[BOS_ID, *tgt_ids]]), padding_mask(src))[0]
    gold = torch.tensor([*tgt_ids, EOS_ID])[:, None]
    return logits.float().log_softmax(-1).gather(-1, gold).sum().item()


@pytest.mark.parametrize("beam", [1, 4])
def test_imported_model_generates_what_hugging_face_generates(any_opus, tmp_path, beam):
    """Greedy: the same output. Beam: the same output, or (both searches are approximate, and on
    these random models every output runs to the length limit, where near-ties decide) one that
    scores at least as high as Hugging Face's under the model, checked independently of either
    search by teacher forcing."""
    root, hf_model, hf_tok = any_opus
    marian.import_marian(root, tmp_path / "opus.pt")
    model, cfg, tokenizer = checkpoint.load(tmp_path / "opus.pt")
    decode = dataclasses.replace(
        cfg.decode, beam_size=beam, length_penalty=0.0, device="cpu", dtype="fp32"
    )
    _, target_vocab = vocabularies(hf_tok)
    target_pieces = {i: p for p, i in target_vocab.items()}
    ours = [hyps[0][0] for hyps in translate.translate_lines(model, tokenizer, SOURCES, decode)]
    theirs, differing = [], []
    for source, ids, text in zip(SOURCES, tokenizer.encode(SOURCES), ours):
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
        if text != theirs[-1]:
            their_ids = [  # Marian's ids -> pieces -> ours, without the start and the final </s>
                tokenizer.target_sp.piece_to_id(target_pieces[i]) for i in out[0].tolist()[1:-1]
            ]
            our_ids = decode_search.search(model, [ids], decode)[0][0].tokens
            differing.append((score_under(model, ids, our_ids), score_under(model, ids, their_ids)))
    if beam == 1:
        assert ours == theirs
    for our_score, their_score in differing:
        assert our_score >= their_score - 1e-4, (our_score, their_score)
    assert len(differing) < len(SOURCES) and len(set(ours)) > 1


@pytest.mark.parametrize(
    "option", [{"normalize_before": True}, {"tie_word_embeddings": False}], ids=str
)
def test_unsupported_marian_option_is_named(opus, tmp_path, option):
    root, _, _ = opus
    broken = tmp_path / "pre"
    broken.mkdir()
    for name in ("source.spm", "target.spm", "vocab.json", "model.safetensors"):
        (broken / name).write_bytes((root / name).read_bytes())
    config = json.loads((root / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, **option}))
    ((name, value),) = option.items()
    with pytest.raises(TranslatorError, match=f"{name}={str(value).lower()}"):
        marian.import_marian(broken, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


def garbage_pickle(path: Path) -> None:
    (path.parent / "model.safetensors").unlink()  # so the .bin is the weights read
    path.write_bytes(b"garbage\n")


def edit_weights(path: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(path)
    edit(weights)
    save_file(weights, path)


def drop_a_weight(weights: dict) -> None:
    del weights[next(k for k in weights if k.endswith("fc1.weight"))]


def halve_a_weight(weights: dict) -> None:
    key = next(k for k in weights if k.endswith("fc1.weight"))
    weights[key] = weights[key][: len(weights[key]) // 2].contiguous()


@pytest.mark.parametrize(
    ("name", "damage", "message"),
    [
        ("model.safetensors", cut_short, "not a readable safetensors file"),
        (
            "model.safetensors",
            lambda p: edit_weights(p, drop_a_weight),
            r"no weight named '.*fc1.weight' for its config.json",
        ),
        (
            "model.safetensors",
            lambda p: edit_weights(p, halve_a_weight),
            "weights do not fit its config.json .*size mismatch",
        ),
        ("pytorch_model.bin", garbage_pickle, "not readable PyTorch weights"),
        ("vocab.json", lambda p: p.write_text("[1,2]"), r"not a JSON object \(a list\)"),
        ("source.spm", lambda p: p.write_text("junk"), "not a SentencePiece model"),
        ("target.spm", lambda p: p.write_bytes(b""), "not a SentencePiece model"),
        (
            "config.json",
            lambda p: p.write_text('{"model_type":"marian"}'),
            "missing or not a positive integer: d_model, encoder_attention_heads",
        ),
    ],
    ids=[
        "safetensors-cut",
        "safetensors-missing-weight",
        "safetensors-wrong-shape",
        "bin-garbage",
        "vocab-list",
        "source-spm-junk",
        "target-spm-empty",
        "config-no-sizes",
    ],
)
def test_damaged_model_file_is_named_in_one_line(opus, tmp_path, name, damage, message):
    root, _, _ = opus
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for path in root.iterdir():
        (damaged / path.name).write_bytes(path.read_bytes())
    damage(damaged / name)
    with pytest.raises(TranslatorError, match=message) as err:
        marian.import_marian(damaged, tmp_path / "x.pt")
    assert str(err.value).startswith(f"{damaged / name}: ") and "\n" not in str(err.value)
    assert "download the model again" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged"]  # no checkpoint, no temporary


def test_separate_vocabularies_need_the_target_table(opus_separate, tmp_path):
    root, _, _ = opus_separate
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("source.spm", "target.spm", "vocab.json", "model.safetensors", "config.json"):
        (partial / name).write_bytes((root / name).read_bytes())
    with pytest.raises(TranslatorError, match="target_vocab.json: not found"):
        marian.import_marian(partial, tmp_path / "x.pt", src_lang="en", tgt_lang="de")
    assert not (tmp_path / "x.pt").exists()


def test_cli_import_hf_then_translate(opus, tmp_path):
    root, _, _ = opus
    ckpt = tmp_path / "opus.pt"
    done = subprocess.run(
        [sys.executable, "-m", "translator", "import-hf", str(root), "-o", str(ckpt)]
        + ["--src-lang", "en", "--tgt-lang", "de"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "(en->de, 2+2 layers" in done.stdout
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


def test_imported_loss_equals_hugging_face(any_opus, tmp_path):
    """Teacher-forced NLL over the whole vocabulary, as fine-tuning's loss sees it: ours has no
    second copy of Marian's <pad> class (BOS holds it), so the softmax is Marian's."""
    root, hf_model, hf_tok = any_opus
    marian.import_marian(root, tmp_path / "opus.pt")
    model, _, tokenizer = checkpoint.load(tmp_path / "opus.pt")
    for source, target in zip(SOURCES, TARGETS):
        batch = hf_tok([source], text_target=[target], return_tensors="pt")
        with torch.no_grad():
            theirs = hf_model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
            src = pad(tokenizer.encode([source]), suffix=[EOS_ID])
            tgt = tokenizer.target_sp.encode(target)
            logits = model(src, torch.tensor([[BOS_ID, *tgt]]), padding_mask(src))[0]
            ours = torch.nn.functional.cross_entropy(logits, torch.tensor([*tgt, EOS_ID]))
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)  # 2 <pad>s: 1e-5 off


def copy_without_languages(root: Path, dest: Path) -> Path:
    dest.mkdir()
    for name in ("source.spm", "target.spm", "vocab.json", "model.safetensors", "config.json"):
        (dest / name).write_bytes((root / name).read_bytes())
    return dest


def test_languages_come_from_tokenizer_config_or_the_flags(opus, tmp_path):
    root, _, _ = opus
    saved = json.loads((root / "tokenizer_config.json").read_text())  # written by Hugging Face
    assert (saved["source_lang"], saved["target_lang"]) == ("en", "de")
    assert marian.import_marian(root, tmp_path / "a.pt").data.src_lang == "en"
    _, cfg, _ = checkpoint.load(tmp_path / "a.pt")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "de")
    cfg = marian.import_marian(root, tmp_path / "b.pt", src_lang="eng", tgt_lang="deu")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("eng", "deu")  # the flags win
    bare = copy_without_languages(root, tmp_path / "bare")
    cfg = marian.import_marian(bare, tmp_path / "c.pt", src_lang="en", tgt_lang="fr")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "fr")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({}, "source language is not recorded.*give --src-lang"),
        ({"src_lang": "en"}, "target language is not recorded.*give --tgt-lang"),
        ({"src_lang": "e n", "tgt_lang": "de"}, r"--src-lang: 'e n' is not a language code"),
        ({"src_lang": "de", "tgt_lang": "de"}, "--tgt-lang: source and target language are both"),
    ],
)
def test_missing_or_bad_languages_are_refused(opus, tmp_path, flags, message):
    root, _, _ = opus
    bare = copy_without_languages(root, tmp_path / "bare")
    with pytest.raises(TranslatorError, match=message) as err:
        marian.import_marian(bare, tmp_path / "x.pt", **flags)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "x.pt").exists()


def test_a_file_given_for_the_model_directory_is_named_as_one(tmp_path):
    config_file = tmp_path / "config.json"
    config_file.write_text("{}")
    with pytest.raises(TranslatorError, match="is a file, not a model directory") as err:
        marian.import_marian(config_file, tmp_path / "m.pt")
    assert err.value.where == str(config_file) and not (tmp_path / "m.pt").exists()


def test_imported_target_pieces_are_marian_tokenizers_even_for_the_source_sides_words(
    opus, tmp_path
):
    """The shared vocabulary holds English pieces that target.spm lacks: the imported target
    model keeps them, so a model can emit them, but must not cut German text with them."""
    import sentencepiece

    root, _, hf_tok = opus
    marian.import_marian(root, tmp_path / "opus.pt")
    _, _, tokenizer = checkpoint.load(tmp_path / "opus.pt")
    original = sentencepiece.SentencePieceProcessor(model_file=str(root / "target.spm"))
    german = {original.id_to_piece(i) for i in range(original.get_piece_size())}
    vocab = json.loads((root / "vocab.json").read_text(encoding="utf-8"))
    english = {p.lstrip("\u2581") for p in vocab if p not in german and not p.startswith("<")}
    words = sorted(english, key=lambda w: (len(w), w))[-40:]
    assert len(words) == 40 and all(len(w) > 2 for w in words)  # whole English words among them
    lines = [f"Ein {w}en mit {w}." for w in words]
    for line in lines + TARGETS:
        theirs = hf_tok.convert_ids_to_tokens(hf_tok(text_target=line)["input_ids"])[:-1]
        ours = tokenizer.target_sp.id_to_piece(tokenizer.target_sp.encode(line))
        assert ours == theirs, line


def copy_opus(root: Path, dest: Path) -> Path:
    dest.mkdir()
    for path in root.iterdir():
        (dest / path.name).write_bytes(path.read_bytes())
    return dest


def test_a_multi_target_model_is_refused_by_its_language_tokens(opus, tmp_path):
    # opus-mt-en-ROMANCE and the like: MarianTokenizer keeps >>fra<< whole, ours would spell it out
    root = copy_opus(opus[0], tmp_path / "multi")
    vocab = json.loads((root / "vocab.json").read_text(encoding="utf-8"))
    for code in (">>fra<<", ">>spa<<"):
        vocab[code] = len(vocab)
    (root / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(
        TranslatorError, match=r"vocab\.json: a multi-target model.*>>fra<<, >>spa<<"
    ):
        marian.import_marian(root, tmp_path / "multi.pt")
    assert not (tmp_path / "multi.pt").exists()


def test_config_keys_left_out_take_marian_configs_defaults(opus, tmp_path):
    transformers = pytest.importorskip("transformers")
    root = copy_opus(opus[0], tmp_path / "trimmed")
    hf = json.loads((root / "config.json").read_text(encoding="utf-8"))
    for key in ("activation_function", "max_position_embeddings"):
        del hf[key]
    (root / "config.json").write_text(json.dumps(hf), encoding="utf-8")
    cfg = marian.import_marian(root, tmp_path / "trimmed.pt")
    defaults = transformers.MarianConfig()
    assert cfg.model.max_positions == defaults.max_position_embeddings
    assert cfg.model.activation == {"gelu": "gelu", "swish": "silu"}[defaults.activation_function]


def test_a_hub_model_is_read_from_the_hugging_face_cache(opus, tmp_path, monkeypatch):
    """hf:NAME goes through huggingface_hub's snapshot_download: offline (HF_HUB_OFFLINE, as the
    tests run), a model in the cache imports as its directory does."""
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--someone--opus-mt-en-de" / "snapshots" / "abc123"
    snapshot.parent.mkdir(parents=True)
    copy_opus(opus[0], snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    marian.import_marian("hf:someone/opus-mt-en-de", tmp_path / "hub.pt")
    marian.import_marian(opus[0], tmp_path / "local.pt")
    hub, local = checkpoint.load(tmp_path / "hub.pt")[0], checkpoint.load(tmp_path / "local.pt")[0]
    assert all(
        torch.equal(a, b) for a, b in zip(hub.state_dict().values(), local.state_dict().values())
    )
    with pytest.raises(TranslatorError, match="cannot download hub model 'someone/other'") as err:
        marian.import_marian("hf:someone/other", tmp_path / "other.pt")  # not in the cache
    assert "HF_HUB_OFFLINE is set" in err.value.fix and not (tmp_path / "other.pt").exists()


@pytest.mark.parametrize(
    "given, fix",
    [
        ("Helsinki-NLP/opus-mt-en-de", "give hf:Helsinki-NLP/opus-mt-en-de"),
        ("https://huggingface.co/Helsinki-NLP/opus-mt-en-de", "give hf:Helsinki-NLP/opus-mt-en-de"),
        ("no-such-model", "give the directory of a MarianMT model"),
        ("models/opus/en-de", "give the directory of a MarianMT model"),  # a path, not a name
    ],
)
def test_a_missing_directory_says_so_and_points_a_hub_name_to_hf(given, fix, tmp_path):
    with pytest.raises(TranslatorError, match="no such directory") as err:
        marian.import_marian(given, tmp_path / "x.pt")
    assert fix in err.value.fix and err.value.where == given


@pytest.mark.parametrize("model_type", ["bart", "mbart", "t5"])
def test_a_model_other_than_marian_is_refused_by_its_type(opus, tmp_path, model_type):
    """BART-like models load into Marian's names but have layers Marian has not
    (layernorm_embedding, learned positions): imported, they would score wrongly."""
    root = copy_opus(opus[0], tmp_path / model_type)
    config = json.loads((root / "config.json").read_text())
    (root / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    with pytest.raises(TranslatorError, match=f"a '{model_type}' model, not MarianMT"):
        marian.import_marian(root, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def test_eval_of_an_imported_model_does_not_score_another_corpus_prepared_here(
    opus, tmp_path, monkeypatch
):
    """An imported model has no prepared data: `eval --split test` refuses it, where it used to
    score data/multi30k's test set (the default data.name's) when that was prepared."""
    from translator import evaluate

    root, _, _ = opus
    marian.import_marian(root, tmp_path / "opus-en-de.pt", "en", "de")
    recorded = checkpoint.read(tmp_path / "opus-en-de.pt")["config"]["data"]
    assert recorded["name"] == "imported-opus-en-de"
    other = tmp_path / "data" / "multi30k"
    other.mkdir(parents=True)
    (other / "test.en").write_text("A dog.\n"), (other / "test.de").write_text("Ein Hund.\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TranslatorError, match="split 'test' not found.*pass --src/--ref") as err:
        evaluate.run([tmp_path / "opus-en-de.pt"], split="test", quiet=True)
    assert err.value.where == str(Path("data") / "imported-opus-en-de")


def test_a_hub_model_without_safetensors_is_fetched_as_its_pickle_with_its_languages(
    opus, tmp_path, monkeypatch
):
    """An older upload holds pytorch_model.bin alone; the download asks for the tokenizer's
    config too, where the languages are."""
    import huggingface_hub
    from safetensors.torch import load_file

    snapshot = copy_opus(opus[0], tmp_path / "snapshot")
    weights = snapshot / "model.safetensors"
    torch.save(load_file(weights), snapshot / "pytorch_model.bin")
    weights.unlink()
    asked = []

    def snapshot_download(repo, allow_patterns):
        asked.append(allow_patterns)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    cfg = marian.import_marian("hf:someone/opus-mt-en-de", tmp_path / "hub.pt")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "de")  # tokenizer_config.json's
    assert all("tokenizer_config.json" in patterns for patterns in asked)
    assert "pytorch_model.bin" in asked[-1] and "model.safetensors" in asked[0]
    marian.import_marian(opus[0], tmp_path / "local.pt")
    hub, local = checkpoint.load(tmp_path / "hub.pt")[0], checkpoint.load(tmp_path / "local.pt")[0]
    assert all(
        torch.equal(a, b) for a, b in zip(hub.state_dict().values(), local.state_dict().values())
    )


def test_a_config_without_model_type_is_read_as_marian_s(opus, tmp_path):
    """A config.json without model_type (hand-made, or older) is read as MarianMT's, the
    importer's default; another model_type is refused (test_a_model_other_than_marian...)."""
    model = copy_opus(opus[0], tmp_path / "m")
    settings = json.loads((model / "config.json").read_text())
    del settings["model_type"]
    (model / "config.json").write_text(json.dumps(settings))
    marian.import_marian(model, tmp_path / "m.pt")
    assert checkpoint.read(tmp_path / "m.pt")["state"]["imported_from"] == "marian"
