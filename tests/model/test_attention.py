"""Attention equals the written-out formula; masked keys get exactly zero weight, in every dtype."""

from __future__ import annotations

import math

import pytest
import torch

from translator.model.attention import (
    MultiHeadAttention,
    attention,
    attention_weights,
    sdpa_attention,
)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def reference_attention(x, memory, module, key_mask=None, causal=False):
    """softmax(Q K^T / sqrt(d_k)) V with every step spelled out, in float64, head by head.

    x (N, T, D); memory (N, S, D) or None; key_mask (N, L) bool, True = may attend.
    Returns output (N, T, D) and weights (N, H, T, L). A row with no visible key gets zero weights.
    """

    def project(linear, inputs):
        return inputs.double() @ linear.weight.double().T + linear.bias.double()

    source = x if memory is None else memory
    q, k, v = (
        project(module.q_proj, x),
        project(module.k_proj, source),
        project(module.v_proj, source),
    )
    H, G, d_k = module.n_heads, module.n_kv_heads, module.d_head
    N, T, L = x.shape[0], x.shape[1], source.shape[1]
    out = torch.zeros(N, T, H * d_k, dtype=torch.float64)
    weights = torch.zeros(N, H, T, L, dtype=torch.float64)
    for h in range(H):
        g = h // (H // G)  # query head h reads key/value head g
        qh = q[:, :, h * d_k : (h + 1) * d_k]
        kh, vh = k[:, :, g * d_k : (g + 1) * d_k], v[:, :, g * d_k : (g + 1) * d_k]
        scores = torch.einsum("ntk,nlk->ntl", qh, kh) / math.sqrt(d_k)
        visible = torch.ones(N, T, L, dtype=torch.bool)
        if key_mask is not None:
            visible &= key_mask[:, None, :]
        if causal:
            visible &= torch.arange(L)[None, :] <= torch.arange(T)[:, None]
        e = torch.where(visible, torch.exp(scores - scores.max()), torch.zeros_like(scores))
        total = e.sum(-1, keepdim=True)
        w = torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e))
        weights[:, h] = w
        out[:, :, h * d_k : (h + 1) * d_k] = w @ vh
    return project(module.out_proj, out.float()), weights


def _module(n_kv_heads):
    return MultiHeadAttention(32, 4, n_kv_heads).eval()


KV_HEADS = [pytest.param(4, id="mha"), pytest.param(2, id="gqa"), pytest.param(1, id="mqa")]


KERNELS = [pytest.param(sdpa_attention, id="sdpa"), pytest.param(attention, id="written-out")]


def _qkv(module, x, memory):
    """The module's projected q (N, H, T, K) and k, v (N, G, L, K)."""
    source = x if memory is None else memory
    return (
        module._heads(module.q_proj(x), module.n_heads),
        module._heads(module.k_proj(source), module.n_kv_heads),
        module._heads(module.v_proj(source), module.n_kv_heads),
    )


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("n_kv_heads", KV_HEADS)
@pytest.mark.parametrize("kind", ["padding", "causal", "cross"])
def test_attention_equals_written_out_formula(kind, n_kv_heads, kernel):
    module = _module(n_kv_heads)
    module.kernel = kernel
    x, memory = torch.randn(3, 6, 32), torch.randn(3, 5, 32) if kind == "cross" else None
    L = 5 if kind == "cross" else 6
    key_mask = torch.arange(L)[None, :] < torch.tensor([L, 3, 1])[:, None]  # (3, L)
    mask = key_mask[:, None, None, :]  # (B, 1, 1, L)
    if kind == "causal":
        expected, expected_w = reference_attention(x, None, module, causal=True)
        got, (_, weights) = (
            module(x, is_causal=True),
            attention_weights(*_qkv(module, x, None), is_causal=True),
        )
    else:
        expected, expected_w = reference_attention(x, memory, module, key_mask)
        got, (_, weights) = (
            module(x, memory, mask),
            attention_weights(*_qkv(module, x, memory), mask),
        )
    torch.testing.assert_close(got, expected.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.double(), expected_w, atol=1e-5, rtol=1e-5)


