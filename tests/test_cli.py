"""The command line end to end on a 2k-pair Multi30k slice, and its error contract."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import MULTI30K, REPO, tiny_overrides, without_length_warnings
from tests.data.conftest import small_splits, write_text_corpus
from translator.files import read_lines

CLI = [sys.executable, "-m", "translator"]


def run_cli(
    *args: str, stdin: str | None = None, cwd: Path = REPO, env=None
) -> subprocess.CompletedProcess:
    # the checkout under test first: from another cwd, `-m translator` would find an installed copy
    env = {**(os.environ if env is None else env)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def registered_commands() -> dict:
    import typer

    from translator.cli import app

    return typer.main.get_command(app).commands


def test_help_is_instant_and_lists_every_command():
    result = run_cli("--help")
    assert result.returncode == 0
    commands = result.stdout.split("Commands:", 1)[1]
    listed = set(re.findall(r"^  (\w[\w-]*) {2,}", commands, flags=re.MULTILINE))
    assert listed == set(registered_commands())
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, translator.cli; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert probe.stdout.strip() == "False"


@pytest.mark.parametrize(
    "command",
    [
        "prepare",
        "train",
        "eval",
        "translate",
        "average",
        "info",
        "keys",
        "attention",
        "export",
        "import-hf",
        "import-fairseq",
        "score",
        "serve",
    ],
)
def test_every_command_help_has_an_example_that_parses(command):
    """The example in each command's help names that command and only arguments and options it
    has."""
    import click

    cmd = registered_commands()[command]
    # a long example goes on over lines ending in a backslash, as it would in a shell
    help_text = re.sub(r"\\\n\s*", " ", cmd.help)
    examples = [
        line.split("Example:", 1)[1] for line in help_text.splitlines() if "Example:" in line
    ]
    assert len(examples) == 1, cmd.help
    # after a pipe: `echo ... | translator translate ...`
    words = shlex.split(examples[0].split("|")[-1])
    assert words[:2] == ["translator", command]
    try:
        cmd.make_context(command, words[2:], resilient_parsing=False)
    except click.UsageError as err:
        # an unknown option, a missing argument, a value of the wrong type
        pytest.fail(f"{command}'s example does not parse: {err}")
    assert run_cli(command, "--help").stdout.count("Example:") == 1


def test_every_command_summary_is_one_line_in_the_root_help():
    """The root --help shows each command's first paragraph; a wrapped one takes two table rows."""
    long = {
        name: cmd.help.split("\n\n")[0]
        for name, cmd in registered_commands().items()
        if "\n" in cmd.help.strip().split("\n\n")[0]
    }
    assert not long, long


def test_every_help_fits_80_columns_uncut():
    """At 80 columns no help line runs over (an example's block is not rewrapped, so it must be
    written to fit) and no command's summary is cut short with `...` in the root list."""
    env = {**os.environ, "COLUMNS": "80"}
    for command in ["", *registered_commands()]:
        result = run_cli(*[command] if command else [], "--help", env=env)
        wide = [line for line in result.stdout.splitlines() if len(line) > 80]
        assert not wide, (command, wide)
        if not command:
            assert "..." not in result.stdout.split("Commands:", 1)[1]


def test_version():
    from translator import __version__

    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout == f"translator {__version__}\n"


def small_corpus(root: Path, test_lines: int = 20) -> Path:
    """Real Multi30k sentences as local files: 300 train, 40 valid and `test_lines` test pairs."""
    splits = small_splits()
    splits["test"] = tuple(side[:test_lines] for side in splits["test"])
    return write_text_corpus(root, splits)


