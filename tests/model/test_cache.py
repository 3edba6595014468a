"""Incremental decoding with the KV cache reproduces full-sequence decoding; beams share memory."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from translator.model.attention import attention_mask
from translator.model.cache import KVCache
from translator.model.inference import for_cpu_decoding

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ATTENTION = [pytest.param(None, id="mha"), pytest.param(2, id="gqa"), pytest.param(1, id="mqa")]
SCHEMES = [
    pytest.param(dict(positions=p, norm=n), id=f"{p}-{n}LN")
    for p in ("sinusoidal", "learned", "rope")
    for n in ("pre", "post")
]


LAYOUTS = [
    pytest.param("slots", id="slots"),
    pytest.param("fixed", id="fixed-shapes"),
    pytest.param("beam-slots", id="beam-slots"),
]


def _cache(model, rows, max_len, layout, dtype=torch.float32, device="cpu", beams=1):
    """A cache of the given layout: slots (the plain one), fixed shapes (CUDA graphs), beam slots
    (CPU)."""
    model.beam_slots_cache = layout == "beam-slots"
    return model.new_cache(
        rows, max_len, dtype, torch.device(device), fixed_shapes=layout == "fixed", beams=beams
    )


def _incremental(model, tgt, memory, src_mask, chunks, dtype=torch.float32, layout="slots"):
    """Logits (N, T, V) from feeding `tgt` through a cache in pieces of the given lengths."""
    cache = _cache(model, tgt.shape[0], tgt.shape[1], layout, dtype, tgt.device)
    pieces, position = [], 0
    for size in chunks:
        pieces.append(model.decode(tgt[:, position : position + size], memory, src_mask, cache))
        cache.advance(size)
        position += size
    return torch.cat(pieces, dim=1), cache


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n_kv_heads", ATTENTION)
@torch.no_grad()
def test_cached_decoding_reproduces_full_sequence_logits(
    make_model, src_batch, n_kv_heads, scheme, layout
):
    model, (src, src_mask) = make_model(n_kv_heads=n_kv_heads, **scheme), src_batch
    tgt = torch.randint(4, model.cfg.vocab_size, (3, 7))
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask)  # (B, T, V)
    one_by_one, cache = _incremental(model, tgt, memory, src_mask, [1] * 7, layout=layout)
    torch.testing.assert_close(one_by_one, full, atol=1e-5, rtol=1e-5)
    G = n_kv_heads or model.cfg.n_heads  # GQA / MQA keep G heads in the cache, not H
    assert cache.length == 7 and cache.layers[0].written()[0].shape == (
        3,
        G,
        7,
        model.cfg.d_model // model.cfg.n_heads,
    )
    # A prefix of 3, then chunks: the chunks need the causal mask shifted by the cache length.
    chunked, _ = _incremental(model, tgt, memory, src_mask, [3, 2, 1, 1], layout=layout)
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "convert", [pytest.param(False, id="plain-model"), pytest.param(True, id="cpu-kernels")]
)
@pytest.mark.parametrize("n_kv_heads", ATTENTION)
def test_beams_share_memory_and_reorder_the_self_attention_cache(
    make_model, src_batch, n_kv_heads, convert, layout
):
    """Every cache layout, under the plain model (SDPA, nn.Linear: what CUDA runs) and the one
    converted for CPU decoding, against decoding the reordered histories in full."""
    model = make_model(n_kv_heads=n_kv_heads, positions="rope")
    if convert:
        for_cpu_decoding(model)
    src, src_mask = src_batch
    B, k, T = 3, 2, 6
    with torch.inference_mode():
        memory = model.encode(src, src_mask)  # (B, S, D): one row per sentence, never per beam
        tgt = torch.randint(4, model.cfg.vocab_size, (B * k, T))
        cache = _cache(model, B * k, T, layout, beams=k)
        history = tgt[:, :0]  # (B*k, t) tokens fed so far, reordered along with the cache
        for t in range(T):
            logits = model.decode(tgt[:, t : t + 1], memory, src_mask, cache)[:, 0]  # (B*k, V)
            cache.advance(1)
            history = torch.cat([history, tgt[:, t : t + 1]], dim=1)
            full = model.decode(
                history, memory.repeat_interleave(k, 0), src_mask.repeat_interleave(k, 0)
            )
            torch.testing.assert_close(logits, full[:, -1], atol=1e-5, rtol=1e-5)
            # beam search: each sentence's beams swap; beam 0 of sentence 1 is cloned
            if t in (2, 3):
                rows = torch.tensor([1, 0, 2, 2, 5, 4])
                cache.reorder(rows)
                history = history.index_select(0, rows)
            if t == 4 and layout != "fixed":  # sentence 1 is done and leaves; 2's beams swap
                rows, sentences = torch.tensor([0, 1, 5, 4]), torch.tensor([0, 2])
                cache.reorder(rows, sentences=sentences)
                history, tgt = history.index_select(0, rows), tgt.index_select(0, rows)
                memory, src_mask = memory[sentences], src_mask[sentences]
    for layer in cache.layers:  # cross-attention K/V: projected once, a row per sentence
        assert layer.cross[0].shape[0] == memory.shape[0] == layer.cross[1].shape[0]


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("n_kv_heads", ATTENTION)
@torch.no_grad()
def test_cached_decoding_reproduces_full_sequence_logits_cuda_bf16(
    make_model, src_batch, n_kv_heads
):
    model = make_model(n_kv_heads=n_kv_heads, positions="rope").to("cuda", torch.bfloat16)
    src, src_mask = (t.cuda() for t in src_batch)
    tgt = torch.randint(4, model.cfg.vocab_size, (3, 7), device="cuda")
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask)
    for layout in ("slots", "fixed"):
        one_by_one, _ = _incremental(model, tgt, memory, src_mask, [1] * 7, torch.bfloat16, layout)
        torch.testing.assert_close(one_by_one.float(), full.float(), atol=5e-2, rtol=5e-2)


def _beam_reorder(sentences: int, beams: int, keep: int, generator) -> torch.Tensor:
    """A search's reorder: `keep` of the sentences, in any order, each of whose `beams` new rows
    continues any row of that sentence (rows may be cloned or left)."""
    kept = torch.randperm(sentences, generator=generator)[:keep]
    pick = torch.randint(0, beams, (keep, beams), generator=generator)
    return (kept[:, None] * beams + pick).view(-1)


def _visible(cache, got: torch.Tensor, row: int, positions: torch.Tensor) -> torch.Tensor:
    """The keys (G, L, K) that `row` attends to in a step: what the layer gave attention, where
    the step's self-attention mask lets that row read."""
    mask = cache.own_keys(attention_mask(positions, cache.key_positions(1), causal=True))
    if mask.dim() == 2:  # (T, L): the layout gives each row its own keys
        return got[row][:, mask[0]]
    beams = cache.beams  # (B, 1, beams * T, L): a sentence's keys, the row's own ones unmasked
    return got[row // beams][:, mask[row // beams, 0, row % beams]]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reorder_is_an_index_select_of_the_written_rows(layout):
    """Reorders compose (a row may be both a source and a destination) and, but for fixed shapes,
    may drop sentences (a search's finished ones); what a layer holds, and what attention reads
    of it afterwards through the step's mask, is torch.index_select of what was written, then
    the new position."""
    generator = torch.Generator().manual_seed(0)
    for beams in (1, 2, 3):
        for _ in range(10):
            sentences, T_max = 4, 10
            rows = sentences * beams
            cache = KVCache(
                2,
                rows,
                2,
                T_max,
                4,
                torch.float32,
                "cpu",
                fixed_shapes=layout == "fixed",
                beam_slots=layout == "beam-slots",
                beams=beams,
            )
            start = int(torch.randint(1, 9, (), generator=generator))
            expected = []
            for layer in cache.layers:
                k, v = torch.randn(2, rows, 2, start, 4, generator=generator)
                layer.update(k, v, cache.positions(start))
                expected.append((k, v))
            cache.advance(start)
            for _ in range(int(torch.randint(1, 3, (), generator=generator))):  # 1 or 2 reorders
                keep = (
                    sentences
                    if layout == "fixed"
                    else int(torch.randint(1, sentences + 1, (), generator=generator))
                )
                origin = _beam_reorder(sentences, beams, keep, generator)
                cache.reorder(origin)
                sentences, rows = keep, keep * beams
                expected = [
                    (k.index_select(0, origin), v.index_select(0, origin)) for k, v in expected
                ]
            positions = cache.positions(1)
            for layer, (k, v) in zip(cache.layers, expected):
                assert all(torch.equal(x, y) for x, y in zip(layer.written(), (k, v)))
                new_k, new_v = torch.randn(2, rows, 2, 1, 4, generator=generator)
                got_k, got_v = layer.update(new_k, new_v, positions)
                for row in range(rows):
                    assert torch.equal(
                        _visible(cache, got_k, row, positions), torch.cat([k, new_k], 2)[row]
                    )
                    assert torch.equal(
                        _visible(cache, got_v, row, positions), torch.cat([v, new_v], 2)[row]
                    )


def test_a_beam_slots_reorder_keeps_beams_in_their_sentence():
    cache = KVCache(1, 4, 2, 5, 4, torch.float32, "cpu", beam_slots=True, beams=2)
    cache.layers[0].update(torch.randn(4, 2, 1, 4), torch.randn(4, 2, 1, 4), cache.positions(1))
    cache.advance(1)
    with pytest.raises(ValueError, match="its own sentence"):
        cache.reorder(torch.tensor([0, 2, 2, 3]))


@pytest.mark.parametrize("layout", ["slots", "beam-slots", "window"])
def test_dropping_sentences_keeps_their_cross_attention_rows(layout):
    """A reorder to fewer rows with `sentences` keeps those sentences' cross-attention K/V, in
    that order; a fixed-shape cache refuses to drop rows."""
    cache = KVCache(
        2,
        6,
        2,
        10,
        4,
        torch.float32,
        "cpu",
        beam_slots=layout == "beam-slots",
        beams=2,
        window=3 if layout == "window" else 0,
    )
    cross = [(torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)) for _ in cache.layers]
    for layer, kv in zip(cache.layers, cross):
        layer.cross = kv
        layer.update(torch.randn(6, 2, 1, 4), torch.randn(6, 2, 1, 4), cache.positions(1))
    cache.advance(1)
    sentences = torch.tensor([2, 0])
    cache.reorder(torch.tensor([4, 5, 0, 1]), sentences=sentences)
    for layer, (k, v) in zip(cache.layers, cross):
        assert torch.equal(layer.cross[0], k[sentences]) and torch.equal(
            layer.cross[1], v[sentences]
        )
        assert layer.written()[0].shape[0] == 4
    fixed = KVCache(1, 6, 2, 10, 4, torch.float32, "cpu", fixed_shapes=True)
    with pytest.raises(ValueError, match="fixed-shape"):
        fixed.reorder(torch.tensor([0, 1]))


