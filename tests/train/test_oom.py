"""An update whose batch runs out of memory is split by sentences and redone (injected OOM on
CPU)."""

from __future__ import annotations

import pytest
import torch

from tests.train.test_step import (
    BOTH,
    CPU,
    FIRST,
    SECOND,
    SRC,
    TGT,
    assert_close,
    session,
    update,
)
from translator.data.batching import make_batch
from translator.data.tokenizer import EOS_ID, PAD_ID
from translator.errors import TranslatorError
from translator.train import loop, oom
from translator.train.distributed import Dist


class Lines:
    """Stands in for Metrics: keeps the log lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, message: str) -> None:
        self.lines.append(message)


def inject_oom(monkeypatch, too_big, pollute: bool = True) -> list[int]:
    """loss_sums raises torch.OutOfMemoryError for a batch where too_big(batch) (after, when
    `pollute`, adding that batch's gradient once, as a backward pass that fails half-way would);
    returns the rows of each OOM."""
    real, seen = loop.loss_sums, []

    def loss_sums(net, batch, label_smoothing, rows=None):
        if too_big(batch):
            seen.append(len(batch.src))
            if pollute:
                real(net, batch, label_smoothing, rows)[0].backward()
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(net, batch, label_smoothing, rows)

    monkeypatch.setattr(loop, "loss_sums", loss_sums)
    return seen


def test_a_batch_out_of_memory_is_halved_and_gives_the_same_update(monkeypatch):
    expected, _, _ = update(session(sgd=True), [FIRST, SECOND])
    s = session(sgd=True)
    s.metrics = Lines()
    seen = inject_oom(monkeypatch, lambda batch: len(batch.src) > 2)
    got, _, ok = update(s, [FIRST, SECOND])
    assert ok and seen == [4, 4]  # each 4-sentence batch failed once; its halves of 2 fit
    assert_close(got, expected, atol=1e-6, rtol=1e-5)
    assert (s.state.oom_splits, s.state.oom_skipped) == (2, 0)
    assert "update 1: out of memory on a batch of 4 sentences; split in two" in s.metrics.lines[0]


def test_a_single_sentence_out_of_memory_is_skipped_and_counted(monkeypatch):
    assert SRC.count(SRC[3]) == 1
    tokens = BOTH.n_tgt_tokens  # the update's divisor stays that of all its sentences
    expected_s = session(sgd=True)
    before = {k: v.detach().clone() for k, v in expected_s.model.named_parameters()}
    loop.train_step(expected_s, [make_batch(SRC[:3] + SRC[4:], TGT[:3] + TGT[4:])], tokens)
    expected = {k: v.detach() - before[k] for k, v in expected_s.model.named_parameters()}

    s = session(sgd=True)
    s.metrics = Lines()
    inject_oom(
        monkeypatch,
        lambda batch: SRC[3] + [EOS_ID] in [row[row != PAD_ID].tolist() for row in batch.src],
    )
    before = {k: v.detach().clone() for k, v in s.model.named_parameters()}
    _, _, _, ok = loop.train_step(s, [BOTH], tokens)
    got = {k: v.detach() - before[k] for k, v in s.model.named_parameters()}
    assert ok and s.state.oom_skipped == 1 and s.state.oom_splits == 3  # 8 -> 4 -> 2 -> 1
    assert_close(got, expected, atol=1e-6, rtol=1e-5)
    assert (
        "out of memory on a single sentence" in s.metrics.lines[-1]
        and "skipped (1 skipped so far)" in s.metrics.lines[-1]
    )


def test_out_of_memory_with_several_processes_is_one_line_naming_the_update():
    """A process cannot split its batch alone (the others wait in the all-reduce): the run stops
    with advice, not torch's traceback."""
    s = session("train.max_tokens=3000")
    s.dist, s.state.step = Dist(CPU, rank=1, world_size=2), 6

    def backward(batch, last):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(TranslatorError) as err:
        oom.accumulate(s, [FIRST], backward)
    assert str(err.value) == (
        "rank 1: out of memory in update 7 (with several processes a batch cannot be split: the "
        "others wait for its gradients) (lower train.max_tokens (now 3000) and resume)"
    )
