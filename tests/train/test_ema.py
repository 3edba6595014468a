"""train.ema_decay: checkpoints hold the exponential moving average of the trained weights, which
training itself never sees; resume continues both exactly."""

from __future__ import annotations

import re

import pytest
import torch

from tests.train.conftest import variant
from tests.train.test_resume import interrupt_at
from translator import checkpoint, config
from translator.errors import TranslatorError
from translator.train import loop

DECAY = 0.6  # far from 1, so that a few updates move the average visibly
SETTINGS = (
    "model.dropout=0.1",
    "train.max_tokens=512",
    "train.log_every=1",
    "train.max_updates=5",
    "train.eval_every=1",  # a checkpoint after every update: the whole trajectory is kept
    "train.keep_last=5",
    "train.valid_bleu_sentences=2",
    "train.valid_beam_size=1",
)


def steps(run_dir) -> list[dict]:
    return [checkpoint.read(run_dir / f"step-{n}.pt") for n in range(1, 6)]


@pytest.fixture(scope="module")
def runs(prepared, tmp_path_factory):
    """Without and with the average; with it, stopped at update 2 and resumed; and an average
    run's step-3.pt resumed without it. All here, under one thread count (two threads round
    differently): tests/conftest.py's session fixture sets one."""
    root = tmp_path_factory.mktemp("ema")
    ema = f"train.ema_decay={DECAY}"
    loop.run(variant(prepared, root / "plain", *SETTINGS), quiet=True)
    loop.run(variant(prepared, root / "ema", *SETTINGS, ema), quiet=True)
    with pytest.MonkeyPatch.context() as monkeypatch:
        interrupt_at(monkeypatch, 2)
        with pytest.raises(SystemExit):  # saved last.pt, then ends as an interrupted program
            loop.run(variant(prepared, root / "resumed", *SETTINGS, ema), quiet=True)
    stopped = checkpoint.read(root / "resumed" / "last.pt")["state"]["train"]["step"]
    loop.run(variant(prepared, root / "resumed", *SETTINGS, ema), quiet=True)
    (root / "dropped").mkdir()
    (root / "dropped" / "last.pt").write_bytes((root / "ema" / "step-3.pt").read_bytes())
    loop.run(variant(prepared, root / "dropped", *SETTINGS), quiet=True)  # ema_decay 0
    return root, stopped


def test_checkpoints_hold_the_moving_average_of_the_trained_weights(runs):
    saved = steps(runs[0] / "ema")
    reference = None  # the average by its formula, from the trained weights of each update
    for payload in saved:
        trained = payload["state"]["train_weights"]
        if reference is None:
            reference = {k: v.double() for k, v in trained.items()}
        else:
            reference = {
                k: DECAY * reference[k] + (1 - DECAY) * trained[k].double() for k in reference
            }
        for name, tensor in payload["model"].items():
            torch.testing.assert_close(tensor.double(), reference[name], rtol=1e-5, atol=1e-6)
    last = saved[-1]
    moved = [k for k in last["model"] if not torch.equal(last["model"][k], trained[k])]
    assert moved, "the average should differ from the trained weights after 5 updates"


def test_the_average_does_not_change_training(runs):
    root, _ = runs
    for a, b in zip(steps(root / "plain"), steps(root / "ema")):
        assert "train_weights" not in a["state"]
        for name, tensor in a["model"].items():
            assert torch.equal(tensor, b["state"]["train_weights"][name]), name


def test_validation_scores_the_average(runs):
    """The logged validation loss of the last update is the average's, not the trained weights'."""
    root, _ = runs
    plain, ema = (
        # the validation's time (", 1.4 s") differs from run to run
        [
            re.sub(r", [0-9.]+ s\b", "", line.split("loss")[1])
            for line in log.splitlines()
            if "validation at" in line
        ]
        for log in ((root / name / "train.log").read_text() for name in ("plain", "ema"))
    )
    assert plain[0] == ema[0]  # update 1: the average is a copy of the weights
    assert plain[-1] != ema[-1]


def test_resume_continues_the_average_bit_for_bit(runs):
    root, stopped = runs
    a, b = checkpoint.read(root / "ema" / "last.pt"), checkpoint.read(root / "resumed" / "last.pt")
    assert stopped == 2 and b["state"]["train"]["step"] == 5
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
        assert torch.equal(a["state"]["train_weights"][name], b["state"]["train_weights"][name])


def test_resume_without_the_average_continues_the_trained_weights(runs):
    root, _ = runs
    a, b = (
        checkpoint.read(root / "plain" / "last.pt"),
        checkpoint.read(root / "dropped" / "last.pt"),
    )
    assert "train_weights" not in b["state"] and b["state"]["train"]["step"] == 5
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert "moving average is dropped" in (root / "dropped" / "train.log").read_text()


def test_ema_decay_must_be_below_one(prepared, tmp_path):
    with pytest.raises(TranslatorError, match="train.ema_decay"):
        variant(prepared, tmp_path, "train.ema_decay=1.0")
    assert variant(prepared, tmp_path, "train.ema_decay=0.999").train.ema_decay == 0.999
    assert config.TrainConfig().ema_decay == 0.0
