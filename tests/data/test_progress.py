"""Progress for the steps no library reports on: reading local files, and SentencePiece training."""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path

import pytest

from tests.data.conftest import small_splits, tiny_config, write_text_corpus
from translator.data.corpus import load_split, source_files
from translator.data.progress import Bars, bytes_read, live_terminal
from translator.data.spm_log import TrainingLog, stderr_lines
from translator.data.tokenizer import train_sentencepiece
from translator.errors import TranslatorError


@pytest.mark.skipif(
    not Path("/proc/self/fdinfo").is_dir(), reason="read offsets come from Linux /proc"
)
def test_bytes_read_follows_a_file_read_elsewhere(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 1_000_000)
    seen: list[int] = []
    halfway_seen = threading.Event()

    def report(done: int) -> None:
        seen.append(done)
        if done == 500_000:
            halfway_seen.set()

    def reader():  # another thread reads half, pauses until that is seen (or 30 s), then the rest
        with open(path, "rb", buffering=0) as handle:  # unbuffered: the offset is exact
            handle.read(500_000)
            halfway_seen.wait(timeout=30)
            handle.read()

    with bytes_read([path], report, every_s=0.05):
        thread = threading.Thread(target=reader)
        thread.start()
        thread.join()
    assert 500_000 in seen  # the pause was seen, at the reader's offset
    assert seen == sorted(seen) and seen[-1] == 1_000_000


def test_source_files_are_what_load_split_reads(tmp_path):
    cfg = tiny_config(write_text_corpus(tmp_path / "corpus", small_splits()), tmp_path / "data")
    files = source_files(cfg.data, "train")
    assert [f.name for f in files] == ["train.en", "train.de"]
    seen: list[int] = []
    with bytes_read(files, seen.append):
        table = load_split(cfg.data, "train", tmp_path / "cache")
    assert table.num_rows == 300 and seen[-1] == sum(f.stat().st_size for f in files)
    assert source_files(tiny_config("hf:wmt/wmt14:de-en", tmp_path / "data").data, "train") == []


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_training_reports_progress_and_gives_the_same_model(tmp_path, model_type):
    en, de = small_splits()["train"]
    sentences = en + de
    reports: list[tuple[int, int]] = []
    quiet = train_sentencepiece(
        sentences, tmp_path / "quiet", vocab_size=300, model_type=model_type
    )
    followed = train_sentencepiece(
        sentences,
        tmp_path / "followed",
        vocab_size=300,
        model_type=model_type,
        progress=lambda done, total: reports.append((done, total)),
    )
    assert quiet.read_bytes() == followed.read_bytes()  # reading the log changes nothing
    assert reports, "no progress reported"
    done = [d for d, _ in reports]
    assert done == sorted(done) and all(0 <= d <= t for d, t in reports)
    assert done[-1] > 0

    os.write(2, b"")  # file descriptor 2 is usable again (restored, not left on the closed pipe)


@pytest.mark.parametrize("followed", [False, True])
def test_sentencepiece_failure_is_one_clear_error(tmp_path, followed):
    en, de = small_splits()["train"]
    progress = (lambda done, total: None) if followed else None
    with pytest.raises(
        TranslatorError, match="SentencePiece training failed: Vocabulary size is smaller"
    ):
        train_sentencepiece(en + de, tmp_path / "spm", vocab_size=10, progress=progress)
    assert not list(tmp_path.iterdir())


def test_training_log_lines_map_to_progress():
    reports: list[tuple[int, int]] = []
    log = TrainingLog(1000, lambda d, t: reports.append((d, t)))
    for line in [
        "I0000 trainer_interface.cc:446] Loaded all 58000 sentences",
        "I0000 unigram_model_trainer.cc:514] Initialized 5000 seed pieces",
        "I0000 unigram_model_trainer.cc:903] EM sub_iter=0 size=4000 obj=10.2 num_tokens=8",
        "I0000 unigram_model_trainer.cc:903] EM sub_iter=1 size=1100 obj=8.0 num_tokens=8",
    ]:
        log(line)
    assert reports == [(0, 4000), (1000, 4000), (3900, 4000)]
    bpe: list[tuple[int, int]] = []
    TrainingLog(1000, lambda d, t: bpe.append((d, t)))(
        "I0000 bpe_model_trainer.cc:421] Merged: freq=19 merges=900 piece=ab"
    )
    assert bpe == [(900, 1000)]


