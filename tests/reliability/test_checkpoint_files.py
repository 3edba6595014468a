"""Damaged checkpoints are refused in one line before a model is built; the weights carry a
checksum."""

from __future__ import annotations

import random
import sys
import zipfile

import pytest
import torch

from translator import checkpoint, cli
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
    "content", [{"weight": torch.zeros(3)}, {"format": 3, "model": {}}, [1, 2, 3], "text"]
)
def test_foreign_files_are_refused(tmp_path, no_model_built, content):
    torch.save(content, tmp_path / "foreign.pt")
    assert "not a translator checkpoint" in refused(tmp_path / "foreign.pt")
    (tmp_path / "notes.pt").write_text("not a checkpoint at all\n")
    assert "not a readable checkpoint" in refused(tmp_path / "notes.pt")


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


def test_the_checksum_is_of_the_saved_weights_and_old_format_1_files_still_load(
    checkpoint_file, tmp_path
):
    payload = torch.load(checkpoint_file, weights_only=True)
    assert payload["format"] == 2 and len(payload["weights_sha256"]) == 64
    model, _, _ = checkpoint.load(checkpoint_file)
    assert checkpoint.weights_digest(model.state_dict()) == payload["weights_sha256"]
    del payload["weights_sha256"]
    payload["format"] = 1  # as written before the checksum existed
    torch.save(payload, tmp_path / "old.pt")
    old, _, _ = checkpoint.load(tmp_path / "old.pt")
    for key, value in model.state_dict().items():
        assert torch.equal(value, old.state_dict()[key])


def test_average_writes_a_verified_checkpoint(checkpoint_file, tmp_path):
    copy = tmp_path / "copy.pt"
    copy.write_bytes(checkpoint_file.read_bytes())
    checkpoint.average([checkpoint_file, copy], tmp_path / "avg.pt")
    assert checkpoint.read(tmp_path / "avg.pt")["format"] == 2


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
