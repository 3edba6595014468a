"""The results-row recipe (`make multi30k`): stages, choice on valid, scores and manifest."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sacrebleu
import torch
from typer.testing import CliRunner

from tests.conftest import MULTI30K, REPO, tiny_overrides
from tests.train.conftest import variant
from translator import averaging, checkpoint, cli, device, recipe
from translator.config import load as load_config
from translator.errors import TranslatorError
from translator.evaluate import Scores
from translator.files import read_lines
from translator.prepared import prepared_dir
from translator.recipe import choose, command
from translator.recipe.members import member_configs, trains_in_fp32

SETTINGS = (
    "train.max_updates=6",
    "train.eval_every=3",
    "train.keep_last=2",
    "decode.beam_size=1",
    "decode.max_len_a=0",  # outputs of at most 3 tokens: scoring 3 x 1,000 sentences takes seconds
    "decode.max_len_b=3",
    "decode.channel_candidates=2",  # a channel reranks 2-best lists: the same steps as 8-best
    "diagnostics.enabled=false",
)


@pytest.fixture(scope="module")
def finished(prepared, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("recipe") / "run"
    cfg = variant(prepared, run_dir, *SETTINGS)
    # the checkout as the recipe starts, then as if a commit landed while it ran
    states = iter([{"commit": "a" * 40, "dirty": False}, {"commit": "b" * 40, "dirty": True}])
    real_git_state, recipe.git_state = recipe.git_state, lambda: next(states)
    try:
        return cfg, recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True)
    finally:
        recipe.git_state = real_git_state


def test_recipe_averages_the_newest_checkpoints_and_picks_on_valid(finished):
    cfg, manifest = finished
    assert manifest["averaged"] == ["step-3.pt", "step-6.pt"]
    assert manifest["training"] == {
        "seconds": manifest["training"]["seconds"],
        "sessions": 1,
        "last_update": 6,
        "end_reason": "max_updates",
    }
    valid = manifest["valid"]
    assert set(valid) == {"avg.pt", "best.pt"}
    assert valid[manifest["chosen"]]["bleu"] == max(s["bleu"] for s in valid.values())


@pytest.mark.parametrize("avg_bleu,chosen", [(30.0, "avg.pt"), (29.0, "best.pt"), (29.5, "avg.pt")])
def test_test_split_is_scored_once_with_the_checkpoint_better_on_valid(
    tmp_path, monkeypatch, avg_bleu, chosen
):
    asked = []

    def fake_score(run_dir, name, split, quiet):
        asked.append((name, split))
        bleu = {"avg.pt": avg_bleu, "best.pt": 29.5}[name] if split == "valid" else 1.0
        return Scores(bleu, 0.0, "", "")

    monkeypatch.setattr(choose, "score", fake_score)
    seconds = {}
    valid, picked, test = choose.choose_on_valid(tmp_path, seconds, quiet=True)
    assert picked == chosen and test.bleu == 1.0
    assert asked == [("avg.pt", "valid"), ("best.pt", "valid"), (chosen, "test")]
    assert {k: v.bleu for k, v in valid.items()} == {"avg.pt": avg_bleu, "best.pt": 29.5}
    assert set(seconds) == {"eval_valid", "eval_test"}
    asked.clear()
    assert choose.choose_on_valid(tmp_path, {}, quiet=True, score_test=False)[2] is None
    assert [split for _, split in asked] == ["valid", "valid"]  # a choosing run never sees test


def test_a_best_pt_holding_avg_pt_s_weights_is_decoded_once(finished, tmp_path, monkeypatch):
    cfg, _ = finished
    run = Path(cfg.train.run_dir)
    asked = []

    def fake_score(run_dir, name, split, quiet):
        asked.append(name)
        return Scores(30.0 - len(asked), 0.0, "", "")  # best.pt, if decoded, scores lower

    monkeypatch.setattr(choose, "score", fake_score)

    def choose_between(avg_of: Path, best: Path) -> dict[str, Scores]:
        asked.clear()
        averaging.average([avg_of], tmp_path / "avg.pt")
        shutil.copyfile(best, tmp_path / "best.pt")  # a file of its own: compared by content
        valid, picked, _ = choose.choose_on_valid(tmp_path, {}, quiet=True, score_test=False)
        assert picked == "avg.pt"
        return valid

    # as `--average 1` leaves them when the last validation was the best
    valid = choose_between(run / "step-6.pt", run / "step-6.pt")
    assert asked == ["avg.pt"] and valid["best.pt"] == valid["avg.pt"]
    # other weights, or the same weights under another config, are decoded
    assert choose_between(run / "step-3.pt", run / "step-6.pt")["best.pt"].bleu == 28.0
    payload = checkpoint.read(run / "step-6.pt")
    payload["config"]["decode"]["beam_size"] = 3
    torch.save(checkpoint.seal(payload), tmp_path / "beam-3.pt")
    assert choose_between(run / "step-6.pt", tmp_path / "beam-3.pt")["best.pt"].bleu == 28.0
    assert not checkpoint.same_model(run / "step-6.pt", tmp_path / "missing.pt")


def test_recipe_scores_test_once_as_sacrebleu_does(finished):
    cfg, manifest = finished
    run_dir = prepared_dir(cfg.data)
    refs = read_lines(run_dir / f"test.{cfg.data.tgt_lang}")
    stem = manifest["chosen"].removesuffix(".pt")
    hyps = read_lines(f"{cfg.train.run_dir}/test.{stem}.hyp")
    test = manifest["test"]
    assert test["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    lowercased = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True, tokenize="13a").score
    assert test["lc_tok_bleu"] == pytest.approx(lowercased)
    assert "case:mixed" in test["bleu_signature"] and "case:lc" in test["lc_tok_signature"]
    scores = (REPO / cfg.train.run_dir / "scores.txt").read_text()
    assert f"test, {manifest['chosen']}" in scores and "lowercased tokenized BLEU" in scores


def test_recipe_manifest_records_what_the_row_was_made_from(finished):
    cfg, manifest = finished
    on_disk = json.loads((REPO / cfg.train.run_dir / recipe.MANIFEST).read_text())
    assert on_disk == json.loads(json.dumps(manifest))
    train_en = {p: h for p, h in manifest["data"]["files"]["train"].items() if p.endswith(".en")}
    assert list(train_en.values()) == [
        hashlib.sha256((MULTI30K / "train.en").read_bytes()).hexdigest()
    ]
    assert len(manifest["data"]["files"]["test"]) == 2  # test2016.en, test2016.de
    assert manifest["data"]["prepared"]["sha256"]
    assert manifest["git"] == {"commit": "a" * 40, "dirty": False}  # the code that ran
    # and the code that trained, from the training sessions' own records
    sessions = json.loads((REPO / cfg.train.run_dir / "manifest.json").read_text())["sessions"]
    assert manifest["trained_by"] == [sessions[0]["git"]]
    assert manifest["config"]["model"]["vocab_size"] > 0 and manifest["seed"] == cfg.train.seed
    assert manifest["hardware"]["cores"] >= 1 and manifest["hardware"]["torch"]
    assert set(manifest["stage_seconds"]) == {
        "prepare",
        "train",
        "average",
        "eval_valid",
        "eval_test",
    }
    budget = manifest["budget"]
    assert budget["within"] and budget["used_seconds"] <= 600
    assert budget["used_seconds"] >= manifest["training"]["seconds"]


def test_a_finished_recipe_is_not_run_over(finished):
    cfg, _ = finished
    with pytest.raises(TranslatorError, match="finished already"):
        recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True)


def test_a_taken_choosing_run_is_scored_on_test_once_as_the_whole_recipe_scores_it(
    finished, prepared, tmp_path
):
    _, whole = finished
    cfg = variant(prepared, tmp_path / "run", *SETTINGS)
    choice = recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True, score_test=False)
    assert choice["test"] is None and "eval_test" not in choice["stage_seconds"]
    with pytest.raises(TranslatorError, match="finished already"):
        recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True, score_test=False)
    taken = recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True)
    # same seed, same batches: choosing on valid, then scoring test, gives the whole recipe's row
    assert taken["chosen"] == whole["chosen"] and taken["test"] == whole["test"]
    assert taken["valid"] == choice["valid"] and taken["training"] == choice["training"]
    assert taken["stage_seconds"].keys() == whole["stage_seconds"].keys()
    assert taken["test_scored"]["command"] and taken["test_scored"]["git"]["commit"]
    run_dir = tmp_path / "run"
    assert json.loads((run_dir / recipe.MANIFEST).read_text()) == json.loads(json.dumps(taken))
    assert f"test, {taken['chosen']}" in (run_dir / "scores.txt").read_text()
    with pytest.raises(TranslatorError, match="test scored"):  # and once only
        recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True)


def write_sessions(run_dir, *sessions: tuple[float, str]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    records = [{"seconds": s, "end_reason": r} for s, r in sessions]
    (run_dir / "manifest.json").write_text(json.dumps({"sessions": records}))


def test_training_budget_goes_on_after_an_interruption_and_stops_after_a_finish(tmp_path):
    assert recipe.training_minutes(tmp_path / "new", 47.0) == 47.0
    write_sessions(tmp_path / "cut", (600.0, "interrupted"), (300.0, "error"))
    assert recipe.training_minutes(tmp_path / "cut", 47.0) == pytest.approx(32.0)
    write_sessions(tmp_path / "done", (600.0, "interrupted"), (60.0, "max_minutes"))
    assert recipe.training_minutes(tmp_path / "done", 47.0) == 0.0
    # a session before a fresh start (killed before its first save) spent none of the budget
    write_sessions(tmp_path / "restarted", (600.0, "interrupted"), (300.0, "interrupted"))
    record = json.loads((tmp_path / "restarted" / "manifest.json").read_text())
    record["sessions"][0]["discarded"] = True
    (tmp_path / "restarted" / "manifest.json").write_text(json.dumps(record))
    assert recipe.training_minutes(tmp_path / "restarted", 47.0) == pytest.approx(42.0)


def test_a_resumed_member_gets_the_run_s_whole_budget_as_max_minutes(tmp_path, monkeypatch):
    # train.max_minutes counts every session's training seconds (train/loop.py): the rest of the
    # budget as max_minutes would stop a resumed run 10 minutes short
    cfg = load_config(REPO / "configs" / "tiny.yaml", [f"train.run_dir={tmp_path / 'cut'}"])
    write_sessions(tmp_path / "cut", (600.0, "interrupted"))
    given = []
    monkeypatch.setattr(recipe.members.loop, "run", lambda c, quiet: given.append(c))
    recipe.members.train_members([cfg], 47.0, quiet=True)
    assert [c.train.max_minutes for c in given] == [47.0]


def test_too_few_kept_checkpoints_are_refused_in_one_line_before_training(prepared, tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text("train:\n  keep_last: 2\n")
    done = subprocess.run(
        [sys.executable, "-m", "translator.recipe", str(config), "--budget", "1", "--average", "5"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # the checkout under test, from any cwd
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "train.keep_last" in done.stderr and not (tmp_path / "runs").exists()


def test_a_budget_not_above_the_reserve_is_refused_in_one_line_before_anything_runs(tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text("train:\n  keep_last: 2\n")
    done = subprocess.run(  # --budget 1 and the default reserve of 1 minute: nothing would train
        [sys.executable, "-m", "translator.recipe", str(config), "--budget", "1", "--average", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: --budget: ") and done.stderr.count("\n") == 1
    assert "budget (1 min) must exceed the reserve (1 min)" in done.stderr
    assert "--reserve" in done.stderr and not (tmp_path / "runs").exists()
    cfg = load_config(config, [f"train.run_dir={tmp_path / 'run'}"])
    with pytest.raises(
        TranslatorError, match=r"budget \(0.5 min\) must exceed the reserve \(2 min"
    ):
        recipe.run(cfg, budget_minutes=0.5, average_last=1, reserve_minutes=2.0, quiet=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "args,named",
    [
        (["--bogus"], "--bogus"),
        (["--average", "x"], "--average"),
        (["--average", "0"], "--average"),
        (["--budget", "0"], "--budget"),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(tmp_path, monkeypatch, capsys, args, named):
    config = tmp_path / "recipe.yaml"
    config.write_text("{}\n")
    argv = ["recipe.py", str(config), "--budget", "5", "--average", "1", *args]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(cli.signal, "signal", lambda *a: None)  # leave pytest's SIGTERM alone
    with pytest.raises(SystemExit) as stopped:
        cli.run_command(command.app)  # as `python -m translator.recipe` runs it
    out, err = capsys.readouterr()
    assert stopped.value.code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and named in err
    assert err.rstrip().endswith("-h`)")  # says where to look


def test_an_unknown_multi30k_direction_is_refused_in_one_line_naming_its_config(tmp_path):
    def make(*args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "MFLAGS"}
        command = ["make", "--no-print-directory", "-n", "-C", str(REPO), "multi30k", *args]
        command.append(f"VENV={tmp_path / 'venv'}")  # -n: nothing runs; not the checkout's venv
        return subprocess.run(command, capture_output=True, text=True, env=env)

    if shutil.which("make") is None:
        pytest.skip("no make")
    done = make("DIR=fr-en", "DATA=../shared/data/multi30k")
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "configs/multi30k-fr-en.yaml" in done.stderr
    assert "en-de" in done.stderr and "de-en" in done.stderr
    known = make("DIR=de-en")
    assert known.returncode == 0
    assert (
        "configs/multi30k-de-en.yaml" in known.stdout and "--average 1 --members 2" in known.stdout
    )
    assert "--fp32-members 1 --fp32-set model.dropout=0.1" in known.stdout
    assert "--fp32" not in make("DIR=de-en", "FP32=").stdout  # the bf16 settings everywhere


def test_a_sigterm_to_the_recipe_stops_its_members_too(prepared, tmp_path):
    """A scheduler's `kill PID` reaches the recipe alone: its members must save and stop with it,
    not train on to the end of the budget while it waits for them."""
    run_dir = tmp_path / "run"
    overrides = [
        *tiny_overrides(Path(prepared.data.data_dir), run_dir, prepared.data.source),
        "train.max_updates=100000",
    ]
    command = [sys.executable, "-m", "translator.recipe", str(REPO / "configs" / "tiny.yaml")]
    for override in [*overrides, "train.precision=fp32"]:
        command += ["--set", override]
    command += ["--budget", "10", "--average", "1", "--members", "2", "--valid-only", "--quiet"]
    recipe_process = subprocess.Popen(  # its own process group, for the clean-up below
        command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True
    )
    logs = [run_dir / f"member-{i}" / "train.log" for i in (1, 2)]
    try:
        deadline = time.time() + 120
        while not all(log.is_file() and "update 2:" in log.read_text() for log in logs):
            assert recipe_process.poll() is None and time.time() < deadline, "no member trained"
            time.sleep(0.2)
        recipe_process.send_signal(signal.SIGTERM)  # the recipe alone, as `kill PID` does
        assert recipe_process.wait(timeout=60) == 128 + signal.SIGTERM
    finally:  # members left running would train on for the budget's 10 minutes
        with contextlib.suppress(ProcessLookupError):
            os.killpg(recipe_process.pid, signal.SIGKILL)
    for member in ("member-1", "member-2"):
        session = json.loads((run_dir / member / "manifest.json").read_text())["sessions"][-1]
        assert session["end_reason"] == "interrupted" and session["saved_update"] >= 2
        assert (run_dir / member / "last.pt").is_file()
    assert not (run_dir / recipe.MANIFEST).exists()


def test_an_ensemble_recipe_trains_its_members_side_by_side_and_scores_them_as_one(
    finished, prepared, tmp_path
):
    _, single = finished
    cfg = variant(prepared, tmp_path / "run", *SETTINGS)
    manifest = recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True, members=2)
    run_dir = tmp_path / "run"
    seeds = [
        json.loads((run_dir / m / "manifest.json").read_text())["sessions"][-1]
        for m in ("member-1", "member-2")
    ]
    assert all(s["end_reason"] == "max_updates" for s in seeds)
    # member 1 is the single recipe's run (same seed, same batches, one thread as there); member
    # 2 has the next seed, so another model
    assert manifest["valid"]["member-1/avg.pt"] == single["valid"]["avg.pt"]
    assert manifest["valid"]["member-1/best.pt"] == single["valid"]["best.pt"]
    m1 = (run_dir / "member-1" / "valid.avg.hyp").read_text()
    assert m1 != (run_dir / "member-2" / "valid.avg.hyp").read_text()
    assert manifest["members"] == 2 and len(manifest["chosen"]) == 2
    assert [c.split("/")[0] for c in manifest["chosen"]] == ["member-1", "member-2"]
    assert manifest["valid"]["ensemble"].keys() == single["valid"]["avg.pt"].keys()
    assert manifest["test"] is not None and (run_dir / "test.ensemble.hyp").is_file()
    assert len(read_lines(run_dir / "test.ensemble.hyp")) == len(
        read_lines(Path(prepared.data.source) / "test2016.en")
    )
    assert "test, member-1/" in (run_dir / "scores.txt").read_text()
    assert manifest["budget"]["within"] and manifest["training"]["member_updates"] == [6, 6]


def test_a_channel_recipe_trains_the_reverse_model_beside_and_reranks_with_it(
    finished, prepared, tmp_path
):
    _, single = finished
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, *SETTINGS)
    flipped = ("data.src_lang=de", "data.tgt_lang=en", "data.name=tiny-de-en")
    reverse = variant(prepared, tmp_path / "elsewhere", *SETTINGS, *flipped)
    manifest = recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True, channel=reverse)
    # the direct model is the single recipe's (same seed, same batches); the channel trained
    # beside it in run_dir/channel (not in its config's own run_dir), within the same budget
    assert manifest["valid"]["avg.pt"] == single["valid"]["avg.pt"]
    session = json.loads((run_dir / "channel" / "manifest.json").read_text())["sessions"][-1]
    assert session["end_reason"] == "max_updates" and (run_dir / "channel" / "avg.pt").is_file()
    assert not (tmp_path / "elsewhere").exists() and manifest["budget"]["within"]
    assert manifest["training"]["member_updates"] == [6, 6]  # the direct model, then the channel
    reranked = {n: s for n, s in manifest["valid"].items() if "reranked by channel/" in n}
    assert len(reranked) == len(choose.CHANNEL_WEIGHTS)
    plain = manifest["valid"][single["chosen"]]["bleu"]
    chosen = manifest["chosen"]
    if isinstance(chosen, dict):  # a weight is kept only when it beats the plain search on valid
        assert reranked[choose.described(chosen)]["bleu"] == max(
            s["bleu"] for s in reranked.values()
        )
        assert reranked[choose.described(chosen)]["bleu"] > plain
        hyp = run_dir / f"test.{chosen['checkpoints'][:-3]}.channel-{chosen['channel_weight']}.hyp"
    else:
        assert all(s["bleu"] <= plain for s in reranked.values())
        hyp = run_dir / f"test.{chosen[:-3]}.hyp"
    assert len(read_lines(hyp)) == len(read_lines(Path(prepared.data.source) / "test2016.en"))
    assert (
        f"test, {choose.described(chosen)} (the better on valid)"
        in (run_dir / "scores.txt").read_text()
    )


def test_a_channel_of_the_same_direction_is_refused_before_training(prepared, tmp_path):
    cfg = variant(prepared, tmp_path / "run", *SETTINGS)
    same = variant(prepared, tmp_path / "other", *SETTINGS)
    with pytest.raises(TranslatorError, match="reverse direction"):
        recipe.run(cfg, budget_minutes=10, average_last=2, quiet=True, channel=same)
    assert not (tmp_path / "run" / "manifest.json").exists()


def test_an_ensemble_with_a_channel_reranks_the_ensembles_n_best(prepared, tmp_path):
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, *SETTINGS)
    flipped = ("data.src_lang=de", "data.tgt_lang=en", "data.name=tiny-de-en")
    reverse = variant(prepared, tmp_path / "elsewhere", *SETTINGS, *flipped)
    manifest = recipe.run(
        cfg, budget_minutes=10, average_last=2, quiet=True, members=2, channel=reverse
    )
    assert manifest["training"]["member_updates"] == [6, 6, 6]  # two members, then the channel
    reranked = [n for n in manifest["valid"] if "reranked by channel/" in n]
    assert len(reranked) == len(choose.CHANNEL_WEIGHTS)
    assert all(n.startswith("member-1/") and " + member-2/" in n for n in reranked)
    for weight in choose.CHANNEL_WEIGHTS:
        assert len(read_lines(run_dir / f"valid.ensemble.channel-{weight}.hyp")) == len(
            read_lines(Path(prepared.data.source) / "valid.en")
        )
    assert manifest["test"] is not None


def test_members_of_a_top_of_range_seed_get_seeds_within_the_range():
    cfg = load_config(None, ["train.seed=4294967295"])
    seeds = [c.train.seed for c in member_configs(cfg, 3)]
    assert seeds == [4294967295, 0, 1]


@pytest.mark.parametrize("fp32", [True, False])
def test_the_fp32_settings_apply_only_where_training_runs_in_fp32(
    tmp_path, monkeypatch, capsys, fp32
):
    """--fp32-members and --fp32-set replace --members and add overrides where the training
    resolves to fp32; the user's own --set still wins over them; elsewhere they change nothing."""
    config = tmp_path / "recipe.yaml"
    config.write_text("model: {dropout: 0.2, attention_dropout: 0.1}\ntrain: {weight_decay: 0.2}\n")
    seen = {}

    def fake_run(cfg, *args, members, channel):
        seen.update(cfg=cfg, members=members)
        (Path(cfg.train.run_dir) / "scores.txt").write_text("scores\n")
        return {"chosen": "avg.pt"}

    monkeypatch.setattr(command, "run", fake_run)
    monkeypatch.setattr(command, "trains_in_fp32", lambda cfg: fp32)
    argv = [str(config), "--budget", "5", "--average", "1", "--members", "2"]
    argv += ["--set", f"train.run_dir={tmp_path}", "--set", "model.attention_dropout=0.05"]
    argv += ["--fp32-members", "1", "--fp32-set", "model.dropout=0.1"]
    argv += ["--fp32-set", "model.attention_dropout=0", "--fp32-set", "train.weight_decay=0"]
    done = CliRunner().invoke(command.app, argv)
    assert done.exit_code == 0, done.output
    cfg = seen["cfg"]
    assert cfg.model.attention_dropout == 0.05  # --set over --fp32-set
    if fp32:
        assert seen["members"] == 1 and cfg.model.dropout == 0.1 and cfg.train.weight_decay == 0
        assert "training in fp32" in done.stderr and "model.dropout=0.1" in done.stderr
    else:
        assert seen["members"] == 2 and cfg.model.dropout == 0.2 and cfg.train.weight_decay == 0.2
        assert "fp32" not in done.stderr


