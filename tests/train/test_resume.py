"""Exact resume: stopped by SIGINT at update 2 and resumed == uninterrupted, bit for bit, dropout
on."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import other_vocabulary
from tests.train.conftest import variant
from translator import averaging, checkpoint, config
from translator.errors import TranslatorError
from translator.train import loop
from translator.train.metrics import Metrics

BY_SECONDS = "tensorboard/by_seconds"  # the events whose step is training seconds
SETTINGS = (
    "model.dropout=0.1",
    "train.max_tokens=512",
    "train.grad_accum_steps=2",
    "train.log_every=1",
    "train.max_updates=6",
    "train.eval_every=3",
    "train.keep_last=5",  # every step-N.pt stays, to be compared
)


def interrupt_at(monkeypatch, step: int, sig: signal.Signals = signal.SIGINT) -> None:
    """Send ourselves `sig` right after update `step`, once, as Ctrl-C (or `kill`) would."""
    advance = Metrics.advance
    fired = []

    def advance_then_signal(self, at, status):
        advance(self, at, status)
        if at == step and not fired:
            fired.append(at)
            signal.raise_signal(sig)

    monkeypatch.setattr(Metrics, "advance", advance_then_signal)


def scalars(run_dir, tag: str, folder: str = "tensorboard") -> list[tuple[int, float]]:
    """Every point of `tag` TensorBoard shows (purged ones left out), in the order logged."""
    events = EventAccumulator(str(run_dir / folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


@pytest.fixture(scope="module")
def runs(prepared, tmp_path_factory):
    """An uninterrupted run and one interrupted at update 2 and then resumed, in their own run
    dirs."""
    root = tmp_path_factory.mktemp("resume")
    loop.run(variant(prepared, root / "straight", *SETTINGS), quiet=True)
    with pytest.MonkeyPatch.context() as monkeypatch:
        interrupt_at(monkeypatch, 2)
        with pytest.raises(SystemExit) as stopped:  # saved, and the shell sees an interruption
            loop.run(variant(prepared, root / "resumed", *SETTINGS), quiet=True)
        assert stopped.value.code == 128 + signal.SIGINT
    stopped = checkpoint.read(root / "resumed" / "last.pt")
    loop.run(variant(prepared, root / "resumed", *SETTINGS), quiet=True)
    return root / "straight", root / "resumed", stopped


def test_interrupt_saves_a_resumable_checkpoint(runs):
    _, resumed, stopped = runs
    state = stopped["state"]
    assert state["train"]["step"] == 2 and state["train"]["batch_index"] == 4
    assert set(state) >= {"optimizer", "scaler", "scheduler", "train"}
    assert set(state["train"]["rng"][0]) == {"python", "numpy", "torch", "cuda"}
    assert stopped["tokenizer"]["sha256"] and stopped["config"]["train"]["max_updates"] == 6
    sessions = json.loads((resumed / "manifest.json").read_text())["sessions"]
    assert [s["end_reason"] for s in sessions] == ["interrupted", "max_updates"]
    assert [(s["first_update"], s["last_update"], s["saved_update"]) for s in sessions] == [
        (0, 2, 2),
        (2, 6, 6),
    ]


def test_an_interrupt_saves_last_pt_alone_so_averaging_sees_the_same_checkpoints(runs):
    # step-N.pt are the validated updates (3 and 6) that `average --last N` takes; the update the
    # interrupt came at (2) is in last.pt only, as if the run had not been interrupted
    straight, resumed, _ = runs
    steps = [sorted(p.name for p in run.glob("step-*.pt")) for run in (straight, resumed)]
    assert steps[0] == steps[1] == ["step-3.pt", "step-6.pt"]


def test_resumed_run_equals_uninterrupted_bit_for_bit(runs):
    straight, resumed, _ = runs
    a, b = checkpoint.read(straight / "last.pt"), checkpoint.read(resumed / "last.pt")
    assert a["state"]["train"]["step"] == b["state"]["train"]["step"] == 6
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for index, slots in a["state"]["optimizer"]["state"].items():
        for slot, tensor in slots.items():
            assert torch.equal(tensor, b["state"]["optimizer"]["state"][index][slot]), (index, slot)


class Killed(Exception):
    """A kill that no handler sees (SIGKILL, a preempted machine): nothing is saved on the way."""


def test_save_every_leaves_a_resumable_last_pt_between_validations(runs, prepared, tmp_path):
    straight, _, _ = runs
    run_dir = tmp_path / "killed"
    settings = (*SETTINGS, "train.save_every=2")  # saves at 2 and 4; validations at 3 and 6
    advance = Metrics.advance

    def advance_then_die(self, at, status):
        advance(self, at, status)
        if at == 5:
            raise Killed

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(Metrics, "advance", advance_then_die)
        with pytest.raises(Killed):
            loop.run(variant(prepared, run_dir, *settings), quiet=True)
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 4
    # the unvalidated saves are no candidates for averaging
    assert sorted(p.name for p in run_dir.glob("step-*.pt")) == ["step-3.pt"]
    loop.run(variant(prepared, run_dir, *settings), quiet=True)
    a, b = checkpoint.read(straight / "last.pt"), checkpoint.read(run_dir / "last.pt")
    assert b["state"]["train"]["step"] == 6
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_resumed_run_logs_the_same_losses(runs):
    straight, resumed, _ = runs
    for tag in (
        "train/loss",
        "train/ppl",
        "train/lr",
        "train/grad_norm",
        "valid/loss",
        "valid/bleu",
    ):
        assert scalars(straight, tag) == scalars(resumed, tag), tag
    assert [step for step, _ in scalars(resumed, "train/loss")] == [1, 2, 3, 4, 5, 6]


def test_tensorboard_holds_the_issue_s_metrics(runs):
    straight, _, _ = runs
    events = EventAccumulator(str(straight / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tags = events.Tags()
    for name in ("loss", "nll_loss", "ppl", "lr", "grad_norm", "tokens_per_s", "skipped_steps"):
        assert f"train/{name}" in tags["scalars"], name
    for name in ("loss", "ppl", "bleu", "chrf"):
        assert [step for step, _ in scalars(straight, f"valid/{name}")] == [3, 6], name
    assert (
        "valid/samples/text_summary" in tags["tensors"] and "config/text_summary" in tags["tensors"]
    )
    sample = events.Tensors("valid/samples/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "**source:** " in sample and "**reference:** " in sample
    assert "_hparams_/experiment" in tags["tensors"] + list(events.summary_metadata)
    log = (straight / "train.log").read_text()
    assert "BLEU" in log and "nrefs:1|case:mixed" in log  # the sacreBLEU signature


def test_valid_bleu_is_also_logged_against_training_seconds(runs):
    straight, resumed, stopped = runs
    for run_dir in (straight, resumed):
        by_time = scalars(run_dir, "valid/bleu_vs_seconds", BY_SECONDS)
        assert [v for _, v in by_time] == [v for _, v in scalars(run_dir, "valid/bleu")]
        steps = [step for step, _ in by_time]
        assert steps == sorted(steps) and steps[0] >= 0
    # the clock is saved with the state and continues from it: the time between sessions is left out
    before = stopped["state"]["train"]["seconds"]
    after = checkpoint.read(resumed / "last.pt")["state"]["train"]["seconds"]
    second_session = json.loads((resumed / "manifest.json").read_text())["sessions"][1]
    assert 0 < before <= after <= before + second_session["seconds"] + 0.1
    by_time = scalars(resumed, "valid/bleu_vs_seconds", BY_SECONDS)
    assert all(step >= int(before) for step, _ in by_time)


def test_resume_refuses_another_architecture(runs, prepared):
    straight, _, _ = runs
    with pytest.raises(TranslatorError, match=r"architecture differs.*model.d_model: 64 -> 32"):
        loop.run(
            variant(prepared, straight, *SETTINGS, "model.d_model=32", "train.max_updates=7"),
            quiet=True,
        )


def test_resume_refuses_another_tokenizer(runs, prepared, tmp_path):
    straight, _, _ = runs
    payload = checkpoint.read(straight / "last.pt")
    other_vocabulary(payload)
    (tmp_path / "run").mkdir()
    torch.save(checkpoint.seal(payload), tmp_path / "run" / "last.pt")
    with pytest.raises(TranslatorError, match="different tokenizer"):
        loop.run(variant(prepared, tmp_path / "run", *SETTINGS, "train.max_updates=7"), quiet=True)


def test_resume_allows_training_only_model_changes(runs, prepared, tmp_path):
    """Dropout and gradient checkpointing do not change the parameters, so a run may switch them."""
    straight, _, _ = runs
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.pt").write_bytes((straight / "last.pt").read_bytes())
    model = loop.run(
        variant(
            prepared,
            tmp_path / "run",
            *SETTINGS,
            "model.dropout=0.0",
            "model.gradient_checkpointing=true",
            "train.max_updates=7",
            "train.eval_every=100",
        ),
        quiet=True,
    )
    assert checkpoint.read(tmp_path / "run" / "last.pt")["state"]["train"]["step"] == 7
    assert model.cfg.gradient_checkpointing


def test_resume_says_when_batch_order_settings_changed(runs, prepared, tmp_path):
    straight, resumed, _ = runs
    # same settings: nothing to say
    assert "resuming with settings changed" not in (resumed / "train.log").read_text()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.pt").write_bytes((straight / "last.pt").read_bytes())
    loop.run(
        variant(
            prepared,
            tmp_path / "run",
            *SETTINGS,
            "train.max_tokens=256",
            "train.max_updates=7",
            "train.eval_every=100",
        ),
        quiet=True,
    )
    log = (tmp_path / "run" / "train.log").read_text()
    assert (
        "train.max_tokens: 512 -> 256, train.max_updates: 6 -> 7, train.eval_every: 3 -> 100; "
        "train.max_tokens cuts and shuffles the epoch's batches: the rest of this epoch's batches "
        "differ from the uninterrupted run's (not bit-exact)"
    ) in log


def test_a_corrupt_last_checkpoint_says_how_to_go_on(prepared, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "last.pt").write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(TranslatorError) as refused:
        loop.run(variant(prepared, run, *SETTINGS), quiet=True)
    assert refused.value.what.startswith("cannot resume: not a readable checkpoint")
    assert refused.value.fix == "start over in a new train.run_dir"  # nothing else to resume from
    (run / "step-2.pt").write_bytes(b"another file")  # a file of its own: named
    os.link(run / "last.pt", run / "best.pt")  # a hard link: shares the damage, not named
    with pytest.raises(TranslatorError) as refused:
        loop.run(variant(prepared, run, *SETTINGS), quiet=True)
    assert refused.value.fix.startswith("remove it, then copy step-2.pt (a file of its own)")


def test_a_run_dir_with_checkpoints_but_no_last_pt_is_refused_untouched(prepared, tmp_path):
    """E.g. after deleting an unreadable last.pt: starting at update 0 there would prune the old
    run's step files, overwrite its best.pt and mix its events with the new run's."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("step-3.pt", "step-6.pt", "best.pt"):
        (run_dir / name).write_bytes(name.encode())
    with pytest.raises(TranslatorError) as refused:
        loop.run(variant(prepared, run_dir, *SETTINGS), quiet=True)
    assert refused.value.what == (
        "holds an earlier run's checkpoints (step-3.pt, step-6.pt, best.pt) "
        "but no last.pt to resume"
    )
    assert refused.value.where == str(run_dir) and "another train.run_dir" in refused.value.fix
    assert sorted(p.name for p in run_dir.iterdir()) == ["best.pt", "step-3.pt", "step-6.pt"]
    assert (run_dir / "best.pt").read_bytes() == b"best.pt"


