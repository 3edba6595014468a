"""One typed configuration tree: YAML -> dataclasses, dotted overrides, unknown keys rejected.

Every field has a default and a doc comment; `load` checks types and names the closest valid key
when a key is unknown. Imports nothing from the package but `errors`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from translator.config_yaml import DuplicateKey, Plain, parse
from translator.errors import TranslatorError


def _check_range(
    section: str,
    obj: Any,
    names: str,
    low: float,
    high: float | None = None,
    high_open: bool = False,
) -> None:
    """Each field in `names` (space-separated) must be a finite number >= low and <= high (< high if
    high_open)."""
    for name in names.split():
        value = getattr(obj, name)
        if (
            math.isfinite(value)
            and value >= low
            and (high is None or (value < high if high_open else value <= high))
        ):
            continue
        rule = (
            f"in [{low}, {high}{')' if high_open else ']'}"
            if high is not None
            else f"of at least {low} (finite)"
            if low > -math.inf
            else "that is a finite number"
        )
        raise TranslatorError(
            f"{name}={value} is out of range", f"{section}.{name}", f"use a value {rule}"
        )


def _expand_path(value: str, key: str) -> str:
    """A path setting with `~` and `$NAME` expanded, as a shell would: YAML files and `--set`
    values reach us unexpanded, and a literal `~` would become a directory of that name here."""
    expanded = os.path.expandvars(os.path.expanduser(value))
    unset = re.search(r"\$\{?[A-Za-z_]\w*\}?", expanded)  # `$5`, `$` alone: not names
    if unset:
        raise TranslatorError(
            f"{value!r} names {unset[0]}, which is not set", key, "set it, or write the path out"
        )
    return expanded


# SentencePiece's own names of its normalization rules (DataConfig.spm_normalization)
SpmNormalization = Literal["nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"]
# Pieces every SentencePiece model of ours holds before any of the text's (tokenizer.py's ids)
SPECIAL_PIECES, BYTE_PIECES = 4, 256


@dataclass(kw_only=True)
class DataConfig:
    name: str = "multi30k"
    """Name of the prepared data set: it lands in `{data_dir}/{name}/`."""
    source: str = "hf:bentrevett/multi30k"
    """`hf:NAME[:CONFIG]` (hub), or a directory of `{split}.{lang}[.gz]`, `{split}.tsv`,
    `{split}.jsonl` files or a `save_to_disk` dataset."""
    data_dir: str = "data"
    """Root directory for prepared data."""
    src_lang: str = "en"
    """Source language code, as it appears in the data (column or file suffix)."""
    tgt_lang: str = "de"
    """Target language code; for zh, ja and ko BLEU uses sacreBLEU's tokenizer of that language."""
    splits: dict[str, str] = field(
        default_factory=lambda: {"train": "train", "valid": "validation", "test": "test"}
    )
    """Our split name -> the source's split name (train, valid and test are used)."""
    max_train_pairs: int = 0
    """Use only the first N training pairs (0 = all); handy for quick experiments."""
    tsv_columns: str = ""
    """Column names of headerless TSV files in file order, comma-separated (e.g. `de,en`); empty = a
    header row names them."""
    nfc: bool = True
    """Cleaning: Unicode NFC normalisation of every sentence."""
    normalize_spaces: bool = True
    """Cleaning: remove control characters; turn each whitespace run (TAB, NO-BREAK SPACE...) into
    one space; trim."""
    drop_empty: bool = True
    """Cleaning: drop training pairs with an empty side."""
    drop_debris: bool = True
    """Cleaning: drop training pairs with a side that has no letter or digit (markup debris such as
    `@@`)."""
    max_tokens_per_side: int = 250
    """Cleaning: drop training pairs with a side longer than this many subword tokens (0 = off)."""
    max_length_ratio: float = 3.0
    """Cleaning: drop training pairs whose longer side has more than this many times the shorter
    side's tokens (at least 1; 0 = off)."""
    dedup: bool = True
    """Cleaning: drop exact duplicate training pairs (the first occurrence stays)."""
    drop_held_out: bool = True
    """Cleaning: drop training pairs whose source or target also occurs in the valid or test set."""
    joint_vocab: bool = True
    """One SentencePiece model for both languages (tied embeddings need it), or one per side."""
    vocab_size: int = 8000
    """SentencePiece vocabulary size (of each model when the vocabularies are separate)."""
    spm_model_type: Literal["unigram", "bpe"] = "unigram"
    """SentencePiece algorithm."""
    character_coverage: float = 1.0
    """SentencePiece character coverage (1.0 for Latin scripts, 0.9995 for CJK)."""
    byte_fallback: bool = False
    """Encode unknown characters as UTF-8 bytes instead of <unk>."""
    spm_normalization: SpmNormalization = "nmt_nfkc"
    """SentencePiece's rewriting of all text before it is split, and so of what the model can
    output: `nmt_nfkc` NFKC (full-width `，？１Ａ` become `,?1A`, `…` `...`, `ﬁ` `fi`) and
    makes ZWNJ and RLM (U+200C, U+200F) spaces; `nfkc` NFKC alone; `nmt_nfkc_cf` and
    `nfkc_cf` also lowercase; `identity` keeps the text as cleaned. Use identity for CJK,
    Persian, Arabic and any target whose characters must survive (prepare counts the references
    the rule changes)."""
    input_sentence_size: int = 1_000_000
    """Train SentencePiece on a seeded random sample of at most this many sentences (0 = all)."""

    def __post_init__(self) -> None:
        _check_range(
            "data",
            self,
            "max_train_pairs max_tokens_per_side max_length_ratio input_sentence_size",
            0,
        )
        self._check_vocab_size()
        # the ratio is longer side / shorter side, never below 1: under 1 every pair is dropped
        if 0 < self.max_length_ratio < 1:
            raise TranslatorError(
                f"max_length_ratio={self.max_length_ratio} is below 1, so every training pair "
                "would be dropped (the ratio is longer side / shorter side)",
                "data.max_length_ratio",
                "use a value of at least 1 (e.g. 3), or 0 for no ratio rule",
            )
        if not 0 < self.character_coverage <= 1:
            raise TranslatorError(
                f"character_coverage={self.character_coverage} is out of range",
                "data.character_coverage",
                "use a value in (0, 1]",
            )
        if self.src_lang == self.tgt_lang:
            raise TranslatorError(
                f"src_lang and tgt_lang are both {self.src_lang!r}",
                "data.tgt_lang",
                "give two different language codes",
            )
        # a directory of its own under data_dir: prepare replaces it whole
        if self.name in ("", ".", "..") or any(sep in self.name for sep in "/\\"):
            raise TranslatorError(
                f"name={self.name!r} is not one directory name",
                "data.name",
                "use a plain name such as multi30k: the data lands in data_dir/NAME",
            )
        unknown = sorted(set(self.splits) - {"train", "valid", "test"})
        if unknown:
            close = difflib.get_close_matches(unknown[0], ["train", "valid", "test"], n=1)
            raise TranslatorError(
                f"unknown split {unknown[0]!r}",
                f"data.splits.{unknown[0]}",
                f"did you mean data.splits.{close[0]}?" if close else "use train, valid or test",
            )

    def _check_vocab_size(self) -> None:
        # below this SentencePiece fails with its internal check on inserting a special token
        least = SPECIAL_PIECES + (BYTE_PIECES if self.byte_fallback else 0)
        if self.vocab_size > least:
            return
        needs = "pad, unk, bos and eos take 4 pieces" + (
            " and byte_fallback's byte pieces 256 more" if self.byte_fallback else ""
        )
        raise TranslatorError(
            f"vocab_size={self.vocab_size} leaves no piece for the text: {needs}",
            "data.vocab_size",
            f"use more than {least}; a real corpus needs thousands",
        )


