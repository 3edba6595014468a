"""`prepare` end to end on small corpora: the output contract, drop counts, cache, atomicity, CLI
errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import datasets
import numpy as np
import pytest

from tests.data.conftest import REPO, small_splits, tiny_config, write_text_corpus
from translator import prepare
from translator.data import clean
from translator.data.clean import normalize
from translator.data.shards import TokenArray
from translator.data.tokenizer import UNK_ID, Tokenizer
from translator.errors import TranslatorError
from translator.files import read_lines
from translator.prepare_record import summary_rows
from translator.prepared import config_hash, load_manifest, out_of_date, prepared_dir

CRAFTED = [  # (en, de, rule)
    ("", "Ein leerer Satz.", "empty side"),
    ("A man in a blue shirt.", "@@", "markup debris"),
    (None, "Ein Satz aus dem Testset.", "in valid/test"),  # en filled in from the valid set below
    ("A\tdog\xa0runs  fast.", "Ein Hund rennt schnell.", None),  # kept, normalised
    ("A dog runs fast.", "Ein Hund rennt schnell.", "duplicate pair"),  # equal after normalisation
    (" ".join(["word"] * 300), "Ein Wort.", "too long"),
    (
        "Yes.",
        "Ja, das ist ein sehr langer Satz mit sehr vielen Wörtern und noch mehr Wörtern dazu.",
        "length ratio",
    ),
]


def crafted_corpus(root):
    splits = small_splits()
    en, de = list(splits["train"][0]), list(splits["train"][1])
    for i, (src, tgt, _) in enumerate(CRAFTED):
        en.insert(10 + 20 * i, src if src is not None else splits["valid"][0][3])
        de.insert(10 + 20 * i, tgt)
    splits["train"] = (en, de)
    return write_text_corpus(root, splits)


def run(cfg, **kwargs):
    return prepare.run(cfg, quiet=True, **kwargs)


def test_prepared_directory_contract_and_drop_counts(tmp_path):
    source = crafted_corpus(tmp_path / "corpus")
    cfg = tiny_config(source, tmp_path / "data", "data.max_tokens_per_side=150")
    out = run(cfg)
    manifest = json.loads((out / "manifest.json").read_text())
    expected = {rule: sum(c[2] == rule for c in CRAFTED) for rule in manifest["dropped"]}
    assert manifest["dropped"] == expected
    assert manifest["pairs_in"] == 300 + len(CRAFTED)
    assert manifest["pairs"] == {"train": 300 + 1, "valid": 40, "test": 30}
    assert manifest["config_hash"] == config_hash(cfg.data) and load_manifest(cfg.data) == manifest
    assert {"datasets", "sentencepiece", "numpy"} <= set(manifest["versions"])
    assert (out / "config.yaml").is_file() and not list(out.glob(".*"))

    tokenizer = Tokenizer(out / "spm.model")
    assert manifest["vocab"]["src"]["sha256"] == tokenizer.checksum() == manifest["files"][
        "spm.model"
    ] and (manifest["vocab"]["src"]["id_dtype"] == "uint16")
    src, tgt = TokenArray(out / "train.src"), TokenArray(out / "train.tgt")
    assert len(src) == len(tgt) == 301 and src.ids.dtype == np.uint16
    assert int(src.lengths.sum()) == manifest["tokens"]["train"]["src"]
    decoded = tokenizer.decode([src[i] for i in range(len(src))])
    assert "A dog runs fast." in decoded and "A\tdog\xa0runs  fast." not in decoded
    splits = small_splits()
    for split in ("valid", "test"):
        en, de = splits[split]
        # eval reads the raw text, line-aligned with the ids
        assert (out / f"{split}.en").read_text(encoding="utf-8").splitlines() == en
        assert (out / f"{split}.de").read_text(encoding="utf-8").splitlines() == de
        ids = TokenArray(out / f"{split}.tgt")
        # a 200-piece vocabulary misses some letters
        known = [i for i in range(len(ids)) if UNK_ID not in ids[i]]
        assert len(known) > len(ids) // 2
        assert tokenizer.decode([ids[i] for i in known]) == [normalize(de[i]) for i in known]


def test_rerun_is_a_cache_hit_and_changes_prepare_again(tmp_path, corpus):
    cfg = tiny_config(corpus, tmp_path / "data")
    out = run(cfg)
    stamp = (out / "manifest.json").stat().st_mtime_ns
    started = time.time()
    run(cfg)
    assert time.time() - started < 2 and (out / "manifest.json").stat().st_mtime_ns == stamp

    run(cfg, force=True)
    assert (out / "manifest.json").stat().st_mtime_ns != stamp
    # the reason names the settings that differ, split names too (not "other data settings")
    renamed = tiny_config(corpus, tmp_path / "data", "data.splits.valid=dev", "data.dedup=false")
    why = out_of_date(renamed.data)
    assert "data.dedup: True there, False here" in why and "data.splits: " in why
    for change in (
        lambda: tiny_config(corpus, tmp_path / "data", "data.dedup=false"),
        lambda: os.utime(corpus / "train.de", ns=(1, 1)) or cfg,
    ):
        before = json.loads((out / "manifest.json").read_text())["config_hash"]
        changed = change()
        assert out_of_date(changed.data)
        run(changed)
        assert json.loads((out / "manifest.json").read_text())["config_hash"] != before


def test_same_config_same_bytes(tmp_path, corpus):
    a = run(tiny_config(corpus, tmp_path / "a"))
    b = run(tiny_config(corpus, tmp_path / "b"))
    for name in ("spm.model", "train.src.ids.npy", "train.tgt.offsets.npy", "valid.tgt.ids.npy"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_separate_bpe_vocabularies(tmp_path, corpus):
    cfg = tiny_config(
        corpus, tmp_path / "data", "data.joint_vocab=false", "data.spm_model_type=bpe"
    )
    out = run(cfg)
    src_tok, tgt_tok = Tokenizer(out / "spm.src.model"), Tokenizer(out / "spm.tgt.model")
    assert not (out / "spm.model").exists() and src_tok.checksum() != tgt_tok.checksum()
    en, de = small_splits()["test"]
    test_src, test_tgt = TokenArray(out / "test.src"), TokenArray(out / "test.tgt")
    assert src_tok.decode([test_src[1]]) == [en[1]] and tgt_tok.decode([test_tgt[1]]) == [de[1]]
    manifest = load_manifest(cfg.data)
    assert (
        manifest["vocab"]["src"]["file"] == "spm.src.model"
        and manifest["vocab"]["tgt"]["sha256"] == tgt_tok.checksum()
    )


def test_training_refuses_data_prepared_with_other_settings(tmp_path, corpus):
    cfg = tiny_config(corpus, tmp_path / "data")
    run(cfg)
    moved = tiny_config(tmp_path / "elsewhere", tmp_path / "data", "data.splits.test=test2016")
    # where it came from may differ
    assert load_manifest(moved.data)["vocab_size"] == cfg.data.vocab_size
    other = tiny_config(
        corpus,
        tmp_path / "data",
        f"data.vocab_size={cfg.data.vocab_size + 100}",
        "data.max_train_pairs=50",
    )
    with pytest.raises(
        TranslatorError, match=r"data\.max_train_pairs: 0 there, 50 here.*data\.vocab_size"
    ):
        load_manifest(other.data)


def test_hub_source_goes_through_the_same_path(tmp_path, monkeypatch):
    splits = small_splits(120)

    def fake_hub(repo, subset=None, split=None, **kwargs):
        en, de = splits[{"train": "train", "validation": "valid", "test": "test"}[split]]
        return datasets.Dataset.from_dict(
            {"translation": [{"de": d, "en": e} for e, d in zip(en, de)]}
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    out = run(tiny_config("hf:wmt/wmt14:de-en", tmp_path / "data", "data.splits.valid=validation"))
    assert json.loads((out / "manifest.json").read_text())["pairs"] == {
        "train": 120,
        "valid": 40,
        "test": 30,
    }


def test_a_directory_that_holds_other_files_is_not_prepared_over(tmp_path, corpus):
    cfg = tiny_config(corpus, tmp_path / "data")
    mine = prepared_dir(cfg.data) / "notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    with pytest.raises(TranslatorError, match="no manifest.json") as err:
        run(cfg, force=True)
    assert err.value.where == str(mine.parent) and mine.read_text() == "mine"
    assert sorted(p.name for p in mine.parent.iterdir()) == ["notes.txt"]


def test_a_missing_split_fails_before_the_training_split_is_loaded(tmp_path, monkeypatch):
    corpus = write_text_corpus(tmp_path / "corpus", {**small_splits(), "valid": ([], [])})
    for lang in ("en", "de"):
        (corpus / f"valid.{lang}").unlink()
    loaded, real = [], prepare.load_split
    monkeypatch.setattr(
        prepare,
        "load_split",
        lambda data, split, *a, **k: loaded.append(split) or real(data, split, *a, **k),
    )
    with pytest.raises(TranslatorError, match="valid"):
        run(tiny_config(corpus, tmp_path / "data"))
    assert "train" not in loaded


def test_failure_leaves_nothing_and_keeps_the_previous_result(tmp_path, corpus):
    cfg = tiny_config(corpus, tmp_path / "data")
    out = run(cfg)
    before = (out / "manifest.json").read_text()
    debris = write_text_corpus(
        tmp_path / "debris", {**small_splits(), "train": (["@@"] * 5, ["<br/>"] * 5)}
    )
    with pytest.raises(
        TranslatorError, match="no training pairs left after cleaning.*markup debris 5"
    ):
        run(tiny_config(debris, tmp_path / "data"))
    assert (out / "manifest.json").read_text() == before
    # no temporary directory left
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["small"]
    with pytest.raises(TranslatorError):
        run(tiny_config(debris, tmp_path / "fresh"))
    assert not (tmp_path / "fresh" / "small").exists() and not list((tmp_path / "fresh").iterdir())


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "translator", "prepare", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _prepare_until_its_temporary_directory(data, multi30k):
    """Start `prepare` and return it frozen (SIGSTOP) while its temporary directory exists, or
    None when it renamed the directory before it could be frozen (a loaded machine)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "translator",
            "prepare",
            "configs/tiny.yaml",
            "--data",
            str(multi30k),
            "--set",
            f"data.data_dir={data}",
            "--set",
            "data.splits.valid=valid",
            "--set",
            "data.splits.test=test2016",
            "--quiet",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 60
    while not list(data.glob(".*.tmp")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "prepare ended before its temporary directory was seen"
    os.kill(proc.pid, signal.SIGSTOP)
    if list(data.glob(".*.tmp")):  # frozen before its rename: still mid-work
        return proc
    os.kill(proc.pid, signal.SIGCONT)
    proc.communicate(timeout=60)
    return None


def test_sigterm_leaves_no_temporary_directory(tmp_path, multi30k):
    for attempt in range(3):
        data = tmp_path / f"data{attempt}"
        if proc := _prepare_until_its_temporary_directory(data, multi30k):
            break
    else:
        pytest.fail("prepare finished before SIGTERM could reach it, three times")
    proc.terminate()  # SIGTERM, as a job scheduler or `kill` sends; handled once it runs again
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    left = sorted(p.name for p in data.iterdir())
    # exit 0 was seen here once (a fresh-clone suite run) and not reproduced since: what was left
    # tells an unheeded SIGTERM (the prepared directory) from an early exit (nothing)
    assert proc.returncode == 143 and err == b"", (proc.returncode, left, out[-300:], err[-800:])
    assert left == []


def test_cli_bad_input_is_one_line_and_quiet_is_silent(tmp_path, corpus):
    (corpus / "train.de").write_text("nur eine Zeile\n", encoding="utf-8")
    done = cli(
        "configs/tiny.yaml",
        "--data",
        str(corpus),
        "--set",
        f"data.data_dir={tmp_path / 'data'}",
        "--set",
        "data.splits.valid=valid",
        "--quiet",
    )
    assert done.returncode == 1 and done.stdout == ""
    assert (
        done.stderr.count("\n") == 1
        and done.stderr.startswith("error: ")
        and "line counts differ" in done.stderr
    )
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").iterdir())

    fixed = write_text_corpus(tmp_path / "ok", small_splits(100))
    done = cli(
        "configs/tiny.yaml",
        "--data",
        str(fixed),
        "--set",
        f"data.data_dir={tmp_path / 'data'}",
        "--set",
        "data.splits.valid=valid",
        "--set",
        "data.vocab_size=200",
        "--quiet",
    )
    # quiet: nothing but warnings about the input (a 200-piece vocabulary lacks a few letters)
    assert done.returncode == 0 and done.stdout == ""
    assert all(line.startswith("warning: ") for line in done.stderr.splitlines())


def test_session_fixture_matches_the_contract(prepared):
    folder = prepared_dir(prepared.data)
    for split in ("train", "valid", "test"):
        assert (
            len(TokenArray(folder / f"{split}.src")) == len(TokenArray(folder / f"{split}.tgt")) > 0
        )
    assert (folder / "valid.en").is_file() and (folder / "test.de").is_file()
    assert load_manifest(prepared.data)["pairs"]["train"] <= prepared.data.max_train_pairs


def test_byte_fallback_encodes_unseen_characters(tmp_path, corpus):
    out = run(
        tiny_config(corpus, tmp_path / "data", "data.byte_fallback=true", "data.vocab_size=400")
    )
    tokenizer = Tokenizer(out / "spm.model")
    ids = tokenizer.encode(["Ein Hund für 5 € 😀."])[0]
    assert UNK_ID not in ids and tokenizer.decode([ids]) == ["Ein Hund für 5 € 😀."]


def test_edited_source_files_are_prepared_again(tmp_path, corpus):
    cfg = tiny_config(corpus, tmp_path / "data")
    run(cfg)
    assert not out_of_date(cfg.data)
    (corpus / "README.md").write_text("notes beside the data\n")  # not read: not a change
    assert not out_of_date(cfg.data)
    os.utime(corpus / "train.de", ns=(1, 1))  # same settings, edited file
    assert out_of_date(cfg.data)
    run(cfg)
    os.utime(corpus / "valid.de", ns=(2, 2))  # every split's files count, not train's alone
    assert out_of_date(cfg.data)


def test_the_cleaning_digest_sees_a_changed_rule(monkeypatch):
    """The rule of 2026-12-01 (CR, FF and \\x1c-\\x1f between words became a space; before, they
    were removed, gluing the words) changes the digest, as do the settings that switch rules off."""
    today = clean.rules_digest()
    assert len({today, clean.rules_digest(nfc=False), clean.rules_digest(spaces=False)}) == 3
    older = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\u200b\ufeff]")
    monkeypatch.setattr(clean, "_CONTROL", older)
    clean.rules_digest.cache_clear()
    try:
        assert clean.normalize("a\x1fb") == "ab" and clean.rules_digest() != today
    finally:
        monkeypatch.undo()
        clean.rules_digest.cache_clear()
    assert clean.rules_digest() == today


