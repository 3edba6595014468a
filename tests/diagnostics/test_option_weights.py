"""The attention diagnostics under the attention options: a window's zeros, the relative bias in
the weights, and linear attention reported as having no weights (issue 21)."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from tests.model.conftest import VOCAB, tiny_config
from translator import attention
from translator.diagnostics.capture import forced_attention
from translator.model.transformer import Transformer


def _model(**changes) -> Transformer:
    return Transformer(tiny_config(**changes)).eval()


def _ids(lengths):
    return [torch.randint(4, VOCAB, (n,)).tolist() for n in lengths]


def test_no_weight_outside_the_window():
    W, src_lengths, tgt_lengths = 3, [12, 9, 3], [11, 10, 2]
    forced = forced_attention(_model(attention_window=W), _ids(src_lengths), _ids(tgt_lengths))
    for kind, lengths, causal in (("encoder", src_lengths, False), ("decoder", tgt_lengths, True)):
        for weights in forced.maps[kind]:
            for b, n in enumerate(lengths):
                w = weights[b, :, : n + 1, : n + 1]  # real tokens: EOS or BOS included
                i, j = torch.arange(n + 1)[:, None], torch.arange(n + 1)[None, :]
                inside = ((i - j).abs() < W) & ((j <= i) if causal else True)
                assert (w[:, ~inside] == 0).all()
                assert (w[:, inside] > 0).all()


def t5_buckets(offsets, bidirectional, n_buckets, max_distance):
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5").T5Attention
    return t5._relative_position_bucket(offsets, bidirectional, n_buckets, max_distance)


@pytest.mark.parametrize("per_layer", [False, True])
def test_weights_include_the_relative_bias(per_layer):
    """With Q = K = 0 every score is 0, so the weights are softmax(bias) over the visible keys."""
    model = _model(positions="relative", relative_per_layer=per_layer, relative_buckets=8)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding) and module.weight.shape[0] == 8:
                module.weight.normal_(0, 2)  # bias tables, far from their small initial values
        for layer in [*model.encoder, *model.decoder]:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                proj.weight.zero_()
                proj.bias.zero_()
    forced = forced_attention(model, _ids([9]), _ids([7]))
    for kind, bias, n, causal in (
        ("encoder", model.encoder_bias, 10, False),
        ("decoder", model.decoder_bias, 8, True),
    ):
        offsets = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # (T, L): j - i
        buckets = t5_buckets(offsets, not causal, 8, model.cfg.relative_max_distance)
        for layer, weights in enumerate(forced.maps[kind]):
            table = bias.tables[layer if per_layer else 0].weight.double()  # (buckets, H)
            scores = table[buckets].permute(2, 0, 1)  # (H, T, L)
            if causal:
                scores = scores.masked_fill(offsets > 0, float("-inf"))
            expected = torch.softmax(scores, dim=-1)
            torch.testing.assert_close(weights[0].double(), expected, atol=1e-5, rtol=1e-5)


def test_linear_encoder_is_reported_without_weights(copy_model, tmp_path):
    """`translator attention` says why there is no encoder table, figure or page panel."""
    cfg = dataclasses.replace(copy_model.cfg.model, attention="linear")
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    forced = forced_attention(model, [[5, 6, 7]], [[5, 6]])
    assert set(forced.maps) == {"decoder", "cross"}
    assert "linear" in forced.without_weights["encoder"]
    out, html = tmp_path / "figures", tmp_path / "page.html"
    table = attention.run(
        model,
        copy_model.tokenizer,
        copy_model.cfg.diagnostics,
        copy_model.cfg.decode,
        ["ka lo mi"],
        ["ka lo mi"],
        out,
        html,
    )
    assert "encoder self-attention is linear (model.attention=linear)" in table
    assert not re.search(r"^encoder +\d", table, re.M)  # no rows of the entropy table
    assert re.search(r"^cross +\d", table, re.M)
    assert not list(out.glob("*encoder*")) and list(out.glob("*cross*"))
    assert "self-attention is linear" in html.read_text(encoding="utf-8")