def small_run(source: Path, data_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    """`train`'s arguments for a seconds-long run on a small local source (no separate prepare)."""
    overrides = [
        f"data.data_dir={data_dir}",
        "data.splits.valid=valid",
        "data.vocab_size=200",
        "model.d_model=64",
        "model.d_ff=128",
        "model.n_heads=4",
        "model.max_positions=128",
        f"train.run_dir={run_dir}",
        "train.max_updates=4",
        "train.eval_every=2",
        "train.log_every=2",
        "train.warmup_steps=2",
        "train.max_tokens=1024",
        "train.valid_bleu_sentences=10",
        "train.precision=fp32",
        *extra,
    ]
    return [str(REPO / "configs" / "tiny.yaml"), "--data", str(source), *sets(overrides)]


STAMP = re.compile(r"^\[ *\d+s\] ")


def log_records(run_dir: Path) -> list[str]:
    """train.log's records without their time stamps (the file is written with plain writes)."""
    return [STAMP.sub("", line) for line in (run_dir / "train.log").read_text().splitlines()]


@pytest.mark.slow
def test_train_prepares_then_eval_and_translate(tmp_path):
    """One command on a clean directory prepares and trains; the next is a cache hit; other data
    settings are refused. Off a terminal, at 20 columns, with paths over 80 characters, every log
    record is one line. Eval scores exactly what it wrote; translate agrees with eval."""
    import sacrebleu

    from translator import checkpoint

    deep = tmp_path / ("a-directory-name-that-makes-every-path-long-" * 2)
    source, data_dir, run_dir = small_corpus(deep / "corpus"), deep / "data", deep / "run"
    env = {**os.environ, "COLUMNS": "20", "LINES": "5"}  # output to a pipe, as `make demo > log`
    first = run_cli("train", *small_run(source, data_dir, run_dir, "train.max_updates=2"), env=env)
    assert first.returncode == 0, first.stderr
    prepared = data_dir / "multi30k-tiny"
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert manifest["pairs"] == {"train": 300, "valid": 40, "test": 20} and manifest[
        "source"
    ] == str(source)
    lines = first.stderr.splitlines()  # prepare's steps and summary, one record per line
    assert (
        f"prepared {prepared}" in lines
        and f"source: {source}" in lines
        and "train pairs out: 300" in lines
    )
    assert any(line.startswith("encode train: ") for line in lines)
    assert first.stdout.splitlines() == log_records(run_dir)  # whole records, as in train.log
    assert any(
        r.startswith("validation at update 2: ") and r.endswith("]") for r in log_records(run_dir)
    )
    assert "━" not in first.stdout + first.stderr  # no bar drawn into the file

    made = (prepared / "manifest.json").stat()
    again = run_cli("train", *small_run(source, data_dir, run_dir, "train.max_updates=4"), env=env)
    assert again.returncode == 0, again.stderr
    assert "prepared" not in again.stderr  # a cache hit: nothing prepared, nothing rewritten
    assert (prepared / "manifest.json").stat().st_mtime_ns == made.st_mtime_ns
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 4
    assert (first.stdout + again.stdout).splitlines() == log_records(run_dir)
    assert (
        f"resumed from {run_dir / 'last.pt'} at update 2 (epoch 0, batch 2)"
        in again.stdout.splitlines()
    )

    other = run_cli("train", *small_run(source, data_dir, tmp_path / "run3", "data.vocab_size=300"))
    assert (
        other.returncode == 1 and other.stderr.count("\n") == 1 and "Traceback" not in other.stderr
    )
    assert "data.vocab_size: 200 there, 300 here" in other.stderr
    assert (prepared / "manifest.json").stat().st_mtime_ns == made.st_mtime_ns and not (
        tmp_path / "run3"
    ).exists()

    result = run_cli("eval", str(run_dir / "best.pt"), "--split", "test", "--beam", "2")
    assert result.returncode == 0, result.stderr
    hyps = (run_dir / "test.de.best.hyp").read_text(encoding="utf-8").splitlines()
    refs = (source / "test.de").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(refs) == 20
    printed = {
        name: float(value)
        for name, value in re.findall(r"^(BLEU|chrF) = ([\d.]+)", result.stdout, re.M)
    }
    assert printed["BLEU"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=0.005)
    assert printed["chrF"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=0.005)

    sources = (source / "test.en").read_text(encoding="utf-8").splitlines()[:3]
    lines = [sources[0], "", sources[1], "   ", sources[2]]
    result = run_cli(
        "translate",
        str(run_dir / "best.pt"),
        "--beam",
        "2",
        stdin="\n".join(lines) + "\n",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.split("\n")[:-1]
    assert len(out) == len(lines) and out[1] == "" and out[3] == ""
    assert [out[0], out[2], out[4]] == hyps[:3]  # the same model, sentence and beam as eval


def test_bad_config_key_is_one_line_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_update: 3\n")
    result = run_cli("prepare", str(bad))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "train.max_update" in result.stderr and "max_updates" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_error_every_torchrun_process_raises_is_printed_by_rank_0_alone(tmp_path):
    """Each process of `torchrun -m translator train` reads the same config: one full line (rank
    0's), not one per process."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_update: 3\n")
    said = {}
    for rank in ("0", "1"):
        result = run_cli("train", str(bad), env={**os.environ, "RANK": rank, "WORLD_SIZE": "2"})
        assert result.returncode == 1
        said[rank] = result.stderr
    assert "train.max_update" in said["0"] and said["0"].count("\n") == 1
    assert said["1"] == "error: rank 1: stopped, see rank 0's error\n"


@pytest.mark.parametrize(
    "args, said",
    [
        (["translate", "x.pt", "--beam", "0"], "translate: Invalid value for '--beam'"),
        (["translate", "x.pt", "--bogus"], "translate: No such option:? '?--bogus"),
        # checked before the (here missing) checkpoint is read
        (["translate", "x.pt", "--dtype", "FP32"], "translate: Invalid value for '--dtype'"),
        (["eval", "x.pt", "--device", "tpu"], "eval: Invalid value for '--device'"),
        # the ranges decode.* holds to, shown in the help and checked there
        (["translate", "x.pt", "--length-penalty", "11"], "Invalid value for '--length-penalty'"),
        (["translate", "x.pt", "--length-penalty", "-11"], "Invalid value for '--length-penalty'"),
        (["eval", "x.pt", "--tokenize", "ZH"], "eval: Invalid value for '--tokenize'"),
        (["translate", "x.pt", "--max-len-a", "2000"], "Invalid value for '--max-len-a'"),
        (["eval", "x.pt", "--channel-weight", "200"], "Invalid value for '--channel-weight'"),
        (["translate"], "translate: Missing argument"),
        (["frobnicate"], "translator: No such command 'frobnicate'"),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(args, said):
    result = run_cli(*args, stdin="")
    assert result.returncode == 2 and result.stdout == ""
    # `python -m translator` here, `translator` when installed
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    # said: a pattern (click's wording of an unknown option changed between releases)
    assert re.search(said, result.stderr) and result.stderr.rstrip().endswith(" -h`)")


@pytest.mark.parametrize("columns", [None, "40", "80", "200"])
def test_help_keeps_whole_option_names_at_any_width_in_ascii(columns):
    """Piped (no COLUMNS) or at a terminal's width, option names are never cut, and the help is
    plain ASCII (boxes would be garbage on a terminal whose locale is not UTF-8)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    result = run_cli("eval", "--help", env=env)
    assert result.returncode == 0
    assert re.search(r"--channel-candidates\s", result.stdout)
    assert re.search(r"--no-cuda-graphs\s", result.stdout)
    assert result.stdout.isascii()


def test_the_bare_command_prints_its_help():
    result = run_cli()
    assert result.returncode == 0 and "Usage: " in result.stdout and "Commands" in result.stdout


def test_keys_lists_the_keys_holding_its_text_and_refuses_text_none_holds():
    shown = run_cli("keys", "Dropout")
    assert shown.returncode == 0, shown.stderr
    entries = shown.stdout.split("\n\n")
    names = [e.split(":")[0] for e in entries if not e.startswith("[")]
    assert {"model.dropout", "model.activation_dropout"} <= set(names)
    assert all("dropout" in entry.lower() for entry in entries if not entry.startswith("["))
    assert entries[0].startswith("[model] ") and "train.lr" not in names
    # what --set takes finds its key, an entry of a mapping too
    for given, key in [("train.lr=5e-4", "train.lr"), ("data.splits.valid=dev", "data.splits")]:
        assert run_cli("keys", given).stdout.split("\n\n")[1].startswith(f"{key}: ")
    unknown = run_cli("keys", "no-such-key")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.count("\n") == 1 and "translator keys" in unknown.stderr


def test_info_refuses_overrides_on_a_checkpoint_whatever_its_name(tmp_path):
    import torch

    from translator import config

    cfg = config.load(None, ["model.vocab_size=50", "model.d_model=16", "model.n_heads=2"])
    path = tmp_path / "model.bin"  # info reads only the config of a checkpoint
    torch.save({"format": 1, "config": config.to_dict(cfg)}, path)
    assert "d_model 16" in run_cli("info", str(path)).stdout
    result = run_cli("info", str(path), "--set", "model.d_model=32")
    assert (
        result.returncode == 1
        and result.stderr.startswith("error: ")
        and "not a checkpoint" in result.stderr
    )


def test_missing_checkpoint_is_one_line_error(tmp_path):
    result = run_cli("translate", str(tmp_path / "nope.pt"), stdin="hello\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "checkpoint not found" in result.stderr and result.stdout == ""


@pytest.mark.parametrize(
    "args, said",
    [
        (["translate", "DIR"], "DIR: a directory, not a checkpoint"),
        (["info", "DIR"], "DIR: a directory, not a config or a checkpoint"),
    ],
)
def test_a_directory_where_a_file_belongs_is_named_as_one(tmp_path, args, said):
    result = run_cli(*[str(tmp_path) if a == "DIR" else a for a in args], stdin="")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert said.replace("DIR", str(tmp_path)) in result.stderr


def test_missing_split_leaves_nothing_behind(tmp_path, multi30k):
    overrides = tiny_overrides(tmp_path / "data", tmp_path / "run") + [
        "data.splits.test=nosuchsplit"
    ]
    result = run_cli("prepare", str(REPO / "configs" / "tiny.yaml"), "--quiet", *sets(overrides))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "nosuchsplit" in result.stderr and "test2016" in result.stderr
    data_dir = tmp_path / "data"
    assert not data_dir.exists() or not any(data_dir.iterdir())


@pytest.mark.parametrize("filename", ["/runs/x/test.en.hyp", b"/runs/x/events.tfevents"])
def test_an_oserror_is_one_line_naming_its_file(monkeypatch, capsys, filename):
    from translator import cli

    def fail(**kwargs):
        raise PermissionError(13, "Permission denied", filename)

    monkeypatch.setattr(cli, "app", fail)
    # leave pytest's own SIGTERM handling alone
    monkeypatch.setattr(cli.signal, "signal", lambda *a: None)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err.count("\n") == 1
    assert err.startswith("error: /runs/x/")
    assert ": Permission denied (check its permissions)" in err


@pytest.mark.parametrize(
    "error, hint",
    [
        (FileNotFoundError(2, "No such file or directory", "terms.tsv"), "(check the path)"),
        (OSError(28, "No space left on device", "runs/x/last.pt"), "(free some space)"),
        (OSError(5, "Input/output error", "runs/x/last.pt"), "permissions and free space)"),
    ],
)
def test_an_oserror_s_advice_fits_its_cause(error, hint):
    from translator.errors import error_line

    line = error_line(error)
    assert line.startswith(f"{error.filename}: {error.strerror} (") and line.endswith(hint)


def test_several_checkpoints_translate_and_eval_as_one_ensemble(tiny, tmp_path):
    """`translate A B` and `eval A B` decode the ensemble (the two commands agree); `A A` is A
    alone; a checkpoint of another vocabulary, or alignments, are one-line errors."""
    from translator import checkpoint
    from translator.data.tokenizer import Tokenizer, train_sentencepiece
    from translator.model.transformer import Transformer

    torch.manual_seed(1)
    other_seed = tmp_path / "b.pt"
    checkpoint.save(other_seed, Transformer(tiny.cfg.model).eval(), tiny.cfg, tiny.tokenizer)
    lines = read_lines(MULTI30K / "test2016.en")[:6]
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("\n".join(lines) + "\n")
    ref.write_text("\n".join(read_lines(MULTI30K / "test2016.de")[:6]) + "\n")
    a, b, stdin = str(tiny.path), str(other_seed), "\n".join(lines) + "\n"
    alone, twice, both = (
        run_cli("translate", *ckpts, "--beam", "2", "-q", stdin=stdin)
        for ckpts in ([a], [a, a], [a, b])
    )
    assert alone.returncode == twice.returncode == both.returncode == 0, both.stderr
    assert twice.stdout == alone.stdout and len(both.stdout.splitlines()) == len(lines)
    scored = run_cli(
        "eval", a, b, "--src", str(src), "--ref", str(ref), "--beam", "2", "-o", str(tmp_path / "h")
    )
    assert scored.returncode == 0, scored.stderr
    assert (tmp_path / "h").read_text() == both.stdout

    vocab = train_sentencepiece(lines * 20, tmp_path / "other", vocab_size=60)
    tokenizer = Tokenizer(vocab)
    cfg = copy.deepcopy(tiny.cfg)
    cfg.model.vocab_size = tokenizer.vocab_size
    checkpoint.save(tmp_path / "c.pt", Transformer(cfg.model).eval(), cfg, tokenizer)
    refused = run_cli("translate", a, str(tmp_path / "c.pt"), stdin=stdin)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "c.pt" in refused.stderr and "SentencePiece" in refused.stderr
    aligned = run_cli("translate", a, b, "--alignments", "-q", stdin=stdin)
    assert aligned.returncode == 1 and aligned.stderr.count("\n") == 1, aligned.stderr
    assert "ensemble" in aligned.stderr and "Traceback" not in aligned.stderr


def run_cli_to(stdout: str, *args: str) -> subprocess.CompletedProcess:
    """The command with stdout redirected by the shell: `>&-` (closed), `>/dev/full`..."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    shell = f'exec "$@" {stdout}'
    return subprocess.run(
        ["sh", "-c", shell, "sh", *CLI, *args],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("command", ["eval", "info", "attention"])
def test_eval_and_info_refuse_a_closed_stdout_and_name_it_when_full(tiny, tmp_path, command):
    """The scores would be lost with exit 0; a failed write said no path."""
    args = [command, str(tiny.path)]
    if command == "attention":
        args += ["A dog.", "-o", str(tmp_path / "attn")]
    if command == "eval":
        (tmp_path / "src").write_text("A dog.\n")
        (tmp_path / "ref").write_text("Ein Hund.\n")
        args += ["--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref"), "-q"]
    closed = run_cli_to(">&-", *args)
    assert closed.returncode == 1 and closed.stderr.count("\n") == 1
    assert closed.stderr.startswith(f"error: {command}: stdout is closed")
    full = run_cli_to(">/dev/full", *args)
    err = without_length_warnings(full.stderr)  # the random model's outputs run to the limit
    assert full.returncode == 1 and err.count("\n") == 1, full.stderr
    assert err.startswith("error: <stdout>: cannot write the ")
    assert "No space left on device" in full.stderr


def test_ctrl_c_during_translate_is_one_line_and_exit_130(tiny):
    """Interrupted while it waits for more input: `... interrupted (Ctrl-C)` on stderr, no
    traceback, exit 130, and what was already translated written."""
    import signal

    from tests.conftest import SENTENCES

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*CLI, "translate", str(tiny.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
        # a child of a non-interactive shell may inherit SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    process.stdin.write(SENTENCES[0] + "\n")  # stdin stays open: the command cannot finish
    process.stdin.flush()
    assert process.stdout.readline()  # its translation: the command now waits for input
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130  # stdin still open: only the signal can end it
    err = process.stderr.read()
    process.stdin.close()
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "python -m translator: interrupted (Ctrl-C)"
