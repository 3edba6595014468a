"""data.spm_model: a SentencePiece model made elsewhere (spm_train's default ids: unk 0, bos 1,
eos 2, no pad) encodes the data, renumbered to our special ids with its segmentation kept."""

from __future__ import annotations

import json
import os

import pytest
import sentencepiece as spm

from tests.data.conftest import REPO, small_splits, tiny_config
from tests.train.conftest import variant
from translator import checkpoint, prepare, summary
from translator.data.clean import normalize
from translator.data.shards import TokenArray
from translator.data.spm_files import with_our_ids
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from translator.errors import TranslatorError
from translator.prepared import out_of_date, prepared_dir
from translator.train import loop


def spm_train(path, lines, model_type="unigram", size=150, symbols=()):
    """A model as `spm_train` makes it, with SentencePiece's own default special ids."""
    text = path.with_suffix(".txt")
    text.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(path.with_suffix("")),
        vocab_size=size,
        model_type=model_type,
        character_coverage=1.0,
        user_defined_symbols=list(symbols),
        minloglevel=2,
    )
    return path.with_suffix(".model")


def foreign_pieces(model, texts):
    processor = spm.SentencePieceProcessor(model_file=str(model))
    return [[processor.id_to_piece(i) for i in processor.encode(text)] for text in texts]


def our_pieces(tokenizer_sp, ids):
    return [[tokenizer_sp.id_to_piece(i) for i in seq] for seq in ids]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_a_given_model_keeps_its_segmentation_with_our_special_ids(tmp_path, corpus, model_type):
    en, de = small_splits()["train"]
    model = spm_train(tmp_path / "given.model", en + de, model_type)
    assert spm.SentencePieceProcessor(model_file=str(model)).unk_id() == 0  # not ours
    cfg = tiny_config(corpus, tmp_path / "data", f"data.spm_model={model}")
    out = prepare.run(cfg, quiet=True)
    tokenizer = Tokenizer(out / "spm.model")
    sp = tokenizer.sp
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    for split, side, lang in (("valid", "src", 0), ("test", "tgt", 1)):
        texts = [normalize(line) for line in small_splits()[split][lang]]
        ids = TokenArray(out / f"{split}.{side}")
        prepared = our_pieces(sp, [ids[i] for i in range(len(ids))])
        assert prepared == foreign_pieces(model, texts), split
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["vocab_from"] == {"spm_model": str(model), "sha256": tokenizer.checksum()}
    assert manifest["joint_vocab"] and not out_of_date(cfg.data, tokenizer.checksum())


def test_separate_given_models_and_a_changed_file_prepares_again(tmp_path, corpus):
    en, de = small_splits()["train"]
    src = spm_train(tmp_path / "src.model", en, size=120)
    tgt = spm_train(tmp_path / "tgt.model", de, "bpe", size=130)
    cfg = tiny_config(
        corpus, tmp_path / "data", f"data.spm_model={src}", f"data.tgt_spm_model={tgt}"
    )
    assert not cfg.data.joint_vocab  # the two files decide
    out = prepare.run(cfg, quiet=True)
    source, target = Tokenizer(out / "spm.src.model"), Tokenizer(out / "spm.tgt.model")
    test_en, test_de = small_splits()["test"]
    ids = TokenArray(out / "test.tgt")
    assert our_pieces(target.sp, [ids[0]]) == foreign_pieces(tgt, [normalize(test_de[0])])
    ids = TokenArray(out / "test.src")
    assert our_pieces(source.sp, [ids[0]]) == foreign_pieces(src, [normalize(test_en[0])])
    said = []
    prepare.run(cfg, log=said.append)
    assert "up to date" in said[0]
    # another model under the same name: the data are encoded again
    spm_train(tmp_path / "tgt.model", de, "unigram", size=110)
    os.utime(tgt, ns=(1, 1))  # an old mtime: nothing but the content can tell the files apart
    said.clear()
    prepare.run(cfg, log=said.append)
    assert "preparing again" in said[0]
    assert Tokenizer(out / "spm.tgt.model").target_vocab_size == 110 + 1  # and our <pad>


@pytest.mark.parametrize(
    "settings, where, what",
    [
        (["data.spm_model={missing}"], "data.spm_model: {missing}", "not found"),
        (["data.spm_model={junk}"], "data.spm_model: {junk}", "not a SentencePiece model"),
        (["data.spm_model={dir}"], "data.spm_model: {dir}", "a directory"),
        (["data.tgt_spm_model={junk}"], "data.tgt_spm_model", "spm_model is not"),
        (["data.joint_vocab=false", "data.spm_model={junk}"], "data.spm_model", "only one"),
    ],
)
def test_a_bad_given_model_is_one_line_naming_the_setting(tmp_path, corpus, settings, where, what):
    paths = {"missing": tmp_path / "no.model", "junk": tmp_path / "junk.model", "dir": tmp_path}
    paths["junk"].write_bytes(b"\x0a\xffnot a model")
    with pytest.raises(TranslatorError) as err:
        cfg = tiny_config(corpus, tmp_path / "data", *(s.format(**paths) for s in settings))
        prepare.run(cfg, quiet=True)
    assert err.value.where == where.format(**paths) and what in err.value.what
    assert "\n" not in str(err.value) and not (tmp_path / "data" / "small").exists()


