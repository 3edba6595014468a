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
"""

from __future__ import annotations

import argparse
import math
import pickle
from pathlib import Path
from typing import Any

import torch

from translator import checkpoint
from translator.config import Config, DataConfig, ModelConfig
from translator.data.spm_files import read_model, with_our_ids
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from translator.errors import TranslatorError
from translator.fairseq_layers import layer_weights
from translator.model.transformer import Transformer

# a logit no softmax gives weight to, yet finite (label smoothing averages every log-prob)
MASKED = -100.0
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's ids 0-3
FAIRSEQ_BOS = "<s:fairseq>"  # the extra piece that holds fairseq's <s>
ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}


def import_fairseq(
    path: str | Path,
    dictionaries: str | Path,
    spm_model: str | Path,
    out: str | Path,
    tgt_spm_model: str | Path | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> Config:
    """Read a fairseq checkpoint, the dictionaries in `dictionaries` (fairseq-preprocess's
    destdir) and the SentencePiece model(s), and write an equivalent translator checkpoint to
    `out`. The languages default to the checkpoint's source_lang/target_lang."""
    path, folder = Path(path), Path(dictionaries)
    saved = read_checkpoint(path)
    settings, weights = saved["settings"], saved["weights"]
    src, tgt = _languages(settings, src_lang, tgt_lang, str(path))
    src_dict = read_dictionary(folder / f"dict.{src}.txt")
    tgt_dict = read_dictionary(folder / f"dict.{tgt}.txt")
    fix = "give the SentencePiece .model file the training text was cut with"
    src_proto = read_model(Path(spm_model), "--spm", fix)
    tgt_proto = read_model(Path(tgt_spm_model), "--tgt-spm", fix) if tgt_spm_model else src_proto
    w = {k: v.float() for k, v in weights.items() if isinstance(v, torch.Tensor)}
    src_symbols = _symbols(src_dict, _rows(w, "encoder.embed_tokens.weight", path), path)
    tgt_symbols = _symbols(tgt_dict, _rows(w, "decoder.embed_tokens.weight", path), path)
    tokenizer = Tokenizer.from_proto(with_our_ids(src_proto), _target_proto(tgt_proto, tgt_symbols))
    cfg = Config(
        data=DataConfig(src_lang=src, tgt_lang=tgt, joint_vocab=False),
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


class _Stub:
    """Stands in for a class of a module that is not installed (fairseq's own, in a pickle);
    keeps what the pickle gives it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _LenientUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (ModuleNotFoundError, AttributeError):
            return type(name, (_Stub,), {})


class _Lenient:
    """A pickle module for torch.load whose unpickler stubs missing classes."""

    Unpickler = _LenientUnpickler

    @staticmethod
    def load(file, **kwargs):  # torch.load calls Unpickler itself; kept for its interface
        return _LenientUnpickler(file, **kwargs).load()


def read_checkpoint(path: Path) -> dict[str, Any]:
    """{"settings": the model's training settings as a dict, "weights": the state dict}.

    A fairseq checkpoint is a pickle, and unpickling runs code of the file's choosing: import only
    files you trust. Classes of fairseq itself (not installed here) are stubbed."""
    if not path.is_file():
        what = "a directory, not a checkpoint file" if path.is_dir() else "not found"
        raise TranslatorError(what, str(path), "give the .pt file fairseq-train wrote")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_Lenient)
    except Exception as err:  # a damaged file fails anywhere inside pickle or zip
        raise TranslatorError(
            f"not a readable checkpoint ({type(err).__name__}: {err})".splitlines()[0],
            str(path),
            "give the .pt file fairseq-train wrote",
        ) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), dict):
        raise TranslatorError(
            "holds no model weights (no 'model' entry)", str(path), "is it a fairseq checkpoint?"
        )
    settings = _as_dict(payload.get("args"))
    cfg = payload.get("cfg")
    if cfg is not None:
        cfg = _as_dict(cfg)
        settings = {**_as_dict(cfg.get("task")), **settings, **_as_dict(cfg.get("model"))}
    return {"settings": settings, "weights": payload["model"]}


def _as_dict(value: Any) -> dict[str, Any]:
    """Settings as fairseq saved them: an argparse Namespace (older), a dict (its cfg, which
    fairseq saves as plain containers), or None."""
    if value is None:
        return {}
    if isinstance(value, argparse.Namespace):
        return vars(value)
    if isinstance(value, dict):
        return value
    if hasattr(value, "items"):  # an omegaconf DictConfig, where omegaconf is installed
        return dict(value.items())
    return {}


def read_dictionary(path: Path) -> list[str]:
    """fairseq's symbols of one side in id order: <s>, <pad>, </s>, <unk>, then the file's."""
    if not path.is_file():
        raise TranslatorError(
            "not found",
            str(path),
            "give the directory fairseq-preprocess wrote (--destdir), with dict.SRC.txt and "
            "dict.TGT.txt",
        )
    symbols = list(SPECIALS)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.removesuffix(" #fairseq:overwrite")
        symbol, _, count = line.rpartition(" ")
        if not symbol or not count.lstrip("-").isdigit():
            raise TranslatorError(
                f"line {number} is not 'SYMBOL COUNT'", str(path), "give fairseq's dict file"
            )
        if symbol not in SPECIALS:
            symbols.append(symbol)
    return symbols


def _rows(w: dict[str, torch.Tensor], name: str, path: Path) -> int:
    if name not in w:
        raise TranslatorError(
            f"no weight named {name!r}", str(path), "is it a fairseq Transformer?"
        )
    return w[name].shape[0]


def _symbols(symbols: list[str], rows: int, path: Path) -> list[str]:
    """A side's symbols, one per embedding row: fairseq pads a dictionary to a multiple of 8
    rows with `madeupwordNNNN`, which the dict file may leave out."""
    if len(symbols) > rows:
        raise TranslatorError(
            f"the dictionary has {len(symbols)} symbols but the embeddings {rows} rows",
            str(path),
            "give the dictionaries the model was trained with",
        )
    return symbols + [f"madeupword{i:04d}" for i in range(rows - len(symbols))]


def _target_proto(proto: bytes, symbols: list[str]) -> bytes:
    """The target SentencePiece model with our ids, every fairseq symbol it lacks as an extra
    piece (decoding spells them), and fairseq's <s> and padding symbols as control pieces (text
    never holds them; decoded, they are nothing)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    control = {FAIRSEQ_BOS, *(s for s in symbols if s.startswith("madeupword"))}
    extra = [FAIRSEQ_BOS] + [s for s in symbols if s not in SPECIALS]
    model = pb.ModelProto.FromString(with_our_ids(proto, extra))
    for piece in model.pieces:
        if piece.piece in control:
            piece.type = pb.ModelProto.SentencePiece.CONTROL
    return model.SerializeToString()


def _row_ids(sp, symbols: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(V,) for each of our ids, the fairseq row it takes; and (V,) True where fairseq has no
    such output (its logit is MASKED)."""
    index = {s: i for i, s in enumerate(symbols)}
    unk = index["<unk>"]
    rows, masked = [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        symbol = "<s>" if piece == FAIRSEQ_BOS else piece
        rows.append(index.get(symbol, unk))
        masked.append(symbol not in index)
    rows[PAD_ID], rows[UNK_ID], rows[EOS_ID] = index["<pad>"], unk, index["</s>"]
    rows[BOS_ID] = index["</s>"]  # fairseq decodes from </s>
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
    output = _output_projection(w)
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


def _output_projection(w: dict[str, torch.Tensor]) -> torch.Tensor:
    """The decoder's output matrix (its embeddings where fairseq shares them and saved none)."""
    output = w.get("decoder.output_projection.weight", w.get("decoder.embed_out"))
    return w["decoder.embed_tokens.weight"] if output is None else output


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


def model_config(
    settings: dict[str, Any], w: dict[str, torch.Tensor], tokenizer: Tokenizer, where: str
) -> ModelConfig:
    """Our ModelConfig for fairseq's settings, sizes read from the weights; what we cannot express
    is refused by name."""
    d_model = w["encoder.embed_tokens.weight"].shape[1]
    layers = {
        side: len({k.split(".")[2] for k in w if k.startswith(f"{side}.layers.")})
        for side in ("encoder", "decoder")
    }
    ffn = {w[f"{side}.layers.0.fc1.weight"].shape[0] for side in ("encoder", "decoder")}
    heads = {settings.get(f"{side}_attention_heads") for side in ("encoder", "decoder")}
    pre = {f"{side}.layer_norm.weight" in w for side in ("encoder", "decoder")}
    learned = {f"{side}.embed_positions.weight" in w for side in ("encoder", "decoder")}
    activation = settings.get("activation_fn", "relu")
    problems = [
        f"activation_fn={activation!r}" if activation not in ACTIVATIONS else "",
        "layernorm_embedding" if "encoder.layernorm_embedding.weight" in w else "",
        "adaptive_softmax" if settings.get("adaptive_softmax_cutoff") else "",
        "no_token_positional_embeddings" if settings.get("no_token_positional_embeddings") else "",
        "cross_self_attention" if settings.get("cross_self_attention") else "",
        "encoder and decoder of different widths"
        if w["decoder.embed_tokens.weight"].shape[1] != d_model or len(ffn) > 1 or len(heads) > 1
        else "",
        "pre-norm on one side, post-norm on the other" if len(pre) > 1 else "",
        "learned positions on one side only" if len(learned) > 1 else "",
    ]
    if any(problems):
        raise TranslatorError(
            f"unsupported fairseq option: {', '.join(p for p in problems if p)}",
            where,
            "import a standard fairseq Transformer (--arch transformer, transformer_wmt_en_de...)",
        )
    (n_heads,) = heads
    if not isinstance(n_heads, int) or n_heads < 1 or d_model % n_heads:
        raise TranslatorError(
            f"encoder_attention_heads={n_heads!r} is not recorded as a divisor of {d_model}",
            where,
            "is it a fairseq Transformer checkpoint?",
        )
    positions = [
        settings.get(key) or 1024 for key in ("max_source_positions", "max_target_positions")
    ]
    if learned == {True}:  # a learned table has its rows: padding_idx + 1 of them are unused
        positions += [
            w[f"{side}.embed_positions.weight"].shape[0] - SPECIALS.index("<pad>") - 1
            for side in ("encoder", "decoder")
        ]
    return ModelConfig(
        vocab_size=tokenizer.target_vocab_size,
        src_vocab_size=tokenizer.vocab_size,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=ffn.pop(),
        n_encoder_layers=layers["encoder"],
        n_decoder_layers=layers["decoder"],
        dropout=settings.get("dropout", 0.1),
        attention_dropout=settings.get("attention_dropout", 0.0),
        activation_dropout=settings.get("activation_dropout", 0.0) or 0.0,
        activation=ACTIVATIONS[activation],
        output_bias=True,
        positions="learned",
        norm="pre" if pre == {True} else "post",
        max_positions=min(positions),
        scale_embeddings=not settings.get("no_scale_embedding", False),
        # shared in fairseq, shared here: the rows of both are gathered alike (_row_ids)
        tie_embeddings=torch.equal(_output_projection(w), w["decoder.embed_tokens.weight"]),
    )


def _languages(
    settings: dict[str, Any], src_lang: str | None, tgt_lang: str | None, where: str
) -> tuple[str, str]:
    """The given codes, else the checkpoint's source_lang/target_lang."""
    codes = []
    for flag, given, key in (
        ("--src-lang", src_lang, "source_lang"),
        ("--tgt-lang", tgt_lang, "target_lang"),
    ):
        code = given or settings.get(key)
        if not isinstance(code, str) or not code:
            raise TranslatorError(
                f"the checkpoint does not record its {key.replace('_', ' ')}",
                where,
                f"give {flag}, as the dict files are named (dict.{{LANG}}.txt)",
            )
        codes.append(code)
    if codes[0] == codes[1]:
        raise TranslatorError(
            f"source and target language are both {codes[0]!r}",
            where,
            "give two different codes with --src-lang and --tgt-lang",
        )
    return codes[0], codes[1]
