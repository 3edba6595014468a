"""The data section: where the corpus comes from and how it is prepared."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Literal

from translator.config.checks import check_range
from translator.errors import TranslatorError

# SentencePiece's own names of its normalization rules (DataConfig.spm_normalization)
SpmNormalization = Literal["nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"]
# Pieces every SentencePiece model of ours holds before any of the text's (tokenizer.py's ids)
SPECIAL_PIECES, BYTE_PIECES = 4, 256
RESERVED_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # SentencePiece's names of the special ones


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
    """Use only the first N training pairs as the source holds them, before cleaning (0 = all);
    handy for quick experiments."""
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
    """One SentencePiece model for both languages, or one per side (then model.tie_embeddings
    ties only the target embeddings to the output projection, not the source's)."""
    vocab_size: int = 8000
    """SentencePiece vocabulary size (of each model when the vocabularies are separate)."""
    spm_model_type: Literal["unigram", "bpe"] = "unigram"
    """SentencePiece algorithm."""
    character_coverage: float = 1.0
    """SentencePiece character coverage, 0.98-1 (1.0 for Latin scripts, 0.9995 for CJK)."""
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
    """Train SentencePiece on a seeded random sample of at most this many sentences, both sides
    counted for a joint vocabulary (0 = all)."""
    user_symbols: list[str] = field(default_factory=list)
    """Texts SentencePiece keeps as one piece each, in every vocabulary: tags written into the
    text like words, such as `<BT>` before each back-translated source (tagged back-translation,
    Caswell et al. 2019). A list: `--set 'data.user_symbols=[<BT>]'`."""
    spm_threads: int = 0
    """Threads SentencePiece trains with (0 = one per CPU core). Its training result depends on
    the count: the same data gives the same vocabulary only with the same count, so to reproduce
    a vocabulary made elsewhere, set the count it was made with (the manifest records it)."""
    spm_model: str = ""
    """A SentencePiece model file (`.model`) to encode the data with instead of training one: a
    vocabulary made by `spm_train`, by another toolkit or for another corpus. Its pad, unk, bos
    and eos pieces are renumbered to ours, its segmentation is kept, and the SentencePiece
    settings above are moot. Alone it serves both sides (a joint vocabulary, so with
    data.joint_vocab=false it is refused); with `tgt_spm_model` it is the source side's, and
    data.joint_vocab follows: false."""
    tgt_spm_model: str = ""
    """The target side's SentencePiece model file, with `spm_model` for the source side."""

    def __post_init__(self) -> None:
        check_range(
            "data",
            self,
            "max_train_pairs max_tokens_per_side max_length_ratio input_sentence_size spm_threads",
            0,
        )
        self._check_vocab_size()
        if self.tgt_spm_model and not self.spm_model:
            raise TranslatorError(
                "tgt_spm_model is set but spm_model is not",
                "data.tgt_spm_model",
                "name the source side's model in data.spm_model as well",
            )
        if self.spm_model and not (self.tgt_spm_model or self.joint_vocab):
            raise TranslatorError(
                "data.joint_vocab is false (one vocabulary a side), but only one SentencePiece "
                "model is given",
                "data.spm_model",
                "give the target side's model in data.tgt_spm_model, or set "
                "data.joint_vocab=true to use this model for both sides",
            )
        if self.spm_model:  # the files decide: one model for both sides, or one a side
            self.joint_vocab = not self.tgt_spm_model
        self._check_user_symbols()
        # the ratio is longer side / shorter side, never below 1: under 1 every pair is dropped
        if 0 < self.max_length_ratio < 1:
            raise TranslatorError(
                f"max_length_ratio={self.max_length_ratio} is below 1, so every training pair "
                "would be dropped (the ratio is longer side / shorter side)",
                "data.max_length_ratio",
                "use a value of at least 1 (e.g. 3), or 0 for no ratio rule",
            )
        if not 0.98 <= self.character_coverage <= 1:  # SentencePiece's own bounds
            raise TranslatorError(
                f"character_coverage={self.character_coverage} is out of SentencePiece's range",
                "data.character_coverage",
                "use a value from 0.98 to 1 (1.0 for Latin scripts, 0.9995 for Chinese or "
                "Japanese)",
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

    def _check_user_symbols(self) -> None:
        for symbol in self.user_symbols:
            wrong = ""
            if not symbol:
                wrong = "is empty"
            elif any(c.isspace() for c in symbol):
                wrong = "holds a space"
            elif symbol in RESERVED_PIECES:
                wrong = "is a special piece"
            if wrong:
                raise TranslatorError(
                    f"user symbol {symbol!r} {wrong}",
                    "data.user_symbols",
                    "give tags such as <BT>, without spaces, other than "
                    + ", ".join(RESERVED_PIECES),
                )
        if len(set(self.user_symbols)) < len(self.user_symbols):
            raise TranslatorError(
                "a user symbol is listed twice", "data.user_symbols", "list each once"
            )

    def _check_vocab_size(self) -> None:
        # below this SentencePiece fails with its internal check on inserting a special token
        least = SPECIAL_PIECES + (BYTE_PIECES if self.byte_fallback else 0) + len(self.user_symbols)
        if self.vocab_size > least:
            return
        needs = (
            "pad, unk, bos and eos take 4 pieces"
            + (" and byte_fallback's byte pieces 256 more" if self.byte_fallback else "")
            + (f" and user_symbols {len(self.user_symbols)}" if self.user_symbols else "")
        )
        raise TranslatorError(
            f"vocab_size={self.vocab_size} leaves no piece for the text: {needs}",
            "data.vocab_size",
            f"use more than {least}; a real corpus needs thousands",
        )