@pytest.mark.parametrize("recorded", ["0123456789abcdef", None])
def test_data_cleaned_by_other_rules_is_prepared_again_saying_why(tmp_path, corpus, recorded):
    cfg = tiny_config(corpus, tmp_path / "data")
    out = run(cfg)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["cleaning"] = recorded  # what an older translator wrote (None: it kept no digest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    why = out_of_date(cfg.data)
    older = (
        "was cleaned by other text rules than this version's"
        if recorded
        else "was prepared by an older translator, which kept no record of its text cleaning"
    )
    assert why == f"{out} {older}"
    said = []
    prepare.run(cfg, log=said.append)
    assert said[0] == f"{out}: preparing again ({why})"
    assert not out_of_date(cfg.data)


def test_eval_split_ids_are_of_the_normalised_text_and_the_text_stays_raw(tmp_path):
    splits = small_splits()
    # characters SentencePiece's own normalisation keeps
    raw = "Two\u200bdogs\ufeff play\x85in  the snow."
    splits["valid"][0][0] = raw
    out = run(tiny_config(write_text_corpus(tmp_path / "corpus", splits), tmp_path / "data"))
    tokenizer = Tokenizer(out / "spm.model")
    assert TokenArray(out / "valid.src")[0] == tokenizer.encode([normalize(raw)])[0]
    # sacreBLEU sees the raw text
    assert (out / "valid.en").read_text(encoding="utf-8").split("\n")[0] == raw


