"""SentencePiece train / load / encode / decode. The special-token ids are defined here only."""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from translator.data.spm_log import TrainingLog, stderr_lines
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
    normalization: str = "nmt_nfkc",
    user_symbols: Sequence[str] = (),
    input_sentence_size: int = 0,
    seed: int = 1,
    threads: int = 0,
    progress: Callable[[int, int], None] | None = None,
    which: str = "",
) -> Path:
    """Train a SentencePiece model on `sentences`; writes and returns `{model_prefix}.model`.

    The model comes back in memory (model_writer) rather than through model_prefix, which
    SentencePiece would store inside the model: the same data and thread count (`threads`, 0: one
    per core; SentencePiece's result depends on it) then give the same bytes wherever it is
    prepared, so the checksum identifies the vocabulary. `progress(done, total)`, when given,
    follows the training itself (see TrainingLog), called from another thread. `which`, when
    given, names the model in an error (one side's of two).
    """
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    interrupted: list[BaseException] = []

    def read() -> Iterator[str]:
        # SentencePiece turns an exception from its iterator into RuntimeError("INTERNAL: ...");
        # Ctrl-C or SIGTERM (SystemExit) while it reads must stay what it is, not a training failure
        try:
            yield from sentences
        except (KeyboardInterrupt, SystemExit) as stop:
            interrupted.append(stop)
            raise

    options = dict(
        sentence_iterator=read(),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        normalization_rule_name=normalization,
        user_defined_symbols=list(user_symbols),
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        hard_vocab_limit=False,  # a smaller corpus gets fewer pieces (see size_note), not an error
        num_threads=threads or os.cpu_count() or 1,
    )
    try:
        if progress is None:
            spm.SentencePieceTrainer.train(**options, minloglevel=2)
        else:  # its log is the only progress it gives: read it, show none of it
            with stderr_lines(TrainingLog(vocab_size, progress)):
                spm.SentencePieceTrainer.train(**options, minloglevel=0)
    except RuntimeError as err:  # e.g. "Vocabulary size is smaller than required_chars"
        if interrupted:
            raise interrupted[0] from None
        reason = (str(err).strip().splitlines() or ["failed"])[-1]
        # the C++ file, line and failed check
        reason = re.sub(r"^INTERNAL: \S+ \[.*?\] ", "", reason)
        raise TranslatorError(
            f"SentencePiece training{' of ' + which if which else ''} failed: {reason}",
            "data.vocab_size",
            "check data.vocab_size, data.character_coverage and the training text",
        ) from None
    path = Path(f"{model_prefix}.model")
    path.write_bytes(model.getvalue())
    return path


def size_note(requested: int | None, made: int) -> str:
    """What to add to a vocabulary's size where SentencePiece made fewer pieces than requested
    (hard_vocab_limit=False lets a small corpus give fewer, where a hard limit would fail); else
    ''. `requested` None: no size was asked for (a checkpoint's vocabulary)."""
    if requested is None or made >= requested:
        return ""
    return f" ({requested:,} requested: the training text gives SentencePiece no more pieces)"


class Tokenizer:
    """A translation model's SentencePiece models: the source's encodes, the target's decodes.

    With a joint vocabulary (the default) they are one model; with separate vocabularies
    (`data.joint_vocab: false`) the target model is its own, and ids of the two sides differ.
    """

    def __init__(self, model_path: str | Path, target_path: str | Path | None = None) -> None:
        protos = []
        for path in (Path(model_path), *([Path(target_path)] if target_path else [])):
            if not path.is_file():
                raise TranslatorError(
                    "SentencePiece model not found", str(path), "run `translator prepare` first"
                )
            protos.append(path.read_bytes())
        self._init(*protos)

    @classmethod
    def from_proto(cls, proto: bytes, target_proto: bytes | None = None) -> Tokenizer:
        """Rebuild from the serialized model(s) embedded in a checkpoint."""
        tokenizer = cls.__new__(cls)
        tokenizer._init(proto, target_proto)
        return tokenizer

    def _init(self, proto: bytes, target_proto: bytes | None = None) -> None:
        self._proto, self._target_proto = proto, target_proto
        self.sp = _processor(proto)  # the source side
        self.target_sp = _processor(target_proto) if target_proto else self.sp

    @property
    def joint(self) -> bool:
        return self._target_proto is None

    def proto(self) -> bytes:
        return self._proto

    def target_proto(self) -> bytes | None:
        """The target model's bytes; None when the vocabulary is joint."""
        return self._target_proto

    @property
    def vocab_size(self) -> int:
        """Pieces of the source model (of the one model when joint)."""
        return self.sp.get_piece_size()

    @property
    def target_vocab_size(self) -> int:
        return self.target_sp.get_piece_size()

    def checksum(self) -> str:
        """sha256 of the model (proto_checksum)."""
        return proto_checksum(self._proto, self._target_proto)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Source ids without BOS/EOS; callers add them where the model needs them."""
        return _each_or_batch(self.sp.encode, texts)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Text from target ids; special tokens are dropped."""
        return _each_or_batch(
            self.target_sp.decode, [[i for i in seq if i > EOS_ID] for seq in ids]
        )


# SentencePiece's batch calls start a pool of threads every time: that pays for a file's lines,
# not for the one line or n-best list that translating detokenizes at a time
BATCH_FROM = 64


def _each_or_batch(call: Callable[[Any], Any], items: list) -> list:
    """call(items) for a batch of at least BATCH_FROM, else [call(item) for each]: the same
    results (a one-item call returns the item's result)."""
    if len(items) >= BATCH_FROM:
        return call(items)
    return [call(item) for item in items]


def _processor(proto: bytes) -> spm.SentencePieceProcessor:
    sp = spm.SentencePieceProcessor(model_proto=proto)
    if (sp.pad_id(), sp.bos_id(), sp.eos_id()) != (PAD_ID, BOS_ID, EOS_ID):
        raise TranslatorError(
            "SentencePiece model has unexpected special-token ids",
            fix="train it with `translator prepare`",
        )
    return sp


def proto_checksum(proto: bytes, target_proto: bytes | None = None) -> str:
    """sha256 of a SentencePiece model; with separate vocabularies, of the source model's bytes
    then the target's (what checkpoints store as the tokenizer's sha256)."""
    return hashlib.sha256(proto + (target_proto or b"")).hexdigest()


def sha256_file(path: str | Path) -> str:
    """In chunks: a prepared id array can be larger than the memory to spare."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
