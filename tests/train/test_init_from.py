"""train.init_from: fine-tuning an imported OPUS-MT model (and one of ours) on a small local corpus.

The imported model's loss before any update comes from Hugging Face's MarianMTModel on the same
pairs; the tokenizer check encodes with Hugging Face's MarianTokenizer. Runs are small (a 2+2-layer,
d_model 32 model, a few hundred pairs) and take seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.data.conftest import multi30k_lines, small_splits, write_text_corpus
from tests.reliability.conftest import SMALL
from tests.reliability.test_kill import fork, wait
from translator import checkpoint, config, marian, prepare
from translator.config import TRAINING_ONLY
from translator.data.shards import TokenArray
from translator.data.tokenizer import BOS_ID, EOS_ID, Tokenizer
from translator.errors import TranslatorError
from translator.prepared import out_of_date, prepared_dir
from translator.train import loop, session


@pytest.fixture(scope="module")
def imported(opus, tmp_path_factory) -> Path:
    root, _, _ = opus
    path = tmp_path_factory.mktemp("imported") / "opus.pt"
    marian.import_marian(root, path)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_text_corpus(tmp_path_factory.mktemp("ft") / "corpus", small_splits(200))


def fine_tune(corpus: Path, tmp: Path, init_from: Path | str, *overrides: str) -> config.Config:
    """SMALL's run (its model section disagrees with the imported one) on `corpus`, from a ckpt."""
    return config.load(
        None,
        [
            f"data.source={corpus}",
            f"data.data_dir={tmp / 'data'}",
            "data.name=ft",
            "data.splits.valid=valid",
            "data.vocab_size=200",
            *SMALL,
            f"train.run_dir={tmp / 'run'}",
            f"train.init_from={init_from}",
            *overrides,
        ],
    )


