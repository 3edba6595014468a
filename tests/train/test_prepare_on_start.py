"""`train` prepares missing data itself; under DDP (2 gloo processes on CPU) rank 0 alone
prepares."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO
from tests.data.conftest import small_splits, write_text_corpus
from tests.train.conftest import spawn_ranks
from tests.train.test_ddp import free_port
from translator import config, prepare
from translator.errors import TranslatorError
from translator.prepared import load_manifest
from translator.train import loop


def small_config(source: Path, root: Path, *overrides: str) -> config.Config:
    """configs/tiny.yaml shrunk to a two-update run on a small local source, data not yet
    prepared."""
    return config.load(
        REPO / "configs" / "tiny.yaml",
        [
            f"data.source={source}",
            f"data.data_dir={root / 'data'}",
            "data.splits.valid=valid",
            "data.vocab_size=200",
            "model.d_model=32",
            "model.d_ff=64",
            "model.n_heads=2",
            "model.max_positions=128",
            f"train.run_dir={root / 'run'}",
            "train.max_updates=2",
            "train.eval_every=2",
            "train.warmup_steps=2",
            "train.max_tokens=512",
            "train.valid_bleu_sentences=4",
            "train.precision=fp32",
            *overrides,
        ],
    )


def _worker(rank: int, cfg: config.Config, port: int, out_dir: str) -> None:
    """One process of `torchrun --nproc_per_node 2 -m translator train`, recording who prepared."""
    torch.set_num_threads(1)
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    real = prepare.run

    def counted(*args, **kwargs):
        with open(os.path.join(out_dir, "prepared-by"), "a") as handle:
            handle.write(f"{rank}\n")
        return real(*args, **kwargs)

    prepare.run = counted
    try:
        model = loop.run(cfg, quiet=True)
        torch.save(model.state_dict(), os.path.join(out_dir, f"rank{rank}.pt"))
    except TranslatorError as err:
        Path(out_dir, f"error{rank}").write_text(str(err))


def spawn_two(cfg: config.Config, out_dir: Path, deadline_s: float = 300) -> None:
    """Run both ranks; fail (rather than hang the suite) if they have not finished by the
    deadline."""
    spawn_ranks(_worker, (cfg, free_port(), str(out_dir)), deadline_s)


def test_two_ranks_prepare_once_then_train_alike(tmp_path):
    source = write_text_corpus(tmp_path / "corpus", small_splits())
    cfg = small_config(source, tmp_path)
    spawn_two(cfg, tmp_path)
    assert not list(tmp_path.glob("error*")), [p.read_text() for p in tmp_path.glob("error*")]
    assert (tmp_path / "prepared-by").read_text() == "0\n"  # one writer
    assert load_manifest(cfg.data)["pairs"]["train"] == 300
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    assert all(torch.equal(tensor, rank1[name]) for name, tensor in rank0.items())


def test_a_failing_prepare_on_rank_0_stops_every_rank(tmp_path):
    splits = small_splits()
    del splits["test"]  # rank 0's prepare fails at the missing split
    source = write_text_corpus(tmp_path / "corpus", splits)
    # far below the barrier's timeout
    spawn_two(small_config(source, tmp_path), tmp_path, deadline_s=120)
    mine, theirs = (tmp_path / "error0").read_text(), (tmp_path / "error1").read_text()
    assert "test" in mine
    # short: rank 0 prints the whole of it, maybe after this line
    assert theirs == "rank 1: rank 0 failed while preparing the data (see its error)"
    assert not (tmp_path / "data" / "multi30k-tiny").exists() and not (tmp_path / "run").exists()


def test_data_prepared_with_other_settings_is_refused_and_left_alone(tmp_path):
    source = write_text_corpus(tmp_path / "corpus", small_splits())
    prepare.run(small_config(source, tmp_path), quiet=True)
    manifest = tmp_path / "data" / "multi30k-tiny" / "manifest.json"
    made = manifest.stat().st_mtime_ns
    with pytest.raises(
        TranslatorError, match=r"data\.vocab_size: 200 there, 300 here.*another data\.name"
    ):
        loop.run(small_config(source, tmp_path, "data.vocab_size=300"), quiet=True)
    assert manifest.stat().st_mtime_ns == made and not (tmp_path / "run").exists()


def test_a_run_directory_holding_prepared_data_is_refused_before_anything_is_written(tmp_path):
    """Its manifest.json is prepare's: the run's would replace it, and the data be lost."""
    source = write_text_corpus(tmp_path / "corpus", small_splits())
    prepare.run(small_config(source, tmp_path), quiet=True)
    prepared = tmp_path / "data" / "multi30k-tiny"
    before = {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()}
    copy = tmp_path / "copy"  # another config's prepared data: its manifest tells
    copy.mkdir()
    (copy / "manifest.json").write_bytes((prepared / "manifest.json").read_bytes())
    for run_dir in (prepared, copy):
        with pytest.raises(TranslatorError, match="train.run_dir is a directory of prepared data"):
            loop.run(small_config(source, tmp_path, f"train.run_dir={run_dir}"), quiet=True)
    assert {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()} == before
    assert [p.name for p in copy.iterdir()] == ["manifest.json"]


def test_the_config_s_own_data_directory_is_refused_as_run_dir_before_it_is_prepared(
    tmp_path, monkeypatch
):
    """Named another way (relative, through ..) and not prepared yet: still the data's place."""
    source = write_text_corpus(tmp_path / "corpus", small_splits())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    cfg = small_config(source, tmp_path, "train.run_dir=sub/../data/multi30k-tiny")
    with pytest.raises(TranslatorError, match="train.run_dir is a directory of prepared data"):
        loop.run(cfg, quiet=True)
    assert not (tmp_path / "data").exists()


