"""The loop's stopping rules, checkpoint retention, skipped-update accounting and data position."""

from __future__ import annotations

import copy
import importlib.machinery
import json
import math
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.train.conftest import variant
from tests.train.test_resume import interrupt_at
from translator import checkpoint
from translator.errors import TranslatorError
from translator.train import loop, session
from translator.train.batches import TrainBatches
from translator.train.distributed import Dist
from translator.train.metrics import Metrics
from translator.train.state import TrainState


def test_data_position_resumes_mid_epoch_and_rolls_into_the_next(prepared):
    cfg = variant(prepared, "unused", "train.max_tokens=8192")
    data, state = TrainBatches(cfg, Dist(torch.device("cpu"))), TrainState()
    per_epoch = len(data.epoch(0))
    data.take(state, per_epoch - 2)
    saved = copy.deepcopy(state)
    straight = data.take(state, 4)
    assert (state.epoch, state.batch_index) == (1, 2)
    again = TrainBatches(cfg, Dist(torch.device("cpu"))).take(saved, 4)
    for a, b in zip(straight, again):
        assert torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)
    # shuffled anew
    assert [b.tolist() for b in data.epoch(1)] != [b.tolist() for b in data.epoch(0)]


def test_positions_too_few_for_the_training_data_are_refused_before_training(prepared):
    longest = TrainBatches(prepared, Dist(torch.device("cpu")))
    need = int(max(longest.src.lengths.max(), longest.tgt.lengths.max())) + 1
    TrainBatches(
        variant(prepared, "unused", f"model.max_positions={need}"), Dist(torch.device("cpu"))
    )
    with pytest.raises(TranslatorError, match=f"up to {need} positions.*use at least {need}"):
        TrainBatches(
            variant(prepared, "unused", f"model.max_positions={need - 1}"),
            Dist(torch.device("cpu")),
        )


def test_an_update_stops_taking_batches_at_max_epochs(prepared):
    """With gradient accumulation an update may be shorter, never run into an epoch past it."""
    cfg = variant(prepared, "unused", "train.max_tokens=8192", "train.max_epochs=1")
    data, state = TrainBatches(cfg, Dist(torch.device("cpu"))), TrainState()
    per_epoch = len(data.epoch(0))
    assert len(data.take(state, per_epoch + 3)) == per_epoch
    assert (state.epoch, state.batch_index) == (1, 0)


def test_under_init_from_too_few_positions_ask_for_shorter_data(prepared):
    """The checkpoint fixes model.max_positions: the fix is data.max_tokens_per_side."""
    longest = TrainBatches(prepared, Dist(torch.device("cpu")))
    need = int(max(longest.src.lengths.max(), longest.tgt.lengths.max())) + 1
    cfg = variant(prepared, "unused", f"model.max_positions={need - 1}", "train.init_from=a.pt")
    with pytest.raises(
        TranslatorError,
        match=rf"data.max_tokens_per_side: .*up to {need} positions.*"
        rf"data.max_tokens_per_side={need - 2} or less",
    ) as err:
        TrainBatches(cfg, Dist(torch.device("cpu")))
    assert "use at least" not in str(err.value)


def test_pairs_wider_than_max_tokens_are_counted_and_logged(prepared, tmp_path):
    data = TrainBatches(variant(prepared, "unused"), Dist(torch.device("cpu")))
    width = np.maximum(data.src.lengths, data.tgt.lengths) + 1
    limit = int(np.median(width))
    cfg = variant(prepared, tmp_path / "run", f"train.max_tokens={limit}", "train.max_updates=1")
    over = int((width > limit).sum())
    assert TrainBatches(cfg, Dist(torch.device("cpu"))).over_max_tokens() == (over, width.max())
    loop.run(cfg, quiet=True)
    log = (tmp_path / "run" / "train.log").read_text()
    assert f"warning: {over:,} of {len(width):,} training pairs take more than " in log
    assert f"train.max_tokens={limit} tokens (the widest {width.max()})" in log
    assert data.over_max_tokens()[0] == 0  # at the default max_tokens