@dataclass(kw_only=True)
class ModelConfig:
    vocab_size: int = 0
    """Target (or joint) vocabulary size; 0 = take it from the prepared data's SentencePiece
    model."""
    src_vocab_size: int = 0
    """Source vocabulary size when the vocabularies are separate; 0 = joint (the source uses
    vocab_size's)."""
    d_model: int = 512
    """Width of embeddings and residual stream."""
    n_heads: int = 8
    """Attention heads; d_head = d_model / n_heads."""
    n_kv_heads: int | None = None
    """Key/value heads for grouped-query attention (None = n_heads, 1 = multi-query)."""
    n_encoder_layers: int = 6
    """Encoder layers."""
    n_decoder_layers: int = 6
    """Decoder layers."""
    d_ff: int = 2048
    """Hidden width of the position-wise feed-forward network."""
    dropout: float = 0.1
    """Dropout on embeddings and sublayer outputs (the FFN's hidden layer has
    `activation_dropout`)."""
    attention_dropout: float = 0.0
    """Dropout on attention weights."""
    activation_dropout: float = 0.0
    """Dropout on the feed-forward hidden layer (after the activation), apart from `dropout`
    (fairseq's)."""
    positions: Literal["sinusoidal", "learned", "rope", "relative"] = "sinusoidal"
    """Position scheme: added sinusoids, learned embeddings, rotary (self-attention only), or
    relative: T5's learned bias on self-attention scores by bucketed distance i - j."""
    relative_buckets: int = 32
    """positions=relative: distance buckets per direction's table (T5: 32; the encoder splits them
    between keys before and after the query); half are exact distances, half log-spaced."""
    relative_max_distance: int = 128
    """positions=relative: distances from this on share the last bucket (T5: 128)."""
    relative_per_layer: bool = False
    """positions=relative: a bias table per layer, or (False, as T5) one shared by a stack's
    layers."""
    attention_window: int = 0
    """Self-attention sees only keys fewer than N positions away (N - 1 before the query in the
    decoder, plus N - 1 after it in the encoder), and the decoder's KV cache keeps the last N keys
    (a sliding window, as Longformer and Mistral use); 0 = full attention."""
    attention: Literal["softmax", "linear"] = "softmax"
    """Encoder self-attention: softmax, or linear (experimental: elu+1 feature maps, Katharopoulos
    et al. 2020; cost linear in source length, no attention weights to look at)."""
    activation: Literal["relu", "gelu", "silu"] = "relu"
    """Feed-forward activation: ReLU (the paper), GELU, or SiLU/swish (Marian's OPUS-MT models)."""
    gated_ffn: bool = False
    """A gated feed-forward network (GLU variants, Shazeer 2020): activation(x W) * (x V), then
    the down projection; SwiGLU with activation silu. d_ff is the gated width: two thirds of an
    ungated d_ff keep the parameters and the products' cost."""
    output_bias: bool = False
    """A learned bias on the output logits (Marian's final_logits_bias; imported models have
    one)."""
    norm: Literal["pre", "post"] = "pre"
    """LayerNorm placement: pre-LN (with a final norm) or post-LN (as in the original paper)."""
    max_positions: int = 1024
    """Longest sequence (tokens) the model accepts; sizes learned positions and the KV cache."""
    scale_embeddings: bool = True
    """Multiply embeddings by sqrt(d_model)."""
    tie_embeddings: bool = True
    """Share target embeddings and the output projection, and with a joint vocabulary the source
    embeddings too."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward pass to save memory."""

    def __post_init__(self) -> None:
        _check_range("model", self, "vocab_size src_vocab_size", 0)
        _check_range("model", self, "d_model n_heads n_encoder_layers n_decoder_layers d_ff", 1)
        _check_range("model", self, "max_positions", 2)  # BOS and one token
        _check_range(
            "model", self, "dropout attention_dropout activation_dropout", 0, 1, high_open=True
        )
        if self.d_model % self.n_heads:
            raise TranslatorError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}",
                "model",
                "pick n_heads dividing d_model",
            )
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise TranslatorError(
                f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}",
                "model.n_kv_heads",
                "use a divisor of n_heads (1 = multi-query)",
            )
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise TranslatorError("rotary positions need an even d_head", "model.positions")
        _check_range("model", self, "attention_window", 0)
        _check_range("model", self, "relative_buckets", 4)  # two exact and two log-spaced, at least
        if self.relative_max_distance <= self.relative_buckets // 2:  # log-spaced buckets need room
            raise TranslatorError(
                f"relative_max_distance={self.relative_max_distance} is within the "
                f"{self.relative_buckets // 2} exact distances of relative_buckets="
                f"{self.relative_buckets}",
                "model.relative_max_distance",
                "use a distance above relative_buckets / 2 (T5: 32 buckets, 128)",
            )
        self._check_linear_attention()

    def _check_linear_attention(self) -> None:
        """Linear attention has no score matrix: nothing to mask by window or to add a bias to."""
        if self.attention != "linear":
            return
        for clash, value in (
            ("attention_window", self.attention_window),
            ("positions", self.positions == "relative" and "relative"),
        ):
            if value:
                raise TranslatorError(
                    f"model.attention=linear has no scores for model.{clash}={value} to act on",
                    "model.attention",
                    f"use attention=softmax, or drop model.{clash}",
                )


