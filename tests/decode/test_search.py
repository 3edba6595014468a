"""Greedy and beam search on tiny random Transformers, against uncached reference searches.

The references below decode one sentence at a time, call `model.decode` on the full prefix at
every step (no cache, no reorder) and keep hypotheses in plain Python lists.
"""

from __future__ import annotations

import copy
import math
from fractions import Fraction

import pytest
import torch

from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.decode import log_softmax_into, max_lengths
from translator.decode.beam import beam_search, length_penalty, top_k
from translator.decode.greedy import greedy_search
from translator.model.inference import for_cpu_decoding

NEG_INF = float("-inf")


def _limit(model, src_mask_row, max_len_a, max_len_b) -> int:
    n = int(src_mask_row.sum()) - 1  # source tokens without EOS
    return max(1, min(exact_limit(max_len_a, max_len_b, n), model.cfg.max_positions - 1))


def exact_limit(max_len_a: float, max_len_b: int, n: int) -> int:
    """floor(a * n + b) in exact decimal arithmetic: what a user writing a = 0.7 means."""
    return math.floor(Fraction(repr(max_len_a)) * n + max_len_b)


def _next_log_probs(model, prefixes, memory, src_mask, step, max_len, min_len) -> torch.Tensor:
    """Uncached: the whole prefix goes through the decoder. -> (len(prefixes), V) with the search's
    bans."""
    logits = model.decode(torch.tensor(prefixes), memory, src_mask)  # (N, t, V)
    lp = torch.log_softmax(logits[:, -1].float(), dim=-1)
    lp[:, [PAD_ID, BOS_ID]] = NEG_INF
    if step < min(min_len, max_len):
        lp[:, EOS_ID] = NEG_INF
    if step >= max_len:
        keep = lp[:, EOS_ID].clone()
        lp[:] = NEG_INF
        lp[:, EOS_ID] = keep
    return lp


@torch.inference_mode()
def reference_greedy(model, src, src_mask, max_len_a=1.2, max_len_b=10, min_len=0):
    out = []
    for b in range(src.shape[0]):
        max_len = _limit(model, src_mask[b], max_len_a, max_len_b)
        out.append(greedy_one(model, src, src_mask, b, max_len, min_len))
    return out


@torch.inference_mode()
def greedy_one(model, src, src_mask, b, max_len, min_len=0, adjust=None):
    """Sentence b alone, uncached, up to max_len tokens -> (tokens, summed log-prob).

    adjust(log_probs (V,), step, output so far) -> the log-probs to choose from: a ban or a
    forced token, written out by a test in its own plain code.
    """
    memory = model.encode(src[b : b + 1], src_mask[b : b + 1])
    prefix, score = [BOS_ID], 0.0
    for step in range(max_len + 1):
        lp = _next_log_probs(model, [prefix], memory, src_mask[b : b + 1], step, max_len, min_len)
        lp = lp[0] if adjust is None else adjust(lp[0], step, prefix[1:])
        token = int(lp.argmax())
        score += float(lp[token])
        prefix.append(token)
        if token == EOS_ID:
            break
    return prefix[1:-1], score


@torch.inference_mode()
def reference_beam(
    model, src, src_mask, beam_size=4, alpha=0.6, max_len_a=1.2, max_len_b=10, min_len=0, nbest=None
):
    """Per sentence its best `nbest` (default all) finished hypotheses, best first, as (tokens,
    score).

    The algorithm in plain lists (reference_beam_search): an EOS among an open beam's k + 1
    best tokens is finished, for good; the k best other continuations of all open beams stay
    open. No early stop: it runs until no beam is open, so it also checks that the search stops
    only when nothing better can come.
    """
    out = []
    for b in range(src.shape[0]):
        mask = src_mask[b : b + 1]
        memory = model.encode(src[b : b + 1], mask)
        max_len = _limit(model, mask[0], max_len_a, max_len_b)

        def next_log_probs(prefixes, step, memory=memory, mask=mask, max_len=max_len):
            return _next_log_probs(model, prefixes, memory, mask, step, max_len, min_len)

        out.append(reference_beam_search(next_log_probs, max_len, beam_size, alpha)[:nbest])
    return out


