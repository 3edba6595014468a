"""Where training numbers go: a TensorBoard that cannot write (a full disk) is one warning, not a
thread's traceback and the end of training."""

from __future__ import annotations

import errno
import os
import sys
import threading

import pytest
from tensorboard.compat.tensorflow_stub.io import gfile

from translator.train.metrics import Metrics, literal


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("fills", ["at the start", "during training"])
def test_a_full_disk_turns_tensorboard_off_with_one_warning(tmp_path, monkeypatch, capfd, fills):
    thread_errors = []  # what Python would print as "Exception in thread ..."
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    if fills == "at the start":
        monkeypatch.setattr(gfile.LocalFileSystem, "write", full_disk)
    metrics = Metrics(tmp_path, 10, 0, quiet=True)
    metrics.scalars(1, {"loss": 2.0}, "train")
    if metrics.writer:
        metrics.writer.flush()
    monkeypatch.setattr(gfile.LocalFileSystem, "append", full_disk)
    for step in range(2, 6):  # the writer thread's error comes out of a later call
        metrics.scalars(step, {"loss": 1.0}, "train")
        metrics.scalar_vs_seconds(step, "train/loss", 1.0)
        metrics.text(step, "sample", "ein Satz")
    metrics.close()
    err = capfd.readouterr().err
    events = tmp_path / "tensorboard"
    assert err.count("\n") == 1, err
    assert f"warning: {events}: cannot write TensorBoard events (No space left on device)" in err
    assert "TensorBoard is off" in (tmp_path / "train.log").read_text()
    assert not thread_errors


def test_a_full_disk_under_train_log_names_it(tmp_path):
    metrics = Metrics(tmp_path, 10, 0, quiet=True)

    class Full:
        name = str(tmp_path / "train.log")
        write = flush = close = staticmethod(full_disk)

    metrics.log_file = Full()
    with pytest.raises(OSError) as raised:
        metrics.line("update 1")
    assert raised.value.filename == str(tmp_path / "train.log")
    metrics.log_file = open(tmp_path / "other.log", "a")
    metrics.close()


@pytest.mark.parametrize(
    "where, env",
    [
        ("log", {"FORCE_COLOR": "1"}),  # `FORCE_COLOR=1 translator train ... > log`
        ("log", {"TTY_COMPATIBLE": "1"}),
        ("terminal", {"TERM": "dumb"}),  # no cursor moves: a bar would show nothing until the end
    ],
)
def test_no_live_bar_in_a_log_or_on_a_dumb_terminal(tmp_path, monkeypatch, where, env):
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"TERM": "xterm-256color", **env}.items():
        monkeypatch.setenv(name, value)
    screen = None
    if where == "terminal":
        screen, fd = os.openpty()  # a real terminal (its screen's end open, as isatty needs)
        stdout = os.fdopen(fd, "w")
    else:
        stdout = open(tmp_path / "stdout.log", "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    metrics = Metrics(tmp_path, 20, 0, quiet=False)
    for update in range(1, 21):
        metrics.advance(update, f"loss {1 / update:.3f}")
    metrics.line("update 20")
    metrics.close()
    stdout.close()
    if screen is not None:
        os.close(screen)
    assert metrics.progress.disable
    if where == "log":
        lines = (tmp_path / "stdout.log").read_text().split("\n")
        assert lines[0].startswith("session started ") and lines[1:] == ["update 20", ""]


def test_the_eta_counts_the_time_validations_take(tmp_path):
    """After its first update, a session takes 20 updates of 1 s each and a 20 s validation: 2 s
    an update on average, so the 80 updates left take 160 s (rich's estimate, over its last 30 s
    of updates, said 80 s, and each validation pushed the end back)."""
    now = [100.0]
    metrics = Metrics(tmp_path, 101, 0, quiet=True)
    metrics.remaining.clock = lambda: now[0]
    (task,) = metrics.progress.tasks
    assert metrics.remaining.render(task).plain == "-:--:--"  # no update yet
    metrics.advance(1, "")  # the clock starts at the first update's end, not at start-up
    for update in range(2, 22):
        now[0] += 1.0
        if update == 11:
            now[0] += 20.0  # a validation
        metrics.advance(update, "")
    metrics.close()
    assert metrics.remaining.render(task).plain == "0:02:40"


@pytest.mark.filterwarnings("ignore:html5lib's sanitizer is deprecated:DeprecationWarning")
@pytest.mark.parametrize(
    "text",
    [
        "A *big* dog_s <b>run</b> [here](http://x) # 1 + 2 - 3 | ~4~ `code` \\ {a} !",
        "**source:** a_b_c",
        "<script>alert(1)</script>",
    ],
)
def test_a_sample_shows_in_tensorboard_as_it_was_written(text):
    """TensorBoard's text tab renders summaries as Markdown (its own renderer, here): a sample's
    markup characters must come out as characters, not emphasis, links or tags."""
    import html

    from tensorboard.plugin_util import markdown_to_safe_html

    rendered = markdown_to_safe_html(literal(text))
    assert rendered == f"<p>{html.escape(text, quote=False)}</p>"
