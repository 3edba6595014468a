"""A diverging run stops with one line instead of training (and saving) non-finite weights; a
validation with a non-finite loss never becomes best.pt."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.train.conftest import variant
from translator import checkpoint
from translator.errors import TranslatorError
from translator.train import divergence, loop, session
from translator.train.state import TrainState
from translator.train.validate import Validation


def test_an_update_that_makes_the_weights_non_finite_stops_the_run_before_any_save(
    prepared, tmp_path
):
    """lr 1e39: the first update's loss and gradients are finite, its optimizer step overflows."""
    run_dir = tmp_path / "run"
    cfg = variant(
        prepared,
        run_dir,
        "train.lr=1e39",
        "train.warmup_steps=1",
        "train.max_updates=4",
        "train.eval_every=1",
    )
    with pytest.raises(
        TranslatorError,
        match=r"update 1 made the weights non-finite.*lower train.lr.*no checkpoint saved",
    ):
        loop.run(cfg, quiet=True)
    assert not list(run_dir.glob("*.pt"))


def test_weights_norm_sees_one_nan_or_inf_and_weights_finite_tells_it_from_large_values(tmp_path):
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.fill_(3e38)  # finite, but their norm overflows float32
    assert not math.isfinite(divergence.weights_norm(model)) and divergence.weights_finite(model)
    s, watch = fake_session(tmp_path, None), divergence.Divergence()
    s.model = model
    watch.after_update(s, ok=True)
    watch.check(s)  # large is not non-finite: the skipped updates that follow will tell
    for bad in (math.nan, math.inf):
        with torch.no_grad():
            model.bias[1] = bad
        assert not math.isfinite(divergence.weights_norm(model)) and not divergence.weights_finite(
            model
        )
    watch.after_update(s, ok=True)
    with pytest.raises(TranslatorError, match="update 0 made the weights non-finite"):
        watch.check(s)


def test_updates_skipped_in_a_row_stop_the_run_and_the_log_names_the_infinite_norm(
    prepared, tmp_path, monkeypatch
):
    """Every gradient norm infinite, every loss finite: a diverged run, not max_updates of skips."""
    monkeypatch.setattr(torch.nn.utils, "get_total_norm", lambda grads: torch.tensor(float("inf")))
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, "train.max_updates=100", "train.eval_every=5")
    n = divergence.MAX_SKIPS_IN_A_ROW
    # no update was applied: last.pt holds the weights every update failed with, so it is no
    # place to resume from
    with pytest.raises(
        TranslatorError,
        match=rf"updates 1-{n} all had a non-finite .*last.pt \(update {n // 2}\) holds the "
        r"weights that failed, unchanged since update 0, so resuming cannot help",
    ):
        loop.run(cfg, quiet=True)
    log = (run_dir / "train.log").read_text()
    assert "update 1: non-finite gradient norm (inf), loss " in log
    assert f"update {n + 1}" not in log


def fake_session(tmp_path: Path, scale: float | None) -> SimpleNamespace:
    """What Divergence reads: the state, the scaler (fp16 when `scale` is given), the run_dir."""
    scaler = SimpleNamespace(is_enabled=lambda: scale is not None, get_scale=lambda: scale)
    return SimpleNamespace(
        state=TrainState(), scaler=scaler, run_dir=tmp_path, saved_step=0, model=None
    )


@pytest.mark.parametrize(("scale", "counted"), [(None, True), (2.0**10, False), (0.5, True)])
def test_fp16_skips_count_only_once_the_scale_is_below_one(tmp_path, scale, counted):
    s, watch = fake_session(tmp_path, scale), divergence.Divergence()
    for _ in range(divergence.MAX_SKIPS_IN_A_ROW - 1):
        s.state.step += 1
        watch.after_update(s, ok=False)
    s.state.step += 1
    if counted:
        with pytest.raises(TranslatorError, match="the training has diverged"):
            watch.after_update(s, ok=False)
    else:
        watch.after_update(s, ok=False)
        assert watch.skips == 0


def test_skips_after_the_last_save_leave_it_to_resume_from(tmp_path):
    """last.pt saved before the last applied update holds other weights than those that failed."""
    s, watch = fake_session(tmp_path, None), divergence.Divergence()
    s.model, s.saved_step = torch.nn.Linear(2, 2), 2
    (tmp_path / "last.pt").write_bytes(b"")
    s.state.step = 3
    watch.after_update(s, ok=True)
    with pytest.raises(TranslatorError, match="last.pt keeps update 2: resume from it"):
        for step in range(4, 4 + divergence.MAX_SKIPS_IN_A_ROW):
            s.state.step = step
            watch.after_update(s, ok=False)


def test_an_applied_update_resets_the_count(tmp_path):
    s, watch = fake_session(tmp_path, None), divergence.Divergence()
    s.model = torch.nn.Linear(2, 2)
    for step in range(1, 2 * divergence.MAX_SKIPS_IN_A_ROW):
        s.state.step = step
        watch.after_update(s, ok=step == divergence.MAX_SKIPS_IN_A_ROW)  # one applied amid skips
    assert watch.skips == divergence.MAX_SKIPS_IN_A_ROW - 1


def test_a_validation_with_a_non_finite_loss_is_never_best(prepared, tmp_path, monkeypatch):
    results = iter([(math.nan, 5.0), (math.inf, 6.0), (2.0, 1.0)])  # (loss, BLEU)

    def validate(*args, **kwargs) -> Validation:
        loss, bleu = next(results)
        return Validation(loss, math.exp(min(loss, 50.0)), bleu, 10.0, "sig", [])

    monkeypatch.setattr(session, "validate", validate)
    run_dir = tmp_path / "run"
    loop.run(variant(prepared, run_dir, "train.eval_every=1", "train.max_updates=3"), quiet=True)
    best = checkpoint.read(run_dir / "best.pt")["state"]["train"]
    assert (best["step"], best["best_bleu"]) == (3, 1.0)
    assert re.search(
        r"BLEU 5.00, chrF 10.00, [0-9.]+ s \[sig\]; a non-finite loss: never best.pt",
        (run_dir / "train.log").read_text(),
    )
    # nor a step-N.pt, which `average --last N` would take
    assert sorted(p.name for p in run_dir.glob("step-*.pt")) == ["step-3.pt"]
