"""The conversion for CPU decoding computes the plain model's functions; the plain model honours
autocast."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from translator.model.inference import OneDNNLinear, bucketed, for_cpu_decoding, onednn_dtypes

needs_onednn = pytest.mark.skipif(
    torch.float32 not in onednn_dtypes(), reason="this PyTorch has no oneDNN linear"
)


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bias", [True, False])
# 17 and 3 x 7 = 21 rows are not of bucketed's sizes: padded to 18 and 22, then cut
@pytest.mark.parametrize(
    "shape", [(5, 16), (3, 4, 16), (16,), (0, 16), (17, 16), (3, 7, 16), "transposed"]
)
@pytest.mark.parametrize("activation", ["none", "relu"])
def test_onednn_linear_is_x_w_plus_b_in_float64(dtype, bias, shape, activation):
    if dtype not in onednn_dtypes():
        pytest.skip("no bf16 oneDNN on this CPU")
    torch.manual_seed(0)
    linear = nn.Linear(16, 24, bias=bias).to(dtype)
    # (37, 16) non-contiguous (and padded to 40)
    x = torch.randn(16, 37).t() if shape == "transposed" else torch.randn(shape)
    x = x.to(dtype)
    with torch.inference_mode():
        got = OneDNNLinear(linear, activation)(x)
    want = F.linear(
        x.double(), linear.weight.double(), None if linear.bias is None else linear.bias.double()
    )
    want = torch.relu(want) if activation == "relu" else want
    tol = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: the output is rounded to 8 mantissa bits
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def test_bucketed_row_counts_are_few_an_octave_and_at_most_an_eighth_more():
    sizes = [bucketed(rows) for rows in range(0, 5000)]
    assert sizes[:16] == list(range(16))  # exact below 16
    for rows, size in enumerate(sizes[16:], start=16):
        assert rows <= size <= rows * 9 / 8 and bucketed(size) == size
    for low in (16, 32, 256, 2048):  # 8 sizes an octave (and its top, the next one's first)
        assert {bucketed(rows) for rows in range(low, 2 * low)} == set(
            range(low, 2 * low + 1, low // 8)
        )


@pytest.mark.parametrize(
    "dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 0.1)], ids=["fp32", "bf16"]
)
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"positions": "rope", "n_kv_heads": 2, "norm": "post"},
        {"positions": "relative", "attention_window": 3, "attention": "softmax"},
        {"attention": "linear"},
        {"gated_ffn": True},  # ReLU, so the ungated FFN's fused activation must not be used
    ],
)
@torch.inference_mode()
def test_converted_model_computes_the_plain_models_logits(
    make_model, src_batch, changes, dtype, tol
):
    plain = make_model(**changes).to(dtype)
    converted = copy.deepcopy(plain)
    for_cpu_decoding(converted)
    src, src_mask = src_batch
    tgt = torch.randint(4, plain.cfg.vocab_size, (3, 6))
    torch.testing.assert_close(
        converted(src, tgt, src_mask).float(), plain(src, tgt, src_mask).float(), atol=tol, rtol=tol
    )


def test_conversion_packs_the_linear_weights_and_keeps_the_rest(make_model):
    model = make_model()
    keys = set(model.state_dict())
    linear_weights = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    embedding = model.tgt_embed.token.weight
    summary = for_cpu_decoding(model)
    assert "beam-slots KV cache" in summary and model.beam_slots_cache
    assert model.tgt_embed.token.weight is embedding  # the embedding keeps its dense matrix
    assert not any(p.requires_grad for p in model.parameters())
    if torch.float32 in onednn_dtypes():
        assert not any(isinstance(m, nn.Linear) for m in model.modules())
        # the dense linear weights are let go: only their packed copies are left
        assert set(model.state_dict()) == keys - linear_weights
        assert "out_proj.weight" in linear_weights


@needs_onednn
def test_converted_linear_refuses_autocast_and_the_plain_model_follows_it(make_model, src_batch):
    """Validation decodes the training model under autocast: its linears must run in bf16 (the
    oneDNN op would silently run fp32 there), and a converted model says it cannot."""
    plain = make_model()
    src, src_mask = src_batch
    tgt = torch.randint(4, plain.cfg.vocab_size, (3, 6))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert plain(src, tgt, src_mask).dtype == torch.bfloat16
        for_cpu_decoding(plain)
        with pytest.raises(RuntimeError, match="not under autocast"):
            plain(src, tgt, src_mask)
