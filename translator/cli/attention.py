"""The `attention` command: a model's attention for a few sentences, as a table, figures, a page
or text."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from translator.cli.options import BeamOpt, CkptArg, DeviceOpt, DtypeOpt
from translator.cli.stdout import print_result, require_stdout, utf8_argument


def attention(
    ckpt: CkptArg,
    sentences: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Source sentences; without any, stdin (one a line; blank lines skipped).",
            show_default=False,
        ),
    ] = None,
    target: Annotated[
        Optional[list[str]],
        typer.Option(
            "--target",
            "-t",
            help=(
                "A translation to force-decode, one per sentence in order (repeatable); "
                "default: the model's own search output."
            ),
        ),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            "-o",
            help=(
                "Directory for PNG heatmaps and head divergences (files named in the help above)."
            ),
        ),
    ] = None,
    html: Annotated[
        Optional[Path],
        typer.Option(
            "--html", help="Write one self-contained, offline HTML page to explore the maps."
        ),
    ] = None,
    tsv: Annotated[
        Optional[Path],
        typer.Option(
            "--tsv",
            help="Write every weight as a row of a TSV file (sentence, kind, layer, head, query, "
            "key, weight): the maps as text, for scripts and screen readers.",
        ),
    ] = None,
    words: Annotated[
        bool,
        typer.Option(
            "--words", help="Merge SentencePiece pieces into words in figures, page and TSV."
        ),
    ] = False,
    beam: BeamOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
) -> None:
    """Show a model's attention for a few sentences.

    Prints a per-head entropy table of the encoder's self-attention, the decoder's self-attention
    and the cross-attention of every layer, and names the heads that are almost uniform, almost
    one-hot or almost duplicates of another (thresholds: the checkpoint's diagnostics.* config).
    With -o, PNG heatmaps and head divergences go to a directory; with --html, one offline page;
    with --tsv, every weight as text:

    \b
      DIR/sentenceI-KIND-layerL.png   DIR/diversity-KIND.png

    \b
    Example: translator attention runs/multi30k/best.pt \\
      "A dog runs on the beach." -o attn/ --html attn.html
    """
    from translator import attention as attention_mod
    from translator.loading import load
    from translator.translate import with_overrides

    require_stdout("attention")  # the table is the result
    model, cfg, tokenizer = load(ckpt, device, dtype)
    # lines end at "\n" alone (as for translate: U+2028 inside a sentence does not split it)
    text = sys.stdin.read() if not sentences else ""  # UTF-8: see cli.stdout.use_utf8
    lines = [utf8_argument(s) for s in sentences or []]
    lines = lines or [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    targets = None if target is None else [utf8_argument(t) for t in target]
    decode = with_overrides(cfg.decode, beam_size=beam)
    table = attention_mod.run(
        model,
        tokenizer,
        cfg.diagnostics,
        decode,
        lines,
        targets,
        out,
        html,
        words,
        (cfg.data.src_lang, cfg.data.tgt_lang),
        tsv,
    )
    print_result(table, "the attention table")