# Model settings that may differ between sessions of one run (and between checkpoints that are
# averaged): they change how a model trains, not the parameters' shapes or what it computes.
TRAINING_ONLY = ("dropout", "attention_dropout", "activation_dropout", "gradient_checkpointing")


def with_training_settings(saved: ModelConfig, ours: ModelConfig) -> ModelConfig:
    """A checkpoint's model section with this config's TRAINING_ONLY fields: the model that a run
    started from the checkpoint (train.init_from) trains."""
    theirs, mine = to_dict(saved), to_dict(ours)
    return ModelConfig(**{**theirs, **{k: mine[k] for k in TRAINING_ONLY}})


def architecture_changes(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Model sections (as dicts) compared outside TRAINING_ONLY -> `model.k: a -> b, ...`, empty if
    alike.

    A field missing from a dict (a checkpoint older than the field) has its default value: that is
    the model it was.
    """
    defaults = to_dict(ModelConfig())
    before, after = {**defaults, **before}, {**defaults, **after}
    changed = sorted(
        k for k in {*before, *after} - set(TRAINING_ONLY) if before.get(k) != after.get(k)
    )
    return ", ".join(f"model.{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in changed)


@dataclass(kw_only=True)
class TrainConfig:
    run_dir: str = "runs/multi30k"
    """Where checkpoints, logs, TensorBoard events and the resolved config go."""
    seed: int = 1
    """Seed for parameters, dropout and batch order (0 to 2**32 - 1)."""
    init_from: str = ""
    """Fine-tune: start from this checkpoint's weights (ours, or one from `import-hf`), its
    architecture (which overrides the model section but for dropout and gradient_checkpointing)
    and its SentencePiece model(s) (prepare encodes the data with them), with a fresh optimizer,
    schedule and update counter. Ignored when run_dir/last.pt exists: the run resumes. Empty =
    random weights."""
    device: str = "auto"
    """`auto` (CUDA when present), `cpu`, `cuda` or `cuda:N`."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Autocast dtype: auto = bf16 on CUDA that supports it, fp16 on older CUDA; on CPU bf16 where
    it is native (AVX512-BF16, AMX, Arm BF16), else fp32."""
    max_tokens: int = 4096
    """Tokens per batch and side, padding included."""
    grad_accum_steps: int = 1
    """Batches accumulated into one update."""
    max_updates: int = 100_000
    """Stop after this many updates."""
    max_epochs: int = 0
    """Stop after this many epochs (0 = no limit)."""
    max_minutes: float = 0.0
    """Stop (validating and saving) after this many minutes of training, summed over the run's
    sessions: a resume continues the budget (0 = no limit)."""
    compile: bool = False
    """Run the training forward/backward through `torch.compile` (validation and decoding stay
    eager)."""
    lr: float = 7e-4
    """Peak learning rate."""
    warmup_steps: int = 4000
    """Linear warm-up updates before the schedule decays."""
    schedule: Literal["inverse_sqrt", "cosine", "constant"] = "inverse_sqrt"
    """Learning-rate decay after warm-up. cosine reaches min_lr at max_updates or, with
    max_minutes, when the run's minutes run out (whichever comes first); constant keeps lr
    (with ema_decay, the moving average does the annealing)."""
    min_lr: float = 0.0
    """Floor of the cosine schedule."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.98
    """AdamW beta2."""
    adam_eps: float = 1e-9
    """AdamW epsilon."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay, on linear layers' matrices only (not LayerNorm, biases,
    embeddings)."""
    label_smoothing: float = 0.1
    """Label smoothing of the cross-entropy loss."""
    subword_alpha: float = 0.0
    """Subword regularisation: each epoch segments the training pairs anew by SentencePiece
    sampling with this alpha (unigram: sharpness of the sampling, smaller = more varied and
    longer, e.g. 0.3-0.5; BPE: merge-dropout probability, e.g. 0.1). Costs a few seconds per
    epoch per 30k pairs, and holds the training text in memory: meant for small corpora. 0 = off,
    the prepared segmentation throughout."""
    clip_grad_norm: float = 0.0
    """Clip the gradient norm to this value (0 = off)."""
    log_every: int = 100
    """Updates between training-log lines and TensorBoard points."""
    eval_every: int = 1000
    """Updates between validations (loss and BLEU) and checkpoints."""
    valid_bleu_sentences: int = 0
    """Decode at most this many valid sentences for BLEU at each validation (0 = all)."""
    valid_beam_size: int = 0
    """Beam width of the validation BLEU decode (0 = decode.beam_size, 1 = greedy)."""
    keep_last: int = 3
    """Numbered checkpoints kept besides `last.pt` and `best.pt`."""
    ema_decay: float = 0.0
    """Decode with an exponential moving average of the weights, updated after every update:
    ema = decay * ema + (1 - decay) * weights (e.g. 0.999 averages over roughly the last 1,000
    updates; fairseq's --ema-decay, Marian's --exponential-smoothing). Validation, best.pt and
    the numbered checkpoints hold the average (what eval, translate and average read); training
    continues from the raw weights, kept beside it. 0 = off."""
    patience: int = 0
    """Stop after this many validations without a better BLEU (0 = never)."""

    def __post_init__(self) -> None:
        if not self.run_dir.strip():  # the current directory would take checkpoints and logs
            raise TranslatorError(
                "run_dir is empty", "train.run_dir", "name a directory, e.g. runs/my-run"
            )
        _check_range(
            "train", self, "max_tokens grad_accum_steps max_updates log_every eval_every", 1
        )
        _check_range(
            "train",
            self,
            "max_epochs max_minutes lr warmup_steps min_lr adam_eps weight_decay subword_alpha "
            "clip_grad_norm valid_bleu_sentences valid_beam_size keep_last patience",
            0,
        )
        _check_range(
            "train", self, "adam_beta1 adam_beta2 label_smoothing ema_decay", 0, 1, high_open=True
        )
        _check_range("train", self, "seed", 0, 2**32 - 1)  # numpy's seeds are 32-bit unsigned
        # only the cosine schedule reads min_lr; above lr, its "decay" would climb to min_lr
        if self.schedule == "cosine" and self.min_lr > self.lr:
            raise TranslatorError(
                f"min_lr={self.min_lr} is above lr={self.lr}: the cosine schedule would raise the "
                "learning rate",
                "train.min_lr",
                "use a min_lr of at most lr (the peak), e.g. lr / 100",
            )


@dataclass(kw_only=True)
class DecodeConfig:
    beam_size: int = 4
    """Beam width; 1 = greedy search."""
    length_penalty: float = 0.6
    """GNMT length-penalty exponent alpha (0 = none)."""
    max_len_a: float = 1.2
    """Maximum output length is max_len_a * source_length + max_len_b tokens (EOS not counted),
    capped by max_positions - 1."""
    max_len_b: int = 10
    """See max_len_a."""
    min_len: int = 0
    """Minimum output length in tokens before EOS is allowed (the maximum length wins if
    smaller)."""
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
    (--no-cuda-graphs turns it off). No effect on CPU or under autocast."""
    channel_weight: float = 0.2
    """With a reverse-direction model (`--channel`): the weight of its log p(source | candidate)
    beside the direct score when it reranks the n-best (translator/rerank.py)."""
    channel_candidates: int = 8
    """With `--channel`: the n-best size it reranks (the beam widens to it if narrower)."""

    def __post_init__(self) -> None:
        _check_range("decode", self, "beam_size batch_tokens", 1)
        # bounds far past any use: beyond them the scores overflow (lp = ((5 + L) / 6) ** alpha)
        # or the lengths do not fit the search's integers
        _check_range("decode", self, "channel_weight", 0, 100)
        _check_range("decode", self, "channel_candidates", 2)
        _check_range("decode", self, "max_len_a", 0, 1000)
        _check_range("decode", self, "max_len_b min_len", 0, 1_000_000)
        _check_range("decode", self, "length_penalty", -10, 10)  # negative favours short outputs
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


@dataclass(kw_only=True)
class DiagnosticsConfig:
    enabled: bool = True
    """Attention diagnostics at each validation: TensorBoard entropy, head diversity and heatmaps,
    and log warnings."""
    sentences: int = 8
    """Valid sentences (the first N, teacher-forced with their references) whose attention the
    statistics average."""
    image_sentences: int = 2
    """How many of them get heatmap images in TensorBoard (first and last layer of each attention
    kind; 0 = none)."""
    uniform_entropy: float = 0.95
    """A head whose mean attention entropy, divided by log(number of keys), is at least this is
    flagged near-uniform."""
    one_hot_entropy: float = 0.05
    """A head whose mean normalised entropy is at most this is flagged near-one-hot (a saturated
    softmax)."""
    duplicate_divergence: float = 0.02
    """Two heads whose mean Jensen-Shannon divergence (bits, 0-1) is at most this are flagged
    near-duplicates."""
    qk_scale_ratio: float = 2.0
    """Warn at start-up when a layer's Q and K projection weights differ in RMS by more than this
    factor."""

    def __post_init__(self) -> None:
        _check_range("diagnostics", self, "sentences image_sentences", 0)
        _check_range(
            "diagnostics", self, "uniform_entropy one_hot_entropy duplicate_divergence", 0, 1
        )
        _check_range("diagnostics", self, "qk_scale_ratio", 1)
        if self.one_hot_entropy >= self.uniform_entropy:
            raise TranslatorError(
                f"one_hot_entropy={self.one_hot_entropy} is not below uniform_entropy="
                f"{self.uniform_entropy}",
                "diagnostics.one_hot_entropy",
                "keep one_hot_entropy < uniform_entropy",
            )


@dataclass(kw_only=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    """Where the corpus comes from and how it is prepared."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Transformer architecture."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Optimisation and logging."""
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    """Search settings for validation, eval and translate."""
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    """Attention diagnostics: thresholds for `translator attention` and for training's checks, and
    their off switch."""


# YAML 1.1's other booleans: quoted, they still give a boolean setting its truth value
YAML11_BOOLS = {"yes": True, "on": True, "no": False, "off": False}


def load(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config (or the defaults when `path` is None) and apply `key.sub=value`
    overrides."""
    raw: dict[str, Any] = {}
    where = "defaults"
    overridden: dict[str, str] = {}  # dotted key -> the --set that gave its value (errors name it)
    if path is not None:
        where = str(path)
        if not Path(path).is_file():
            what = (
                "a directory, not a config file" if Path(path).is_dir() else "config file not found"
            )
            raise TranslatorError(what, where, "give the path to a YAML file")
        try:
            raw = parse(Path(path).read_text(encoding="utf-8")) or {}
        except DuplicateKey as err:
            raise TranslatorError(
                f"key {err.key!r} is given twice (lines {err.lines[0]} and {err.lines[1]})",
                where,
                "keep one of them",
            ) from None
        except yaml.YAMLError as err:
            raise TranslatorError(f"invalid YAML: {err}".replace("\n", " "), where) from None
        except UnicodeDecodeError:
            raise TranslatorError("not a UTF-8 text file", where, "give a YAML config") from None
        if not isinstance(raw, dict):
            raise TranslatorError("top level must be a mapping of sections", where)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise TranslatorError(
                f"override {item!r} is not KEY=VALUE", "--set", "e.g. --set train.lr=5e-4"
            )
        try:
            value = parse(text) if text.strip() else ""
        except DuplicateKey as err:
            raise TranslatorError(
                f"key {err.key!r} is given twice", f"--set {item}", "keep one of them"
            ) from None
        except yaml.YAMLError:
            raise TranslatorError(
                f"the value in {item!r} is not valid YAML",
                "--set",
                "quote it, e.g. --set 'data.source=\"a b\"'",
            ) from None
        _set_dotted(raw, key.strip(), value, item)
        overridden[key.strip()] = f"--set {item}"
    cfg = _build(Config, raw, where, "", overridden)
    # what a user wrote, not what a checkpoint stores (from_dict): that was expanded when written
    cfg.data.data_dir = _expand_path(cfg.data.data_dir, "data.data_dir")
    if not cfg.data.source.startswith("hf:"):
        cfg.data.source = _expand_path(cfg.data.source, "data.source")
    cfg.train.run_dir = _expand_path(cfg.train.run_dir, "train.run_dir")
    cfg.train.init_from = _expand_path(cfg.train.init_from, "train.init_from")
    return cfg


def from_dict(raw: dict[str, Any], where: str = "config") -> Config:
    """Build a checked Config from plain nested dicts (as stored in checkpoints)."""
    return _build(Config, raw, where, "", {})


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dicts, ready for YAML or a checkpoint."""
    return dataclasses.asdict(cfg)


def dump(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def _set_dotted(raw: dict[str, Any], key: str, value: Any, item: str) -> None:
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise TranslatorError(f"{part!r} is not a section", f"--set {item}")
    node[leaf] = value


def _build(cls: type, raw: Any, where: str, prefix: str, overridden: dict[str, str]) -> Any:
    if not isinstance(raw, dict):
        section = prefix.rstrip(".") or "config"
        raise TranslatorError(f"{section} must be a mapping of keys to values", where)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            fix = (
                f"did you mean {prefix}{close[0]}?" if close else "valid keys: " + ", ".join(fields)
            )
            # a --set that made it (`traing.lr=1` makes section traing), else the file
            named = [w for k, w in overridden.items() if f"{k}.".startswith(f"{dotted}.")]
            raise TranslatorError(f"unknown key {dotted!r}", (named or [where])[0], fix)
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = _build(hint, value, where, f"{dotted}.", overridden)
        else:
            values[key] = _convert(value, hint, dotted, overridden.get(dotted, where), overridden)
            if isinstance(values[key], dict):  # a mapping adds to (and overrides) its defaults
                values[key] = {**fields[key].default_factory(), **values[key]}
    return cls(**values)


def _convert(value: Any, hint: Any, key: str, where: str, overridden: dict[str, str]) -> Any:
    """`value` as type `hint`; errors name `where` (the file, or the --set that gave the value; an
    item of a mapping may have a --set of its own)."""
    if isinstance(value, Plain):  # a string setting takes the text as written
        value = value.text if hint is str else value.value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        if value in args:
            return value
        raise TranslatorError(f"{key}={value!r} is not one of {', '.join(map(str, args))}", where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = next(a for a in args if a is not type(None))
        return _convert(value, inner, key, where, overridden)
    if origin is dict:
        if not isinstance(value, dict):
            raise TranslatorError(f"{key} expects a mapping, got {value!r}", where)
        return {
            str(k): _convert(
                v, args[1], f"{key}.{k}", overridden.get(f"{key}.{k}", where), overridden
            )
            for k, v in value.items()
        }
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads `5e-4` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if hint is str and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)  # from plain dicts (YAML's numbers arrive as Plain)
    if hint is bool and isinstance(value, str) and value.lower() in YAML11_BOOLS:
        return YAML11_BOOLS[value.lower()]
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise TranslatorError(f"{key} expects {hint.__name__}, got {value!r}", where)
