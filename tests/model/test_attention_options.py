"""Attention options (issue 21): relative position bias, sliding window, linear encoder attention.

Each option's defining property, against references written here: T5's own bucket function
(from transformers), a sliding window that hides far tokens, a window cache of bounded size, and
linear attention's formula computed the O(n^2) way.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tests.model.conftest import VOCAB, tiny_config
from tests.model.test_cache import LAYOUTS, _cache, _incremental
from translator.config import ModelConfig, architecture_changes, to_dict
from translator.errors import TranslatorError
from translator.model.attention import attention, linear_attention
from translator.model.relative import RelativePositionBias, relative_buckets

OPTIONS = [
    pytest.param(dict(positions="relative"), id="relative"),
    pytest.param(
        dict(positions="relative", relative_per_layer=True, n_kv_heads=2), id="relative-per-layer"
    ),
    pytest.param(dict(attention_window=3), id="window3"),
    pytest.param(
        dict(attention_window=3, positions="relative", norm="post"), id="relative-window3"
    ),
    pytest.param(dict(attention_window=2, positions="rope", n_kv_heads=1), id="window2-rope-mqa"),
    pytest.param(dict(attention="linear"), id="linear-encoder"),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("changes", OPTIONS)
@torch.no_grad()
def test_cached_decoding_reproduces_full_sequence_logits(make_model, src_batch, changes, layout):
    """One token at a time, and in chunks longer than the window (a ring read before written)."""
    model, (src, src_mask) = make_model(**changes), src_batch
    tgt = torch.randint(4, VOCAB, (3, 9))
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask)
    for chunks in ([1] * 9, [3, 2, 4]):
        cached, _ = _incremental(model, tgt, memory, src_mask, chunks, layout=layout)
        torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)


def test_t5_buckets():
    """Our buckets are T5's, from its reference implementation, for both directions."""
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5").T5Attention
    offsets = torch.arange(-300, 301)[None, :]  # (1, L): key minus query position
    for bidirectional in (True, False):
        for n_buckets, max_distance in ((32, 128), (8, 20), (6, 7)):
            ours = relative_buckets(offsets, n_buckets, max_distance, bidirectional)
            theirs = t5._relative_position_bucket(offsets, bidirectional, n_buckets, max_distance)
            assert torch.equal(ours, theirs)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_bias_depends_only_on_the_distance(bidirectional):
    cfg = tiny_config(positions="relative", relative_buckets=8, relative_max_distance=20)
    bias = RelativePositionBias(cfg, 2, bidirectional)
    torch.nn.init.normal_(bias.tables[0].weight)
    q, k = torch.tensor([0, 3, 7, 50]), torch.arange(60)
    mask = torch.ones(4, 60, dtype=torch.bool)
    first, second = bias(mask, q, k)  # (H, 4, 60) each
    assert first is second  # one table shared by the stack's layers
    assert torch.equal(first, bias(mask, q + 100, k + 100)[0])  # shifted alike: no change
    distance = k[None, :] - q[:, None]  # (4, 60)
    for d in distance.unique():
        same = first[:, distance == d]  # (H, count): every pair at distance d
        assert (same == same[:, :1]).all()
    far = first[:, distance < -40]  # T5: every distance past max_distance shares one bucket
    assert (far == far[:, :1]).all()
    assert not torch.equal(first[:, 1, 3], first[:, 1, 2])  # not the same bias everywhere


@torch.no_grad()
def test_no_token_outside_the_window_reaches_an_output(make_model, src_batch):
    """One decoder layer, window 3: the target token at position 0 reaches positions 0-2 only."""
    model, (src, src_mask) = make_model(attention_window=3, n_decoder_layers=1), src_batch
    memory = model.encode(src, src_mask)
    tgt = torch.randint(4, VOCAB, (3, 8))
    changed = tgt.clone()
    changed[:, 0] = (tgt[:, 0] + 1 - 4) % (VOCAB - 4) + 4
    before, after = model.decode(tgt, memory, src_mask), model.decode(changed, memory, src_mask)
    assert torch.equal(before[:, 3:], after[:, 3:])
    assert not torch.allclose(before[:, :3], after[:, :3])
    full = make_model(n_decoder_layers=1)
    full.load_state_dict(model.state_dict())  # without the window it does reach them
    memory = full.encode(src, src_mask)
    assert not torch.allclose(
        full.decode(tgt, memory, src_mask)[:, 3:], full.decode(changed, memory, src_mask)[:, 3:]
    )


@pytest.mark.parametrize("layout", LAYOUTS)
@torch.no_grad()
def test_window_cache_memory_stops_growing(make_model, src_batch, layout):
    """The cache holds W slots a layer whatever the length, and still decodes what full decoding
    does."""
    model, (src, src_mask) = make_model(attention_window=4, positions="relative"), src_batch
    sizes = []
    for max_len in (10, 60):
        cache = _cache(model, 3, max_len, layout)
        sizes.append(sum(t.numel() for layer in cache.layers for t in (layer.k, layer.v)))
    K = model.cfg.d_model // model.cfg.n_heads
    assert sizes == [2 * model.cfg.n_decoder_layers * 3 * model.cfg.n_heads * 4 * K] * 2
    memory, tgt = model.encode(src, src_mask), torch.randint(4, VOCAB, (3, 40))
    cached, cache = _incremental(model, tgt, memory, src_mask, [1] * 40, layout=layout)
    torch.testing.assert_close(cached, model.decode(tgt, memory, src_mask), atol=1e-5, rtol=1e-5)
    assert all(layer.k.shape[2] == 4 for layer in cache.layers)  # after 40 positions


