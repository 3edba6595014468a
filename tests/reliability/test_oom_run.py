"""A whole training run with out-of-memory injected on every big batch: it goes on, and counts
it."""

from __future__ import annotations

from tests.reliability.conftest import small
from tests.train.test_oom import inject_oom
from translator.train import loop


def test_training_goes_on_after_out_of_memory_and_counts_it(small_data, tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    inject_oom(monkeypatch, lambda batch: len(batch.src) > 6)
    run_dir = tmp_path / "run"
    loop.run(small(small_data, run_dir, "train.log_every=2"), quiet=True)
    log = (run_dir / "train.log").read_text()
    assert "stopped at update 4 (max_updates)" in log and "out of memory on a batch of" in log
    splits = int(log.split("out of memory: ")[1].split()[0])
    assert splits >= 4  # every update had a batch of more than 6 sentences
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.value for e in events.Scalars("train/oom_splits")][-1] == splits