@pytest.mark.parametrize(
    "native,precision,fp32",
    [(False, "auto", True), (True, "auto", False), (True, "fp32", True), (False, "bf16", False)],
)
def test_training_resolves_to_fp32_by_the_cpu_s_bf16_and_the_precision_asked(
    monkeypatch, native, precision, fp32
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device, "cpu_native_bf16", lambda: native)
    assert trains_in_fp32(load_config(None, [f"train.precision={precision}"])) is fp32


@pytest.mark.parametrize("started,members", [(2, 1), (1, 2), (2, 3)])
def test_a_run_directory_is_not_gone_on_with_another_number_of_models(
    tmp_path, monkeypatch, started, members
):
    """A rerun on a CPU of the other kind (the Makefile's FP32 settings) would otherwise start a
    second training beside the first one's."""
    run_dir = tmp_path / "run"
    if started == 1:
        write_sessions(run_dir, (600.0, "interrupted"))
    for i in range(1, started + 1 if started > 1 else 1):
        write_sessions(run_dir / f"member-{i}", (600.0, "interrupted"))
    monkeypatch.setattr(recipe.prepare, "run", lambda *a, **k: pytest.fail("prepared"))
    cfg = load_config(None, [f"train.run_dir={run_dir}"])
    with pytest.raises(TranslatorError, match=f"training of {started} model.*trains {members}"):
        recipe.run(cfg, budget_minutes=10, average_last=1, quiet=True, members=members)
    recipe.check_same_layout(run_dir, started)  # as it started: goes on


def test_the_recipes_hypotheses_replace_a_link_in_its_run_dir(tmp_path, monkeypatch):
    """The recipe names run_dir/test.STEM.hyp itself: a link there (a copied run directory's)
    is replaced by the file, and what it named is left as it was."""
    from translator import evaluate
    from translator.files import atomic_write
    from translator.recipe import choose

    def fake_eval(ckpts, *, hyp_file, **options):
        with atomic_write(hyp_file) as handle:  # as eval writes a file it was given
            handle.write("hypotheses\n")
        return Scores(1.0, 2.0, "sig", "sig")

    monkeypatch.setattr(evaluate, "run", fake_eval)
    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    (tmp_path / "test.avg.hyp").symlink_to(precious)
    choose.score(tmp_path, "avg.pt", "test", quiet=True)
    assert precious.read_text() == "mine"
    assert (tmp_path / "test.avg.hyp").read_text() == "hypotheses\n"