def reference_beam_search(
    next_log_probs, max_len: int, k: int, alpha: float
) -> list[tuple[list[int], float]]:
    """next_log_probs(prefixes with BOS, step) -> (len(prefixes), V) -> every finished hypothesis,
    best first.

    A beam's EOS continuation finishes when EOS is among its k + 1 best tokens; the open beams
    are the k best of all open beams' other continuations, every token considered. A beam of one
    is greedy: its best token, and it ends when that is EOS.
    """
    open_beams, finished = [([], 0.0)], []  # (tokens, summed log-prob)
    for step in range(max_len + 1):
        rows = next_log_probs([[BOS_ID, *tokens] for tokens, _ in open_beams], step).tolist()
        continuations = []
        for (tokens, score), row in zip(open_beams, rows):
            allowed = sorted(
                (v for v in range(len(row)) if row[v] > NEG_INF), key=lambda v: -row[v]
            )
            ranked = allowed[: k + 1] if k > 1 else allowed[:1]
            if EOS_ID in ranked:
                ended = score + row[EOS_ID]
                finished.append((tokens, ended / length_penalty(len(tokens) + 1, alpha)))
            considered = allowed if k > 1 else ranked
            continuations += [(tokens + [v], score + row[v]) for v in considered if v != EOS_ID]
        open_beams = sorted(continuations, key=lambda p: -p[1])[:k]
        if not open_beams:
            break
    return sorted(finished, key=lambda hyp: -hyp[1])


def assert_same(hyps, expected):
    assert [h.tokens for h in hyps] == [tokens for tokens, _ in expected]
    torch.testing.assert_close(
        [h.score for h in hyps], [score for _, score in expected], atol=1e-4, rtol=1e-4
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"positions": "rope", "n_kv_heads": 2},
        {"norm": "post", "positions": "learned"},
        {"positions": "relative", "attention_window": 3},
        {"attention": "linear", "attention_window": 0},
    ],
)
def test_greedy_cached_equals_uncached(make_model, src_batch, changes):
    model = make_model(**changes)
    src, src_mask = src_batch
    assert_same(greedy_search(model, src, src_mask), reference_greedy(model, src, src_mask))


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"positions": "rope", "n_kv_heads": 2},
        {"positions": "relative", "attention_window": 3, "relative_per_layer": True},
        {"attention": "linear"},
    ],
)
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_cached_equals_uncached(make_model, src_batch, changes, alpha):
    model = make_model(**changes)
    src, src_mask = src_batch
    found = beam_search(model, src, src_mask, beam_size=3, alpha=alpha, nbest=3)
    for hyps, expected in zip(
        found, reference_beam(model, src, src_mask, beam_size=3, alpha=alpha, nbest=3)
    ):
        assert_same(hyps, expected)


@pytest.mark.parametrize(
    "alpha, max_len_a, max_len_b", [(0.0, 1.2, 10), (0.6, 0.5, 2), (2.0, 0.0, 7)]
)
def test_beam_of_one_is_greedy(make_model, src_batch, alpha, max_len_a, max_len_b):
    model = make_model()
    src, src_mask = src_batch
    limits = dict(max_len_a=max_len_a, max_len_b=max_len_b, min_len=2)
    greedy = greedy_search(model, src, src_mask, **limits)
    beam = [
        hyps[0] for hyps in beam_search(model, src, src_mask, beam_size=1, alpha=alpha, **limits)
    ]
    # One beam has no rival to rank, so the length penalty only rescales its final score.
    # + EOS
    penalty = [length_penalty(torch.tensor(len(h.tokens) + 1), alpha).item() for h in greedy]
    assert_same(beam, [(h.tokens, h.score / lp) for h, lp in zip(greedy, penalty)])


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_sentence_alone_equals_sentence_in_batch(make_model, src_batch, search):
    model = make_model()
    src, src_mask = src_batch

    def run(s, m):
        if search == "greedy":
            return [[h] for h in greedy_search(model, s, m)]
        return beam_search(model, s, m, beam_size=3, nbest=3)

    batched = run(src, src_mask)
    for b in range(src.shape[0]):
        n = int(src_mask[b].sum())  # the sentence alone, without any padding
        alone = run(src[b : b + 1, :n], src_mask[b : b + 1, ..., :n])[0]
        assert_same(batched[b], [(h.tokens, h.score) for h in alone])


def test_nbest_is_sorted_and_distinct(make_model, src_batch):
    model = make_model()
    src, src_mask = src_batch
    for hyps in beam_search(model, src, src_mask, beam_size=5, nbest=4):
        assert len(hyps) == 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 4


@pytest.mark.parametrize("max_len_a,max_len_b", [(0.0, 3), (1.0, 2), (0.5, 1)])
def test_outputs_respect_max_len(make_model, src_batch, max_len_a, max_len_b):
    model = make_model()
    src, src_mask = src_batch
    limits = [_limit(model, m, max_len_a, max_len_b) for m in src_mask]
    greedy = greedy_search(model, src, src_mask, max_len_a=max_len_a, max_len_b=max_len_b)
    beam = beam_search(model, src, src_mask, max_len_a=max_len_a, max_len_b=max_len_b, nbest=4)
    for limit, g, hyps in zip(limits, greedy, beam):
        assert len(g.tokens) <= limit and all(len(h.tokens) <= limit for h in hyps)
        assert EOS_ID not in g.tokens and PAD_ID not in g.tokens and BOS_ID not in g.tokens


