"""The serve command: a model behind a JSON-over-HTTP API."""

from __future__ import annotations

from typing import Annotated

import typer

from translator.cli.options import (
    BatchTokensOpt,
    BeamOpt,
    CkptsArg,
    DeviceOpt,
    DtypeOpt,
    LengthPenaltyOpt,
    MaxLenAOpt,
    MaxLenBOpt,
    MinLenOpt,
    NoRepeatNgramOpt,
    QuietOpt,
    TerminologyOpt,
    UnkPenaltyOpt,
)


def serve(
    ckpt: CkptsArg,
    host: Annotated[
        str,
        typer.Option(
            "--host", help="Address to listen on; 0.0.0.0 for every interface (no auth: mind it)."
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port (0: any free one, printed).")
    ] = 8000,
    beam: BeamOpt = None,
    max_len_a: MaxLenAOpt = None,
    max_len_b: MaxLenBOpt = None,
    min_len: MinLenOpt = None,
    no_repeat_ngram_size: NoRepeatNgramOpt = None,
    unk_penalty: UnkPenaltyOpt = None,
    length_penalty: LengthPenaltyOpt = None,
    batch_tokens: BatchTokensOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    terminology: TerminologyOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Serve a model over HTTP (JSON).

    The model is loaded once and answers until Ctrl-C or SIGTERM, one line per request on
    stderr (not with --quiet). POST /translate takes {"text": [lines]} (optional "beam",
    "nbest"), POST /score {"source": [...], "target": [...]}; GET /health says what is served.
    A bad request gets a 4xx and {"error": ...}.

    \b
    Example: translator serve runs/multi30k/best.pt --port 8000 &
    Then: curl -s localhost:8000/translate -d '{"text": ["A dog runs."]}'
    """
    from translator import serve as serve_mod

    serve_mod.run(
        ckpt,
        host=host,
        port=port,
        beam=beam,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        min_len=min_len,
        no_repeat_ngram_size=no_repeat_ngram_size,
        unk_penalty=unk_penalty,
        length_penalty=length_penalty,
        batch_tokens=batch_tokens,
        device=device,
        dtype=dtype,
        terminology=terminology,
        quiet=quiet,
    )