def test_a_kill_inside_the_first_save_leaves_a_run_that_resumes(prepared, tmp_path, monkeypatch):
    """Killed after the checkpoint is written but before its other names are linked: the run dir
    must not look like an earlier run's (checkpoints without last.pt), which a start refuses."""
    from translator.train import state

    def killed(src, dst):
        raise KeyboardInterrupt  # as SIGKILL would stop it: nothing after runs

    run_dir = tmp_path / "run"
    with pytest.MonkeyPatch.context() as killing:
        killing.setattr(state, "_link", killed)
        with pytest.raises(SystemExit):  # the loop's answer to a Ctrl-C it did not ask for: 130
            loop.run(variant(prepared, run_dir, *SETTINGS), quiet=True)
    assert [p.name for p in run_dir.glob("*.pt")] == ["last.pt"]
    loop.run(variant(prepared, run_dir, *SETTINGS), quiet=True)
    assert "resumed from" in (run_dir / "train.log").read_text()
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 6


def test_a_fresh_start_hides_the_events_of_an_earlier_attempt(prepared, tmp_path):
    """Killed before its first checkpoint (its events written, no .pt): the rerun starts at update
    0, and TensorBoard shows its curves once, not the two attempts one after the other."""
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, *SETTINGS)
    loop.run(cfg, quiet=True)
    for path in run_dir.glob("*.pt"):  # as if the first attempt had never saved
        path.unlink()
    loop.run(cfg, quiet=True)
    assert [step for step, _ in scalars(run_dir, "train/loss")] == [1, 2, 3, 4, 5, 6]
    assert len(scalars(run_dir, "valid/bleu_vs_seconds", BY_SECONDS)) == 2