def valid_losses(run_dir: Path) -> dict[int, float]:
    """valid/loss by update, as TensorBoard got it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return {e.step: e.value for e in events.Scalars("valid/loss")}


def hugging_face_loss(hf_model, hf_tok, sources: list[str], targets: list[str]) -> float:
    """Cross-entropy per target token (EOS included) of the Marian model, one pair at a time."""
    total, tokens = 0.0, 0
    for source, target in zip(sources, targets):
        batch = hf_tok([source], text_target=[target], return_tensors="pt")
        with torch.no_grad():
            loss = hf_model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        total += loss.item() * batch["labels"].shape[1]
        tokens += batch["labels"].shape[1]
    return total / tokens


def test_fine_tuning_an_imported_model(opus, imported, corpus, tmp_path):
    _, hf_model, hf_tok = opus
    cfg = fine_tune(
        corpus, tmp_path, imported, "train.max_updates=2", "train.eval_every=2", "model.dropout=0"
    )
    loop.run(cfg, quiet=True)
    run_dir = tmp_path / "run"
    log = (run_dir / "train.log").read_text()
    assert f"init_from: starting from the weights of {imported}" in log
    theirs = checkpoint.read(imported)["config"]["model"]["dropout"]
    assert theirs != 0 and f"not the checkpoint's: model.dropout: {theirs!r} -> 0.0" in log
    assert "the architecture and vocabulary are the checkpoint's; overriding the config's" in log
    assert "model.n_decoder_layers: 1 -> 2" in log and "model.n_heads: 2 -> 4" in log  # SMALL's
    assert "data.joint_vocab: True -> False" in log

    # before any update, the validation loss is the Marian model's on the same pairs
    valid = small_splits(200)["valid"]
    losses = valid_losses(run_dir)
    assert sorted(losses) == [0, 2]
    assert losses[0] == pytest.approx(hugging_face_loss(hf_model, hf_tok, *valid), rel=2e-6)
    assert losses[2] != losses[0]

    # the updates changed every tensor; the architecture stayed the imported one
    start, end = checkpoint.read(imported), checkpoint.read(run_dir / "last.pt")
    assert end["state"]["train"]["step"] == 2
    assert all(not torch.equal(start["model"][k], end["model"][k]) for k in start["model"])
    model_start, model_end = start["config"]["model"], end["config"]["model"]
    assert {k: v for k, v in model_end.items() if k not in TRAINING_ONLY} == {
        k: v for k, v in model_start.items() if k not in TRAINING_ONLY
    }
    assert end["tokenizer"]["sha256"] == start["tokenizer"]["sha256"]

    # the data were encoded with the imported SentencePiece models, which encode as Marian's do
    folder = prepared_dir(cfg.data)
    src_spm, tgt_spm = Tokenizer(folder / "spm.src.model"), Tokenizer(folder / "spm.tgt.model")
    assert src_spm.proto() == start["tokenizer"]["proto"]
    assert tgt_spm.proto() == start["tokenizer"]["target_proto"]
    for side, spm, lines in (("src", src_spm, valid[0]), ("tgt", tgt_spm, valid[1])):
        ids = TokenArray(folder / f"valid.{side}")
        assert [list(ids[i]) for i in range(3)] == spm.encode(lines[:3])
    for source, target in zip(*valid):  # pieces of the ids (an unknown character: <unk>)
        ours = src_spm.sp.id_to_piece(src_spm.encode([source])[0])
        assert ours == hf_tok.convert_ids_to_tokens(hf_tok(source)["input_ids"])[:-1]
        ours = tgt_spm.sp.id_to_piece(tgt_spm.encode([target])[0])
        assert ours == hf_tok.convert_ids_to_tokens(hf_tok(text_target=target)["input_ids"])[:-1]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["settings"]["vocab_from"] == start["tokenizer"]["sha256"]
    sha = start["tokenizer"]["sha256"]
    assert manifest["vocab_from"] == {"checkpoint": str(imported), "sha256": sha}


def test_prepared_with_or_without_a_checkpoint_vocabulary_is_no_false_cache_hit(
    imported, corpus, tmp_path
):
    with_ckpt = fine_tune(corpus, tmp_path, imported)
    prepare.run(with_ckpt, quiet=True)
    sha = checkpoint.read_tokenizer(imported)[0].checksum()
    assert not out_of_date(with_ckpt.data, sha)
    without = fine_tune(corpus, tmp_path, "", "data.joint_vocab=false")
    assert out_of_date(without.data)  # same data settings, other vocabulary
    with pytest.raises(TranslatorError) as err:
        loop.run(without, quiet=True)
    assert err.value.what == (
        f"prepared with the checkpoint {imported}'s vocabulary (sha256 {sha[:12]}), but this run "
        "needs a SentencePiece model trained on the data"
    )
    prepare.run(without, quiet=True)  # prepares again: a SentencePiece model of its own
    folder = prepared_dir(without.data)
    assert Tokenizer(folder / "spm.src.model").checksum() != sha
    assert out_of_date(with_ckpt.data, sha)
    with pytest.raises(TranslatorError, match="prepared with a SentencePiece model trained on"):
        loop.run(fine_tune(corpus, tmp_path, imported), quiet=True)


def test_fine_tuning_one_of_our_checkpoints(tmp_path):
    """Train a small model on one corpus, fine-tune it on another: its joint vocabulary and its
    architecture win over the config's (logged), and its loss is where fine-tuning starts."""
    base_corpus = write_text_corpus(tmp_path / "a", small_splits(200))
    base = fine_tune(base_corpus, tmp_path / "base", "", "train.max_updates=2")
    loop.run(base, quiet=True)
    ours = tmp_path / "base" / "run" / "last.pt"
    other = small_splits(0)
    other["train"] = tuple(multi30k_lines("train", lang, 200, 5000) for lang in ("en", "de"))
    corpus = write_text_corpus(tmp_path / "b", other)
    cfg = fine_tune(
        corpus,
        tmp_path / "ft",
        ours,
        "data.joint_vocab=false",
        "model.d_model=64",
        "train.max_updates=2",
        "train.eval_every=2",
        "decode.beam_size=7",
    )
    loop.run(cfg, quiet=True)
    run_dir = tmp_path / "ft" / "run"
    log = (run_dir / "train.log").read_text()
    assert "model.d_model: 64 -> 32" in log and "data.joint_vocab: False -> True" in log
    # decoding is this config's, and the log says where it differs from the checkpoint's
    assert re.search(r"decode with this config's settings.*decode.beam_size: \d+ -> 7", log)
    assert "decode.length_penalty" not in log
    folder = prepared_dir(cfg.data)
    start = checkpoint.read(ours)
    assert (folder / "spm.model").read_bytes() == start["tokenizer"]["proto"]
    assert not (folder / "spm.src.model").exists()

    model, _, tokenizer = checkpoint.load(ours)
    sources, targets = other["valid"]
    expected = reference_loss(model, tokenizer, sources, targets)
    assert valid_losses(run_dir)[0] == pytest.approx(expected, rel=2e-6)
    end = checkpoint.read(run_dir / "last.pt")["model"]
    assert not torch.equal(end["out_proj.weight"], start["model"]["out_proj.weight"])
    # update 0's validation saved best.pt (and last.pt), but no step file for `average --last N`
    assert [p.name for p in checkpoint.step_files(run_dir)] == ["step-2.pt"]
    assert (run_dir / "best.pt").is_file()


