"""The score command: a model's log-probability of given translations (forced decoding)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from translator.cli.options import CkptsArg, DeviceOpt, DtypeOpt, QuietOpt, ScoreBatchTokensOpt
from translator.cli.stdout import reader_may_leave, require_stdout


def score(
    ckpt: CkptsArg,
    src: Annotated[
        Optional[Path], typer.Option("--src", help="Source file (with --tgt; else stdin).")
    ] = None,
    tgt: Annotated[
        Optional[Path], typer.Option("--tgt", help="Target file, line-aligned with --src.")
    ] = None,
    per_token: Annotated[
        bool,
        typer.Option("--per-token", help="Print the mean log-probability per target token."),
    ] = False,
    length_penalty: Annotated[
        float,
        typer.Option(
            "--length-penalty",
            min=-10.0,  # translate's range (decode.length_penalty)
            max=10.0,
            help=(
                "Divide by the GNMT length penalty of this alpha, as `translate --nbest` "
                "scores (0: the plain sum)."
            ),
        ),
    ] = 0.0,
    batch_tokens: ScoreBatchTokensOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Score translations: log p(target | source) per pair.

    Prints one number per line pair: the natural log of the probability the model gives the
    target's SentencePiece tokens and EOS (forced decoding, as fairseq's --score-reference or
    Marian's scorer); several checkpoints score as their ensemble. Pairs come from --src/--tgt,
    or stdin as source<TAB>target lines (paste src.txt tgt.txt). A pair longer than the model's
    positions prints nan, with a warning. A summary (tokens, the mean loss a token, perplexity)
    goes to stderr.

    \b
    Example: translator score runs/multi30k/best.pt --src test.en \\
      --tgt test.de --per-token
    """
    from translator import score as score_mod

    require_stdout("score")

    with reader_may_leave():  # `score ... | head`: stops at once, exit 0
        score_mod.run(
            ckpt,
            src_file=src,
            tgt_file=tgt,
            per_token=per_token,
            alpha=length_penalty,
            batch_tokens=batch_tokens,
            device=device,
            dtype=dtype,
            quiet=quiet,
        )