def test_max_epochs_keep_last_and_a_skipped_update(prepared, tmp_path, monkeypatch):
    """One epoch of ~6 updates; the second update's loss is made infinite, as an overflow would."""
    calls = []
    real = loop.loss_sums

    def overflow_on_second_update(net, batch, label_smoothing, rows=None):
        calls.append(1)
        loss, nll = real(net, batch, label_smoothing, rows)
        return (loss * float("inf"), nll) if len(calls) == 2 else (loss, nll)

    monkeypatch.setattr(loop, "loss_sums", overflow_on_second_update)
    run_dir = tmp_path / "run"
    cfg = variant(
        prepared,
        run_dir,
        "train.max_tokens=8192",
        "train.max_epochs=1",
        "train.max_updates=1000",
        "train.eval_every=2",
        "train.log_every=1",
        "train.keep_last=1",
    )
    loop.run(cfg, quiet=True)
    last = checkpoint.read(run_dir / "last.pt")["state"]["train"]
    per_epoch = len(TrainBatches(cfg, Dist(torch.device("cpu"))).epoch(0))
    assert (last["step"], last["epoch"], last["batch_index"]) == (per_epoch, 1, 0)
    assert last["skipped_steps"] == 1
    assert sorted(p.name for p in run_dir.glob("*.pt")) == [
        "best.pt",
        "last.pt",
        f"step-{last['step']}.pt",
    ]
    log = (run_dir / "train.log").read_text()
    assert (
        "update 2: non-finite loss (inf) and gradient norm (nan)" in log
        and "(1 skipped so far)" in log
    )
    assert f"stopped at update {last['step']} (max_epochs); 1 updates skipped" in log


@pytest.mark.parametrize(
    ("vendor", "features", "linears"),
    [
        ("AuthenticAMD", {"avx2", "avx512f"}, "oneDNN"),
        ("AuthenticAMD", {"avx2"}, "PyTorch's own kernels"),
        ("GenuineIntel", {"avx2", "avx512f"}, "PyTorch's own kernels"),
    ],
)
def test_the_log_names_the_fp32_linears_this_cpu_trains_with(
    prepared, tmp_path, monkeypatch, vendor, features, linears
):
    from translator.train import linear

    if not linear.onednn_fp32_available():
        pytest.skip("this PyTorch build has no oneDNN linear")
    monkeypatch.setattr(linear, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(linear, "cpu_features", lambda: features)
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, "train.precision=fp32", "train.max_updates=1")
    loop.run(cfg, quiet=True)
    log = (run_dir / "train.log").read_text()
    assert f"fp32 linears through {linears}" in log


def test_early_stopping_after_patience_validations_without_gain(prepared, tmp_path):
    run_dir = tmp_path / "run"
    cfg = variant(
        prepared,
        run_dir,
        "train.lr=0.0",
        "train.eval_every=1",
        "train.patience=2",
        "train.max_updates=50",
    )
    loop.run(cfg, quiet=True)
    state = checkpoint.read(run_dir / "last.pt")["state"]["train"]
    # update 1 sets the best; 2 and 3 do not beat it
    assert state["step"] == 3 and state["bad_evals"] == 2
    loop.run(cfg, quiet=True)  # the same command again: the run is done, as after max_updates
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 3
    log = (run_dir / "train.log").read_text()
    assert log.count("stopped at update 3 (early stopping)") == 2
    assert log.count("updates skipped; to train on, raise train.patience (the run resumes)") == 2
    loop.run(variant(prepared, run_dir, "train.patience=3", "train.max_updates=4"), quiet=True)
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 4  # as it said
    assert log.count("session started 20") == 2  # each session's times count from its own start
    assert (
        json.loads((run_dir / "manifest.json").read_text())["sessions"][0]["end_reason"]
        == "early stopping"
    )


def test_time_limit_validates_saves_and_stops(prepared, tmp_path):
    run_dir = tmp_path / "run"
    loop.run(
        variant(prepared, run_dir, "train.max_minutes=1e-6", "train.max_updates=50"), quiet=True
    )
    state = checkpoint.read(run_dir / "last.pt")["state"]["train"]
    assert state["step"] == 1 and state["last_valid_step"] == 1
    assert (
        json.loads((run_dir / "manifest.json").read_text())["sessions"][0]["end_reason"]
        == "max_minutes"
    )


