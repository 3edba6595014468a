"""SentencePiece train / load / encode / decode. The special-token ids are defined here only."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from translator.errors import TranslatorError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


def train_sentencepiece(
    sentences: Iterable[str],
    model_prefix: Path,
    *,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    byte_fallback: bool = False,
    input_sentence_size: int = 0,
    seed: int = 1,
) -> Path:
    """Train a SentencePiece model on `sentences`; writes and returns `{model_prefix}.model`.

    The model comes back in memory (model_writer) rather than through model_prefix, which
    SentencePiece would store inside the model: the same data then gives the same bytes wherever
    it is prepared, so the checksum identifies the vocabulary.
    """
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        hard_vocab_limit=False,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
    )
    path = Path(f"{model_prefix}.model")
    path.write_bytes(model.getvalue())
    return path


class Tokenizer:
    """A loaded SentencePiece model: text <-> ids, with our fixed special ids."""

    def __init__(self, model_path: str | Path) -> None:
        path = Path(model_path)
        if not path.is_file():
            raise TranslatorError("SentencePiece model not found", str(path), "run `translator prepare` first")
        self._init(path.read_bytes())

    @classmethod
    def from_proto(cls, proto: bytes) -> Tokenizer:
        """Rebuild from the serialized model embedded in a checkpoint."""
        tokenizer = cls.__new__(cls)
        tokenizer._init(proto)
        return tokenizer

    def _init(self, proto: bytes) -> None:
        self._proto = proto
        self.sp = spm.SentencePieceProcessor(model_proto=proto)
        if (self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id()) != (PAD_ID, BOS_ID, EOS_ID):
            raise TranslatorError("SentencePiece model has unexpected special-token ids",
                                  fix="train it with `translator prepare`")

    def proto(self) -> bytes:
        return self._proto

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def checksum(self) -> str:
        return hashlib.sha256(self._proto).hexdigest()

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Ids without BOS/EOS; callers add them where the model needs them."""
        return self.sp.encode(texts)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text from ids; special tokens are dropped."""
        return self.sp.decode([[i for i in seq if i > EOS_ID] for seq in ids])


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