def test_a_resume_keeps_the_seconds_curve_up_to_the_save(prepared, tmp_path, monkeypatch):
    """valid/bleu_vs_seconds's steps are seconds: a resume from update 3 must hide its points after
    the save's seconds, not after "step 4". A fake clock makes each update 100 s, so the points'
    seconds are far above their update numbers."""
    from types import SimpleNamespace

    from translator.train import session

    calls = []
    start = loop.time.time()
    clock = SimpleNamespace(time=lambda: start + 100 * len(calls))
    real = loop.learning_rate
    monkeypatch.setattr(loop, "learning_rate", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(loop, "time", clock)
    monkeypatch.setattr(session, "time", clock)
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, *SETTINGS, "diagnostics.enabled=false")
    loop.run(cfg, quiet=True)
    first = scalars(run_dir, "valid/bleu_vs_seconds", BY_SECONDS)
    assert [step for step, _ in first] == [300, 600]
    (run_dir / "last.pt").write_bytes((run_dir / "step-3.pt").read_bytes())  # killed after 6
    calls[3:] = []  # the clock as it was at update 3's save
    loop.run(cfg, quiet=True)
    assert scalars(run_dir, "valid/bleu_vs_seconds", BY_SECONDS) == first


def test_sigterm_saves_and_stops_like_ctrl_c(prepared, tmp_path, monkeypatch):
    interrupt_at(monkeypatch, 2, signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        loop.run(variant(prepared, tmp_path / "run", *SETTINGS), quiet=True)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert checkpoint.read(tmp_path / "run" / "last.pt")["state"]["train"]["step"] == 2
    assert "stopped at update 2 (interrupted)" in (tmp_path / "run" / "train.log").read_text()


def test_logged_perplexity_is_that_of_the_unsmoothed_loss(runs):
    straight, _, _ = runs
    nll, ppl, loss = (
        dict(scalars(straight, f"train/{name}")) for name in ("nll_loss", "ppl", "loss")
    )
    assert nll.keys() == ppl.keys() == loss.keys() and nll
    for step in nll:
        assert ppl[step] == pytest.approx(math.exp(nll[step]), rel=1e-4)
        assert nll[step] < loss[step]  # label smoothing (0.1) puts the training loss above the NLL


def test_resume_with_another_process_count_skips_the_same_share_of_the_epoch(
    runs, prepared, tmp_path
):
    from translator.train import startup

    _, _, stopped = runs  # 2 updates x 2 batches by 1 process
    payload = copy.deepcopy(stopped)
    payload["state"]["train"]["world_size"] = 2  # as if 2 processes had each taken 4 batches
    payload["state"]["train"]["rng"] *= 2
    (tmp_path / "run").mkdir()
    torch.save(checkpoint.seal(payload), tmp_path / "run" / "last.pt")
    s = startup.setup(variant(prepared, tmp_path / "run", *SETTINGS), quiet=True)
    s.metrics.close()
    assert (s.state.step, s.state.epoch, s.state.batch_index) == (2, 0, 8)
    log = (tmp_path / "run" / "train.log").read_text()
    assert "resuming with 1 processes instead of 2" in log
    assert "an update now holds 1/2 of the tokens it held (train.max_tokens and" in log


def test_a_checkpoint_from_before_later_counters_resumes(runs, prepared, tmp_path):
    """A format-1 last.pt (no checksums) whose training state predates the counters added since:
    they start from their defaults instead of stopping the resume."""
    straight, _, _ = runs
    payload = checkpoint.read(straight / "last.pt")
    for later in ("seconds", "warmup_end_seconds", "best_step", "oom_splits", "oom_skipped"):
        del payload["state"]["train"][later]
    del payload["sha256"]
    payload["format"] = 1
    (tmp_path / "run").mkdir()
    torch.save(payload, tmp_path / "run" / "last.pt")
    loop.run(variant(prepared, tmp_path / "run", *SETTINGS, "train.max_updates=7"), quiet=True)
    assert checkpoint.read(tmp_path / "run" / "last.pt")["state"]["train"]["step"] == 7


def test_a_last_pt_from_a_newer_translator_is_not_called_damaged(runs, prepared, tmp_path):
    straight, _, _ = runs
    payload = checkpoint.read(straight / "last.pt")
    payload["format"] = checkpoint.FORMAT + 1
    (tmp_path / "run").mkdir()
    torch.save(payload, tmp_path / "run" / "last.pt")
    with pytest.raises(TranslatorError) as refused:
        loop.run(variant(prepared, tmp_path / "run", *SETTINGS), quiet=True)
    assert refused.value.what.startswith("cannot resume: written by a newer translator")
    assert refused.value.fix.startswith("upgrade translator")  # not: remove it


def test_resume_from_weights_only_is_refused_in_one_line(runs, prepared, tmp_path):
    straight, _, _ = runs
    (tmp_path / "run").mkdir()
    # no optimizer state, as average writes
    averaging.average([straight / "last.pt"], tmp_path / "run" / "last.pt")
    with pytest.raises(TranslatorError, match="holds no training state"):
        loop.run(variant(prepared, tmp_path / "run", *SETTINGS), quiet=True)
    # refused before the log and the events are opened: nothing left behind
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["last.pt"]


def test_a_resume_after_a_kill_hides_the_updates_logged_past_the_last_save(prepared, tmp_path):
    """A kill after update 6 with last.pt at update 3 (step-3.pt put back as last.pt): updates 4-6
    are trained and logged again, and TensorBoard shows each once, the later ones."""
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, *SETTINGS, "train.keep_last=5")
    loop.run(cfg, quiet=True)
    (run_dir / "last.pt").write_bytes((run_dir / "step-3.pt").read_bytes())
    first = dict(scalars(run_dir, "train/lr"))
    loop.run(cfg, quiet=True)
    logged = scalars(run_dir, "train/lr")
    assert [step for step, _ in logged] == [1, 2, 3, 4, 5, 6]
    assert dict(logged) == first  # the same schedule: the values are the resumed session's own