@pytest.mark.parametrize("joint", [True, False])
def test_sentencepiece_reads_at_most_input_sentence_size_sentences(
    tmp_path, corpus, monkeypatch, joint
):
    seen, real = [], prepare.train_sentencepiece

    def counting(sentences, *args, **kwargs):
        sentences = list(sentences)
        seen.append(len(sentences))
        return real(sentences, *args, **kwargs)

    monkeypatch.setattr(prepare, "train_sentencepiece", counting)
    run(
        tiny_config(
            corpus,
            tmp_path / "data",
            "data.input_sentence_size=400",
            f"data.joint_vocab={str(joint).lower()}",
        )
    )
    per_model = [2 * 300] if joint else [300, 300]  # sentences the 300 kept pairs offer each model
    assert seen == [min(400, n) for n in per_model]  # joint: 200 pairs x 2 sides


def test_a_cr_inside_a_valid_sentence_keeps_sources_and_references_aligned(tmp_path):
    splits = small_splits()
    splits["valid"][0][0] = (
        "A dog\rruns."  # universal newlines: 41 lines a side, references 1-5 shifted by one
    )
    splits["valid"][1][5] = "Ein Hund\rrennt."
    out = run(tiny_config(write_text_corpus(tmp_path / "corpus", splits), tmp_path / "data"))
    sources, refs = read_lines(out / "valid.en"), read_lines(out / "valid.de")
    assert sources == splits["valid"][0] and refs == splits["valid"][1]
    assert len(TokenArray(out / "valid.src")) == len(TokenArray(out / "valid.tgt")) == 40
    tokenizer = Tokenizer(out / "spm.model")
    # the CR is a space, not glue
    assert TokenArray(out / "valid.src")[0] == tokenizer.encode(["A dog runs."])[0]


