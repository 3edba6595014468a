"""`prepare` killed at random moments never leaves a prepared directory that `train` would take as
complete."""

from __future__ import annotations

import os
import random
import shutil
import signal
import time

from tests.data.conftest import small_splits, write_text_corpus
from tests.reliability.conftest import data_overrides
from tests.reliability.test_kill import fork, wait
from translator import config, prepare
from translator.data.tokenizer import sha256_file
from translator.files import read_lines
from translator.prepared import load_manifest, out_of_date, prepared_dir


def assert_absent_or_complete(cfg: config.Config, note: str) -> bool:
    """The prepared directory is missing, or it has every file its manifest lists, with that
    content."""
    folder = prepared_dir(cfg.data)
    if not folder.exists():
        return False
    manifest = load_manifest(cfg.data)  # what train reads first
    assert not out_of_date(cfg.data), note
    for name, digest in manifest["files"].items():  # id arrays and SentencePiece models
        assert sha256_file(folder / name) == digest, (note, name)
    for split in ("valid", "test"):  # the raw text that validation and eval score against
        assert (
            len(read_lines(folder / f"{split}.{cfg.data.tgt_lang}")) == manifest["pairs"][split]
        ), (note, split)
    return True


def test_prepare_killed_at_random_moments(tmp_path):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    cfg = config.load(
        None,
        data_overrides(
            write_text_corpus(tmp_path / "corpus", small_splits(300)), tmp_path / "data"
        ),
    )
    started = time.time()
    assert wait(fork(lambda: prepare.run(cfg, quiet=True))) == 0
    duration = time.time() - started
    assert assert_absent_or_complete(cfg, f"seed {seed}")
    # two with no prepared directory, then two replacing a complete one (--force)
    for attempt in range(4):
        note = f"seed {seed}, attempt {attempt}"
        if attempt < 2:
            shutil.rmtree(tmp_path / "data")
        elif not prepared_dir(cfg.data).exists():
            assert wait(fork(lambda: prepare.run(cfg, quiet=True))) == 0
        pid = fork(lambda: prepare.run(cfg, force=True, quiet=True))
        time.sleep(rng.uniform(0, duration))
        os.kill(pid, signal.SIGKILL)
        assert wait(pid) in (0, -signal.SIGKILL), note
        assert_absent_or_complete(cfg, note)
