"""Per-sentence limits inside one batch: the early stop, the length limit and min_len of each
sentence are its own, and the search equals the plain-list reference (no early stop) sentence by
sentence."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.decode.test_search import reference_beam_search
from tests.decode.test_toy import _random_table, _table_log_probs, source
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from translator.decode import ban_tokens_
from translator.decode.beam import beam_search
from translator.decode.greedy import greedy_search

A, B, C = 4, 5, 6


def _chain() -> dict[tuple[int, ...], dict[int, float]]:
    """B EOS finishes first (0.5); A goes on to a nearly sure run of A's, then EOS."""
    table = {(): {A: 0.5, B: 0.5}, (B,): {EOS_ID: 1.0}}
    prefix = (A,)
    for _ in range(6):
        table[prefix] = {A: 0.74, EOS_ID: 0.26} if len(prefix) == 1 else {A: 0.99, EOS_ID: 0.01}
        prefix += (A,)
    table[prefix] = {EOS_ID: 1.0}
    return table


@pytest.mark.parametrize("lengths", [[12], [2, 12], [12, 2, 3]])
def test_the_early_stop_never_ends_a_sentence_that_a_longer_hypothesis_would_win(toy, lengths):
    """alpha 2 makes the long A...A EOS beat B EOS, which finishes first: the bound on what an open
    beam can still reach must use the longest reachable length, per sentence."""
    table, alpha = _chain(), 2.0
    src, src_mask = source(lengths)
    found = beam_search(
        toy(table, vocab=32, floor=0.0),
        src,
        src_mask,
        beam_size=2,
        alpha=alpha,
        max_len_a=1.0,
        max_len_b=0,
    )
    for n, hyps in zip(lengths, found):
        limit = max(1, n - 1)
        ref = reference_beam_search(_table_log_probs(table, 32, limit), limit, 2, alpha)
        assert hyps[0].tokens == ref[0][0]
        assert hyps[0].score == pytest.approx(ref[0][1], abs=1e-5)


@pytest.mark.parametrize("seed", range(25))
def test_a_batch_of_different_limits_finds_what_each_sentence_finds_by_reference(toy, seed):
    table, alpha, k = _random_table(seed, 5), 2.0, 2
    lengths = [2, 6, 3, 5]  # limits (a=1, b=0): 1, 5, 2, 4
    src, src_mask = source(lengths)
    found = beam_search(
        toy(table, vocab=32, floor=0.0),
        src,
        src_mask,
        beam_size=k,
        alpha=alpha,
        max_len_a=1.0,
        max_len_b=0,
    )
    for n, hyps in zip(lengths, found):
        ref = reference_beam_search(_table_log_probs(table, 32, n - 1), n - 1, k, alpha)
        expected = pytest.approx(ref[0][1], abs=1e-5) if ref else float("-inf")
        assert hyps[0].score == expected


@pytest.mark.parametrize("beam_size", [1, 3])
def test_min_len_in_a_mixed_batch_is_what_each_sentence_gets_alone(toy, beam_size):
    """A model that wants to end at once: each output is min(min_len, its own limit) long."""
    wants_to_end = {EOS_ID: 0.9, C: 0.05, UNK_ID: 0.05 - 1e-5}
    lengths = [2, 12, 1, 9]  # limits 1, 11, 1, 8: min_len 6 exceeds two of them
    limits = dict(max_len_a=1.0, max_len_b=0, min_len=6)

    def lengths_found(lens: list[int]) -> list[int]:
        src, src_mask = source(lens)
        model = toy({}, default=wants_to_end)
        if beam_size == 1:
            return [len(h.tokens) for h in greedy_search(model, src, src_mask, **limits)]
        found = beam_search(model, src, src_mask, beam_size=beam_size, **limits)
        return [len(h[0].tokens) for h in found]

    expected = [min(6, max(1, n - 1)) for n in lengths]
    assert lengths_found(lengths) == expected
    assert [lengths_found([n])[0] for n in lengths] == expected


def test_cross_attention_keys_are_projected_once_per_search(make_model, src_batch):
    """Memory K/V are made once and never recomputed or beam-reordered (model/cache.py)."""
    model = make_model()
    rows = []
    for layer in model.decoder:
        layer.cross_attn.k_proj.register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    src, src_mask = src_batch
    beam_search(model, src, src_mask, beam_size=3)
    assert rows == [src.shape[0]] * len(model.decoder)


class HostTensors(TorchDispatchMode):
    """Records the shapes of the tensors made from Python data (`aten.lift_fresh`)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.lift_fresh.default:
            self.shapes.append(tuple(out.shape))
        return out


def test_the_bans_make_no_host_tensor_to_copy_to_the_device_each_step():
    """A scalar is passed to a CUDA kernel by value; an index tensor from a list would be copied
    from the host (a stream sync) at every step of every search."""
    log_probs, eos_from = torch.zeros(3, 8), torch.tensor([0, 2, 1])
    with HostTensors() as made:
        ban_tokens_(log_probs, 1, eos_from, unk_penalty=2.5)
    assert all(shape == () for shape in made.shapes), made.shapes
    banned = torch.tensor([[True, True, False], [True, True, True], [True, True, False]])
    assert torch.equal(log_probs[:, [PAD_ID, BOS_ID, EOS_ID]].isinf(), banned)
    assert log_probs[:, UNK_ID].tolist() == [-2.5] * 3 and log_probs[:, 4:].eq(0).all()