def test_cosine_with_a_time_budget_decays_to_its_end_and_not_before_warm_up(
    prepared, tmp_path, monkeypatch
):
    """Updates cannot end this run (max_updates is far away): the budget's minutes must. The
    loop's clock is made to advance one second per update, so the schedule is deterministic."""
    seen = []
    real = loop.learning_rate
    start = loop.time.time()

    def recording(step, cfg, time_progress=0.0):
        seen.append((step, time_progress))
        return real(step, cfg, time_progress)

    monkeypatch.setattr(loop, "learning_rate", recording)
    monkeypatch.setattr(loop, "time", SimpleNamespace(time=lambda: start + len(seen)))
    ends = []  # where the progress bar expects the run to end
    monkeypatch.setattr(Metrics, "expect_total", lambda self, updates: ends.append(updates))
    run_dir = tmp_path / "run"
    overrides = ["train.schedule=cosine", "train.warmup_steps=3", "train.max_updates=100000"]
    budget = ("train.max_minutes=0.5", "train.eval_every=1000")  # validated at the end only
    loop.run(variant(prepared, run_dir, *overrides, *budget), quiet=True)
    assert ends and all(29 <= end <= 32 for end in ends)  # the budget's ~30 updates, not 100,000
    # updates 1-3 warm up (the third starts the decay at its peak); the decay then has 28 of
    # the 30 seconds, and the update that starts at the deadline (not yet past it) is the last
    progress = [p for _, p in seen]
    assert len(seen) == 31 and progress[:3] == [0, 0, 0]
    assert progress[3:] == pytest.approx([k / 28 for k in range(1, 29)])
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["warmup_end_seconds"] == 2
    # without a time budget the schedule stays a function of the update number
    seen.clear()
    loop.run(variant(prepared, tmp_path / "counted", *overrides[:2], "train.max_updates=8"), True)
    assert [p for _, p in seen] == [0] * 8


def test_the_time_budget_counts_every_session_of_a_run(prepared, tmp_path, monkeypatch):
    """max_minutes is the run's, not each session's: interrupted at update 10 and resumed, a cosine
    run gets the uninterrupted run's learning rates and stops at its update; run again, a finished
    run trains nothing, and a raised budget trains on. One fake second per update, as above."""
    seen = []
    real = loop.learning_rate
    start = loop.time.time()
    clock = SimpleNamespace(time=lambda: start + len(seen))  # the loop's and the saves' clock

    def recording(step, cfg, time_progress=0.0):
        seen.append((step, time_progress))
        return real(step, cfg, time_progress)

    monkeypatch.setattr(loop, "learning_rate", recording)
    monkeypatch.setattr(loop, "time", clock)
    monkeypatch.setattr(session, "time", clock)
    settings = ["train.schedule=cosine", "train.warmup_steps=3", "train.max_updates=100000"]
    settings += ["diagnostics.enabled=false", "train.max_minutes=0.5", "train.eval_every=1000"]
    loop.run(variant(prepared, tmp_path / "straight", *settings), quiet=True)
    straight, _ = list(seen), seen.clear()
    run_dir = tmp_path / "resumed"
    with pytest.MonkeyPatch.context() as interrupting:
        interrupt_at(interrupting, 10)
        with pytest.raises(SystemExit):
            loop.run(variant(prepared, run_dir, *settings), quiet=True)
    loop.run(variant(prepared, run_dir, *settings), quiet=True)
    assert len(straight) == 31 and seen == straight  # where the schedule was, and where it ended
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 31
    seen.clear()
    loop.run(variant(prepared, run_dir, *settings), quiet=True)  # the same command again
    assert (
        seen == [] and "stopped at update 31 (max_minutes)" in (run_dir / "train.log").read_text()
    )
    loop.run(variant(prepared, run_dir, *settings[:-2], "train.max_minutes=0.6"), quiet=True)
    assert len(seen) > 3 and seen[0][0] == 32  # 6 more minutes' seconds, continuing at update 32


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_auto_precision_run_logs_memory_and_resumes(prepared, tmp_path):
    """bf16 (or fp16 with a scaler) on CUDA, then 2 more updates from last.pt with the CUDA RNG
    restored."""
    run_dir = tmp_path / "run"
    loop.run(
        variant(
            prepared,
            run_dir,
            "train.precision=auto",
            "train.device=cuda",
            "train.max_updates=4",
            "train.log_every=1",
            "model.gradient_checkpointing=true",
        ),
        quiet=True,
    )
    loop.run(
        variant(
            prepared,
            run_dir,
            "train.precision=auto",
            "train.device=cuda",
            "train.max_updates=6",
            "train.log_every=1",
        ),
        quiet=True,
    )
    payload = checkpoint.read(run_dir / "last.pt")
    assert (
        payload["state"]["train"]["step"] == 6 and payload["state"]["train"]["skipped_steps"] == 0
    )
    assert payload["state"]["train"]["rng"][0]["cuda"] is not None  # this device's state
    log = (run_dir / "train.log").read_text()
    assert "gpu_mem_gb" in log and "precision torch.float32" not in log