ON = [
    pytest.param(("cpu", torch.float32, 1e-6), id="cpu-fp32"),
    pytest.param(("cuda", torch.bfloat16, 2e-2), id="cuda-bf16", marks=[pytest.mark.cuda, cuda]),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("on", ON)
@pytest.mark.parametrize("n_kv_heads", KV_HEADS)
def test_beams_folded_into_queries_equal_memory_repeated_per_beam(n_kv_heads, on, kernel):
    (device, dtype, tol), B, k = on, 2, 3
    module = _module(n_kv_heads).to(device, dtype)
    module.kernel = kernel
    x, memory = (
        torch.randn(B * k, 4, 32, device=device, dtype=dtype),
        torch.randn(B, 5, 32, device=device, dtype=dtype),
    )
    # (B, 1, 1, S)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 2])[:, None])[:, None, None, :].to(device)
    folded = module(x, memory, mask)
    repeated = module(x, memory.repeat_interleave(k, 0), mask.repeat_interleave(k, 0))
    torch.testing.assert_close(folded, repeated, atol=tol, rtol=tol)


def _fully_masked_case(dtype, device="cpu", requires_grad=False):
    """q (2, 4, 3, 8), k/v (2, 2, 5, 8) (GQA); sentence 0 sees 3 keys, sentence 1 none."""
    q, k, v = (
        torch.randn(2, h, n, 8, device=device, dtype=dtype, requires_grad=requires_grad)
        for h, n in ((4, 3), (2, 5), (2, 5))
    )
    mask = torch.arange(5, device=device)[None, :] < torch.tensor([3, 0], device=device)[:, None]
    return q, k, v, mask[:, None, None, :]


def _check_masked_rows(dtype, device):
    """The written-out attention (SDPA's precondition is a key for every query: sdpa_attention)."""
    q, k, v, mask = _fully_masked_case(dtype, device)
    slow, weights = attention_weights(q, k, v, mask)
    assert not slow.isnan().any()
    assert (slow[1] == 0).all()  # no key to read: a zero output, not NaN
    assert (weights[1] == 0).all() and (weights[0, ..., 3:] == 0).all()  # exactly zero, no leak
    # weights rounded to bf16/fp16
    torch.testing.assert_close(
        weights[0].float().sum(-1), torch.ones(4, 3, device=device), atol=1e-2, rtol=0
    )
    # A masked key's value cannot move the output, however large: its weight is exactly zero.
    v_big = v.clone()
    v_big[0, :, 3:] = 1e4
    assert torch.equal(attention_weights(q, k, v_big, mask)[0][0], slow[0])
    assert torch.equal(sdpa_attention(q, k, v_big, mask)[0], sdpa_attention(q, k, v, mask)[0])


def _check_masked_rows_backward(dtype, device):
    q, k, v, mask = _fully_masked_case(dtype, device, requires_grad=True)
    attention(q, k, v, mask).float().sum().backward()
    for t in (q, k, v):
        assert t.grad.isfinite().all()
    assert (q.grad[1] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_fully_masked_rows_get_zero_weight_not_nan(dtype):
    _check_masked_rows(dtype, "cpu")  # fp16 attention runs on CPU in the supported torch versions
    _check_masked_rows_backward(dtype, "cpu")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_fully_masked_rows_cuda(dtype):
    _check_masked_rows(dtype, "cuda")
    _check_masked_rows_backward(dtype, "cuda")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("n_kv_heads", KV_HEADS)
def test_attention_equals_written_out_formula_cuda_bf16(n_kv_heads):
    module = _module(n_kv_heads)
    x, key_mask = torch.randn(3, 6, 32), torch.arange(6)[None, :] < torch.tensor([6, 3, 1])[:, None]
    expected, _ = reference_attention(x, None, module, key_mask)
    causal, _ = reference_attention(x, None, module, causal=True)
    module = module.to("cuda", torch.bfloat16)
    xb, mask = x.to("cuda", torch.bfloat16), key_mask[:, None, None, :].cuda()
    got = [module(xb, mask=mask), module(xb, is_causal=True)]
    module.kernel = attention
    got += [module(xb, mask=mask), module(xb, is_causal=True)]
    for out, want in zip(got, (expected, causal) * 2):
        torch.testing.assert_close(out.float().cpu(), want.float(), atol=3e-2, rtol=3e-2)


@pytest.mark.cuda
@cuda
def test_sdpa_on_cuda_never_runs_cudnn():
    """cuDNN's kernel plans each new shape anew: a decoding step's shapes (one query, a growing
    key length), training's (N, T) and a masked call must all go to the other kernels."""
    from torch.profiler import ProfilerActivity, profile

    q, kv = torch.randn(8, 8, 1, 64), torch.randn(2, 8, 37, 64)
    args = [t.to("cuda", torch.bfloat16) for t in (q, kv, kv, q.repeat(1, 1, 23, 1))]
    mask = torch.ones(2, 1, 1, 37, dtype=torch.bool, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sdpa_attention(args[0].view(2, 8, 4, 64), args[1], args[2])
        sdpa_attention(args[3], args[3], args[3], is_causal=True)
        sdpa_attention(args[3][:2], args[1], args[2], mask=mask)
        torch.cuda.synchronize()
    names = {event.key for event in prof.key_averages()}
    assert any("attention" in name for name in names)  # the calls were recorded
    assert not [name for name in names if "cudnn" in name.lower()]


def test_rotary_scores_depend_only_on_relative_position():
    from translator.model.attention import RotaryEmbedding

    rope = RotaryEmbedding(8, 64)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    at = torch.tensor  # positions (T,) = (1,)
    scores = [(rope(q, at([start + 3])) * rope(k, at([start]))).sum() for start in (0, 5, 40)]
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(3), atol=1e-5, rtol=1e-5)
    assert not torch.allclose((rope(q, at([4])) * rope(k, at([0]))).sum(), scores[0])


def test_rotary_is_a_complex_rotation_of_each_pair():
    """Each (even, odd) pair as a complex number a + ib, times e^(i t theta_j): the reference is
    complex arithmetic, in whatever memory layout the heads come in (here a transposed view)."""
    from translator.model.attention import RotaryEmbedding

    d_head, positions = 16, torch.tensor([0, 3, 7, 30])
    rope = RotaryEmbedding(d_head, 64, base=100.0)
    x = torch.randn(2, 4, 3, d_head, dtype=torch.float64).transpose(1, 2)  # (N, heads, T, K)
    theta = 100.0 ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)  # (K/2,)
    turn = torch.polar(torch.ones(4, d_head // 2, dtype=torch.float64), positions[:, None] * theta)
    pairs = torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2)))  # (N, heads, T, K/2)
    expected = torch.view_as_real(pairs * turn).flatten(-2)
    torch.testing.assert_close(rope(x, positions), expected, rtol=1e-5, atol=1e-5)
    # gradients: a rotation's transpose is the rotation back
    x = x.float().requires_grad_()
    grad = torch.randn(2, 3, 4, d_head)
    rope(x, positions).backward(grad)
    back = torch.view_as_complex(grad.double().unflatten(-1, (-1, 2))) * turn.conj()
    torch.testing.assert_close(
        x.grad, torch.view_as_real(back).flatten(-2).float(), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_weights_are_the_fp32_softmax_rounded(dtype):
    """attention_weights runs softmax in the input dtype, relying on PyTorch to compute it in
    fp32."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 8, T, 64, generator=generator).to(dtype) for T in (3, 40, 40))
    mask = torch.rand(4, 1, 3, 40, generator=generator) > 0.3
    _, weights = attention_weights(q, k, v, mask)
    scores = ((q / 8) @ k.transpose(-2, -1)).float().masked_fill(~mask, float("-inf"))
    expected = torch.softmax(scores, dim=-1).to(dtype)
    ulp = torch.finfo(dtype).eps * expected.float().abs()  # one unit in the last place, per weight
    assert ((weights.float() - expected.float()).abs() <= ulp).all()
