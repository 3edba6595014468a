"""How two gloo processes stop together: a stop request (also during validation), an error on one
of them, a divergence, a run_dir they do not share, early stopping at fine-tuning's update 0."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.train.conftest import spawn_ranks, torchrun_env, variant
from tests.train.test_ddp import free_port
from translator.errors import TranslatorError
from translator.train import loop, session

SETTINGS = (
    "model.dropout=0.0",
    "train.max_tokens=512",
    "train.max_updates=4",
    "train.eval_every=2",
    "train.log_every=2",
    "train.valid_bleu_sentences=4",
)


def _term_in_validation(rank: int) -> None:
    """SIGTERM reaches rank 0 as its validation at update 2 begins (torchrun's grace is 30 s)."""
    real = session.validate

    def validate(model, *args, **kwargs):
        if rank == 0 and session_step[0] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(model, *args, **kwargs)

    session_step = [0]
    real_update = loop._update

    def _update(s, *args, **kwargs):
        real_update(s, *args, **kwargs)
        session_step[0] = s.state.step

    session.validate, loop._update = validate, _update


def _term_rank_1(rank: int) -> None:
    """SIGTERM reaches rank 1 alone, during update 1."""
    real = loop.train_step

    def train_step(s, *args, **kwargs):
        if rank == 1 and s.state.step == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(s, *args, **kwargs)

    loop.train_step = train_step


def _crash_rank_1(rank: int) -> None:
    """Rank 1 fails at update 3 with an error of its own; rank 0 waits for it in a collective."""
    real = loop.train_step

    def train_step(s, *args, **kwargs):
        if rank == 1 and s.state.step == 2:
            raise ValueError("injected bad batch")
        return real(s, *args, **kwargs)

    loop.train_step = train_step


def _diverge(rank: int) -> None:
    """Every update after the second is skipped as non-finite, on both ranks alike."""
    real = loop.train_step

    def train_step(s, *args, **kwargs):
        if s.state.step >= 2:
            return math.nan, math.nan, math.nan, False
        return real(s, *args, **kwargs)

    loop.train_step = train_step


def _non_finite_start(rank: int) -> None:
    """The validation of train.init_from's model (rank 0's) gives a non-finite loss."""
    real = session.validate

    def validate(*args, **kwargs):
        return replace(real(*args, **kwargs), loss=math.nan)

    session.validate = validate


INJECT = {
    "term_in_validation": _term_in_validation,
    "term_rank_1": _term_rank_1,
    "crash_rank_1": _crash_rank_1,
    "diverge": _diverge,
    "non_finite_start": _non_finite_start,
}


def _worker(rank: int, cfgs: list, port: int, out_dir: str, inject: str | None) -> None:
    """One process of `torchrun --nproc_per_node 2 -m translator train`; writes how it ended."""
    torch.set_num_threads(1)
    torchrun_env(rank, port)
    if inject:
        INJECT[inject](rank)
    try:
        model = loop.run(cfgs[rank], quiet=True)
        outcome = {"end": "done", "out_proj": model.out_proj.weight.sum().item()}
    except SystemExit as err:
        outcome = {"end": "exit", "code": err.code}
    except TranslatorError as err:
        outcome = {"end": "error", "text": str(err), "every_rank": getattr(err, "every_rank", 0)}
    except Exception as err:
        outcome = {"end": type(err).__name__, "text": str(err)[:200]}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(outcome))


