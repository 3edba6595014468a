"""SentencePiece models made elsewhere (spm_train's, another toolkit's, an OPUS-MT release's),
read and rewritten so that PAD, UNK, BOS, EOS have our ids 0-3 (data/tokenizer.py).

The rewrite keeps every other piece, in its order and with its score, so the segmentation is the
model's own: unigram scores are the pieces' log-probabilities and BPE ranks its merges by them.
"""

from __future__ import annotations

import re
from pathlib import Path

import sentencepiece as spm

from translator.config import DataConfig
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from translator.errors import TranslatorError

SPECIALS = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}


def read_model(path: Path, where: str, fix: str) -> bytes:
    """A SentencePiece model's bytes, checked to parse and hold pieces (the model proto parses
    `b""` as a model with none). `where` and `fix` go into the error: which setting or download
    named the file, and how to repair it."""
    from google.protobuf.message import DecodeError
    from sentencepiece import sentencepiece_model_pb2 as pb

    if not path.is_file():
        what = "a directory, not a SentencePiece model file" if path.is_dir() else "not found"
        raise TranslatorError(what, f"{where}: {path}" if where else str(path), fix)
    proto = path.read_bytes()
    try:
        pieces = len(pb.ModelProto.FromString(proto).pieces)
    except DecodeError:
        pieces = 0
    if not pieces:
        raise TranslatorError(
            "not a SentencePiece model", f"{where}: {path}" if where else str(path), fix
        )
    try:  # parsed, yet SentencePiece may refuse it (a piece defined twice)
        spm.SentencePieceProcessor(model_proto=proto)
    except RuntimeError as err:
        reason = re.sub(r"^INTERNAL: \S+ \[.*?\] ", "", str(err).strip().splitlines()[-1])
        raise TranslatorError(
            f"SentencePiece refuses the model ({reason})",
            f"{where}: {path}" if where else str(path),
            fix,
        ) from None
    return proto


def given_tokenizer(data: DataConfig) -> Tokenizer:
    """data.spm_model (and data.tgt_spm_model) with our special ids: the tokenizer prepare encodes
    with instead of training one."""
    fix = "give a SentencePiece .model file (spm_train's output), or leave it empty to train one"
    src = with_our_ids(read_model(Path(data.spm_model), "data.spm_model", fix))
    if not data.tgt_spm_model:
        return Tokenizer.from_proto(src)
    tgt = with_our_ids(read_model(Path(data.tgt_spm_model), "data.tgt_spm_model", fix))
    return Tokenizer.from_proto(src, tgt)


def with_our_ids(proto: bytes, extra: list[str] | tuple[str, ...] = ()) -> bytes:
    """A SentencePiece model with <pad>, <unk>, <s>, </s> at our ids 0-3, its other pieces after
    them in their order (so their scores, hence segmentation, are unchanged), then `extra` pieces
    it lacks, which decoding can still spell. A one-character extra stays a piece, scored below
    every other (the only way to spell that character); a longer one is UNUSED, which encoding
    never picks (scored low instead, one could beat a run of single characters: not the model's
    segmentation). Its own special pieces under other names (e.g. `[CLS]`) stay, as control
    pieces that encoding never produces."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto.FromString(proto)
    Piece = pb.ModelProto.SentencePiece
    kinds = {
        PAD_ID: Piece.CONTROL,
        UNK_ID: Piece.UNKNOWN,
        BOS_ID: Piece.CONTROL,
        EOS_ID: Piece.CONTROL,
    }
    specials = set(SPECIALS.values())
    pieces = [Piece(piece=SPECIALS[i], score=0.0, type=kinds[i]) for i in range(4)]
    pieces += [p for p in model.pieces if p.piece not in specials and p.type != Piece.UNKNOWN]
    known = {p.piece for p in pieces}
    lowest = min((p.score for p in model.pieces), default=0.0) - 10.0
    pieces += [
        Piece(piece=text, score=lowest, type=Piece.NORMAL if len(text) == 1 else Piece.UNUSED)
        for text in extra
        if text not in known
    ]
    del model.pieces[:]
    model.pieces.extend(pieces)
    spec = model.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = (SPECIALS[i] for i in range(4))
    spec.vocab_size = len(pieces)
    return model.SerializeToString()
