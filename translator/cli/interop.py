"""Commands that move a model between toolkits: export, import-hf, import-fairseq."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from translator.cli.options import (
    CkptArg,
)
from translator.errors import TranslatorError


def export(
    ckpt: CkptArg,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Model directory to write (an existing one only if empty or an earlier export).",
        ),
    ],
    format: Annotated[
        str, typer.Option("--format", help="Target format: ctranslate2.")
    ] = "ctranslate2",
    quantization: Annotated[
        Optional[str],
        typer.Option(
            "--quantization",
            help=(
                "CTranslate2 weight type: int8, int8_float32, float16, bfloat16... "
                "(default: float32)."
            ),
        ),
    ] = None,
) -> None:
    """Export a checkpoint to CTranslate2, for deployment.

    Writes a CTranslate2 model directory with the SentencePiece model beside it.

    Needs the optional ctranslate2 package.

    \b
    Example: translator export runs/multi30k/best.pt -o ct2-multi30k
    """
    from translator import export as export_mod

    if format != "ctranslate2":
        raise TranslatorError(f"unknown export format {format!r}", "--format", "use ctranslate2")
    export_mod.export_ctranslate2(ckpt, out, quantization)
    typer.echo(f"exported {ckpt} to {out}")


def import_hf(
    directory: Annotated[
        str,
        typer.Argument(
            help=(
                "A MarianMT model saved in Hugging Face format "
                "(config.json, weights, source.spm, target.spm, vocab.json), "
                "e.g. an OPUS-MT download; or hf:NAME, a hub model, downloaded "
                "(needs internet)."
            ),
            show_default=False,
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Checkpoint to write.")],
    src_lang: Annotated[
        Optional[str],
        typer.Option(
            "--src-lang",
            show_default="tokenizer_config.json's source_lang",
            help="Source language code, as the data to fine-tune on spells it (data.src_lang).",
        ),
    ] = None,
    tgt_lang: Annotated[
        Optional[str],
        typer.Option(
            "--tgt-lang",
            show_default="tokenizer_config.json's target_lang",
            help="Target language code (data.tgt_lang).",
        ),
    ] = None,
) -> None:
    """Import an OPUS-MT (MarianMT) model as a checkpoint.

    The checkpoint then translates, evaluates and fine-tunes as one of ours does.

    \b
    Example: translator import-hf opus-mt-en-de -o runs/opus-en-de.pt
    From the hub: translator import-hf hf:Helsinki-NLP/opus-mt-en-de \\
      -o runs/opus-en-de.pt
    """
    from translator import marian

    cfg = marian.import_marian(directory, out, src_lang, tgt_lang)
    typer.echo(
        f"imported {directory} ({cfg.data.src_lang}->{cfg.data.tgt_lang}, "
        f"{cfg.model.n_encoder_layers}+{cfg.model.n_decoder_layers} layers, "
        f"d_model {cfg.model.d_model}) into {out}"
    )


def import_fairseq(
    path: Annotated[
        Path,
        typer.Argument(
            help="A fairseq Transformer checkpoint (checkpoint_best.pt), trained on "
            "SentencePiece pieces. A pickle: import only files you trust.",
            show_default=False,
        ),
    ],
    dicts: Annotated[
        Path,
        typer.Option(
            "--dicts",
            help="fairseq-preprocess's --destdir, with dict.SRC.txt and dict.TGT.txt.",
        ),
    ],
    spm_model: Annotated[
        Path,
        typer.Option("--spm", help="The SentencePiece model that cut the text (both sides)."),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Checkpoint to write.")],
    tgt_spm: Annotated[
        Optional[Path],
        typer.Option("--tgt-spm", help="The target side's own SentencePiece model, if any."),
    ] = None,
    src_lang: Annotated[
        Optional[str],
        typer.Option(
            "--src-lang",
            show_default="the checkpoint's source_lang",
            help="Source language code (data.src_lang; the dict files' suffix).",
        ),
    ] = None,
    tgt_lang: Annotated[
        Optional[str],
        typer.Option(
            "--tgt-lang",
            show_default="the checkpoint's target_lang",
            help="Target language code (data.tgt_lang).",
        ),
    ] = None,
) -> None:
    """Import a fairseq Transformer checkpoint as one of ours.

    It then translates, scores, evaluates and fine-tunes with the scores fairseq gives.

    \b
    Example: translator import-fairseq checkpoints/checkpoint_best.pt \\
      --dicts data-bin/wmt14_en_de --spm spm.model -o runs/fairseq.pt
    """
    from translator import fairseq

    cfg = fairseq.import_fairseq(path, dicts, spm_model, out, tgt_spm, src_lang, tgt_lang)
    typer.echo(
        f"imported {path} ({cfg.data.src_lang}->{cfg.data.tgt_lang}, "
        f"{cfg.model.n_encoder_layers}+{cfg.model.n_decoder_layers} layers, "
        f"d_model {cfg.model.d_model}) into {out}"
    )