def run_two(cfgs: list, out_dir: Path, inject: str | None = None, deadline_s: float = 120):
    """Both ranks' outcomes; fails (rather than hang the suite) when they do not end in time."""
    out_dir.mkdir(parents=True, exist_ok=True)
    spawn_ranks(_worker, (cfgs, free_port(), str(out_dir), inject), deadline_s)
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def trained(prepared, tmp_path_factory) -> Path:
    """A run directory of one process trained for 2 updates (its last.pt at update 2)."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    loop.run(variant(prepared, run_dir, *SETTINGS, "train.max_updates=2"), quiet=True)
    return run_dir


def test_a_stop_during_validation_abandons_it_and_saves_at_once(prepared, tmp_path):
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, *SETTINGS)
    ends = run_two([cfg, cfg], tmp_path / "out", "term_in_validation")
    # both exit as SIGTERM's, though rank 1 received none (torchrun reports rank 0's code)
    assert ends == [{"end": "exit", "code": 143}] * 2
    log = (run_dir / "train.log").read_text()
    assert "validation at update 2" not in log and "interrupted: saved" in log
    assert torch.load(run_dir / "last.pt", weights_only=False)["state"]["train"]["step"] == 2
    assert not (run_dir / "step-2.pt").exists()  # not a validated checkpoint
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["sessions"][-1]["end_reason"] == "interrupted"


def test_sigterm_to_one_rank_gives_both_its_exit_code(prepared, tmp_path):
    cfg = variant(prepared, tmp_path / "run", *SETTINGS)
    assert (
        run_two([cfg, cfg], tmp_path / "out", "term_rank_1") == [{"end": "exit", "code": 143}] * 2
    )


def test_an_error_on_one_rank_is_one_line_on_the_other(prepared, tmp_path):
    cfg = variant(prepared, tmp_path / "run", *SETTINGS)
    rank0, rank1 = run_two([cfg, cfg], tmp_path / "out", "crash_rank_1")
    assert rank1 == {"end": "ValueError", "text": "injected bad batch"}
    assert rank0 == {
        "end": "error",
        "text": "rank 0: another process stopped (see its error above)",
        "every_rank": 0,
    }


def test_a_divergence_gives_the_same_advice_on_every_rank(prepared, tmp_path):
    cfg = variant(prepared, tmp_path / "run", *SETTINGS, "train.max_updates=20")
    rank0, rank1 = run_two([cfg, cfg], tmp_path / "out", "diverge")
    assert rank0 == rank1 and rank0["end"] == "error" and rank0["every_rank"]
    assert "updates 3-12" in rank0["text"]
    assert (
        "last.pt (update 10) holds the weights that failed, unchanged since update 2"
        in (rank0["text"])
    )


def test_ranks_that_do_not_see_the_same_last_pt_are_refused(prepared, trained, tmp_path):
    """run_dir on each machine's own disk: rank 0 would resume, rank 1 start afresh."""
    shutil.copytree(trained, tmp_path / "rank0")
    cfgs = [variant(prepared, tmp_path / f"rank{r}", *SETTINGS) for r in range(2)]
    rank0, rank1 = run_two(cfgs, tmp_path / "out", deadline_s=60)
    assert rank0["end"] == rank1["end"] == "error" and rank0["every_rank"] and rank1["every_rank"]
    # alike but for the path (the test's run_dirs differ by name, two machines' by their disks)
    assert rank0["text"].split(": ", 1)[1] == rank1["text"].split(": ", 1)[1]
    assert "rank 0 sees update 2 (sha256 " in rank0["text"]
    assert "rank 1 sees no last.pt" in rank0["text"]
    assert "train.run_dir on storage that every machine shares" in rank0["text"]


def test_early_stopping_at_fine_tunings_update_0_stops_every_rank(prepared, trained, tmp_path):
    cfg = variant(
        prepared,
        tmp_path / "run",
        *SETTINGS,
        f"train.init_from={trained / 'last.pt'}",
        "train.patience=1",
        "data.name=ft",  # encoded with the checkpoint's SentencePiece model, by rank 0
        f"data.data_dir={tmp_path / 'data'}",
    )
    rank0, rank1 = run_two([cfg, cfg], tmp_path / "out", "non_finite_start")
    assert rank0["end"] == rank1["end"] == "done"
    assert "stopped at update 0 (early stopping)" in (tmp_path / "run" / "train.log").read_text()
