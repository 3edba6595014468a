"""The decode section: search settings for validation, eval and translate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from translator.config.checks import check_range
from translator.errors import TranslatorError


@dataclass(kw_only=True)
class DecodeConfig:
    beam_size: int = 4
    """Beam width; 1 = greedy search."""
    length_penalty: float = 0.6
    """GNMT length penalty alpha: a hypothesis's log-probability is divided by
    ((5 + |y|) / 6) ** alpha, |y| counting its EOS (0 = none). Not fairseq's --lenpen (which
    divides by |y| ** lenpen)."""
    max_len_a: float = 1.2
    """Maximum output length is max_len_a * source_length + max_len_b tokens (EOS not counted),
    capped by max_positions - 1."""
    max_len_b: int = 10
    """Maximum output length is max_len_a * source_length + max_len_b tokens (see max_len_a)."""
    min_len: int = 0
    """Minimum output length in tokens before EOS is allowed (the maximum length wins if
    smaller)."""
    no_repeat_ngram_size: int = 0
    """No output holds the same n-gram of tokens (subword pieces) twice: a token that would
    repeat one is never chosen (fairseq's --no-repeat-ngram-size; 0 = off). A guard against
    loops; it also bans repeats the text needs, so keep n at 3 or more."""
    unk_penalty: float = 0.0
    """Taken from <unk>'s log-probability at every step, so outputs hold fewer <unk> tokens
    (negative: more); the scores include it (fairseq's --unkpen). 100 and up in effect bans
    <unk>, as Marian does by default. An <unk> that remains is dropped from the text, with a
    warning."""
    batch_tokens: int = 4096
    """Source tokens per decoding batch, padding included (sentences are sorted by length first)."""
    device: str = "auto"
    """Inference device for `translate`/`eval` (their --device overrides): `auto` (CUDA when
    present), `cpu`, `cuda` or `cuda:N`."""
    dtype: Literal["auto", "fp32", "bf16", "fp16", "int8"] = "auto"
    """Inference dtype (--dtype overrides): auto = bf16 on CUDA that supports it, fp16 on older
    CUDA; on CPU bf16 where it is native (AVX512-BF16, AMX, Arm BF16), else fp32.
    int8 (CPU only): the fp32 model with its linear layers dynamically quantised to int8."""
    cuda_graphs: bool = True
    """On CUDA, replay each decoding step as one CUDA graph over a fixed-shape KV cache
    (--no-cuda-graphs turns it off). No effect on CPU or under autocast (so not in training's
    validation under bf16 or fp16)."""
    channel_weight: float = 0.2
    """With a reverse-direction model (`--channel`): each n-best candidate is ranked by its
    direct score + channel_weight * log p(source | candidate) / the length penalty of the
    source."""
    channel_candidates: int = 8
    """With `--channel`: the n-best size it reranks (the beam widens to it if narrower)."""

    def __post_init__(self) -> None:
        check_range("decode", self, "beam_size batch_tokens", 1)
        # bounds far past any use: beyond them the scores overflow (lp = ((5 + L) / 6) ** alpha)
        # or the lengths do not fit the search's integers
        check_range("decode", self, "channel_weight", 0, 100)
        check_range("decode", self, "channel_candidates", 2)
        check_range("decode", self, "max_len_a", 0, 1000)
        check_range("decode", self, "max_len_b min_len no_repeat_ngram_size", 0, 1_000_000)
        check_range("decode", self, "length_penalty", -10, 10)  # negative favours short outputs
        check_range("decode", self, "unk_penalty", -1000, 1000)
        if self.max_len_a == 0 and self.min_len > self.max_len_b > 0:
            raise TranslatorError(
                f"min_len={self.min_len} is above the output limit max_len_b={self.max_len_b}",
                "decode.min_len",
                "lower min_len or raise the limit",
            )
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise TranslatorError(
                "max_len_a=0 and max_len_b=0 allow no output",
                "decode.max_len_b",
                "raise either (the limit is max_len_a * source length + max_len_b)",
            )
