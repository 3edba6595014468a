"""The command line end to end on a 2k-pair Multi30k slice, and its error contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, tiny_overrides

CLI = [sys.executable, "-m", "translator"]


def run_cli(*args: str, stdin: str | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    # the checkout under test first: from another cwd, `-m translator` would find an installed copy
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, cwd=cwd, timeout=600, env=env)


def sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def test_help_is_instant_and_lists_commands():
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("prepare", "train", "eval", "translate", "average", "info"):
        assert command in result.stdout
    probe = subprocess.run([sys.executable, "-c", "import sys, translator.cli; print('torch' in sys.modules)"],
                           capture_output=True, text=True, cwd=REPO)
    assert probe.stdout.strip() == "False"


@pytest.mark.parametrize("command", ["prepare", "train", "eval", "translate", "average", "info", "attention"])
def test_every_command_help_has_an_example(command):
    result = run_cli(command, "--help")
    assert result.returncode == 0 and "Example:" in result.stdout


def test_version():
    from translator import __version__

    result = run_cli("--version")
    assert result.returncode == 0 and __version__ in result.stdout


@pytest.mark.slow
def test_prepare_train_eval_translate(tmp_path, multi30k):
    overrides = tiny_overrides(tmp_path / "data", tmp_path / "run")
    config = str(REPO / "configs" / "tiny.yaml")
    result = run_cli("prepare", config, "--quiet", *sets(overrides))
    assert result.returncode == 0, result.stderr
    prepared = tmp_path / "data" / "multi30k-tiny"
    assert (prepared / "manifest.json").is_file() and (prepared / "config.yaml").is_file()

    result = run_cli("train", config, "--quiet", *sets(overrides))
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "run"
    for name in ("last.pt", "best.pt", "config.yaml", "train.log"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tensorboard").iterdir())

    result = run_cli("eval", str(run_dir / "best.pt"), "--split", "test", "--beam", "2")
    assert result.returncode == 0, result.stderr
    assert "BLEU = " in result.stdout and "nrefs:1" in result.stdout and "chrF = " in result.stdout
    hyps = (run_dir / "test.en.hyp").read_text().splitlines()
    assert len(hyps) == 1000

    lines = ["A man is riding a bike.", "", "Two dogs play in the snow.", "   ", "A woman."]
    result = run_cli("translate", str(run_dir / "best.pt"), stdin="\n".join(lines) + "\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout.split("\n")[:-1]
    assert len(out) == len(lines)
    assert out[1] == "" and out[3] == ""


def test_bad_config_key_is_one_line_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_update: 3\n")
    result = run_cli("prepare", str(bad))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "train.max_update" in result.stderr and "max_updates" in result.stderr
    assert "Traceback" not in result.stderr


def test_info_refuses_overrides_on_a_checkpoint_whatever_its_name(tmp_path):
    import torch

    from translator import config

    cfg = config.load(None, ["model.vocab_size=50", "model.d_model=16", "model.n_heads=2"])
    path = tmp_path / "model.bin"  # info reads only the config of a checkpoint
    torch.save({"format": 1, "config": config.to_dict(cfg)}, path)
    assert "d_model 16" in run_cli("info", str(path)).stdout
    result = run_cli("info", str(path), "--set", "model.d_model=32")
    assert result.returncode == 1 and result.stderr.startswith("error: ") and "not a checkpoint" in result.stderr


def test_missing_checkpoint_is_one_line_error(tmp_path):
    result = run_cli("translate", str(tmp_path / "nope.pt"), stdin="hello\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "checkpoint not found" in result.stderr and result.stdout == ""


def test_missing_split_leaves_nothing_behind(tmp_path, multi30k):
    overrides = tiny_overrides(tmp_path / "data", tmp_path / "run") + ["data.splits.test=nosuchsplit"]
    result = run_cli("prepare", str(REPO / "configs" / "tiny.yaml"), "--quiet", *sets(overrides))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "nosuchsplit" in result.stderr and "test2016" in result.stderr
    data_dir = tmp_path / "data"
    assert not data_dir.exists() or not any(data_dir.iterdir())




@pytest.mark.parametrize("filename", ["/runs/x/test.en.hyp", b"/runs/x/events.tfevents"])
def test_an_oserror_is_one_line_naming_its_file(monkeypatch, capsys, filename):
    from translator import cli

    def fail():
        raise PermissionError(13, "Permission denied", filename)

    monkeypatch.setattr(cli, "app", fail)
    monkeypatch.setattr(cli.signal, "signal", lambda *a: None)  # leave pytest's own SIGTERM handling alone
    with pytest.raises(SystemExit) as exited:
        cli.main()
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err.count("\n") == 1
    assert err.startswith("error: /runs/x/") and ": Permission denied (check the path" in err
