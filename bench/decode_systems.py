"""The PyTorch systems of bench.decode (ours, Hugging Face MarianMT) and the CTranslate2 export.

Every model is base size with random weights from one seed; CTranslate2 gets ours, converted by
our export (translator/export.py), so the peers multiply the same matrices.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from translator.data.batching import pad, padding_mask
from translator.data.tokenizer import EOS_ID
from translator.model.attention import sdpa_kernels

BASE = dict(vocab=32000, d_model=512, layers=6, heads=8, ffn=2048, max_positions=1024)


def build_ours(device: torch.device, dtype: str, cpu_kernels: bool = True) -> torch.nn.Module:
    """Our randomly initialised base model in eval mode; `dtype` int8 is fp32 with int8 linears.

    On CPU it gets the conversion `loading.load` applies (model/inference.py) unless not
    `cpu_kernels`.
    """
    from translator.config import ModelConfig
    from translator.model.inference import for_cpu_decoding
    from translator.model.transformer import Transformer

    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=BASE["vocab"],
        d_model=BASE["d_model"],
        n_heads=BASE["heads"],
        n_encoder_layers=BASE["layers"],
        n_decoder_layers=BASE["layers"],
        d_ff=BASE["ffn"],
        dropout=0.0,
        max_positions=BASE["max_positions"],
    )
    int8 = dtype == "int8"
    model = Transformer(cfg).to(device, torch.float32 if int8 else getattr(torch, dtype)).eval()
    if device.type == "cpu" and (cpu_kernels or int8):
        for_cpu_decoding(model, int8=int8)
    return model


def build_hf(device: torch.device, dtype: str) -> torch.nn.Module:
    """A randomly initialised MarianMT of the same size (ReLU, scaled and tied embeddings)."""
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=BASE["vocab"],
        decoder_vocab_size=BASE["vocab"],
        d_model=BASE["d_model"],
        encoder_layers=BASE["layers"],
        decoder_layers=BASE["layers"],
        encoder_attention_heads=BASE["heads"],
        decoder_attention_heads=BASE["heads"],
        encoder_ffn_dim=BASE["ffn"],
        decoder_ffn_dim=BASE["ffn"],
        max_position_embeddings=BASE["max_positions"],
        activation_function="relu",
        scale_embedding=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
    )
    return MarianMTModel(config).to(device, getattr(torch, dtype)).eval()


def decode_ours(model, batch: dict, beam: int, cuda_graphs: bool) -> int:
    """Search one batch to exactly L tokens + EOS (greedy for beam 1, as `translate` does)."""
    from translator.decode.beam import beam_search
    from translator.decode.greedy import greedy_search

    src = pad(batch["src"], suffix=[EOS_ID]).to(next(model.parameters()).device)  # (B, S)
    L = batch["length"]
    lengths = dict(max_len_a=0.0, max_len_b=L, min_len=L, cuda_graphs=cuda_graphs)
    if beam == 1:
        found = [h.tokens for h in greedy_search(model, src, padding_mask(src), **lengths)]
    else:
        hyps = beam_search(model, src, padding_mask(src), beam_size=beam, alpha=0.0, **lengths)
        found = [h[0].tokens for h in hyps]
    assert all(len(tokens) == L for tokens in found)
    return len(batch["src"]) * (L + 1)


def decode_hf(model, batch: dict, beam: int) -> int:
    """`generate` one batch to exactly L + 1 new tokens."""
    src = pad(batch["src"], suffix=[EOS_ID]).to(model.device)  # (B, S)
    L = batch["length"]
    # on CUDA the SDPA kernels ours may use (model/attention.py), so the ratio compares searches
    with torch.inference_mode(), sdpa_kernels(model.device.type == "cuda"):
        out = model.generate(
            input_ids=src,
            attention_mask=src != 0,
            num_beams=beam,
            length_penalty=0.0,
            min_new_tokens=L + 1,
            max_new_tokens=L + 1,
            early_stopping=False,
            do_sample=False,
            use_cache=True,
        )
    assert out.shape[1] == L + 2  # decoder start token + L + 1 generated
    return len(batch["src"]) * (L + 1)


def load(spec: dict) -> tuple:
    """(decode(batch) -> target tokens, parameters) for a PyTorch spec."""
    torch.set_num_threads(spec["threads"])
    device, hf = torch.device(spec["device"]), spec["system"] == "hf"
    model = build_hf(device, spec["dtype"]) if hf else build_ours(device, spec["dtype"])

    def decode(batch: dict) -> int:
        if hf:
            tokens = decode_hf(model, batch, spec["beam"])
        else:
            tokens = decode_ours(model, batch, spec["beam"], spec["system"] == "ours")
        if device.type == "cuda":
            torch.cuda.synchronize()
        return tokens

    return decode, _parameters(model)


def _parameters(model: torch.nn.Module) -> int:
    """Parameters (a tied matrix once); an int8 or oneDNN linear counts the matrix it holds,
    except a tied output projection's copy of the embedding."""
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    from translator.model.inference import OneDNNLinear

    count = sum(p.numel() for p in model.parameters())
    tied = getattr(getattr(model, "cfg", None), "tie_embeddings", False)
    for name, module in model.named_modules():
        if tied and name == "out_proj":
            continue
        if isinstance(module, Int8Linear):
            count += module.weight().numel() + (module.bias() is not None) * module.out_features
        elif isinstance(module, OneDNNLinear):  # its bias is still a parameter
            count += module.packed_weight.numel()
    return count


def export_ct2(tokenizer_file: Path, out: Path) -> None:
    """Our base model (the same seed as `build_ours`) -> CTranslate2 directories out/float32 and
    out/int8, through translator/export.py's `build_spec` (CTranslate2 quantises at save)."""
    from translator.data.tokenizer import Tokenizer
    from translator.export import build_spec

    model = build_ours(torch.device("cpu"), "float32", cpu_kernels=False)
    padded = SimpleNamespace(sp=_PaddedPieces(Tokenizer(tokenizer_file).sp), joint=True)
    for quantization in ("float32", "int8"):
        spec = build_spec(model, padded)
        spec.validate()
        spec.optimize(quantization=quantization)
        (out / quantization).mkdir(parents=True)
        spec.save(str(out / quantization))


class _PaddedPieces:
    """The benchmark's SentencePiece pieces, then placeholders up to the model's 32000 rows: the
    tokenizer trained on newstest2013 has fewer pieces, and CTranslate2 wants one per row."""

    def __init__(self, sp) -> None:
        self.sp = sp

    def get_piece_size(self) -> int:
        return BASE["vocab"]

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(i) if i < self.sp.get_piece_size() else f"<unused{i}>"
