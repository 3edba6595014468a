"""The only place that reaches into the model: attention weights and Q/K projection scales.

Everything else in `diagnostics` works on the plain tensors these two functions return, so a
change inside `translator/model/` needs a change here and nowhere else.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from translator.data.batching import pad, padding_mask
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.model.attention import MultiHeadAttention, attention_weights, linear_attention
from translator.model.transformer import Transformer

# encoder self-, decoder (causal) self-, decoder cross-attention
KINDS = ("encoder", "decoder", "cross")
# one capture at a time: each swaps the modules' kernels, and a second would save the first's as
# the kernels to put back
_CAPTURING = threading.Lock()


def attention_modules(model: Transformer) -> dict[str, list[MultiHeadAttention]]:
    """Each kind's attention modules, by layer."""
    return {
        "encoder": [layer.self_attn for layer in model.encoder],
        "decoder": [layer.self_attn for layer in model.decoder],
        "cross": [layer.cross_attn for layer in model.decoder],
    }


def without_weights(model: Transformer) -> dict[str, str]:
    """Kinds whose attention has no weight matrix to capture -> why, in words for a user."""
    return {
        kind: f"{kind} self-attention is linear (model.attention=linear): its kernel never forms "
        "query-by-key weights, so there are none to show"
        for kind, modules in attention_modules(model).items()
        if any(module.kernel is linear_attention for module in modules)
    }


@torch.no_grad()
def attention_maps(
    model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor
) -> dict[str, list[torch.Tensor]]:
    """Teacher-forced pass -> per kind, per layer, the softmax weights (B, H, T, L) in float32.

    src (B, S) with src_mask (B, 1, 1, S); tgt_in (B, T) starts with BOS. Encoder maps are
    (B, H, S, S), decoder self-attention (B, H, T, T), cross-attention (B, H, T, S). The weights
    are the model's own: for this pass each module's attention kernel is the written-out
    `attention_weights` (which a test checks against the fused SDPA path), recording its weights
    under the module's own mask (a sliding window's zeros; relative positions' bias included).
    A kind in `without_weights` (linear attention) keeps its kernel and has no entry.
    """
    skipped = without_weights(model)
    maps: dict[str, list[torch.Tensor]] = {kind: [] for kind in KINDS if kind not in skipped}
    # the swapped kernels and the hook act on this thread's pass alone: another thread decoding
    # with the same model meanwhile (a service) runs the model's own kernels, to its end
    here = threading.get_ident()

    def recording(kind: str, own):
        def kernel(q, k, v, mask, is_causal, dropout_p):
            if threading.get_ident() != here:
                return own(q, k, v, mask, is_causal, dropout_p)
            out, weights = attention_weights(q, k, v, mask, is_causal, dropout_p)
            maps[kind].append(weights.float())
            return out

        return kernel

    def stop(module, args, output):
        if threading.get_ident() == here:
            raise _Done

    with _CAPTURING:
        kernels = []
        for kind, modules in attention_modules(model).items():
            if kind not in maps:  # its own kernel stays: the pass still needs its output
                continue
            for module in modules:  # modules run in layer order: the lists fill layer by layer
                kernels.append((module, module.kernel))
                module.kernel = recording(kind, module.kernel)
        # the logits are not needed: their (B, T, V) projection would be most of the pass's cost
        handle = model.decoder[-1].register_forward_hook(stop)
        try:
            model.decode(tgt_in, model.encode(src, src_mask), src_mask)
        except _Done:
            pass
        finally:
            handle.remove()
            for module, kernel in kernels:
                module.kernel = kernel
    return maps


class _Done(Exception):
    """Raised after the last decoder layer, to end the pass there."""


def qk_scales(model: Transformer) -> dict[str, list[tuple[float, float]]]:
    """Per kind, per layer, the RMS of the Q and of the K projection weights."""
    rms = lambda w: float(w.detach().float().pow(2).mean().sqrt())  # noqa: E731
    return {
        kind: [(rms(m.q_proj.weight), rms(m.k_proj.weight)) for m in modules]
        for kind, modules in attention_modules(model).items()
    }


@dataclass
class Forced:
    """Attention of a teacher-forced batch, with which source and target positions are real."""

    maps: dict[str, list[torch.Tensor]]  # kind -> per layer (B, H, T, L) float32, on the CPU
    src_valid: torch.Tensor  # (B, S) bool: source ids + EOS
    # (B, T) bool: BOS + target ids; row t is the position that predicts token t
    tgt_valid: torch.Tensor
    # kinds absent from `maps` -> why (see `without_weights`)
    without_weights: dict[str, str] = field(default_factory=dict)


def forced_attention(
    model: Transformer, src_ids: list[list[int]], tgt_ids: list[list[int]]
) -> Forced:
    """Pad id lists (no EOS / BOS) as training does, run `attention_maps` on the model's device."""
    device = next(model.parameters()).device
    src = pad(src_ids, suffix=[EOS_ID]).to(device)  # (B, S)
    tgt_in = pad(tgt_ids, prefix=[BOS_ID]).to(device)  # (B, T)
    maps = attention_maps(model, src, padding_mask(src), tgt_in)
    return Forced(
        {k: [w.cpu() for w in v] for k, v in maps.items()},
        (src != PAD_ID).cpu(),
        (tgt_in != PAD_ID).cpu(),
        without_weights(model),
    )
