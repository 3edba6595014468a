"""Import a fairseq Transformer checkpoint (`fairseq-train --arch transformer...`) trained on
SentencePiece pieces, as a translator checkpoint.

Three inputs: the checkpoint (a pickle holding the weights and the training settings, as `args`
or as `cfg`'s `model`), the dictionaries fairseq-preprocess wrote (`dict.SRC.txt`,
`dict.TGT.txt`: a piece and its count a line, after fairseq's own <s>, <pad>, </s>, <unk> = 0-3),
and the SentencePiece model(s) that cut the text into those pieces.

How it maps (tests/test_fairseq.py checks the scores against Hugging Face's ports of fairseq's
Transformer: FSMT, post-norm, and M2M100, pre-norm):
- Ids: our ids take fairseq's rows by piece. A piece fairseq's dictionary lacks reads its <unk>
  row, as fairseq-preprocess encoded it, and gets a logit of MASKED (it has none in fairseq's
  softmax); a dictionary entry the SentencePiece model lacks becomes an extra piece.
- fairseq decodes from </s>: our BOS row is its </s> row, and as an output BOS is MASKED (fairseq
  has one EOS). fairseq's softmax also holds <s> and <pad>: <pad> takes our PAD row (never read
  as input), <s> an extra control piece, so that scores are fairseq's.
- Sinusoidal positions: fairseq's table (sines then cosines, frequencies spread over D/2 - 1
  steps, positions counted from padding_idx + 1) is copied into a learned table
  (model.positions: learned), so the outputs are the same; fine-tuning then trains it.

Reading the files is fairseq_files.py; the settings as our ModelConfig, fairseq_settings.py; the
layers' weight names, fairseq_layers.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from translator import checkpoint
from translator.config import Config, DataConfig, ModelConfig
from translator.data.spm_files import read_model, with_our_ids
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from translator.errors import TranslatorError
from translator.fairseq_files import SPECIALS, read_checkpoint, read_dictionary
from translator.fairseq_layers import layer_weights, output_projection
from translator.fairseq_settings import languages, model_config
from translator.model.transformer import Transformer

# a logit no softmax gives weight to, yet finite (label smoothing averages every log-prob)
MASKED = -100.0
FAIRSEQ_BOS = "<s:fairseq>"  # the extra piece that holds fairseq's <s>
# weights every fairseq Transformer has (an LSTM or convolutional model has none of them)
TRANSFORMER = (
    "encoder.embed_tokens.weight",
    "decoder.embed_tokens.weight",
    "encoder.layers.0.fc1.weight",
    "decoder.layers.0.fc1.weight",
)


def import_fairseq(
    path: str | Path,
    dicts: str | Path,
    spm: str | Path,
    out: str | Path,
    tgt_spm: str | Path | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> Config:
    """Read a fairseq checkpoint, the dictionaries in `dicts` (fairseq-preprocess's destdir) and
    the SentencePiece model(s) `spm` (and `tgt_spm`), and write an equivalent translator checkpoint
    to `out`. The languages default to the checkpoint's source_lang/target_lang."""
    path, folder = Path(path), Path(dicts)
    checkpoint.refuse_replacing_another_kind(out)
    saved = read_checkpoint(path)
    settings = saved["settings"]
    w = {k: v.float() for k, v in saved["weights"].items() if isinstance(v, torch.Tensor)}
    if missing := [name for name in TRANSFORMER if name not in w]:
        raise TranslatorError(
            f"not a fairseq Transformer: no weight {missing[0]!r} (an LSTM or convolutional "
            "model?)",
            str(path),
            "import a checkpoint of fairseq-train --arch transformer...",
        )
    src, tgt = languages(settings, src_lang, tgt_lang, str(path))
    src_symbols = _symbols(read_dictionary(folder / f"dict.{src}.txt"), w, "encoder", path)
    tgt_symbols = _symbols(read_dictionary(folder / f"dict.{tgt}.txt"), w, "decoder", path)
    fix = "give the SentencePiece .model file the training text was cut with"
    src_proto = read_model(Path(spm), "--spm", fix)
    tgt_proto = read_model(Path(tgt_spm), "--tgt-spm", fix) if tgt_spm else src_proto
    _check_cut_by(src_proto, src_symbols, "--spm", spm)
    _check_cut_by(tgt_proto, tgt_symbols, "--tgt-spm" if tgt_spm else "--spm", tgt_spm or spm)
    tokenizer = Tokenizer.from_proto(
        _with_symbols(src_proto, src_symbols, []),
        _with_symbols(tgt_proto, tgt_symbols, [FAIRSEQ_BOS]),
    )
    cfg = Config(
        data=DataConfig(
            name=checkpoint.imported_data_name(out),
            src_lang=src,
            tgt_lang=tgt,
            joint_vocab=False,
        ),
        model=model_config(settings, w, tokenizer, str(path)),
    )
    model = Transformer(cfg.model)
    try:
        model.load_state_dict(our_weights(w, cfg.model, tokenizer, src_symbols, tgt_symbols))
    except KeyError as err:
        raise TranslatorError(
            f"no weight named {err.args[0]!r}", str(path), "is it a fairseq Transformer?"
        ) from None
    except RuntimeError as err:
        lines = str(err).splitlines()
        detail = next((line.strip() for line in lines if "size mismatch" in line), lines[0])
        raise TranslatorError(
            f"weights do not fit its settings ({detail})", str(path), "is it a fairseq Transformer?"
        ) from None
    checkpoint.save(out, model, cfg, tokenizer, {"imported_from": "fairseq"})
    return cfg


def _symbols(symbols: list[str], w: dict[str, torch.Tensor], side: str, path: Path) -> list[str]:
    """A side's symbols, one per embedding row: fairseq pads a dictionary to a multiple of 8
    rows with `madeupwordNNNN`, which the dict file may leave out."""
    rows = w[f"{side}.embed_tokens.weight"].shape[0]
    if len(symbols) > rows:
        raise TranslatorError(
            f"the {side}'s dictionary has {len(symbols)} symbols but its embeddings {rows} rows",
            str(path),
            "give the dictionaries the model was trained with",
        )
    return symbols + [f"madeupword{i:04d}" for i in range(rows - len(symbols))]


def _check_cut_by(proto: bytes, symbols: list[str], flag: str, model: str | Path) -> None:
    """Refuses a SentencePiece model that did not cut the text of a side's dictionary: beyond a
    few characters spm_encode writes as themselves, its symbols are the model's pieces."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    pieces = {p.piece for p in pb.ModelProto.FromString(proto).pieces}
    words = [s for s in symbols[len(SPECIALS) :] if not s.startswith("madeupword")]
    missing = [s for s in words if s not in pieces]
    if len(missing) > max(10, len(words) // 20):
        raise TranslatorError(
            f"{len(missing):,} of the dictionary's {len(words):,} symbols are not pieces of this "
            f"SentencePiece model (e.g. {missing[0]!r}): it did not cut fairseq's text",
            f"{flag}: {model}",
            "give the model the training text was cut with (--tgt-spm: the target side's own)",
        )


def _with_symbols(proto: bytes, symbols: list[str], control: list[str]) -> bytes:
    """A side's SentencePiece model with our ids and every dictionary symbol it lacks as an extra
    piece: `spm_encode` writes a character its model lacks as itself, and fairseq gave it a row.
    `control` pieces (and fairseq's padding symbols) are added as control pieces: text never
    holds them, and decoded they are nothing."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    hidden = {*control, *(s for s in symbols if s.startswith("madeupword"))}
    extra = control + [s for s in symbols if s not in SPECIALS]
    model = pb.ModelProto.FromString(with_our_ids(proto, extra))
    for piece in model.pieces:
        if piece.piece in hidden:
            piece.type = pb.ModelProto.SentencePiece.CONTROL
    return model.SerializeToString()


def _row_ids(sp, symbols: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(V,) for each of our ids, the fairseq row it takes; and (V,) True where fairseq has no
    such output (its logit is MASKED)."""
    index = {s: i for i, s in enumerate(symbols)}  # a symbol given again: its last row
    unk = SPECIALS.index("<unk>")
    rows, masked = [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if piece == FAIRSEQ_BOS:  # fairseq's own <s>, whatever row the file gave it again
            rows.append(SPECIALS.index("<s>"))
            masked.append(False)
        else:
            rows.append(index.get(piece, unk))
            masked.append(piece not in index)
    # fairseq's own ids for its specials, whatever rows the file gave them again
    rows[PAD_ID], rows[UNK_ID] = SPECIALS.index("<pad>"), unk
    rows[EOS_ID] = rows[BOS_ID] = SPECIALS.index("</s>")  # fairseq decodes from </s>
    masked[PAD_ID] = masked[UNK_ID] = masked[EOS_ID] = False
    masked[BOS_ID] = True  # a second </s>
    return torch.tensor(rows), torch.tensor(masked)


def our_weights(
    w: dict[str, torch.Tensor],
    cfg: ModelConfig,
    tokenizer: Tokenizer,
    src_symbols: list[str],
    tgt_symbols: list[str],
) -> dict[str, torch.Tensor]:
    """fairseq's state dict under our names, embedding rows gathered by piece (_row_ids)."""
    src_rows, _ = _row_ids(tokenizer.sp, src_symbols)
    tgt_rows, masked = _row_ids(tokenizer.target_sp, tgt_symbols)
    output = output_projection(w)
    out = {
        "src_embed.token.weight": w["encoder.embed_tokens.weight"][src_rows],
        "tgt_embed.token.weight": w["decoder.embed_tokens.weight"][tgt_rows],
        "out_proj.weight": output[tgt_rows],
        "out_proj.bias": torch.where(masked, MASKED, 0.0),
    }
    for side, ours in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
        out[f"{ours}.learned.weight"] = _positions(w, side, cfg)
        if f"{side}.layer_norm.weight" in w:  # pre-norm: a norm after the last layer
            for p in ("weight", "bias"):
                out[f"{side}_norm.{p}"] = w[f"{side}.layer_norm.{p}"]
    out.update(layer_weights(w, cfg))
    return out


def _positions(w: dict[str, torch.Tensor], side: str, cfg: ModelConfig) -> torch.Tensor:
    """(max_positions, D): what fairseq adds at positions 0, 1, ...; fairseq counts them from
    padding_idx + 1 = 2, in a learned table or in its sinusoid table."""
    first = SPECIALS.index("<pad>") + 1
    learned = w.get(f"{side}.embed_positions.weight")
    if learned is not None:
        return learned[first : first + cfg.max_positions]
    half = cfg.d_model // 2
    frequencies = torch.exp(torch.arange(half).float() * -(math.log(10000) / (half - 1)))
    angles = torch.arange(first, first + cfg.max_positions).float()[:, None] * frequencies[None]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
