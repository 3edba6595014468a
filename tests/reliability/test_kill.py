"""SIGKILL at random moments, inside checkpoint writes too: nothing half-written looks complete, and
training resumed ten times in a row ends with the weights of an uninterrupted run, bit for bit.

Runs are forked from the test process (torch already imported), so a start costs milliseconds, not
an interpreter. A child killed "inside a checkpoint write" has torch.save write a random share of
the checkpoint's bytes and then SIGKILL itself; the other kills come from the parent at a random
time.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import time
import traceback
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401 - AdamW imports it lazily: once here, not in every child

from tests.reliability.conftest import small
from translator import checkpoint
from translator.train import loop

SETTINGS = ("model.dropout=0.1", "train.max_updates=8", "train.keep_last=2")


def fork(work) -> int:
    """Run `work()` in a child process; returns its pid. The child never returns into pytest."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            work()
        except BaseException:  # noqa: BLE001 - reported through the exit code and stderr
            traceback.print_exc()
            code = 1
        os._exit(code)
    return pid


def wait(pid: int) -> int:
    """The child's exit code, or minus the signal that ended it."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def train(cfg, die_in_save: int = 0, share: float = 0.0) -> None:
    """loop.run; with die_in_save=N, the N-th checkpoint write of this run stops after `share` of
    its bytes."""
    if die_in_save:
        real, calls = torch.save, []

        def dying_save(obj, handle, *args, **kwargs):
            calls.append(1)
            if len(calls) == die_in_save:
                buffer = io.BytesIO()
                real(obj, buffer, *args, **kwargs)
                handle.write(buffer.getvalue()[: int(share * len(buffer.getvalue()))])
                handle.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return real(obj, handle, *args, **kwargs)

        torch.save = dying_save  # in the child only
    torch.set_num_threads(1)
    loop.run(cfg, quiet=True)


def assert_nothing_half_written(run_dir: Path, note: str) -> None:
    """Every visible checkpoint reads and verifies; only hidden .tmp files may be unfinished."""
    for path in run_dir.iterdir():
        if path.name.startswith(".") and path.name != ".lock":  # the trainers' lock
            assert path.name.endswith(".tmp"), (note, path.name)
        elif path.suffix == ".pt":
            payload = checkpoint.read(path)  # raises on a cut or damaged file
            assert "optimizer" in payload["state"], (note, path.name)
        elif path.name == "manifest.json":
            json.loads(path.read_text())


def test_ten_kills_in_a_row_then_the_same_weights_as_an_uninterrupted_run(small_data, tmp_path):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    started = time.time()
    assert wait(fork(lambda: train(small(small_data, straight, *SETTINGS)))) == 0
    duration = time.time() - started  # of one whole run: kills land anywhere in it

    cfg = small(small_data, killed, *SETTINGS)
    in_save = 0
    for attempt in range(10):
        note = f"seed {seed}, attempt {attempt}"
        if attempt % 2 == 0:  # inside the first or second checkpoint write of this session
            code = wait(
                fork(lambda: train(cfg, die_in_save=rng.choice([1, 2]), share=rng.random()))
            )
            in_save += code == -signal.SIGKILL
        else:
            pid = fork(lambda: train(cfg))
            time.sleep(rng.uniform(0, duration))
            os.kill(pid, signal.SIGKILL)
            code = wait(pid)
        assert code in (0, -signal.SIGKILL), note
        assert_nothing_half_written(killed, note)
    assert in_save >= 1, seed
    assert wait(fork(lambda: train(cfg))) == 0

    a, b = checkpoint.read(straight / "last.pt"), checkpoint.read(killed / "last.pt")
    assert a["state"]["train"]["step"] == b["state"]["train"]["step"] == 8
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), (seed, name)
    for index, slots in a["state"]["optimizer"]["state"].items():
        for slot, tensor in slots.items():
            assert torch.equal(tensor, b["state"]["optimizer"]["state"][index][slot]), (
                seed,
                index,
                slot,
            )
    assert not list(killed.glob(".*.tmp")), seed  # the last start removed what the kills left
    sessions = json.loads((killed / "manifest.json").read_text())["sessions"]
    # at least one run resumed a saved one
    assert any(s["first_update"] > 0 for s in sessions), seed