def test_a_model_sentencepiece_refuses_is_one_line_and_info_counts_the_given_vocabulary(
    tmp_path, corpus
):
    from sentencepiece import sentencepiece_model_pb2 as pb

    en, de = small_splits()["train"]
    good = spm_train(tmp_path / "given.model", en + de)
    described = summary.describe(str(REPO / "configs" / "tiny.yaml"), [f"data.spm_model={good}"])
    sizes = Tokenizer.from_proto(with_our_ids(good.read_bytes())).vocab_size
    assert "vocabulary size from data.spm_model" in described and f"{sizes:,}" in described
    proto = pb.ModelProto.FromString(good.read_bytes())
    proto.pieces.append(proto.pieces[-1])  # a piece defined twice: parses, SentencePiece refuses
    bad = tmp_path / "bad.model"
    bad.write_bytes(proto.SerializeToString())
    cfg = tiny_config(corpus, tmp_path / "data", f"data.spm_model={bad}")
    with pytest.raises(TranslatorError, match="SentencePiece refuses the model .*already defined"):
        prepare.run(cfg, quiet=True)


def test_fine_tuning_refuses_a_given_model(tmp_path, corpus):
    model = spm_train(tmp_path / "given.model", small_splits()["train"][0])
    cfg = tiny_config(
        corpus,
        tmp_path / "data",
        f"data.spm_model={model}",
        f"train.init_from={tmp_path / 'parent.pt'}",
    )
    with pytest.raises(TranslatorError) as err:
        prepare.run(cfg, quiet=True)
    assert err.value.where == "data.spm_model" and "train.init_from" in err.value.what


def test_training_encodes_with_the_given_model(prepared, tmp_path):
    """train prepares data itself when none are there: with the given model, as prepare does."""
    data_dir = tmp_path / "data"
    lines = TokenArray(prepared_dir(prepared.data) / "train.src")  # the session's small corpus
    sp = Tokenizer(prepared_dir(prepared.data) / "spm.model")
    texts = sp.decode([lines[i] for i in range(len(lines))])
    model = spm_train(tmp_path / "given.model", texts, size=90)
    settings = (
        f"data.data_dir={data_dir}",
        f"data.spm_model={model}",
        "model.vocab_size=0",
        "model.max_positions=256",
        "train.max_updates=2",
        "train.eval_every=2",
    )
    cfg = variant(prepared, tmp_path / "run", *settings)
    loop.run(cfg, quiet=True)
    saved = checkpoint.read(tmp_path / "run" / "last.pt")
    given = Tokenizer.from_proto(with_our_ids(model.read_bytes()))  # the file, renumbered
    assert saved["tokenizer"]["sha256"] == given.checksum()
    assert saved["config"]["model"]["vocab_size"] == given.vocab_size
    # the file moved away: the resume reads last.pt's copy
    model.rename(tmp_path / "moved.model")
    more = variant(prepared, tmp_path / "run", *settings, "train.max_updates=4")
    loop.run(more, quiet=True)
    assert checkpoint.read(tmp_path / "run" / "last.pt")["state"]["train"]["step"] == 4
    # ... and so does a new run on the data prepared with it
    loop.run(variant(prepared, tmp_path / "other-run", *settings), quiet=True)
    # another model under the name: not the one the run was trained with
    spm_train(model, texts[::-1], size=80)
    with pytest.raises(TranslatorError, match="is not the SentencePiece model .*last.pt was"):
        loop.run(more, quiet=True)


def test_user_symbols_a_given_model_lacks_are_warned_about(tmp_path, corpus, capsys):
    """data.user_symbols shapes models prepare trains; a given one has the pieces it has."""
    en, de = small_splits()["train"]
    model = spm_train(tmp_path / "given.model", en + de)
    cfg = tiny_config(corpus, tmp_path / "data", f"data.spm_model={model}")
    cfg.data.user_symbols = ["<BT>", "\u2581"]  # the second: a piece every model has
    prepare.run(cfg, quiet=True)
    warned = capsys.readouterr().err
    assert "warning: data.user_symbols <BT>: not pieces of data.spm_model's" in warned
    assert "\u2581" not in warned.split(":")[1]


def test_a_user_symbol_the_target_model_alone_lacks_is_warned_about(tmp_path, corpus, capsys):
    en, de = small_splits()["train"]
    src = spm_train(tmp_path / "src.model", en, symbols=["<BT>"])
    tgt = spm_train(tmp_path / "tgt.model", de)
    cfg = tiny_config(
        corpus, tmp_path / "data", f"data.spm_model={src}", f"data.tgt_spm_model={tgt}"
    )
    cfg.data.user_symbols = ["<BT>"]
    prepare.run(cfg, quiet=True)
    assert "warning: data.user_symbols <BT>: not pieces of" in capsys.readouterr().err
