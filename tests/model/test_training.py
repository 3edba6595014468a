"""Training-side properties: gradient checkpointing changes nothing; the model can memorise."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from translator.model.transformer import Transformer

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _loss(model, src, tgt, pad=0):
    src_mask = (src != pad)[:, None, None, :]
    logits = model(src, tgt[:, :-1], src_mask)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=pad)


def _pairs(n, vocab, device="cpu"):
    """n random (src, tgt) pairs, right-padded with 0; tgt starts with BOS (2), ends with EOS
    (3)."""
    src, tgt = torch.zeros(n, 9, dtype=torch.long), torch.zeros(n, 10, dtype=torch.long)
    for i in range(n):
        length = 4 + i % 5
        src[i, :length] = torch.randint(4, vocab, (length,))
        src[i, length] = 3
        tgt[i, 0], tgt[i, length + 1] = 2, 3
        tgt[i, 1 : length + 1] = torch.randint(4, vocab, (length,))
    return src.to(device), tgt.to(device)


def _loss_and_grads(model, src, tgt, seed):
    torch.manual_seed(seed)  # the same dropout masks for both runs
    model.zero_grad()
    loss = _loss(model, src, tgt)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def _count_forward_calls(layer: torch.nn.Module) -> list[int]:
    """Wrap layer.forward to log each run (forward hooks do not fire on checkpoint
    recomputation)."""
    calls, forward = [], layer.forward

    def counted(*args):
        calls.append(1)
        return forward(*args)

    layer.forward = counted
    return calls


def _check_checkpointing(make_model, device, dtype, tol):
    plain = make_model(dropout=0.1, attention_dropout=0.1, positions="rope", n_kv_heads=2).train()
    ckpt = make_model(
        dropout=0.1,
        attention_dropout=0.1,
        positions="rope",
        n_kv_heads=2,
        gradient_checkpointing=True,
    ).train()
    ckpt.load_state_dict(plain.state_dict())
    plain, ckpt = plain.to(device, dtype), ckpt.to(device, dtype)
    calls = _count_forward_calls(ckpt.decoder[0])
    src, tgt = _pairs(4, plain.cfg.vocab_size, device)
    loss, grads = _loss_and_grads(plain, src, tgt, seed=7)
    loss_ckpt, grads_ckpt = _loss_and_grads(ckpt, src, tgt, seed=7)
    assert len(calls) == 2  # the layer ran again in the backward pass: activations were recomputed
    torch.testing.assert_close(loss_ckpt, loss, atol=tol, rtol=tol)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, atol=tol, rtol=tol, msg=name)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(make_model):
    _check_checkpointing(make_model, "cpu", torch.float32, 1e-6)


@pytest.mark.cuda
@cuda
def test_gradient_checkpointing_cuda_bf16(make_model):
    _check_checkpointing(make_model, "cuda", torch.bfloat16, 2e-2)


def test_checkpointing_is_off_in_eval_mode(make_model):
    model = make_model(gradient_checkpointing=True)
    calls = _count_forward_calls(model.encoder[0])
    src, tgt = _pairs(2, model.cfg.vocab_size)
    _loss(model, src, tgt).backward()
    assert len(calls) == 1


def test_model_overfits_eight_pairs(make_model):
    model: Transformer = make_model(d_model=64, d_ff=128).train()
    src, tgt = _pairs(8, model.cfg.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(80):
        optimizer.zero_grad()
        loss = _loss(model, src, tgt)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 3.0 and losses[-1] < 0.02, (losses[0], losses[-1])  # from ~ln(40) to ~0