def _vocab_row(src: int, tgt: int, joint: bool, requested: int) -> str:
    """The summary's vocabulary row of a manifest with these sizes."""
    manifest = {
        "source": "corpus",
        "pairs_in": 300,
        "dropped": {},
        "pairs": {"train": 300, "valid": 20, "test": 20},
        "tokens": {"train": {"src": 4000, "tgt": 4200}},
        "vocab": {
            "src": {"size": src, "id_dtype": "uint16"},
            "tgt": {"size": tgt, "id_dtype": "uint16"},
        },
        "joint_vocab": joint,
        "settings": {"vocab_size": requested},
        "seconds": 3,
    }
    return next(v for k, v in summary_rows(manifest) if k.startswith("vocabular"))


@pytest.mark.parametrize("joint", [True, False])
def test_the_summary_says_when_the_vocabulary_is_smaller_than_requested(joint):
    assert "50,000 requested" in _vocab_row(1677, 1677, joint, 50_000)
    assert "requested" not in _vocab_row(1677, 1677, joint, 1677)


def test_the_note_of_a_smaller_vocabulary_stands_beside_the_side_that_is_smaller():
    row = _vocab_row(80, 200, False, 200)
    assert row.startswith("80 (200 requested:") and row.endswith("/ 200")


def test_a_training_run_directory_is_not_prepared_over(tmp_path, corpus):
    """A run directory has a manifest.json too: data.name set to a run's name must not replace
    its checkpoints."""
    cfg = tiny_config(corpus, tmp_path / "data")
    run_dir = prepared_dir(cfg.data)
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text('{"sessions": []}\n')
    (run_dir / "best.pt").write_bytes(b"weights")
    with pytest.raises(TranslatorError, match="no prepared data .a training run directory") as err:
        run(cfg, force=True)
    assert err.value.where == str(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == ["best.pt", "manifest.json"]


def test_spm_threads_reach_sentencepiece_and_the_manifest_says_how_many_trained(
    tmp_path, corpus, monkeypatch
):
    """SentencePiece's result depends on its thread count: the manifest records the count, and
    data.spm_threads pins it (unset, it is one per core and not a setting of the data)."""
    from translator.data import tokenizer

    used = []
    real = tokenizer.spm.SentencePieceTrainer.train
    monkeypatch.setattr(
        tokenizer.spm.SentencePieceTrainer,
        "train",
        lambda **options: used.append(options["num_threads"]) or real(**options),
    )
    pinned = run(tiny_config(corpus, tmp_path / "a", "data.spm_threads=3"))
    manifest = json.loads((pinned / "manifest.json").read_text())
    assert used == [3] and manifest["spm_threads"] == 3 and manifest["settings"]["spm_threads"] == 3
    default = run(tiny_config(corpus, tmp_path / "b"))
    manifest = json.loads((default / "manifest.json").read_text())
    assert used[1] == os.cpu_count() == manifest["spm_threads"]
    assert "spm_threads" not in manifest["settings"]  # data prepared before it keep their hash


@pytest.mark.parametrize("joint", [True, False])
def test_user_symbols_are_one_piece_each_and_tag_the_sources_that_carry_them(tmp_path, joint):
    """Tagged back-translation: `<BT>` written before some sources is one piece of every
    vocabulary, wherever it stands, and a source without it has no such piece."""
    splits = small_splits()
    sources, targets = splits["train"]
    tagged = [f"<BT> {line}" if i % 3 == 0 else line for i, line in enumerate(sources)]
    root = write_text_corpus(tmp_path / "corpus", {**splits, "train": (tagged, targets)})
    cfg = tiny_config(
        root, tmp_path / "data", "data.user_symbols=[<BT>, <2de>]", f"data.joint_vocab={joint}"
    )
    out = run(cfg)
    models = ["spm.model"] if joint else ["spm.src.model", "spm.tgt.model"]
    for name in models:
        sp = Tokenizer(out / name).sp
        for symbol in ("<BT>", "<2de>"):
            assert sp.piece_to_id(symbol) > 3 and sp.id_to_piece(sp.piece_to_id(symbol)) == symbol
            ids = sp.encode(f"A dog{symbol}runs {symbol} fast.")
            assert ids.count(sp.piece_to_id(symbol)) == 2  # whole, inside a word or alone
    source_model = Tokenizer(out / models[0]).sp
    tag = source_model.piece_to_id("<BT>")
    ids = TokenArray(out / "train.src")
    rows = [ids[i] for i in range(len(ids))]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["pairs"]["train"] == len(tagged)  # none dropped: each row is its line
    assert sum(tag in list(row) for row in rows) == sum(t.startswith("<BT> ") for t in tagged)
    assert manifest["settings"]["user_symbols"] == ["<BT>", "<2de>"]
    # without the setting the tag is split into ordinary pieces
    plain = Tokenizer(run(tiny_config(root, tmp_path / "plain")) / "spm.model").sp
    assert plain.piece_to_id("<BT>") == UNK_ID


def test_a_junk_line_too_long_to_keep_does_not_count_in_the_unk_share(tmp_path):
    """One pair of thousands of characters the vocabulary lacks is dropped by the length rule:
    its <unk>s say nothing of the corpus, and counting them refused the whole of it."""
    splits = small_splits()
    junk = " ".join(["\u03b1\u03b2"] * 3000)  # Greek, which Multi30k's vocabulary lacks
    splits["train"] = ([*splits["train"][0], junk], [*splits["train"][1], junk])
    corpus = write_text_corpus(tmp_path / "corpus", splits)
    out = run(tiny_config(corpus, tmp_path / "data"))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["unk"]["src"]["unk"] < 50 and manifest["dropped"]["too long"] == 1


def test_the_unk_share_counts_exactly_the_pairs_short_enough_to_keep(tmp_path):
    """A pair too long on one side only is left out of both sides' counts (it is dropped whole);
    the other pairs count every token; with no length limit every pair counts."""
    splits = small_splits()
    base = run(tiny_config(write_text_corpus(tmp_path / "base", splits), tmp_path / "d1"))
    counted = json.loads((base / "manifest.json").read_text())["unk"]
    junk = " ".join(["\u03b1\u03b2"] * 3000)
    one_side = {
        **splits,
        "train": ([*splits["train"][0], junk], [*splits["train"][1], "Ein Hund."]),
    }
    out = run(tiny_config(write_text_corpus(tmp_path / "junk", one_side), tmp_path / "d2"))
    assert json.loads((out / "manifest.json").read_text())["unk"] == counted
    unlimited = tiny_config(write_text_corpus(tmp_path / "all", splits), tmp_path / "d3")
    unlimited.data.max_tokens_per_side = 0
    out = run(unlimited)
    assert json.loads((out / "manifest.json").read_text())["unk"] == counted
    assert counted["src"]["tokens"] > 0 and counted["tgt"]["tokens"] > 0


def test_a_length_ratio_rule_that_drops_many_pairs_is_warned_about(tmp_path, capsys):
    """A fifth of the pairs with a target four times as long as its source (as a vocabulary of
    phrase-long Chinese pieces makes them): dropped, and said on stderr, not only in the table."""
    splits = small_splits(200)
    src, tgt = splits["train"]
    tgt = [f"{t} {t} {t} {t}" if i % 5 == 0 else t for i, t in enumerate(tgt)]
    splits["train"] = (src, tgt)
    cfg = tiny_config(write_text_corpus(tmp_path / "skewed", splits), tmp_path / "data")
    cfg.data.max_length_ratio = 3
    out = run(cfg)
    dropped = json.loads((out / "manifest.json").read_text())["dropped"]["length ratio"]
    warned = capsys.readouterr().err
    assert dropped >= 30 and f"dropped {dropped:,} of 200 training pairs" in warned
    cfg = tiny_config(write_text_corpus(tmp_path / "plain", small_splits(200)), tmp_path / "d2")
    cfg.data.max_length_ratio = 3
    run(cfg)
    assert "max_length_ratio" not in capsys.readouterr().err