@pytest.mark.parametrize("layout", LAYOUTS)
@torch.no_grad()
def test_cached_decoding_under_autocast_follows_full_decoding(make_model, src_batch, layout):
    """Validation decodes an fp32 model under bf16 autocast: K/V come in bf16, the cache is fp32."""
    model, (src, src_mask) = make_model(), src_batch
    tgt = torch.randint(4, model.cfg.vocab_size, (3, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)
        one_by_one, _ = _incremental(model, tgt, memory, src_mask, [1] * 5, memory.dtype, layout)
    torch.testing.assert_close(one_by_one.float(), full.float(), atol=0.1, rtol=0.1)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_dropped_cache_is_freed_at_once(make_model, layout):
    """No reference cycle: a search's K/V buffers go when it returns, not at the next collection."""
    gc.disable()
    try:
        cache = _cache(make_model(), 4, 8, layout)
        buffer = weakref.ref(cache.layers[0].k)
        del cache
        assert buffer() is None
    finally:
        gc.enable()


def test_cache_refuses_to_write_past_its_length():
    cache = KVCache(1, 3, 2, 4, 8, torch.float32, "cpu")
    cache.advance(len(cache.positions(4)))
    with pytest.raises(ValueError, match="holds 4 positions"):
        cache.positions(1)


def test_searches_are_independent_of_what_ran_before(make_model, src_batch):
    from translator.decode.beam import beam_search
    from translator.decode.greedy import greedy_search

    model, (src, src_mask) = make_model(), src_batch
    for search in (beam_search, greedy_search):
        first = search(model, src, src_mask, min_len=3)
        search(model, src[:2, :4], src_mask[:2, ..., :4], min_len=3)  # another batch in between
        assert search(model, src, src_mask, min_len=3) == first
