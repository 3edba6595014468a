"""Incremental decoding with the KV cache reproduces full-sequence decoding; beams share memory."""

from __future__ import annotations

import pytest
import torch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ATTENTION = [pytest.param(None, id="mha"), pytest.param(2, id="gqa"), pytest.param(1, id="mqa")]
SCHEMES = [pytest.param(dict(positions=p, norm=n), id=f"{p}-{n}LN")
           for p in ("sinusoidal", "learned", "rope") for n in ("pre", "post")]


def _incremental(model, tgt, memory, src_mask, chunks, dtype=torch.float32, static=False):
    """Logits (N, T, V) from feeding `tgt` through a cache in pieces of the given lengths."""
    cache = model.new_cache(tgt.shape[0], tgt.shape[1], dtype, tgt.device, static)
    pieces, position = [], 0
    for size in chunks:
        pieces.append(model.decode(tgt[:, position:position + size], memory, src_mask, cache))
        cache.length += size  # a static cache's length is a device tensor, advanced in place
        position += size
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
    # The static cache (CUDA graphs): one position per step, written in place at a device-side length.
    static, cache = _incremental(model, tgt, memory, src_mask, [1] * 7, static=True)
    torch.testing.assert_close(static, full, atol=1e-5, rtol=1e-5)
    assert cache.length.tolist() == [7] and cache.layers[0].written()[0].shape[2] == 7


def _forbidden(*args, **kwargs):
    raise AssertionError("the written-out attention ran where the fused SDPA path should")


@pytest.mark.parametrize("static", [pytest.param(False, id="dense"), pytest.param(True, id="static")])
@pytest.mark.parametrize("path", [pytest.param("cpu-search", id="cpu-search-path"), pytest.param("sdpa", id="sdpa-path")])
@pytest.mark.parametrize("n_kv_heads", ATTENTION)
def test_beams_share_memory_and_reorder_the_self_attention_cache(make_model, src_batch, n_kv_heads, path, static,
                                                                 monkeypatch):
    """With autograd on, a CPU decoding step takes the path CUDA always takes: one fused SDPA call
    for the one-token query (self- and cross-attention) and F.linear; without, the CPU search path.
    The static cache is the one CUDA graphs replay over."""
    model = make_model(n_kv_heads=n_kv_heads, positions="rope").requires_grad_(False)
    if path == "sdpa":
        monkeypatch.setattr("translator.model.attention.attention_weights", _forbidden)
    with torch.set_grad_enabled(path == "sdpa"):
        _check_beams_share_memory_and_reorder(model, src_batch, static)


def _check_beams_share_memory_and_reorder(model, src_batch, static):
    src, src_mask = src_batch
    B, k, T = 3, 2, 6
    memory = model.encode(src, src_mask)  # (B, S, D): one row per sentence, never per beam
    tgt = torch.randint(4, model.cfg.vocab_size, (B * k, T))
    cache = model.new_cache(B * k, T, torch.float32, "cpu", static)
    buffers = [set() for _ in cache.layers]  # storage each layer's K has lived in
    history = tgt[:, :0]  # (B*k, t) tokens fed so far, reordered along with the cache
    for t in range(T):
        logits = model.decode(tgt[:, t:t + 1], memory, src_mask, cache)[:, 0]  # (B*k, V)
        cache.length += 1
        history = torch.cat([history, tgt[:, t:t + 1]], dim=1)
        repeated = model.decode(history, memory.repeat_interleave(k, 0), src_mask.repeat_interleave(k, 0))
        torch.testing.assert_close(logits, repeated[:, -1], atol=1e-5, rtol=1e-5)
        for seen, layer in zip(buffers, cache.layers):
            seen.add(layer.self_k.untyped_storage().data_ptr())
        if t == 2:  # beam search: each sentence's beams swap; beam 0 of sentence 1 is cloned
            rows = torch.tensor([1, 0, 2, 2, 5, 4])
            cache.reorder(rows)
            history = history.index_select(0, rows)
    # dense: two preallocated buffers alternate, none is made per step; static: K never moves (a graph reads it there)
    assert all(len(seen) == (1 if static else 2) for seen in buffers)
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
        assert all(torch.equal(x, y) for x, y in zip(a.written(), b.written()))


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


def test_reorder_then_append_equals_index_select_then_cat():
    """Pending reorders compose (a row may be both a source and a destination); the next append applies them."""
    from translator.model.cache import KVCache

    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        cache = KVCache.allocate(2, 8, 2, 10, 4, torch.float32, "cpu")
        start = int(torch.randint(1, 9, (), generator=generator))
        first = [cache.layers[i].append(*torch.randn(2, 8, 2, start, 4, generator=generator), 0) for i in range(2)]
        expected = [(k.clone(), v.clone()) for k, v in first]
        for _ in range(int(torch.randint(1, 3, (), generator=generator))):  # one or two reorders
            origin = torch.randint(0, 8, (8,), generator=generator)
            cache.reorder(origin)
            expected = [(k.index_select(0, origin), v.index_select(0, origin)) for k, v in expected]
        for layer, (k, v) in zip(cache.layers, expected):
            assert all(torch.equal(x, y) for x, y in zip(layer.written(), (k, v)))
            new_k, new_v = torch.randn(2, 8, 2, 1, 4, generator=generator)
            got_k, got_v = layer.append(new_k, new_v, start)
            assert torch.equal(got_k, torch.cat([k, new_k], dim=2)) and torch.equal(got_v, torch.cat([v, new_v], dim=2))
            assert got_k.is_contiguous() and got_v.is_contiguous()  # attention's bmm reads them in place


def test_cache_refuses_to_write_past_its_length():
    from translator.model.cache import KVCache

    layer = KVCache.allocate(1, 3, 2, 4, 8, torch.float32, "cpu").layers[0]
    layer.append(torch.zeros(3, 2, 4, 8), torch.zeros(3, 2, 4, 8), 0)
    with pytest.raises(ValueError, match="holds 4 positions"):
        layer.append(torch.zeros(3, 2, 1, 8), torch.zeros(3, 2, 1, 8), 4)


def test_searches_are_independent_of_what_ran_before(make_model, src_batch):
    from translator.decode.beam import beam_search
    from translator.decode.greedy import greedy_search

    model, (src, src_mask) = make_model(), src_batch
    for search in (beam_search, greedy_search):
        first = search(model, src, src_mask, min_len=3)
        search(model, src[:2, :4], src_mask[:2, ..., :4], min_len=3)  # another batch in between
        assert search(model, src, src_mask, min_len=3) == first
