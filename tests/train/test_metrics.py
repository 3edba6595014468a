"""Where training numbers go: a TensorBoard that cannot write (a full disk) is one warning, not a
thread's traceback and the end of training."""

from __future__ import annotations

import errno
import threading

import pytest
from tensorboard.compat.tensorflow_stub.io import gfile

from translator.train.metrics import Metrics


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
