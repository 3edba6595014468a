"""Captured weights are the model's own: weighted values reproduce what the SDPA path outputs."""

from __future__ import annotations

import threading

import pytest
import torch

from tests.model.conftest import VOCAB, tiny_config
from translator.diagnostics.capture import KINDS, attention_maps, forced_attention, qk_scales
from translator.model.transformer import Transformer

# > 8 queries: the fused SDPA path, not the decoding one
SRC_LENGTHS, TGT_LENGTHS = ([12, 9, 3], [11, 10, 2])


def _model(**changes) -> Transformer:
    return Transformer(tiny_config(**changes)).eval()


def _ids(lengths):
    return [torch.randint(4, VOCAB, (n,)).tolist() for n in lengths]


def _sdpa_run(model, src, src_mask, tgt_in):
    """A plain forward, recording each attention module's V projection and its merged heads (before
    out_proj)."""
    seen, handles = [], []
    modules = [
        (k, m)
        for k, ms in [
            ("encoder", [la.self_attn for la in model.encoder]),
            ("decoder", [la.self_attn for la in model.decoder]),
            ("cross", [la.cross_attn for la in model.decoder]),
        ]
        for m in ms
    ]
    for kind, module in modules:
        record = {"kind": kind, "module": module}
        seen.append(record)
        handles.append(
            module.v_proj.register_forward_hook(lambda m, a, out, r=record: r.__setitem__("v", out))
        )
        handles.append(
            module.out_proj.register_forward_pre_hook(
                lambda m, a, r=record: r.__setitem__("merged", a[0])
            )
        )
    with torch.no_grad():
        model.decode(tgt_in, model.encode(src, src_mask), src_mask)
    for handle in handles:
        handle.remove()
    return seen


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=[pytest.mark.cuda, CUDA]),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)], ids=["fp32", "bf16"]
)
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"n_kv_heads": 2},
        {"positions": "rope"},
        {"positions": "relative", "relative_per_layer": True},
        {"attention_window": 3, "positions": "relative"},
    ],
    ids=["mha", "gqa", "rope", "relative", "window-relative"],
)
def test_weighted_values_reproduce_the_sdpa_output(dtype, tol, changes, device):
    if device == "cuda" and dtype == torch.float32:
        tol = 1e-3  # TF32-free fp32, but the fused kernels sum in another order
    model = _model(**changes).to(device, dtype)
    src_ids, tgt_ids = _ids(SRC_LENGTHS), _ids(TGT_LENGTHS)
    forced = forced_attention(model, src_ids, tgt_ids)
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(s + [3]) for s in src_ids], batch_first=True
    ).to(device)
    tgt_in = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor([2] + t) for t in tgt_ids], batch_first=True
    ).to(device)
    records = _sdpa_run(model, src, (src != 0)[:, None, None, :], tgt_in)
    layer = {kind: 0 for kind in KINDS}
    for r in records:  # modules of one kind run in layer order
        weights = forced.maps[r["kind"]][layer[r["kind"]]]  # (B, H, T, L) float32
        layer[r["kind"]] += 1
        m = r["module"]
        B, L, _ = r["v"].shape
        v = r["v"].float().cpu().view(B, L, m.n_kv_heads, m.d_head).transpose(1, 2)  # (B, G, L, K)
        v = v.repeat_interleave(m.n_heads // m.n_kv_heads, dim=1)  # (B, H, L, K)
        ours = (weights @ v).transpose(1, 2).reshape(B, weights.shape[2], -1)  # (B, T, H*K)
        torch.testing.assert_close(ours, r["merged"].float().cpu(), atol=tol, rtol=tol)


def test_masked_keys_get_exactly_zero_weight():
    model = _model()
    forced = forced_attention(model, _ids(SRC_LENGTHS), _ids(TGT_LENGTHS))
    for b, s in enumerate(SRC_LENGTHS):
        for w in forced.maps["encoder"] + forced.maps["cross"]:
            assert (w[b, ..., s + 1 :] == 0).all()  # padding after the source's EOS
            assert (w[b, ..., : s + 1] > 0).all()
        for w in forced.maps["decoder"]:
            T = w.shape[-1]
            # the future
            assert (w[b].masked_select(~torch.ones(T, T, dtype=torch.bool).tril()) == 0).all()
    for kind in KINDS:  # every real row is a distribution
        for w in forced.maps[kind]:
            sums = w.sum(-1)
            rows = forced.src_valid if kind == "encoder" else forced.tgt_valid
            torch.testing.assert_close(
                sums[rows[:, None, :].expand_as(sums)],
                torch.ones_like(sums[rows[:, None, :].expand_as(sums)]),
            )


def test_shapes_and_hooks_removed():
    model = _model(n_encoder_layers=3, n_decoder_layers=1)
    src = torch.randint(4, VOCAB, (2, 5))
    maps = attention_maps(
        model, src, torch.ones(2, 1, 1, 5, dtype=torch.bool), torch.randint(4, VOCAB, (2, 4))
    )
    assert [tuple(w.shape) for w in maps["encoder"]] == [(2, 4, 5, 5)] * 3
    assert [tuple(w.shape) for w in maps["decoder"]] == [(2, 4, 4, 4)]
    assert [tuple(w.shape) for w in maps["cross"]] == [(2, 4, 4, 5)]
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert isinstance(
        model(src, src[:, :3], torch.ones(2, 1, 1, 5, dtype=torch.bool)), torch.Tensor
    )


def test_qk_scales_are_the_weights_rms():
    model = _model()
    with torch.no_grad():
        model.decoder[1].cross_attn.q_proj.weight.fill_(0.5)
        model.decoder[1].cross_attn.k_proj.weight.fill_(-0.125)
    scales = qk_scales(model)
    assert scales["cross"][1] == (pytest.approx(0.5), pytest.approx(0.125))
    assert [len(scales[k]) for k in KINDS] == [2, 2, 2]


def test_another_thread_decodes_as_usual_during_a_capture():
    """A service's other threads keep the model's own kernels and run past the last decoder layer
    while one thread captures: the capture's swapped kernels and its stop act on its pass alone."""
    model = _model()
    src = torch.randint(4, VOCAB, (2, 9))
    src_mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    tgt_in = torch.randint(4, VOCAB, (2, 10))
    with torch.no_grad():
        expected = model(src, tgt_in, src_mask)
    seen = {}

    def other_thread():
        try:
            with torch.no_grad():
                seen["logits"] = model(src, tgt_in, src_mask)
        except BaseException as err:  # noqa: BLE001 - what the other thread met is the finding
            seen["error"] = err

    def mid_capture(module, args):  # the capture's kernels and stop are in place by now
        if threading.current_thread() is threading.main_thread() and "done" not in seen:
            seen["done"] = True
            worker = threading.Thread(target=other_thread)
            worker.start()
            worker.join()

    handle = model.decoder[0].register_forward_pre_hook(mid_capture)
    try:
        maps = attention_maps(model, src, src_mask, tgt_in)
    finally:
        handle.remove()
    assert "error" not in seen, seen.get("error")
    torch.testing.assert_close(seen["logits"], expected, rtol=0, atol=0)
    assert [len(maps[kind]) for kind in KINDS] == [2, 2, 2]  # the other thread recorded nothing
