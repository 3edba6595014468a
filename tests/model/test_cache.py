"""Incremental decoding with the KV cache reproduces full-sequence decoding; beams share memory."""

from __future__ import annotations

import pytest
import torch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ATTENTION = [pytest.param(None, id="mha"), pytest.param(2, id="gqa"), pytest.param(1, id="mqa")]
SCHEMES = [pytest.param(dict(positions=p, norm=n), id=f"{p}-{n}LN")
           for p in ("sinusoidal", "learned", "rope") for n in ("pre", "post")]


def _incremental(model, tgt, memory, src_mask, chunks, dtype=torch.float32):
    """Logits (N, T, V) from feeding `tgt` through a cache in pieces of the given lengths."""
    cache = model.new_cache(tgt.shape[0], tgt.shape[1], dtype, tgt.device)
    pieces = []
    for size in chunks:
        pieces.append(model.decode(tgt[:, cache.length:cache.length + size], memory, src_mask, cache))
        cache.length += size
    return torch.cat(pieces, dim=1), cache


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n_kv_heads", ATTENTION)
@torch.no_grad()
def test_cached_decoding_reproduces_full_sequence_logits(make_model, src_batch, n_kv_heads, scheme):
    model, (src, src_mask) = make_model(n_kv_heads=n_kv_heads, **scheme), src_batch
    tgt = torch.randint(4, model.cfg.vocab_size, (3, 7))
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask)  # (B, T, V)
    one_by_one, cache = _incremental(model, tgt, memory, src_mask, [1] * 7)
    torch.testing.assert_close(one_by_one, full, atol=1e-5, rtol=1e-5)
    # A prefix of 3, then chunks: the chunks need the causal mask shifted by the cache length.
    chunked, _ = _incremental(model, tgt, memory, src_mask, [3, 2, 1, 1])
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=1e-5)
    G = n_kv_heads or model.cfg.n_heads  # GQA / MQA keep G heads in the cache, not H
    assert cache.layers[0].self_k.shape == (3, G, 7, model.cfg.d_model // model.cfg.n_heads)


@pytest.mark.parametrize("n_kv_heads", ATTENTION)
@torch.no_grad()
def test_beams_share_memory_and_reorder_the_self_attention_cache(make_model, src_batch, n_kv_heads):
    model, (src, src_mask) = make_model(n_kv_heads=n_kv_heads, positions="rope"), src_batch
    B, k, T = 3, 2, 6
    memory = model.encode(src, src_mask)  # (B, S, D): one row per sentence, never per beam
    tgt = torch.randint(4, model.cfg.vocab_size, (B * k, T))
    cache = model.new_cache(B * k, T, torch.float32, "cpu")
    storage = [layer.self_k.data_ptr() for layer in cache.layers]
    history = tgt[:, :0]  # (B*k, t) tokens fed so far, reordered along with the cache
    for t in range(T):
        logits = model.decode(tgt[:, t:t + 1], memory, src_mask, cache)[:, 0]  # (B*k, V)
        cache.length += 1
        history = torch.cat([history, tgt[:, t:t + 1]], dim=1)
        repeated = model.decode(history, memory.repeat_interleave(k, 0), src_mask.repeat_interleave(k, 0))
        torch.testing.assert_close(logits, repeated[:, -1], atol=1e-5, rtol=1e-5)
        if t == 2:  # beam search: each sentence's beams swap; beam 0 of sentence 1 is cloned
            rows = torch.tensor([1, 0, 2, 2, 5, 4])
            cache.reorder(rows)
            history = history.index_select(0, rows)
    assert [layer.self_k.data_ptr() for layer in cache.layers] == storage  # written in place
    for layer in cache.layers:  # cross-attention K/V: projected once, B rows, shared by the beams
        assert layer.cross_k.shape[0] == B and layer.cross_v.shape[0] == B


@torch.no_grad()
def test_reorder_before_or_after_advancing_length_is_the_same(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    memory, tgt = model.encode(src, src_mask), torch.randint(4, 40, (3, 4))
    rows, caches = torch.tensor([2, 0, 1]), []
    for advance_first in (True, False):
        cache = model.new_cache(3, 4, torch.float32, "cpu")
        for t in range(2):
            model.decode(tgt[:, t:t + 1], memory, src_mask, cache)
            if advance_first:
                cache.length += 1
            cache.reorder(rows)
            if not advance_first:
                cache.length += 1
        caches.append(cache)
    for a, b in zip(*(c.layers for c in caches)):
        assert torch.equal(a.self_k[:, :, :2], b.self_k[:, :, :2])


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("n_kv_heads", ATTENTION)
@torch.no_grad()
def test_cached_decoding_reproduces_full_sequence_logits_cuda_bf16(make_model, src_batch, n_kv_heads):
    model = make_model(n_kv_heads=n_kv_heads, positions="rope").to("cuda", torch.bfloat16)
    src, src_mask = (t.cuda() for t in src_batch)
    tgt = torch.randint(4, model.cfg.vocab_size, (3, 7), device="cuda")
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask)
    one_by_one, _ = _incremental(model, tgt, memory, src_mask, [1] * 7, torch.bfloat16)
    torch.testing.assert_close(one_by_one.float(), full.float(), atol=5e-2, rtol=5e-2)


def test_reorder_equals_index_select_for_any_origin():
    """Rows that continue themselves are skipped; sources that are also destinations are read first."""
    from translator.model.cache import KVCache

    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        cache = KVCache.allocate(2, 8, 2, 10, 4, torch.float32, "cpu")
        for layer in cache.layers:
            layer.self_k.normal_(generator=generator)
            layer.self_v.normal_(generator=generator)
        cache.length = int(torch.randint(0, 10, (), generator=generator))
        origin = torch.randint(0, 8, (8,), generator=generator)
        end = min(cache.length + 1, 10)
        expected = [(layer.self_k[:, :, :end].index_select(0, origin), layer.self_v[:, :, :end].index_select(0, origin))
                    for layer in cache.layers]
        cache.reorder(origin)
        for layer, (k, v) in zip(cache.layers, expected):
            assert torch.equal(layer.self_k[:, :, :end], k) and torch.equal(layer.self_v[:, :, :end], v)


def test_cpu_key_prefix_is_a_row_major_k_transposed():
    """On CPU, q @ k^T over the written prefix reads the cache in place (no copy of the prefix)."""
    from translator.model.cache import KVCache

    layer = KVCache.allocate(1, 3, 2, 10, 4, torch.float32, "cpu").layers[0]
    assert layer.self_k.shape == layer.self_v.shape == (3, 2, 10, 4)
    prefix_t = layer.self_k[:, :, :6].transpose(-2, -1)  # (N, G, K, L)
    assert prefix_t.stride(-1) == 1 and prefix_t.stride(0) == 2 * prefix_t.stride(1)  # rows, batch dims merge