def test_a_hub_download_draws_the_hubs_own_bars_between_ours(tmp_path, monkeypatch):
    import datasets
    import huggingface_hub
    from datasets.utils.tqdm import are_progress_bars_disabled

    from translator import prepare

    splits, seen = small_splits(120), []

    def fake_hub(repo, subset=None, split=None, **kwargs):
        seen.append(
            (are_progress_bars_disabled(), huggingface_hub.utils.are_progress_bars_disabled())
        )
        en, de = splits[{"train": "train", "validation": "valid", "test": "test"}[split]]
        return datasets.Dataset.from_dict(
            {"translation": [{"de": d, "en": e} for e, d in zip(en, de)]}
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    cfg = tiny_config("hf:wmt/wmt14:de-en", tmp_path / "data", "data.splits.valid=validation")
    from translator.data import progress

    prepare.run(cfg, force=True, log=lambda line: None)  # stderr a log file (pytest's capture)
    assert seen == [(True, True)] * 3  # no redrawn bars written into a log
    monkeypatch.setattr(progress, "live_terminal", lambda stream: True)
    prepare.run(cfg, force=True, log=lambda line: None)
    assert seen[3:] == [(False, False)] * 3  # on a terminal: shown while loading each split
    assert are_progress_bars_disabled()  # and off again for the rest of the job
    prepare.run(cfg, force=True, quiet=True)
    assert seen[6:] == [(True, True)] * 3  # --quiet: nobody's bars


def test_stderr_lines_keeps_draining_when_the_reader_fails():
    """A log bigger than a pipe holds, with a line handler that raises: the writer must not
    block."""
    lines: list[str] = []

    def handler(line: str) -> None:
        lines.append(line)
        raise RuntimeError("display gone")

    writer = threading.Thread(
        target=lambda: os.write(2, b"x" * 100 + b"\n" * 2000 + b"y" * 300_000 + b"\n")
    )
    with stderr_lines(handler):
        writer.start()
        writer.join(timeout=10)
        assert not writer.is_alive(), "the writer blocked on a full pipe"
    assert lines == ["x" * 100 + "\n"]


def test_a_step_that_ends_at_once_shows_its_mean_rate_not_zero():
    from rich.progress import Progress

    from translator.data.progress import StatsColumn

    now = [100.0]
    progress = Progress(StatsColumn(), get_time=lambda: now[0], disable=True)
    task = progress.add_task("clean", total=5000, bar=True)
    now[0] += 2.0
    # one update: rich has no two samples to take a speed from
    progress.update(task, completed=5000)
    progress.stop_task(task)
    assert str(StatsColumn().render(progress.tasks[task])) == "5,000/5,000 2.5k/s eta 0:00:00"


# rich's own answers: a forced colour or "TTY compatible" makes any file a terminal to it
RICH_TERMINAL_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "TERM")


@pytest.fixture
def stderr_to(tmp_path, monkeypatch, request):
    """stderr as a log file or a terminal (a pseudo-terminal: a real isatty, no faked answer),
    with the given environment -> the stream."""

    def make(where: str, **env: str):
        for name in RICH_TERMINAL_ENV:
            monkeypatch.delenv(name, raising=False)
        for name, value in {"TERM": "xterm-256color", **env}.items():
            monkeypatch.setenv(name, value)
        if where == "terminal":
            screen, fd = os.openpty()  # the screen's end stays open: closed, isatty turns False
            request.addfinalizer(lambda: os.close(screen))
            stream = os.fdopen(fd, "w")
        else:
            stream = open(tmp_path / "log", "w")
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    return make


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.parametrize(
    "where, env, live",
    [
        ("log", {}, False),
        ("log", {"FORCE_COLOR": "1"}, False),  # `FORCE_COLOR=1 translator prepare ... > log 2>&1`
        ("log", {"TTY_COMPATIBLE": "1"}, False),
        ("terminal", {}, True),
        ("terminal", {"FORCE_COLOR": "1"}, True),
        ("terminal", {"TERM": "dumb"}, False),  # no cursor moves: rich would show nothing
        ("terminal", {"TERM": "unknown"}, False),
    ],
)
def test_live_bars_only_on_a_terminal_that_redraws(stderr_to, where, env, live):
    stream = stderr_to(where, **env)
    try:
        assert live_terminal(stream) is live
        bars = Bars(quiet=False)
        assert bars.live is live and bars.progress.disable is not live
    finally:
        stream.close()


def test_forced_colour_in_a_log_gives_plain_lines(stderr_to, tmp_path):
    stream = stderr_to("log", FORCE_COLOR="1")
    with Bars(quiet=False) as bars, bars.step("encode train", 10) as step:
        step.advance(10)
    bars.summary("prepared", [("pairs", "10")])
    stream.close()
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines[0].startswith("encode train: ") and lines[1:] == ["prepared", "pairs: 10"]
    assert "\x1b" not in (tmp_path / "log").read_text()  # no redraws, no cursor codes


def test_live_terminal_without_a_file_descriptor():
    assert not live_terminal(None) and not live_terminal(io.StringIO())


def test_an_eta_past_a_day_keeps_its_hours():
    from translator.data.progress import clock

    assert [clock(s) for s in (0, 59.9, 3661, 90000)] == [
        "0:00:00",
        "0:00:59",
        "1:01:01",
        "25:00:00",
    ]


def test_a_failed_step_is_not_logged_as_done(tmp_path, monkeypatch):
    """A log holds a step's line only when it finished: a failed load is the error alone."""
    from translator.data.progress import Bars

    with open(tmp_path / "log", "w") as log:
        monkeypatch.setattr(sys, "stderr", log)
        with pytest.raises(ValueError), Bars(quiet=False) as bars:
            with bars.step("load train", total=10) as step:
                step.advance(10)
            with bars.step("load valid", total=10):
                raise ValueError("the two files differ in line count")
    lines = (tmp_path / "log").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["load train"]