def test_length_limit_is_exact_for_decimal_a_and_capped_without_overflow():
    n = torch.arange(301)
    src_mask = (torch.arange(302) <= n[:, None]).view(301, 1, 1, 302)  # rows of n tokens + EOS
    for a in (0.1, 0.3, 0.7, 1.1, 1.2, 1.3, 1.5, 2.0, 2.7):
        for b in (0, 5, 10):
            expected = [max(1, min(exact_limit(a, b, i), 1023)) for i in range(301)]
            assert max_lengths(src_mask, a, b, 1023).tolist() == expected, (a, b)
    # n = 0: b = 0, at least 1
    assert max_lengths(src_mask, 1e30, 0, 1023).tolist() == [1] + [1023] * 300
    assert max_lengths(src_mask, 0.0, 10**20, 1023).tolist() == [1023] * 301


def test_the_model_limit_caps_the_output(make_model, src_batch):
    model = make_model(max_positions=6)  # room for BOS + 5 tokens
    src, src_mask = src_batch
    src, src_mask = src[:, :5], src_mask[..., :5]
    for g in greedy_search(model, src, src_mask, max_len_a=3.0, max_len_b=50, min_len=50):
        assert len(g.tokens) == 5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_log_softmax_into_is_fp32_log_softmax_bit_for_bit(dtype):
    out = torch.empty(6, 50)
    for scale in (1.0, 30.0):  # the same buffer twice: nothing of the first call is left over
        logits = (torch.randn(6, 50) * scale).to(dtype)
        logits[0, :3] = float("-inf")
        got = log_softmax_into(out, logits)
        assert got.data_ptr() == out.data_ptr()
        assert torch.equal(got, torch.log_softmax(logits, dim=-1, dtype=torch.float32))


@pytest.mark.parametrize("V,k", [(32000, 4), (1280, 10), (384, 3), (1000, 4), (256, 5), (40, 2)])
def test_top_k_is_torch_topk(V, k):
    """The block top-k each beam's proposals come from, against the plain torch.topk: same values
    and indices as x.topk without ties; with ties (bf16-rounded), the same values at indices that
    hold them. V = 1000 (not a multiple of the block) and 256 (2 blocks < k) take x.topk."""
    generator = torch.Generator().manual_seed(V + k)
    for _ in range(20):
        x = torch.randn(16, V, generator=generator) * 5
        x[:, :3] = NEG_INF  # as the search masks PAD, BOS and an early EOS
        values, index = top_k(x, k)
        want = x.topk(k, dim=-1)
        assert torch.equal(values, want.values) and torch.equal(index, want.indices)
        tied = x.bfloat16().float()
        values, index = top_k(tied, k)
        assert torch.equal(values, tied.topk(k, dim=-1).values) and torch.equal(
            tied.gather(1, index), values
        )
        assert all(len(set(row)) == k for row in index.tolist())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_half_precision_search(make_model, src_batch, dtype):
    """On CUDA in bf16/fp16: runs, respects limits, beam 1 == greedy, and mostly agrees with fp32
    CPU."""
    model = make_model()
    src, src_mask = src_batch
    cpu = greedy_search(model, src, src_mask)
    model = model.to("cuda", dtype)
    src, src_mask = src.cuda(), src_mask.cuda()
    greedy = greedy_search(model, src, src_mask)
    beam = beam_search(model, src, src_mask, beam_size=1, alpha=0.0)
    assert [g.tokens for g in greedy] == [hyps[0].tokens for hyps in beam]
    first = [g.tokens[:2] for g in greedy] == [c.tokens[:2] for c in cpu]
    assert first, "half precision changed the first tokens of a sharp random model"
    hyps = beam_search(model, src, src_mask, beam_size=4, nbest=4)
    assert all(len(h) == 4 for h in hyps)


def _searches(model, src, src_mask, cuda_graphs=True):
    """Greedy, then beam (k = 3, 3-best) hypotheses, as comparable (tokens, score) lists."""
    greedy = greedy_search(model, src, src_mask, min_len=2, cuda_graphs=cuda_graphs)
    beam = beam_search(model, src, src_mask, beam_size=3, nbest=3, cuda_graphs=cuda_graphs)
    return [[(h.tokens, h.score)] for h in greedy] + [
        [(h.tokens, h.score) for h in hyps] for hyps in beam
    ]


def _assert_same_searches(got, want, tolerance):
    assert [[tokens for tokens, _ in hyps] for hyps in got] == [
        [tokens for tokens, _ in hyps] for hyps in want
    ]
    torch.testing.assert_close(
        [s for hyps in got for _, s in hyps],
        [s for hyps in want for _, s in hyps],
        atol=tolerance,
        rtol=tolerance,
    )