def test_going_on_from_a_model_on_the_data_it_was_made_on_takes_those_data_as_they_are(tmp_path):
    """fairseq's --restore-file --reset-optimizer on the same data: the prepared SentencePiece
    model is the checkpoint's, byte for byte, so neither prepare nor train may call the data
    other (that prepared them again, and then refused the parent's own run), even where the
    child's config asks other SentencePiece settings, which the checkpoint's vocabulary makes
    moot."""
    corpus = write_text_corpus(tmp_path / "a", small_splits(200))
    parent = fine_tune(corpus, tmp_path, "", "train.max_updates=2")
    loop.run(parent, quiet=True)
    folder = prepared_dir(parent.data)
    before = (folder / "manifest.json").read_bytes()
    child = fine_tune(
        corpus,
        tmp_path,
        tmp_path / "run" / "last.pt",
        f"train.run_dir={tmp_path / 'child'}",
        "train.max_updates=2",
        f"data.vocab_size={parent.data.vocab_size + 1000}",
        "data.spm_threads=1",
    )
    prepare.run(child, quiet=True)  # up to date: the same data, the same vocabulary
    loop.run(child, quiet=True)
    assert (folder / "manifest.json").read_bytes() == before
    assert (tmp_path / "child" / "last.pt").is_file()
    # the child's record of its data: the settings they were made with
    assert checkpoint.read(tmp_path / "child" / "last.pt")["config"]["data"]["vocab_size"] == (
        parent.data.vocab_size
    )
    loop.run(fine_tune(corpus, tmp_path, "", "train.max_updates=4"), quiet=True)  # the parent's
    assert checkpoint.read(tmp_path / "run" / "last.pt")["state"]["train"]["step"] == 4


def test_a_stop_during_the_starting_validation_is_made_good_on_resume(
    imported, corpus, tmp_path, monkeypatch
):
    """Stopped during update 0's validation (last.pt at update 0, never validated), the resumed
    run validates the starting model before its first update: best.pt starts as it."""
    cfg = fine_tune(corpus, tmp_path, imported, "train.max_updates=2", "train.eval_every=2")
    real = session.validate
    monkeypatch.setattr(session, "validate", lambda *a, **k: None)  # what a stop request gives
    with pytest.raises(SystemExit):
        loop.run(cfg, quiet=True)
    assert checkpoint.read(tmp_path / "run" / "last.pt")["state"]["train"]["step"] == 0
    monkeypatch.setattr(session, "validate", real)
    loop.run(
        fine_tune(corpus, tmp_path, imported, "train.max_updates=2", "train.eval_every=2"),
        quiet=True,
    )
    assert sorted(valid_losses(tmp_path / "run")) == [0, 2]


def test_a_resume_prepares_its_data_again_without_the_init_from_file(imported, corpus, tmp_path):
    """The parent's file gone and the data to prepare again (another machine, data/ cleaned):
    last.pt holds the same tokenizer, so the resume reads it there."""
    parent = tmp_path / "parent.pt"
    parent.write_bytes(imported.read_bytes())
    loop.run(fine_tune(corpus, tmp_path, parent, "train.max_updates=2"), quiet=True)
    parent.unlink()
    again = fine_tune(
        corpus, tmp_path, parent, "train.max_updates=4", f"data.data_dir={tmp_path / 'data2'}"
    )
    loop.run(again, quiet=True)
    assert checkpoint.read(tmp_path / "run" / "last.pt")["state"]["train"]["step"] == 4