def test_a_run_whose_own_record_is_damaged_goes_on(tmp_path, capsys):
    """A run directory's damaged manifest.json (cut short) is the run's own, not prepare's: kept
    aside with a warning, and the run trains."""
    source = write_text_corpus(tmp_path / "corpus", small_splits())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text('{"sessions": [{"started": ')
    loop.run(small_config(source, tmp_path), quiet=True)
    assert (run_dir / "last.pt").is_file() and (run_dir / "manifest.json.damaged").is_file()
    assert "damaged" in capsys.readouterr().err


def test_a_directory_that_is_not_prepared_data_is_not_replaced(tmp_path):
    source = write_text_corpus(tmp_path / "corpus", small_splits())
    cfg = small_config(source, tmp_path)
    theirs = tmp_path / "data" / "multi30k-tiny" / "notes.txt"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("mine")
    with pytest.raises(TranslatorError, match="no manifest.json"):
        loop.run(cfg, quiet=True)
    assert [p.name for p in theirs.parent.iterdir()] == [
        "notes.txt"
    ] and theirs.read_text() == "mine"


def test_training_warns_when_its_source_is_not_what_the_data_were_prepared_from(tmp_path, capsys):
    """Prepared data are reused by their settings; another or an edited source is not read, and
    the log says so (on stderr too, quiet or not)."""
    source = write_text_corpus(tmp_path / "corpus", small_splits())
    prepare.run(small_config(source, tmp_path), quiet=True)
    capsys.readouterr()  # prepare's own warnings (a 200-piece vocabulary lacks a few letters)
    log = tmp_path / "run" / "train.log"
    loop.run(small_config(source, tmp_path), quiet=True)
    assert "warning" not in log.read_text() and "warning" not in capsys.readouterr().err

    other = write_text_corpus(tmp_path / "other", small_splits(train=200))
    loop.run(small_config(other, tmp_path, "train.max_updates=3"), quiet=True)
    said = f"was prepared from {source}, not {other}; training reads the prepared copy"
    assert said in log.read_text() and said in capsys.readouterr().err

    train_en = source / "train.en"
    train_en.write_text(train_en.read_text().replace("A ", "One ", 1), encoding="utf-8")
    loop.run(small_config(source, tmp_path, "train.max_updates=4"), quiet=True)
    assert f"the files of {source} changed after" in log.read_text()


def test_training_warns_when_its_data_were_cleaned_by_other_rules(tmp_path, capsys):
    """An older translator's prepared data: the run goes on with them (resuming must), and says
    that translate now cleans its input by other rules than the training text's."""
    source = write_text_corpus(tmp_path / "corpus", small_splits())
    folder = prepare.run(small_config(source, tmp_path), quiet=True)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["cleaning"]  # as prepared before the digest was recorded
    (folder / "manifest.json").write_text(json.dumps(manifest))
    loop.run(small_config(source, tmp_path), quiet=True)
    said = f"{folder} was prepared by an older translator, which kept no record of its text"
    assert said in (tmp_path / "run" / "train.log").read_text()
    assert said in capsys.readouterr().err
