"""The Hugging Face peer of bench/train_peer.py: a MarianMTModel of our config's size and
choices (`marian_config`; where Marian has no such choice the difference is named in NOT_MAPPED),
its fused AdamW as HF's Trainer builds it, and its side of one update on our batches."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from translator.config import Config, ModelConfig
from translator.data.batching import Batch
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.model.attention import sdpa_kernels
from translator.train.loss import token_loss

NOT_MAPPED = (
    "Marian is post-LN only (our configs are pre-LN: one final LayerNorm per stack more); "
    "Marian adds a fixed `final_logits_bias` buffer to the logits (ours: model.output_bias off); "
    "Marian's sinusoids put sines before cosines (ours interleave them: the same cost); "
    "HF's embedding has padding_idx (its PAD row gets no gradient)"
)


HF_ACTIVATION = {"relu": "relu", "gelu": "gelu", "silu": "swish"}


def marian_config(m: ModelConfig):
    """A MarianConfig of the same size and choices as our ModelConfig (joint vocabulary, tied)."""
    from transformers import MarianConfig

    if m.positions != "sinusoidal" or m.n_kv_heads not in (None, m.n_heads):
        raise ValueError("Marian has sinusoidal positions and full multi-head attention only")
    return MarianConfig(
        vocab_size=m.vocab_size,
        decoder_vocab_size=m.vocab_size,
        d_model=m.d_model,
        encoder_layers=m.n_encoder_layers,
        decoder_layers=m.n_decoder_layers,
        encoder_attention_heads=m.n_heads,
        decoder_attention_heads=m.n_heads,
        encoder_ffn_dim=m.d_ff,
        decoder_ffn_dim=m.d_ff,
        max_position_embeddings=m.max_positions,
        activation_function=HF_ACTIVATION[m.activation],
        scale_embedding=m.scale_embeddings,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        activation_dropout=m.activation_dropout,
        share_encoder_decoder_embeddings=m.src_vocab_size == 0,
        tie_word_embeddings=m.tie_embeddings,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,
        attn_implementation="sdpa",
    )


@dataclass
class Peer:
    """HF's model and optimizer with the config's training settings."""

    cfg: Config
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    dtype: torch.dtype | None
    device: torch.device


def build_peer(cfg: Config, device: torch.device, dtype: torch.dtype | None) -> Peer:
    from transformers import MarianMTModel

    torch.manual_seed(cfg.train.seed)
    model = MarianMTModel(marian_config(cfg.model)).to(device).train()
    t = cfg.train
    optimizer = torch.optim.AdamW(  # as HF's Trainer builds it (optim="adamw_torch_fused")
        model.parameters(),
        lr=t.lr,
        betas=(t.adam_beta1, t.adam_beta2),
        eps=t.adam_eps,
        weight_decay=t.weight_decay,
        fused=True,
    )
    return Peer(cfg, model, optimizer, dtype, device)


def peer_step(p: Peer, batch: Batch, total_tokens: float) -> float:
    """HF's side of one update: forward, the same loss, backward, norm (and clip), AdamW."""
    batch = batch.to(p.device)
    # on CUDA the SDPA kernels ours may use (model/attention.py), so the ratio compares the steps
    amp = p.dtype is not None
    with (
        sdpa_kernels(p.device.type == "cuda"),
        torch.autocast(p.device.type, dtype=p.dtype or torch.float32, enabled=amp),
    ):
        logits = p.model(
            input_ids=batch.src,
            attention_mask=(batch.src != PAD_ID).long(),
            decoder_input_ids=batch.tgt_in,
            use_cache=False,  # what HF's training path sets when labels are given
        ).logits  # (B, T, V)
        loss, _ = token_loss(logits, batch.tgt_out, p.cfg.train.label_smoothing)
    (loss / total_tokens).backward()
    params = [q for q in p.model.parameters() if q.grad is not None]
    norm = torch.nn.utils.get_total_norm([q.grad for q in params])
    if p.cfg.train.clip_grad_norm:
        torch.nn.utils.clip_grads_with_norm_(params, p.cfg.train.clip_grad_norm, norm)
    p.optimizer.step()
    p.optimizer.zero_grad(set_to_none=True)
    return float(norm)