@pytest.mark.parametrize(
    "changes", [{}, {"positions": "rope", "n_kv_heads": 2}, {"positions": "learned"}]
)
def test_searches_over_the_fixed_shape_cache_find_what_the_plain_cache_finds(
    make_model, src_batch, changes, monkeypatch
):
    """The fixed-shape cache that CUDA graphs replay over, here run eagerly on CPU."""
    model, (src, src_mask) = make_model(**changes), src_batch
    plain = _searches(model, src, src_mask)
    for search in ("beam", "greedy"):
        monkeypatch.setattr(f"translator.decode.{search}.use_cuda_graph", lambda device: True)
    _assert_same_searches(_searches(model, src, src_mask), plain, 1e-5)


@pytest.mark.parametrize(
    "changes", [{}, {"positions": "rope", "n_kv_heads": 2}, {"positions": "relative"}]
)
def test_searches_of_the_model_converted_for_cpu_find_what_the_plain_model_finds(
    make_model, src_batch, changes
):
    """for_cpu_decoding (oneDNN linears, written-out decoder attention, beam-slots cache) against
    the plain model: the same functions, so the same hypotheses (scores to fp32 rounding; in bf16
    rounding can change a search's path: tests/model/test_inference.py compares logits there)."""
    model, (src, src_mask) = make_model(**changes), src_batch
    plain = _searches(model, src, src_mask)
    converted = copy.deepcopy(model)
    for_cpu_decoding(converted)
    _assert_same_searches(_searches(converted, src, src_mask), plain, 1e-4)


@pytest.mark.parametrize(
    "changes, convert",
    [
        ({}, False),
        ({"positions": "rope", "n_kv_heads": 2}, True),
        ({"positions": "relative", "attention_window": 3}, False),
    ],
)
def test_dropping_finished_sentences_finds_what_stepping_every_row_finds(
    make_model, changes, convert, monkeypatch
):
    """Sentences leave the batch as they end (later steps decode fewer rows: counted), and each
    search still returns what it returns when every row is stepped to the end: the plain model's
    slot cache, the CPU-converted model's beam slots, a sliding window's ring."""
    model = make_model(**changes)
    if convert:
        for_cpu_decoding(model)
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 10, (8,), generator=generator).tolist()
    src = torch.full((8, max(lengths) + 1), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(4, model.cfg.vocab_size, (n,), generator=generator)
        src[row, n] = EOS_ID
    src_mask = (src != PAD_ID)[:, None, None, :]
    rows, decode = [], model.decode
    monkeypatch.setattr(model, "decode", lambda tgt, *a: rows.append(len(tgt)) or decode(tgt, *a))
    searches = {
        "greedy": lambda drop: [
            [h] for h in greedy_search(model, src, src_mask, min_len=1, drop_finished=drop)
        ],
        "beam 3, 3-best": lambda drop: beam_search(
            model, src, src_mask, beam_size=3, nbest=3, drop_finished=drop
        ),
        "beam 4, alpha 1": lambda drop: beam_search(
            model, src, src_mask, beam_size=4, alpha=1.0, drop_finished=drop
        ),
    }
    for name, search in searches.items():
        rows.clear()
        dropped = search(True)
        assert rows[-1] < rows[0], f"{name}: no sentence left the batch ({rows})"
        rows.clear()
        stepped = search(False)
        assert len(set(rows)) == 1
        _assert_same_searches(
            [[(h.tokens, h.score) for h in hyps] for hyps in dropped],
            [[(h.tokens, h.score) for h in hyps] for hyps in stepped],
            1e-5,
        )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_replays_compute_the_eager_steps(make_model, src_batch, dtype, monkeypatch):
    """Replayed graphs == the same fixed-shape-cache steps run eagerly, and, in fp32, == the eager
    dense-cache search."""
    import translator.decode.step as step

    model = make_model(positions="rope", n_kv_heads=2).to("cuda", dtype)
    src, src_mask = (t.cuda() for t in src_batch)
    captured = []
    original = step.CudaGraphStep.__call__

    def recording_call(self, tokens):
        captured.append(self)
        return original(self, tokens)

    monkeypatch.setattr(step.CudaGraphStep, "__call__", recording_call)
    graphed = _searches(model, src, src_mask)
    assert captured and all(s.graph is not None for s in captured)  # the graph path ran
    monkeypatch.setattr(step.CudaGraphStep, "__call__", lambda self, tokens: self.decode(tokens))
    # cuBLAS may pick other algorithms under capture
    tolerance = 1e-5 if dtype == torch.float32 else 1e-3
    _assert_same_searches(_searches(model, src, src_mask), graphed, tolerance)
    if dtype == torch.float32:  # the dense cache, no graph
        _assert_same_searches(_searches(model, src, src_mask, cuda_graphs=False), graphed, 1e-4)