def naive_linear_attention(q, k, v, key_mask):
    """sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j), as a (T, L) weight matrix, float64.

    q (N, H, T, K), k and v (N, G, L, K), key_mask (N, L) bool.
    """
    phi = lambda x: F.elu(x.double()) + 1  # noqa: E731
    N, H, T, _ = q.shape
    out = torch.zeros(q.shape, dtype=torch.float64)
    for n in range(N):
        for h in range(H):
            g = h // (H // k.shape[1])
            similarity = phi(q[n, h]) @ phi(k[n, g]).T  # (T, L)
            similarity = similarity * key_mask[n][None, :]
            out[n, h] = (similarity / similarity.sum(-1, keepdim=True)) @ v[n, g].double()
    return out


@pytest.mark.parametrize("G", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_linear_attention_is_its_formula_computed_the_quadratic_way(G):
    q, k, v = torch.randn(3, 4, 6, 8), torch.randn(3, G, 6, 8), torch.randn(3, G, 6, 8)
    key_mask = torch.arange(6)[None, :] < torch.tensor([6, 3, 1])[:, None]  # (N, L)
    got = linear_attention(q, k, v, key_mask[:, None, None, :])
    expected = naive_linear_attention(q, k, v, key_mask)
    torch.testing.assert_close(got.double(), expected, atol=1e-6, rtol=1e-5)
    big = v.clone()
    big[1, :, 3:] = 1e4  # masked keys' values cannot move the output
    assert torch.equal(linear_attention(q, k, big, key_mask[:, None, None, :])[1], got[1])
    with pytest.raises(ValueError, match="key padding mask"):
        linear_attention(q, k, v, is_causal=True)


def _flops(kernel, L: int) -> int:
    q, k, v = (torch.randn(1, 2, L, 16) for _ in range(3))
    with FlopCounterMode(display=False) as counter:
        kernel(q, k, v, torch.ones(1, 1, 1, L, dtype=torch.bool))
    return counter.get_total_flops()


def test_linear_attention_work_grows_linearly_with_length():
    """Counted operations, not time (the timing is bench/attention_options.py's)."""
    assert _flops(linear_attention, 1024) == 4 * _flops(linear_attention, 256)
    assert _flops(attention, 1024) == 16 * _flops(attention, 256)  # softmax: quadratic


@pytest.mark.parametrize("changes", OPTIONS)
def test_gradients_reach_every_option_parameter(make_model, src_batch, changes):
    """Training: the bias tables learn, through SDPA's float mask and with checkpointing too."""
    src, src_mask = src_batch
    tgt = torch.randint(4, VOCAB, (3, 6))
    losses = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = make_model(**changes, gradient_checkpointing=checkpointing).train()
        loss = model(src, tgt, src_mask).logsumexp(-1).mean()
        loss.backward()
        losses.append(loss.detach())
        for name, param in model.named_parameters():
            assert param.grad is not None and param.grad.abs().sum() > 0, name
    torch.testing.assert_close(losses[0], losses[1])


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(attention="linear", attention_window=8), "attention_window"),
        (dict(attention="linear", positions="relative"), "positions"),
        (dict(relative_buckets=32, relative_max_distance=16), "relative_max_distance"),
        (dict(attention_window=-1), "attention_window"),
    ],
)
def test_config_refuses_options_that_cannot_work_together(changes, field):
    with pytest.raises(TranslatorError, match=field):
        ModelConfig(**changes)


def test_a_checkpoint_older_than_the_options_is_the_default_model():
    """Resuming or averaging a run saved before these fields existed is no architecture change."""
    old = to_dict(ModelConfig())
    for name in ("attention", "attention_window", "relative_buckets", "relative_max_distance"):
        del old[name]
    assert architecture_changes(old, to_dict(ModelConfig())) == ""
    assert architecture_changes(old, to_dict(ModelConfig(attention_window=8))) == (
        "model.attention_window: 0 -> 8"
    )


@pytest.mark.parametrize("changes", OPTIONS)
@torch.no_grad()
def test_cached_decoding_under_autocast_follows_full_decoding(make_model, src_batch, changes):
    """Validation decodes an fp32 model under bf16 autocast: bf16 K/V and bias, an fp32 cache."""
    model, (src, src_mask) = make_model(**changes), src_batch
    tgt = torch.randint(4, VOCAB, (3, 7))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)
        cached, _ = _incremental(model, tgt, memory, src_mask, [1] * 7, memory.dtype)
    torch.testing.assert_close(cached.float(), full.float(), atol=0.1, rtol=0.1)
