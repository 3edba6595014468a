"""Entropy, divergence and head flags against written-out references (float64 loops, math.log)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from translator.config import DiagnosticsConfig
from translator.diagnostics.stats import (
    allowed_keys,
    duplicate_groups,
    head_divergence,
    head_entropy,
    layer_stats,
    row_entropy,
)


def _entropy_ref(p: list[float]) -> float:
    return -sum(x * math.log(x) for x in p if x > 0)


def _js_ref(p: list[float], q: list[float]) -> float:
    """Jensen-Shannon divergence in bits, term by term."""
    m = [(a + b) / 2 for a, b in zip(p, q)]
    kl = lambda a, b: sum(x * math.log2(x / y) for x, y in zip(a, b) if x > 0)  # noqa: E731
    return (kl(p, m) + kl(q, m)) / 2


@pytest.mark.parametrize("n", [2, 3, 7, 50])
def test_uniform_row_has_entropy_log_n_and_one_hot_row_zero(n):
    uniform, one_hot = torch.full((1, 1, 1, n), 1 / n), torch.zeros(1, 1, 1, n)
    one_hot[..., n // 2] = 1.0
    allowed = torch.ones(1, 1, 1, n, dtype=torch.bool)
    assert row_entropy(uniform, allowed).item() == pytest.approx(math.log(n), rel=1e-6)
    assert row_entropy(one_hot, allowed).item() == 0.0
    ent, norm = head_entropy(uniform, allowed)
    assert ent.item() == pytest.approx(math.log(n), rel=1e-6) and norm.item() == pytest.approx(
        1.0, rel=1e-6
    )
    assert head_entropy(one_hot, allowed)[1].item() == 0.0


def test_masked_keys_are_left_out_of_entropy_and_its_normalisation():
    # three allowed keys of five, uniform over them; the masked keys hold junk that must not count
    weights = torch.tensor([[[[1 / 3, 1 / 3, 1 / 3, 0.7, 0.2]]]])
    allowed = torch.tensor([[[[True, True, True, False, False]]]])
    assert row_entropy(weights, allowed).item() == pytest.approx(math.log(3), rel=1e-6)
    assert head_entropy(weights, allowed)[1].item() == pytest.approx(1.0, rel=1e-6)


def test_padding_rows_and_single_key_rows_do_not_count():
    src_valid = torch.tensor([[True, True, True, False]])
    tgt_valid = torch.tensor([[True, True, False]])
    allowed, rows = allowed_keys("decoder", src_valid, tgt_valid)
    assert rows.tolist() == [[True, True, False]]
    assert allowed[0, 0].tolist() == [
        [True, False, False],
        [True, True, False],
        [False, False, False],
    ]
    # row 0 sees one key (always entropy 0), row 2 is padding: only row 1 (uniform over 2) counts
    weights = torch.tensor([[[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]]])
    ent, norm = head_entropy(weights, allowed)
    assert ent.item() == pytest.approx(math.log(2)) and norm.item() == pytest.approx(1.0)
    enc, enc_rows = allowed_keys("encoder", src_valid, tgt_valid)
    assert enc_rows.tolist() == src_valid.tolist() and enc[0, 0, 3].tolist() == [False] * 4
    cross, _ = allowed_keys("cross", src_valid, tgt_valid)
    assert cross[0, 0].tolist() == [[True, True, True, False]] * 2 + [[False] * 4]


def _distributions(draw_floats, rows, keys):
    raw = torch.tensor(draw_floats, dtype=torch.float64).view(rows, keys) + 1e-3
    return (raw / raw.sum(-1, keepdim=True)).float()


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 4), st.integers(2, 6), st.data())
def test_entropy_and_divergence_match_references(heads, keys, data):
    rows = 3
    floats = data.draw(
        st.lists(st.floats(0, 1), min_size=heads * rows * keys, max_size=heads * rows * keys)
    )
    weights = _distributions(floats, heads * rows, keys).view(1, heads, rows, keys)
    allowed = torch.ones(1, 1, rows, keys, dtype=torch.bool)
    p = weights[0].double().tolist()  # (H, T, L) as lists
    ent, norm = head_entropy(weights, allowed)
    for h in range(heads):
        expected = sum(_entropy_ref(p[h][t]) for t in range(rows)) / rows
        assert ent[h].item() == pytest.approx(expected, abs=1e-5)
        assert norm[h].item() == pytest.approx(expected / math.log(keys), abs=1e-5)
    div = head_divergence(weights, allowed)
    for h in range(heads):
        for g in range(heads):
            expected = sum(_js_ref(p[h][t], p[g][t]) for t in range(rows)) / rows
            assert div[h, g].item() == pytest.approx(expected, abs=1e-5)


def _distinct_heads(T: int = 6) -> torch.Tensor:
    """(1, 4, T, T) four clearly different patterns: diagonal, next token, first token, reversed."""
    eye = torch.eye(T)
    prev = torch.roll(eye, -1, dims=1)
    first = torch.zeros(T, T)
    first[:, 0] = 1
    rev = eye.flip(1)
    sharp = torch.stack([eye, prev, first, rev]) * 0.9 + 0.1 / T  # keep every weight positive
    return (sharp / sharp.sum(-1, keepdim=True))[None]


def test_duplicate_check_flags_copies_and_not_distinct_heads():
    cfg, T = DiagnosticsConfig(), 6
    allowed = torch.ones(1, 1, T, T, dtype=torch.bool)
    distinct = _distinct_heads(T)
    assert layer_stats(distinct, allowed, cfg).duplicates == []
    copies = distinct.clone()
    copies[0, 3] = distinct[0, 1]  # head 3 copies head 1
    noisy = distinct[0, 0] + 0.01 * torch.rand(T, T)
    copies[0, 2] = noisy / noisy.sum(-1, keepdim=True)  # head 2 nearly copies head 0
    stats = layer_stats(copies, allowed, cfg)
    assert sorted(stats.duplicates) == [[0, 2], [1, 3]]
    assert stats.divergence[1, 3].item() == pytest.approx(0.0, abs=1e-6)


def test_groups_are_transitive_and_skip_heads_left_out():
    div = torch.tensor(
        [[0, 0.01, 0.9, 0.9], [0.01, 0, 0.01, 0.9], [0.9, 0.01, 0, 0.9], [0.9, 0.9, 0.9, 0]]
    )
    assert duplicate_groups(div, 0.02) == [[0, 1, 2]]
    assert duplicate_groups(div, 0.02, skip={1}) == []


def test_uniform_and_one_hot_heads_are_flagged():
    T = 5
    allowed = torch.ones(1, 1, T, T, dtype=torch.bool)
    weights = torch.cat(
        [torch.full((1, 2, T, T), 1 / T), torch.eye(T)[None, None], _distinct_heads(T)[:, 1:2]],
        dim=1,
    )
    stats = layer_stats(weights, allowed, DiagnosticsConfig())
    assert stats.uniform == [0, 1] and stats.one_hot == [2]
    assert stats.duplicates == []  # two uniform heads are alike trivially: reported as uniform only
    assert 0 < stats.diversity <= 1


def test_a_map_without_a_row_that_has_a_choice_flags_no_head():
    # a one-token decoder (an empty forced or found translation): each row sees one key, so no
    # head can be called one-hot or uniform from it
    allowed = torch.ones(2, 1, 1, 1, dtype=torch.bool)
    stats = layer_stats(torch.ones(2, 4, 1, 1), allowed, DiagnosticsConfig())
    assert stats.uniform == [] and stats.one_hot == [] and stats.duplicates == []
