"""What a run tells whoever watches it or reads it later: the last updates logged, a finite
blow-up named, the error that ended it kept in train.log and manifest.json, a closed stdout no
reason to stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, tiny_overrides
from tests.train.conftest import variant
from translator.errors import TranslatorError
from translator.train import divergence, loop


def test_the_updates_after_the_last_log_point_are_logged_at_the_end(prepared, tmp_path):
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, "train.max_updates=7", "train.log_every=5")
    loop.run(cfg, quiet=True)
    log = (run_dir / "train.log").read_text()
    assert "update 5: lr " in log and "update 7: lr " in log
    assert log.index("update 7: lr ") < log.index("stopped at update 7")


def test_a_loss_far_above_a_uniform_guess_is_named_once(prepared, tmp_path):
    """lr 0.5: the loss goes far past ln(V) but stays finite, so the non-finite guards never
    fire; the log must still say that the run diverges."""
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, "train.lr=0.5", "train.max_updates=16", "train.log_every=2")
    loop.run(cfg, quiet=True)
    log = (run_dir / "train.log").read_text()
    assert log.count("is over twice a uniform guess's ln(vocabulary)") == 1


def test_a_run_at_a_sane_rate_gets_no_blow_up_warning(prepared, tmp_path):
    run_dir = tmp_path / "run"
    loop.run(variant(prepared, run_dir, "train.max_updates=8", "train.log_every=1"), quiet=True)
    assert "uniform guess" not in (run_dir / "train.log").read_text()


def test_the_error_that_ends_a_run_is_in_train_log_and_the_manifest(
    prepared, tmp_path, monkeypatch
):
    monkeypatch.setattr(torch.nn.utils, "get_total_norm", lambda grads: torch.tensor(float("inf")))
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, "train.max_updates=100", "train.eval_every=50")
    with pytest.raises(TranslatorError) as raised:
        loop.run(cfg, quiet=True)
    n = divergence.MAX_SKIPS_IN_A_ROW
    assert f"error: {raised.value}" in (run_dir / "train.log").read_text()
    (session,) = json.loads((run_dir / "manifest.json").read_text())["sessions"]
    assert session["end_reason"] == "error" and session["error"] == str(raised.value)
    assert f"updates 1-{n} all had a non-finite" in session["error"]


def test_an_error_reading_the_batches_at_the_start_is_in_train_log_and_the_manifest(
    prepared, tmp_path, monkeypatch
):
    """As any error that ends a run: it came before the loop, after train.log was opened."""

    def refuse(*args, **kwargs):
        raise TranslatorError("a pair longer than the model's positions", "train.tsv:11", "fix it")

    monkeypatch.setattr(loop, "TrainBatches", refuse)
    run_dir = tmp_path / "run"
    with pytest.raises(TranslatorError) as raised:
        loop.run(variant(prepared, run_dir), quiet=True)
    assert f"error: {raised.value}" in (run_dir / "train.log").read_text()
    (session,) = json.loads((run_dir / "manifest.json").read_text())["sessions"]
    assert session["end_reason"] == "error" and session["error"] == str(raised.value)


def test_a_reader_that_leaves_stdout_does_not_end_the_run(prepared, tmp_path):
    """`translator train ... | head -3`: the pipe closes after three lines; training goes on to
    its end and saves, logging to train.log alone (it used to exit 1, silently, unsaved)."""
    run_dir = tmp_path / "run"
    overrides = [
        *tiny_overrides(Path(prepared.data.data_dir), run_dir, prepared.data.source),
        "train.precision=fp32",
        "train.max_updates=12",
        "train.log_every=1",
        "train.eval_every=6",
    ]
    command = [sys.executable, "-m", "translator", "train", str(REPO / "configs" / "tiny.yaml")]
    for override in overrides:
        command += ["--set", override]
    trainer = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    for _ in range(3):
        trainer.stdout.readline()
    trainer.stdout.close()  # the reader leaves
    _, err = trainer.communicate(timeout=300)
    assert trainer.returncode == 0, err
    assert b"stdout was closed by its reader; training goes on" in err
    assert b"Traceback" not in err and b"Exception ignored" not in err
    assert "stopped at update 12" in (run_dir / "train.log").read_text()
    assert (run_dir / "last.pt").is_file()