def test_manifest_tells_the_last_saved_update_after_a_failed_save(prepared, tmp_path, monkeypatch):
    from translator.train import session

    real, calls = session.save_checkpoints, []

    def disk_full_on_second_save(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(*args, **kwargs)

    monkeypatch.setattr(session, "save_checkpoints", disk_full_on_second_save)
    run_dir = tmp_path / "run"
    with pytest.raises(OSError):
        loop.run(
            variant(prepared, run_dir, "train.eval_every=1", "train.max_updates=5"), quiet=True
        )
    (record,) = json.loads((run_dir / "manifest.json").read_text())["sessions"]
    assert (record["last_update"], record["saved_update"], record["end_reason"]) == (2, 1, "error")
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 1


def test_loss_sums_are_the_smoothed_cross_entropy_and_the_plain_nll_over_non_pad_tokens():
    from translator.data.batching import make_batch

    torch.manual_seed(0)
    batch = make_batch([[5, 6], [7]], [[8, 9, 10], [11]])  # the second target is padded
    logits = torch.randn(*batch.tgt_in.shape, 20)
    eps = 0.1
    # a model's logits for the positions asked for (Transformer.forward's `rows`)
    loss, nll = loop.loss_sums(
        lambda src, tgt_in, src_mask, rows: logits.flatten(0, 1)[rows], batch, eps
    )
    log_probs = logits.log_softmax(-1)
    expected_loss, expected_nll = 0.0, 0.0
    for (b, t), target in zip(
        torch.cartesian_prod(*map(torch.arange, batch.tgt_out.shape)).tolist(),
        batch.tgt_out.flatten().tolist(),
    ):
        if target == 0:  # PAD
            continue
        expected_nll -= log_probs[b, t, target].item()
        expected_loss -= (1 - eps) * log_probs[b, t, target].item() + eps * log_probs[
            b, t
        ].mean().item()
    assert (batch.tgt_out != 0).sum() == 6  # targets + EOS; the padding is skipped
    torch.testing.assert_close(nll.item(), expected_nll, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss.item(), expected_loss, rtol=1e-5, atol=1e-5)


def test_best_checkpoint_keeps_the_update_with_the_highest_bleu(prepared, tmp_path, monkeypatch):
    from translator.train import session
    from translator.train.validate import Validation

    bleus = iter([30.0, 20.0, 25.0])  # the best validation is the first
    monkeypatch.setattr(
        session, "validate", lambda *a, **k: Validation(1.0, math.e, next(bleus), 50.0, "sig", [])
    )
    run_dir = tmp_path / "run"
    loop.run(variant(prepared, run_dir, "train.eval_every=1", "train.max_updates=3"), quiet=True)
    assert checkpoint.read(run_dir / "best.pt")["state"]["train"]["step"] == 1
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 3


def test_at_equal_bleu_the_lower_valid_loss_makes_best_pt(prepared, tmp_path, monkeypatch):
    """BLEU 0.00 at every validation (single-token outputs have no 4-grams): best.pt follows the
    valid loss instead of keeping the first model; a higher loss at equal BLEU does not win."""
    from translator.train import session
    from translator.train.validate import Validation

    results = iter([(0.9, 0.0), (0.1, 0.0), (0.5, 0.0), (2.0, 1.0)])  # (loss, BLEU)

    def validation(*args, **kwargs) -> Validation:
        loss, bleu = next(results)
        return Validation(loss, math.e, bleu, 50.0, "sig", [])

    monkeypatch.setattr(session, "validate", validation)
    run_dir = tmp_path / "run"
    loop.run(variant(prepared, run_dir, "train.eval_every=1", "train.max_updates=3"), quiet=True)
    assert checkpoint.read(run_dir / "best.pt")["state"]["train"]["step"] == 2
    state = checkpoint.read(run_dir / "last.pt")["state"]["train"]
    assert (state["best_loss"], state["bad_evals"]) == (0.1, 1)
    loop.run(variant(prepared, run_dir, "train.eval_every=1", "train.max_updates=4"), quiet=True)
    assert checkpoint.read(run_dir / "best.pt")["state"]["train"]["step"] == 4  # BLEU decides


def test_patience_counts_validations_in_a_row_without_gain(prepared, tmp_path, monkeypatch):
    from translator.train import session
    from translator.train.validate import Validation

    bleus = iter([10.0, 5.0, 20.0, 15.0, 30.0, 25.0])  # never two validations in a row without gain
    monkeypatch.setattr(
        session, "validate", lambda *a, **k: Validation(1.0, math.e, next(bleus), 50.0, "sig", [])
    )
    run_dir = tmp_path / "run"
    loop.run(
        variant(prepared, run_dir, "train.eval_every=1", "train.patience=2", "train.max_updates=6"),
        quiet=True,
    )
    state = checkpoint.read(run_dir / "last.pt")["state"]["train"]
    assert (state["step"], state["bad_evals"]) == (6, 1)


def test_keep_last_keeps_the_newest_numbered_checkpoints(tmp_path, monkeypatch):
    from pathlib import Path

    from translator import config
    from translator.train import state as train_state

    def save(path, model, cfg, tokenizer, payload, follow_link):  # the file says its update
        # replaced, as checkpoint.save's atomic write does: the links keep the earlier updates
        Path(f"{path}.tmp").write_text(str(payload["step"]))
        Path(f"{path}.tmp").replace(path)

    monkeypatch.setattr(train_state.checkpoint, "save", save)
    cfg = config.load(None, ["train.keep_last=2"])
    for step in range(7, 13):  # across the 9 -> 10 digit boundary
        train_state.save_checkpoints(tmp_path, None, cfg, None, {"step": step}, step, step == 9)
    assert sorted(p.name for p in tmp_path.glob("step-*.pt")) == ["step-11.pt", "step-12.pt"]
    held = {name: (tmp_path / name).read_text() for name in ("last.pt", "step-12.pt", "best.pt")}
    assert held == {"last.pt": "12", "step-12.pt": "12", "best.pt": "9"}


def test_each_process_has_its_own_dropout_stream_and_the_same_initial_weights(
    prepared, tmp_path, monkeypatch
):
    from translator.train import distributed, startup

    # no process group: DDP is not the point (nor waiting for rank 0: the data is prepared)
    monkeypatch.setattr(distributed, "wrap", lambda model, d: model)
    monkeypatch.setattr(distributed, "main_first", lambda d, work, what: work())
    monkeypatch.setattr(startup, "agree_to_resume", lambda d, last: last.is_file())
    draws, weights = [], []
    for rank in range(2):
        monkeypatch.setattr(
            distributed, "init", lambda device, rank=rank: Dist(torch.device("cpu"), rank, 2)
        )
        s = startup.setup(variant(prepared, tmp_path / "run"), quiet=True)
        s.metrics.close()
        draws.append(torch.rand(16))
        weights.append(s.model.state_dict())
    assert not torch.equal(draws[0], draws[1])
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


@pytest.mark.parametrize(
    ("argv", "spec", "command"),
    [
        (
            ["/x/translator/__main__.py", "train", "a b.yaml"],
            "translator.__main__",  # python -m translator
            "python -m translator train 'a b.yaml'",
        ),
        (  # torchrun runs the file as a script: no module spec
            ["/x/translator/__main__.py", "train", "a.yaml"],
            None,
            "python -m translator train a.yaml",
        ),
        (
            ["/x/translator/recipe/__main__.py", "b.yaml", "--members", "2"],
            "translator.recipe.__main__",
            "python -m translator.recipe b.yaml --members 2",
        ),
        (["/venv/bin/translator", "train", "c.yaml"], None, "translator train c.yaml"),
    ],
)
def test_the_manifest_records_a_command_one_can_type_again(monkeypatch, argv, spec, command):
    """(Whatever runs the test: the process's own __main__ is replaced, as its argv is.)"""
    from translator.train import manifest

    main = types.ModuleType("__main__")
    main.__spec__ = None if spec is None else importlib.machinery.ModuleSpec(spec, None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(manifest.sys, "argv", argv)
    assert manifest.command_line() == command