def reference_loss(model, tokenizer: Tokenizer, sources: list[str], targets: list[str]) -> float:
    """Cross-entropy per target token, one unpadded pair at a time, from the raw text."""
    total, tokens = 0.0, 0
    for source, target in zip(sources, targets):
        src = torch.tensor([[*tokenizer.encode([source])[0], EOS_ID]])
        tgt = tokenizer.target_sp.encode(target)
        with torch.no_grad():
            logits = model(
                src, torch.tensor([[BOS_ID, *tgt]]), torch.ones(1, 1, 1, src.shape[1]) > 0
            )
        total += torch.nn.functional.cross_entropy(
            logits[0], torch.tensor([*tgt, EOS_ID]), reduction="sum"
        ).item()
        tokens += len(tgt) + 1
    return total / tokens


def test_resume_after_a_kill_ignores_init_from(imported, corpus, tmp_path):
    """Killed once it has saved, the run resumes from last.pt even with init_from pointing
    elsewhere (here at nothing), and ends with the weights of an uninterrupted run."""
    settings = ("train.max_updates=12", "train.eval_every=4", "train.keep_last=1")
    straight = fine_tune(corpus, tmp_path / "straight", imported, *settings)
    loop.run(straight, quiet=True)

    killed = tmp_path / "killed"

    def train_killed() -> None:
        torch.set_num_threads(1)
        saved = session.save_checkpoints

        def save_then_hang(*args, **kwargs) -> None:  # killed mid-run, however loaded the machine
            saved(*args, **kwargs)
            time.sleep(600)

        session.save_checkpoints = save_then_hang  # in the forked child only
        loop.run(fine_tune(corpus, killed, imported, *settings), quiet=True)

    pid = fork(train_killed)
    while not (killed / "run" / "last.pt").exists():
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    assert wait(pid) == -signal.SIGKILL
    assert checkpoint.read(killed / "run" / "last.pt")["state"]["train"]["step"] < 12

    elsewhere = tmp_path / "missing.pt"
    cfg = fine_tune(corpus, killed, elsewhere, *settings)
    loop.run(cfg, quiet=True)
    log = (killed / "run" / "train.log").read_text()
    assert f"the run resumes from it, train.init_from ({elsewhere}) is not loaded" in log
    assert "resumed from" in log
    a = checkpoint.read(tmp_path / "straight" / "run" / "last.pt")
    b = checkpoint.read(killed / "run" / "last.pt")
    assert a["state"]["train"]["step"] == b["state"]["train"]["step"] == 12
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert b["config"]["train"]["init_from"] == str(imported)  # how the run started


def test_bad_init_from_is_one_line(imported, corpus, tmp_path):
    from tests.test_cli import run_cli

    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n")
    cases = [
        (tmp_path / "nope.pt", "train.init_from: .*nope.pt: checkpoint not found"),
        (text, "train.init_from: .*notes.txt: not a readable checkpoint"),
    ]
    for path, message in cases:
        cfg = fine_tune(corpus, tmp_path, path)
        with pytest.raises(TranslatorError, match=message):
            loop.run(cfg, quiet=True)
    misfit = checkpoint.read(imported)
    misfit["config"]["model"]["d_ff"] = 128  # its weights have 64
    torch.save(checkpoint.seal(misfit), tmp_path / "misfit.pt")
    with pytest.raises(TranslatorError, match="misfit.pt: its weights do not fit .*size mismatch"):
        loop.run(fine_tune(corpus, tmp_path, tmp_path / "misfit.pt"), quiet=True)
    reversed_pair = fine_tune(corpus, tmp_path, imported, "data.src_lang=de", "data.tgt_lang=en")
    with pytest.raises(
        TranslatorError, match="the checkpoint translates en->de, the data is de->en"
    ):
        loop.run(reversed_pair, quiet=True)
    assert not (tmp_path / "run" / "last.pt").exists()
    with pytest.raises(  # and by `prepare` alone, before data of the wrong direction are made
        TranslatorError, match="train.init_from: .*the checkpoint translates en->de, the data is"
    ):
        prepare.run(reversed_pair, quiet=True)

    sets = [f"train.init_from={tmp_path}/x.pt", f"train.run_dir={tmp_path}/cli"]
    result = run_cli("train", "configs/tiny.yaml", *[a for s in sets for a in ("--set", s)])
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: train.init_from: ") and "not found" in result.stderr


