"""Damaged checkpoints are refused in one line before a model is built; the weights carry a
checksum."""

from __future__ import annotations

import argparse
import math
import random
import sys
import zipfile

import pytest
import torch

from translator import averaging, checkpoint, cli
from translator.errors import TranslatorError


@pytest.fixture
def no_model_built(monkeypatch):
    """Fails the test if anything gets as far as building a model from the file."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was built from a refused checkpoint")

    monkeypatch.setattr(checkpoint, "Transformer", refuse)


def refused(path) -> str:
    with pytest.raises(TranslatorError) as err:
        checkpoint.load(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_zero_byte_checkpoint_is_refused(tmp_path, no_model_built):
    (tmp_path / "empty.pt").write_bytes(b"")
    assert "empty checkpoint file (0 bytes)" in refused(tmp_path / "empty.pt")


def test_a_checkpoint_cut_anywhere_is_refused(checkpoint_file, tmp_path, no_model_built):
    data = checkpoint_file.read_bytes()
    for cut in [1, 100, len(data) // 2, len(data) - 22, len(data) - 1] + random.Random(0).sample(
        range(len(data)), 5
    ):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        assert "not a readable checkpoint" in refused(tmp_path / "cut.pt"), cut


@pytest.mark.parametrize(
    "content",
    [
        {"weight-and-step": torch.zeros(3), "step": 3},  # not weights alone
        {},
        {"format": 3, "model": {}},
        {"format": "3"},
        [1, 2, 3],
        "text",
    ],
)
def test_foreign_files_are_refused(tmp_path, no_model_built, content):
    torch.save(content, tmp_path / "foreign.pt")
    text = refused(tmp_path / "foreign.pt")
    assert "not a translator checkpoint" in text and "weights alone" not in text
    (tmp_path / "notes.pt").write_text("not a checkpoint at all\n")
    assert "not a readable checkpoint" in refused(tmp_path / "notes.pt")


@pytest.mark.parametrize(
    "content, message, fix",
    [
        # older fairseq: settings in an argparse Namespace, which weights_only refuses to unpickle
        (
            lambda: {"args": argparse.Namespace(arch="transformer"), "model": {}},
            "fairseq",
            "import-fairseq",
        ),
        (
            lambda: {"cfg": {"model": {}}, "model": {"w": torch.zeros(2)}},
            "fairseq",
            "import-fairseq",
        ),
        (lambda: {"model.shared.weight": torch.zeros(2)}, "weights alone", "import-hf"),
    ],
    ids=["fairseq-args", "fairseq-cfg", "state-dict"],
)
def test_another_toolkit_s_checkpoint_is_named_with_its_import(
    tmp_path, no_model_built, content, message, fix
):
    torch.save(content(), tmp_path / "theirs.pt")
    text = refused(tmp_path / "theirs.pt")
    assert message in text and fix in text and "damaged" not in text


def _pickled_from(module: str, monkeypatch) -> object:
    """An object whose pickle names a class of `module` (made importable for torch.save while the
    test runs, its parent packages too)."""
    import types

    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        if name not in sys.modules:
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    kind = type("Settings", (), {"__module__": module})
    monkeypatch.setattr(sys.modules[module], "Settings", kind, raising=False)
    return kind()


@pytest.mark.parametrize(
    "content, fairseqs",
    [
        # newer fairseq: a dataclass of its own, in a submodule
        (lambda mp: {"model": {}, "extra": _pickled_from("fairseq.dataclass.fake", mp)}, True),
        # the Namespace after more than a kilobyte of pickle (a large model's weights first)
        (
            lambda mp: {
                "model": {f"w{i}": torch.zeros(2) for i in range(200)},
                "args": argparse.Namespace(arch="transformer"),
            },
            True,
        ),
        # OpenNMT-py keeps a Namespace too, beside its own classes: not fairseq's
        (
            lambda mp: {"opt": argparse.Namespace(a=1), "vocab": _pickled_from("onmt.fake", mp)},
            False,
        ),
    ],
    ids=["fairseq-class", "fairseq-late-namespace", "opennmt"],
)
def test_a_fairseq_checkpoint_is_told_by_its_pickled_classes(
    tmp_path, no_model_built, monkeypatch, content, fairseqs
):
    torch.save(content(monkeypatch), tmp_path / "theirs.pt")
    text = refused(tmp_path / "theirs.pt")
    assert ("a fairseq checkpoint, not a translator one" in text) == fairseqs, text


def test_a_fairseq_checkpoint_with_cfg_is_named_as_fairseq_s(tmp_path, no_model_built):
    torch.save({"cfg": {"model": {}}, "model": {"w": torch.zeros(2)}}, tmp_path / "f.pt")
    assert "a fairseq checkpoint, not a translator one" in refused(tmp_path / "f.pt")


def test_a_damaged_checkpoint_imported_from_fairseq_is_damaged_not_fairseqs(
    checkpoint_file, tmp_path, no_model_built
):
    payload = torch.load(checkpoint_file, weights_only=True)
    payload["state"] = {"imported_from": "fairseq"}  # the word, in a checkpoint of ours
    torch.save(payload, tmp_path / "ours.pt")
    data = (tmp_path / "ours.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    assert "not a readable checkpoint" in refused(tmp_path / "cut.pt")


def test_a_newer_format_is_refused_as_newer_not_as_foreign(tmp_path, no_model_built):
    torch.save({"format": checkpoint.FORMAT + 1, "model": {}}, tmp_path / "newer.pt")
    message = refused(tmp_path / "newer.pt")
    assert f"newer translator (checkpoint format {checkpoint.FORMAT + 1}" in message
    assert "upgrade translator" in message


def test_a_changed_weight_is_caught_by_the_checksum(checkpoint_file, tmp_path, no_model_built):
    payload = torch.load(checkpoint_file, weights_only=True)
    name = next(iter(payload["model"]))
    payload["model"][name].view(-1)[0] += 1e-3  # a valid file whose weights are not those saved
    torch.save(payload, tmp_path / "changed.pt")
    assert "do not match the checkpoint's checksum" in refused(tmp_path / "changed.pt")


def test_a_flipped_byte_in_the_weights_is_refused(checkpoint_file, tmp_path, no_model_built):
    data = bytearray(checkpoint_file.read_bytes())
    # torch.save stores tensors uncompressed, one entry each
    with zipfile.ZipFile(checkpoint_file) as archive:
        entry = max(
            (i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size
        )
    # after the local header
    start = entry.header_offset + 30 + len(entry.filename.encode()) + len(entry.extra)
    start += entry.file_size // 2
    data[start] ^= 0x10
    (tmp_path / "flipped.pt").write_bytes(bytes(data))
    # torch checks no CRC
    assert "do not match the checkpoint's checksum" in refused(tmp_path / "flipped.pt")


def test_the_checksums_are_of_each_saved_part_and_older_formats_still_load(
    checkpoint_file, tmp_path
):
    payload = torch.load(checkpoint_file, weights_only=True)
    assert payload["format"] == 3 and sorted(payload["sha256"]) == sorted(checkpoint.PARTS)
    model, _, _ = checkpoint.load(checkpoint_file)
    assert checkpoint.digest(model.state_dict()) == payload["sha256"]["model"]
    del payload["sha256"]
    # format 2: a checksum of the weights alone, still verified
    payload.update(format=2, weights_sha256=checkpoint.weights_digest(payload["model"]))
    torch.save(payload, tmp_path / "two.pt")
    checkpoint.load(tmp_path / "two.pt")
    name = next(iter(payload["model"]))
    payload["model"][name].view(-1)[0] += 1e-3
    torch.save(payload, tmp_path / "two.pt")
    assert "its weights do not match" in refused(tmp_path / "two.pt")
    del payload["weights_sha256"]
    payload["format"] = 1  # as written before the checksum existed
    torch.save(payload, tmp_path / "old.pt")
    old, _, _ = checkpoint.load(tmp_path / "old.pt")
    for key, value in old.state_dict().items():
        assert torch.equal(value, payload["model"][key])


def test_average_writes_a_verified_checkpoint(checkpoint_file, tmp_path):
    copy = tmp_path / "copy.pt"
    copy.write_bytes(checkpoint_file.read_bytes())
    averaging.average([checkpoint_file, copy], tmp_path / "avg.pt")
    assert checkpoint.read(tmp_path / "avg.pt")["format"] == checkpoint.FORMAT


def test_loading_leaves_the_caller_s_random_stream_alone(checkpoint_file):
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    checkpoint.load(checkpoint_file)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("int8", [False, True], ids=["packed", "int8"])
def test_a_model_converted_for_decoding_is_refused_by_save(checkpoint_file, tmp_path, int8):
    """loading.load's CPU model holds packed (or int8) linears under other names: saved, it would
    make a file that no load reads. The plain model saves and loads back."""
    from translator.model.inference import for_cpu_decoding, onednn_dtypes

    if not int8 and torch.float32 not in onednn_dtypes():
        pytest.skip("this PyTorch build has no oneDNN linear: nothing is packed")
    model, cfg, tokenizer = checkpoint.load(checkpoint_file)
    checkpoint.save(tmp_path / "plain.pt", model, cfg, tokenizer)
    assert checkpoint.load(tmp_path / "plain.pt")[1] == cfg
    for_cpu_decoding(model, int8=int8)
    out = tmp_path / "converted.pt"
    with pytest.raises(TranslatorError, match="converted for decoding") as err:
        checkpoint.save(out, model, cfg, tokenizer)
    assert "\n" not in str(err.value) and str(out) in str(err.value)
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "plain.pt"]


def test_translate_refuses_a_truncated_checkpoint_in_one_line(
    checkpoint_file, tmp_path, monkeypatch, capsys
):
    (tmp_path / "cut.pt").write_bytes(checkpoint_file.read_bytes()[:5000])
    monkeypatch.setattr(sys, "argv", ["translator", "translate", str(tmp_path / "cut.pt")])
    with pytest.raises(SystemExit) as exit_code:
        cli.main()  # in this process: the CLI's own error handling, without a new interpreter
    out, err = capsys.readouterr()
    assert exit_code.value.code == 1 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and "not a readable checkpoint" in err


def _changed(trained_run, tmp_path, change) -> str:
    """last.pt of a trained run, changed by `change(payload)` and saved as a valid file: the error
    reading it."""
    payload = torch.load(trained_run / "last.pt", weights_only=True)
    change(payload)
    torch.save(payload, tmp_path / "changed.pt")
    with pytest.raises(TranslatorError) as err:
        checkpoint.read(tmp_path / "changed.pt")
    return err.value.what


def test_a_flipped_sign_in_the_optimizer_state_is_refused_naming_it(trained_run, tmp_path):
    """exp_avg_sq < 0 gives NaN weights at the next update: the checksum must cover it."""

    def flip(payload):
        payload["state"]["optimizer"]["state"][0]["exp_avg_sq"].view(-1)[0] *= -1

    assert _changed(trained_run, tmp_path, flip).startswith("its training state (optimizer")


@pytest.mark.parametrize(
    "part, change",
    [
        ("config", lambda p: p["config"]["decode"].update(beam_size=7)),
        ("training state", lambda p: p["state"]["train"].update(step=99)),
        ("training state", lambda p: p["state"]["train"]["rng"][0]["torch"].view(-1).add_(1)),
        ("training state", lambda p: p["state"].pop("scaler")),
        ("weights", lambda p: next(iter(p["model"].values())).view(-1).add_(1)),
    ],
)
def test_every_part_of_the_checkpoint_is_checked(trained_run, tmp_path, part, change):
    what = _changed(trained_run, tmp_path, change)
    verb = "do" if part == "weights" else "does"  # the verb agrees with the part's noun
    assert what.startswith(f"its {part}") and f" {verb} not match " in what, what


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_flipped_byte_in_the_tokenizer_is_refused_naming_it(trained_run, tmp_path, fmt):
    """A changed SentencePiece piece ("▁dog" -> "▁eog") would change translations silently; also
    caught in a format-2 file, whose weights checksum does not cover it."""

    def flip(payload):
        proto = bytearray(payload["tokenizer"]["proto"])
        proto[len(proto) // 2] ^= 0x01
        payload["tokenizer"]["proto"] = bytes(proto)
        if fmt == 2:
            payload.update(format=2, weights_sha256=checkpoint.weights_digest(payload["model"]))
            del payload["sha256"]

    assert _changed(trained_run, tmp_path, flip).startswith("its tokenizer (SentencePiece model)")
    with pytest.raises(TranslatorError, match="its tokenizer"):
        checkpoint.read_tokenizer(tmp_path / "changed.pt")


def test_the_advice_names_a_checkpoint_that_is_not_a_hard_link_of_the_damaged_one(
    trained_run, tmp_path
):
    """last.pt, best.pt and the newest step-N.pt are one file: damage to one is damage to all."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(trained_run, run_dir)  # copies: the links are gone
    for name in ("best.pt", "step-4.pt"):
        (run_dir / name).unlink()
        (run_dir / name).hardlink_to(run_dir / "last.pt")
    with zipfile.ZipFile(run_dir / "last.pt") as archive:
        entry = max(
            (i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size
        )
    data = bytearray((run_dir / "last.pt").read_bytes())
    start = entry.header_offset + 30 + len(entry.filename.encode()) + len(entry.extra)
    data[start + entry.file_size // 2] ^= 0xFF
    (run_dir / "last.pt").write_bytes(bytes(data))  # in place: all three names
    with pytest.raises(TranslatorError) as err:
        checkpoint.read(run_dir / "best.pt")
    assert err.value.fix == "use another checkpoint, e.g. step-2.pt (a file of its own)"
    (run_dir / "step-2.pt").unlink()
    with pytest.raises(TranslatorError) as err:
        checkpoint.read(run_dir / "best.pt")
    assert err.value.fix == (
        "use another checkpoint: its hard links (step-4.pt, last.pt) share the damage"
    )


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_weights_are_refused_everywhere_a_checkpoint_is_read(
    checkpoint_file, tmp_path, no_model_built, value
):
    """A checksum that matches does not make weights usable: one NaN is refused in one line
    naming the tensor, by load and so by translate, eval, score, average and train.init_from."""
    payload = torch.load(checkpoint_file, weights_only=True)
    name = next(n for n in payload["model"] if n.endswith("up.weight"))
    payload["model"][name].view(-1)[7] = value
    torch.save(checkpoint.seal(payload), tmp_path / "nan.pt")  # sealed: not merely damaged
    message = refused(tmp_path / "nan.pt")
    assert f"its weights are not finite ({name} holds NaN or inf)" in message
    with pytest.raises(TranslatorError, match="not finite"):
        averaging.average([checkpoint_file, tmp_path / "nan.pt"], tmp_path / "avg.pt")
    assert not (tmp_path / "avg.pt").exists()


def test_a_checkpoint_output_naming_a_file_of_another_kind_is_refused_before_any_work(
    checkpoint_file, tmp_path, monkeypatch
):
    """average, import-hf and import-fairseq write a checkpoint to -o: a text file there (a slip
    of the keyboard) is kept, and refused before anything is read."""
    from translator import fairseq, marian

    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    monkeypatch.setattr(averaging, "read", lambda path: pytest.fail("read before the check"))
    for write in (
        lambda: averaging.average([checkpoint_file], notes),
        lambda: marian.import_marian(tmp_path / "no-such-model", notes),
        lambda: fairseq.import_fairseq(tmp_path / "no.pt", tmp_path, tmp_path / "spm", notes),
    ):
        with pytest.raises(TranslatorError, match="exists and is not a checkpoint") as err:
            write()
        assert err.value.where == str(notes) and notes.read_text() == "kept\n"
    monkeypatch.undo()
    (tmp_path / "runs").mkdir()  # a directory: named as one, not as "not a checkpoint"
    with pytest.raises(TranslatorError, match="is a directory") as err:
        averaging.average([checkpoint_file], tmp_path / "runs")
    assert "not a checkpoint" not in str(err.value)
    (tmp_path / "avg.pt").touch()  # an empty file (`touch`) holds nothing to keep: replaced
    for _ in range(2):  # the second time a checkpoint is there: replaced
        averaging.average([checkpoint_file], tmp_path / "avg.pt")
    assert checkpoint.read(tmp_path / "avg.pt")["state"]["averaged"] == [str(checkpoint_file)]


def test_a_hugging_face_model_given_as_a_checkpoint_is_pointed_to_import_hf(tmp_path):
    model_dir = tmp_path / "opus-mt-en-de"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "marian"}')
    for given in (str(model_dir), "hf:Helsinki-NLP/opus-mt-en-de"):
        with pytest.raises(TranslatorError) as err:
            checkpoint.load(given)
        assert err.value.fix.startswith(f"import it first: translator import-hf {given} -o CKPT")
    with pytest.raises(TranslatorError) as err:
        checkpoint.load(tmp_path / "missing.pt")
    assert "import-hf" not in err.value.fix


def test_a_ctranslate2_export_given_as_a_checkpoint_is_named_as_one(tmp_path):
    """An export holds a config.json too, but import-hf cannot read it: the checkpoint it was
    exported from is what to give (as `info` says)."""
    export = tmp_path / "ct2-en-de"
    export.mkdir()
    (export / "config.json").write_text('{"add_source_bos": false}')
    (export / "model.bin").write_bytes(b"\0" * 16)
    with pytest.raises(TranslatorError) as err:
        checkpoint.load(export)
    assert err.value.what == "a CTranslate2 model directory, not a checkpoint"
    assert err.value.fix == "give the checkpoint it was exported from"
