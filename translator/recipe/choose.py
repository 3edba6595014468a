"""Choosing on valid what the recipe scores on test: a checkpoint, an ensemble, a channel weight."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from translator import checkpoint, evaluate
from translator.bleu import Scores

# the channel model's weights tried on valid (translator/rerank.py); the plain search competes too
CHANNEL_WEIGHTS = (0.1, 0.2, 0.3, 0.5)


Chosen = str | list[str] | dict[str, Any]  # a checkpoint, an ensemble's, or either with a channel


def first(chosen: Chosen) -> str:
    """The chosen checkpoint, or an ensemble's first member's."""
    if isinstance(chosen, dict):
        chosen = chosen["checkpoints"]
    return chosen[0] if isinstance(chosen, list) else chosen


def described(chosen: Chosen) -> str:
    """The chosen checkpoint(s), as scores.txt names them."""
    if isinstance(chosen, dict):
        checkpoints = described(chosen["checkpoints"])
        return f"{checkpoints} reranked by {chosen['channel']}, weight {chosen['channel_weight']}"
    return " + ".join(chosen) if isinstance(chosen, list) else chosen


@contextlib.contextmanager
def stage(seconds: dict[str, float], name: str) -> Iterator[None]:
    """Time the block into seconds[name] (rounded to 0.1 s)."""
    began = time.time()
    yield
    seconds[name] = round(time.time() - began, 1)


def choose_on_valid(
    run_dir: Path, seconds: dict[str, float], quiet: bool, score_test: bool = True
) -> tuple[dict[str, Scores], str, Scores | None]:
    """Score avg.pt and best.pt on valid; the better one (avg.pt on a tie), and only it, on test."""
    with stage(seconds, "eval_valid"):
        valid, chosen = avg_or_best(run_dir, "", quiet)
    return valid, chosen, on_test(run_dir, chosen, seconds, quiet) if score_test else None


def avg_or_best(run_dir: Path, model_dir: str, quiet: bool) -> tuple[dict[str, Scores], str]:
    """One model's avg.pt and best.pt (in run_dir/model_dir, model_dir "" or "member-1/") scored
    on valid, and the better one (avg.pt on a tie). A best.pt with avg.pt's weights (`--average
    1` kept the last checkpoint, and it was the best) is not decoded again: it gets avg.pt's
    scores, and keeps no hypotheses file of its own."""
    avg, best = f"{model_dir}avg.pt", f"{model_dir}best.pt"
    scores = {avg: score(run_dir, avg, "valid", quiet)}
    same = checkpoint.same_model(run_dir / avg, run_dir / best)
    scores[best] = scores[avg] if same else score(run_dir, best, "valid", quiet)
    return scores, max(scores, key=lambda name: scores[name].bleu)


def ensemble_on_valid(
    run_dir: Path,
    member_dirs: list[Path],
    seconds: dict[str, float],
    quiet: bool,
    score_test: bool = True,
) -> tuple[dict[str, Scores], list[str], Scores | None]:
    """Each member keeps avg.pt or best.pt by valid BLEU; the ensemble of those on valid (and,
    only it, on test)."""
    valid: dict[str, Scores] = {}
    chosen = []
    with stage(seconds, "eval_valid"):
        for member_dir in member_dirs:
            scores, kept = avg_or_best(run_dir, f"{member_dir.name}/", quiet)
            valid |= scores
            chosen.append(kept)
        valid["ensemble"] = score(run_dir, chosen, "valid", quiet)
    return valid, chosen, on_test(run_dir, chosen, seconds, quiet) if score_test else None


def rerank_on_valid(
    run_dir: Path,
    member_dirs: list[Path],
    channel_dir: Path,
    seconds: dict[str, float],
    quiet: bool,
    score_test: bool = True,
) -> tuple[dict[str, Scores], Chosen, Scores | None]:
    """The direct model(s) keep their checkpoints as without a channel; the channel model keeps
    avg.pt or best.pt by its own valid BLEU; then each of CHANNEL_WEIGHTS reranks the direct
    search's n-best on valid, and the best of those and of the plain search (only it) is scored
    on test."""
    if len(member_dirs) == 1:
        valid, direct, _ = choose_on_valid(run_dir, seconds, quiet, score_test=False)
    else:
        valid, direct, _ = ensemble_on_valid(run_dir, member_dirs, seconds, quiet, False)
    plain = valid["ensemble" if isinstance(direct, list) else direct]
    with stage(seconds, "eval_valid_channel"):
        channel_valid, channel = avg_or_best(run_dir, f"{channel_dir.name}/", quiet)
        valid |= channel_valid
        reranked = {}
        for weight in CHANNEL_WEIGHTS:
            option = {"checkpoints": direct, "channel": channel, "channel_weight": weight}
            valid[described(option)] = score(run_dir, option, "valid", quiet)
            reranked[described(option)] = option
    best = max(reranked, key=lambda n: valid[n].bleu)
    chosen = reranked[best] if valid[best].bleu > plain.bleu else direct
    return valid, chosen, on_test(run_dir, chosen, seconds, quiet) if score_test else None


def on_test(run_dir: Path, chosen: Chosen, seconds: dict[str, float], quiet: bool) -> Scores:
    """The chosen checkpoint(s) scored on the test split, timed as seconds["eval_test"]."""
    with stage(seconds, "eval_test"):
        return score(run_dir, chosen, "test", quiet)


def score(run_dir: Path, chosen: Chosen, split: str, quiet: bool) -> Scores:
    """`translator eval CKPT --split SPLIT --lc-tok`, hypotheses to run_dir/SPLIT.CKPT-STEM.hyp
    (a member's beside it, SPLIT.ensemble.hyp for a list of checkpoints: the ensemble); with a
    channel model `... --channel C --channel-weight W`, to SPLIT.CKPT-STEM.channel-W.hyp."""
    channel, weight, suffix = None, None, ""
    if isinstance(chosen, dict):
        channel, weight = run_dir / chosen["channel"], chosen["channel_weight"]
        chosen, suffix = chosen["checkpoints"], f".channel-{weight}"
    if isinstance(chosen, list):
        ckpts, hyp_file = [run_dir / n for n in chosen], run_dir / f"{split}.ensemble{suffix}.hyp"
    else:
        ckpts = run_dir / chosen
        hyp_file = ckpts.parent / f"{split}.{ckpts.stem}{suffix}.hyp"
    if hyp_file.is_symlink():  # a name picked here: replaced, never written through (eval's -o is)
        hyp_file.unlink()
    return evaluate.run(
        ckpts,
        split=split,
        hyp_file=hyp_file,
        lc_tok=True,
        channel=channel,
        channel_weight=weight,
        quiet=quiet,
    )