def test_info_describes_the_checkpoint_that_training_starts_from(imported):
    """`info CONFIG --set train.init_from=CKPT` shows the model that training would build: the
    checkpoint's architecture (as `info CKPT` shows it) with the config's dropout."""
    from translator import summary

    tiny = str(Path(__file__).parents[2] / "configs" / "tiny.yaml")

    def line(text: str, start: str) -> str:
        return next(x for x in text.splitlines() if x.strip().startswith(start))

    own = summary.describe(tiny, [])
    theirs = summary.describe(str(imported), [])
    started = summary.describe(tiny, [f"train.init_from={imported}", "model.dropout=0.25"])
    assert line(started, "parameters") == line(theirs, "parameters") != line(own, "parameters")
    assert line(started, "layers") == line(theirs, "layers")
    assert "dropout 0.25" in line(started, "vocabulary")
    assert f"from train.init_from: {imported}" in started
    with pytest.raises(TranslatorError, match="train.init_from: .*nope.pt: checkpoint not found"):
        summary.describe(tiny, [f"train.init_from={imported.parent / 'nope.pt'}"])


def test_info_of_a_fine_tuned_checkpoint_describes_that_checkpoint_alone(imported, tmp_path):
    """The checkpoint holds its own architecture: its train.init_from is a record, not read (it
    may have moved, or now name another model)."""
    from translator import checkpoint, summary

    model, cfg, tokenizer = checkpoint.load(imported)
    cfg.train.init_from = str(tmp_path / "moved-away.pt")
    tuned = tmp_path / "tuned.pt"
    checkpoint.save(tuned, model, cfg, tokenizer)
    text = summary.describe(str(tuned), [])
    assert text.splitlines()[:-2] == summary.describe(str(imported), []).splitlines()[:-1]
    assert "written by translator" in text.splitlines()[-2]
    assert text.splitlines()[-1] == f"  fine-tuned from train.init_from: {tmp_path}/moved-away.pt"


def test_data_prepared_with_another_checkpoint_s_vocabulary_are_refused_naming_both(
    imported, corpus, tmp_path
):
    prepare.run(fine_tune(corpus, tmp_path, imported), quiet=True)  # imported's vocabulary
    parent = fine_tune(
        corpus,
        tmp_path,
        "",
        "data.name=own",
        f"train.run_dir={tmp_path / 'parent'}",
        "train.max_updates=1",
    )
    loop.run(parent, quiet=True)
    other = tmp_path / "parent" / "last.pt"
    child = fine_tune(corpus, tmp_path, other, f"train.run_dir={tmp_path / 'child'}")
    with pytest.raises(TranslatorError) as err:
        loop.run(child, quiet=True)
    assert f"prepared with the checkpoint {imported}'s vocabulary" in err.value.what
    assert f"this run needs the checkpoint {other}'s vocabulary" in err.value.what


def test_init_from_into_the_run_directory_of_a_plain_run_is_refused_before_any_work(
    imported, corpus, tmp_path
):
    """Fine-tuning from RUN/best.pt with train.run_dir left at RUN: the run there would resume
    and the checkpoint be ignored; said before anything is prepared (it once trained a new
    SentencePiece model first, then refused)."""
    parent = fine_tune(corpus, tmp_path, "", "train.max_updates=1")
    loop.run(parent, quiet=True)
    run_dir = tmp_path / "run"
    child = fine_tune(corpus, tmp_path, run_dir / "best.pt", "data.name=child")
    with pytest.raises(TranslatorError, match="train.run_dir holds a run that started from") as err:
        loop.run(child, quiet=True)
    assert err.value.where == str(run_dir) and "give a new train.run_dir" in err.value.fix
    assert not (tmp_path / "data" / "child").exists()