def test_a_killed_session_is_on_record_to_its_last_save(prepared, tmp_path):
    # SIGKILL runs no clean-up: manifest.json must already say what last.pt holds and the time
    import os
    import subprocess
    import sys
    import time

    from tests.conftest import REPO, tiny_overrides

    run_dir = tmp_path / "run"
    overrides = [
        *tiny_overrides(Path(prepared.data.data_dir), run_dir, prepared.data.source),
        "train.max_updates=100000",
    ]
    command = [sys.executable, "-m", "translator", "train", str(REPO / "configs" / "tiny.yaml")]
    for override in [*overrides, "train.precision=fp32", "train.eval_every=2", "train.keep_last=0"]:
        command += ["--set", override]
    trainer = subprocess.Popen([*command, "-q"], env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.time() + 120
        while not (run_dir / "last.pt").is_file() or "update 6:" not in _log(run_dir):
            assert trainer.poll() is None and time.time() < deadline, "no checkpoint came"
            time.sleep(0.1)
    finally:
        trainer.kill()
        trainer.wait()
    saved = checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"]
    (session,) = json.loads((run_dir / "manifest.json").read_text())["sessions"]
    # a kill between last.pt's rename and the manifest's write leaves it one save (2 updates)
    # behind: a narrow window, but a test must not fail by its timing
    assert session["end_reason"] is None and session["saved_update"] in (saved, saved - 2)
    assert saved >= 4 and session["last_update"] == session["saved_update"]
    assert session["seconds"] > 0


def _log(run_dir) -> str:
    path = run_dir / "train.log"
    return path.read_text() if path.is_file() else ""


def test_each_session_of_the_log_opens_with_session_started(prepared, tmp_path):
    """What a resume says about itself (the temporary files it removed, the checkpoint it resumed
    from) belongs to the new session, not to the end of the last. (An init_from a fine-tuning
    resume does not load: tests/train/test_init_from.py.)"""
    run_dir = tmp_path / "run"
    loop.run(variant(prepared, run_dir, *SETTINGS), quiet=True)
    (run_dir / ".last.pt.tmp").write_bytes(b"a save cut short")
    loop.run(variant(prepared, run_dir, *SETTINGS, "train.max_updates=7"), quiet=True)
    # "[   12s] message": the time stamp counts from the session's start
    lines = [line.split("] ", 1)[1] for line in (run_dir / "train.log").read_text().splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("session started ")]
    assert len(starts) == 2 and starts[0] == 0
    assert lines[starts[1] - 1].startswith("stopped at update 6 (max_updates)")
    second = lines[starts[1] :]
    for said in ("removed 1 temporary files", "resumed from"):
        assert any(line.startswith(said) for line in second), said


def _signalled_twice_at_update_4(prepared, run_dir, signum) -> int:
    """SETTINGS' run with `signum` raised twice as update 4 is reached -> its exit code."""
    advance, sent = Metrics.advance, []

    def advance_then_signal_twice(self, at, status):
        advance(self, at, status)
        if at == 4 and not sent:  # after update 3's validation and save
            sent.append(at)
            signal.raise_signal(signum)
            signal.raise_signal(signum)

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(Metrics, "advance", advance_then_signal_twice)
        with pytest.raises(SystemExit) as stopped:
            loop.run(variant(prepared, run_dir, *SETTINGS), quiet=True)
    return stopped.value.code


def test_a_second_ctrl_c_stops_at_once_and_says_what_last_pt_holds(prepared, tmp_path, capfd):
    """The first Ctrl-C asks for a save after the update; a second one, before it comes, stops
    without saving: the run must say so, and which update a rerun resumes from."""
    run_dir = tmp_path / "run"
    # 130, as an interrupted program exits
    assert _signalled_twice_at_update_4(prepared, run_dir, signal.SIGINT) == 130
    said = f"stopped at once by a second Ctrl-C: update 4 not saved; {run_dir / 'last.pt'} holds "
    said += "update 3 (rerun to resume from there)"
    err = capfd.readouterr().err.splitlines()  # quiet: warnings (attention's) and the stop
    assert [line for line in err if not line.startswith("warning: ")] == [said]
    assert said in (run_dir / "train.log").read_text()
    (record,) = json.loads((run_dir / "manifest.json").read_text())["sessions"]
    assert (record["end_reason"], record["last_update"], record["saved_update"]) == (
        "interrupted",
        4,
        3,
    )
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 3


def test_a_second_sigterm_still_saves(prepared, tmp_path):
    """A supervisor (systemd, Slurm, torchrun) may send SIGTERM more than once before it kills:
    only a second Ctrl-C, a person's, gives up the save."""
    run_dir = tmp_path / "run"
    assert _signalled_twice_at_update_4(prepared, run_dir, signal.SIGTERM) == 143
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 4


def test_a_resume_names_every_changed_setting_and_the_manifest_keeps_each_session_s_config(
    prepared, tmp_path
):
    run_dir = tmp_path / "run"
    loop.run(variant(prepared, run_dir, *SETTINGS, "train.max_updates=3"), quiet=True)
    lr = checkpoint.read(run_dir / "last.pt")["config"]["train"]["lr"]
    changes = (
        "model.dropout=0.2",
        "train.max_updates=4",
        "train.lr=0.0005",
        "decode.batch_tokens=2048",
        "diagnostics.sentences=4",
    )
    loop.run(variant(prepared, run_dir, *SETTINGS, *changes), quiet=True)
    log = (run_dir / "train.log").read_text()
    said = (
        "resuming with settings changed since last.pt was saved: model.dropout: 0.1 -> 0.2, "
        f"train.max_updates: 3 -> 4, train.lr: {lr!r} -> 0.0005, decode.batch_tokens: 4096 -> "
        "2048, diagnostics.sentences: 8 -> 4\n"
    )
    assert said in log and "warning: resuming" not in log  # BLEU is measured as before
    assert log.index("resumed from") < log.index(said) < log.index("update 4:")
    first, second = json.loads((run_dir / "manifest.json").read_text())["sessions"]
    assert first["changed"] is None and second["changed"] == {
        "model.dropout": [0.1, 0.2],
        "train.max_updates": [3, 4],
        "train.lr": [lr, 0.0005],
        "decode.batch_tokens": [4096, 2048],
        "diagnostics.sentences": [8, 4],
    }
    # config.yaml is the latest session's; each session's own is in the manifest
    assert first["config"]["model"]["dropout"] == 0.1 and first["config"]["train"]["lr"] == lr
    assert second["config"] == config.to_dict(config.load(run_dir / "config.yaml"))
    assert second["config"]["model"]["dropout"] == 0.2


def test_a_resume_that_changes_how_valid_bleu_is_measured_says_the_best_bleu_is_the_old_one(
    prepared, tmp_path
):
    run_dir = tmp_path / "run"
    loop.run(variant(prepared, run_dir, *SETTINGS, "train.max_updates=3"), quiet=True)
    # the beam validation decodes with stays 1 (tiny.yaml's decode.beam_size): measured as before
    same_beam = ("train.max_updates=4", "train.valid_beam_size=1")
    loop.run(variant(prepared, run_dir, *SETTINGS, *same_beam), quiet=True)
    assert "warning: resuming" not in (run_dir / "train.log").read_text()
    stored = checkpoint.read(run_dir / "last.pt")["state"]["train"]
    other = ("train.max_updates=5", "train.valid_beam_size=1", "train.valid_bleu_sentences=10")
    loop.run(variant(prepared, run_dir, *SETTINGS, *other), quiet=True)
    best = checkpoint.read(run_dir / "last.pt")["state"]["train"]
    after = (run_dir / "train.log").read_text().split("resumed from")[-1]
    assert (
        "warning: resuming with settings changed since last.pt was saved: train.max_updates: 4 -> "
        "5, train.valid_bleu_sentences: 20 -> 10; train.valid_bleu_sentences changes how "
        f"validation BLEU is measured: the best BLEU so far ({stored['best_bleu']:.2f}, best.pt's) "
        "and early stopping's count of validations without gain "
        f"({stored['bad_evals']}) were measured the old way and are kept"
    ) in after
    assert best["best_bleu"] >= stored["best_bleu"]  # kept, not reset


def test_settings_a_checkpoint_predates_are_compared_with_their_defaults():
    from translator.train.resume import setting_changes

    cfg = config.Config()
    saved = config.to_dict(cfg)
    del saved["train"]["valid_beam_size"]  # written before the field existed: it was the default
    del saved["diagnostics"]
    saved["data"]["splits"] = {"train": "train", "valid": "dev"}
    cfg.train.lr = 1e-4
    assert setting_changes(saved, cfg) == {
        "data.splits.valid": ("dev", "validation"),
        "data.splits.test": (None, "test"),
        "train.lr": (7e-4, 1e-4),
    }


def test_a_measure_change_before_any_validation_is_no_warning(prepared, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    interrupt_at(monkeypatch, 2)  # before update 3's validation: no best BLEU stored
    with pytest.raises(SystemExit):
        loop.run(variant(prepared, run_dir, *SETTINGS), quiet=True)
    loop.run(variant(prepared, run_dir, *SETTINGS, "train.valid_bleu_sentences=10"), quiet=True)
    log = (run_dir / "train.log").read_text()
    assert "] resuming with settings changed since last.pt was saved: " in log
    assert "train.valid_bleu_sentences: 20 -> 10\n" in log and "BLEU is measured" not in log


def test_a_checkpoint_records_its_code_and_a_resume_under_other_code_says_so(
    runs, prepared, tmp_path
):
    from translator import summary, versions

    straight, resumed, _ = runs
    payload = checkpoint.read(straight / "last.pt")
    assert payload["made_by"] == versions.made_by()  # the code of this test run
    assert summary.written_by(payload).startswith("  written by translator ")
    payload["made_by"] = {"translator": "0.0.1", "commit": "f" * 40, "dirty": False}
    (tmp_path / "run").mkdir()
    torch.save(checkpoint.seal(payload), tmp_path / "run" / "last.pt")
    assert summary.written_by(payload) == "  written by translator 0.0.1, commit ffffffffffff"
    loop.run(variant(prepared, tmp_path / "run", *SETTINGS, "train.max_updates=7"), quiet=True)
    now = versions.made_by()["translator"]
    said = f"last.pt was written by translator 0.0.1 (this is {now}): the run continues"
    assert said in (tmp_path / "run" / "train.log").read_text()
    # a resume under the code that wrote last.pt: nothing said
    assert "resumed from" in (resumed / "train.log").read_text()
    assert "was written by" not in (resumed / "train.log").read_text()


def test_a_validation_a_stop_skipped_is_done_when_the_run_resumes(prepared, tmp_path):
    """Stopped right after update 2, before its validation: last.pt holds update 2 unvalidated
    (no step-2.pt, no best.pt candidate). The resumed run validates update 2 before going on, so
    its validations are the uninterrupted run's."""
    run_dir = tmp_path / "run"
    settings = ("train.max_updates=4", "train.eval_every=2", "train.keep_last=0")
    with pytest.MonkeyPatch.context() as monkeypatch:
        interrupt_at(monkeypatch, 2)
        with pytest.raises(SystemExit):
            loop.run(variant(prepared, run_dir, *settings), quiet=True)
    assert "validation at update 2" not in _log(run_dir)
    loop.run(variant(prepared, run_dir, *settings), quiet=True)
    assert [step for step, _ in scalars(run_dir, "valid/loss")] == [2, 4]
    assert "validating update 2, which a stop left unvalidated" in _log(run_dir)
