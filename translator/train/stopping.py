"""How a run stops: the limits checked before each update, Ctrl-C and SIGTERM (save, then exit as
an interrupted program), and the lines that say where it stopped and what a stop left."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

from translator.config import TrainConfig
from translator.train import distributed
from translator.train.state import TrainState

if TYPE_CHECKING:
    from translator.train.session import Session


def limit_reached(state: TrainState, t: TrainConfig, seconds: float, deadline: float) -> str | None:
    """The limit that ends the run before its next update, if one is reached.

    Checked before the first update too: a rerun of a run that stopped early or spent its
    minutes does nothing (the same on all ranks: `seconds` is their average).
    """
    if state.step >= t.max_updates:
        return "max_updates"
    if t.max_epochs and state.epoch >= t.max_epochs:
        return "max_epochs"
    if t.patience and state.bad_evals >= t.patience:
        return "early stopping"
    if seconds > deadline:
        return "max_minutes"
    return None


def stopped_line(state: TrainState, reason: str) -> str:
    """The log's last line: where and why the run stopped, and what it skipped."""
    line = f"stopped at update {state.step} ({reason}); {state.skipped_steps} updates skipped"
    if state.oom_splits or state.oom_skipped:
        line += (
            f"; out of memory: {state.oom_splits} batches split, {state.oom_skipped} sentences "
            "skipped"
        )
    return line + (WAY_ON if reason == "early stopping" else "")


# early stopping's stop (and a rerun of it) says how to go on: the counter is checked against the
# current train.patience, so raising it resumes the run
WAY_ON = "; to train on, raise train.patience (the run resumes) or use a new train.run_dir"


class StopRequest:
    """Ctrl-C / SIGTERM set a flag; the loop saves after the current update and exits.

    A second Ctrl-C raises KeyboardInterrupt at once (nothing saved; `run` says what last.pt
    holds).
    """

    def __init__(self) -> None:
        self.requested = False
        self.signum = signal.SIGINT  # the one received (another process's under DDP: Ctrl-C's)
        self.previous = {}
        # signal handlers live in the main thread
        if threading.current_thread() is threading.main_thread():
            self.previous = {
                sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
            }

    def _handle(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum

    def seen(self) -> bool:
        """Whether a stop was requested (what validation checks between its batches)."""
        return self.requested

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def unsaved(s: Session) -> str:
    """What a stop without saving leaves: the updates lost, and the one a rerun resumes from."""
    step, saved, last = s.state.step, s.saved_step, s.run_dir / "last.pt"
    if step == saved:  # stopped inside the update after the save
        lost = ""
    elif step == saved + 1:
        lost = f"update {step} not saved; "
    else:
        lost = f"updates {saved + 1}-{step} not saved; "
    if not last.is_file():
        return lost + "no checkpoint saved yet (a rerun starts over)"
    return lost + f"{last} holds update {saved} (rerun to resume from there)"


def signal_received(s: Session, stop: StopRequest) -> int:
    """The signal that stopped the run, alike on every process (torchrun reports rank 0's exit
    code, and SIGTERM may have reached another rank alone): SIGTERM over Ctrl-C when both came."""
    (signum,) = distributed.max_all(s.dist, [float(stop.signum if stop.requested else 0)])
    return int(signum) or signal.SIGINT
