"""Commands that run a model on text: eval, translate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from translator.cli.options import (
    BatchTokensOpt,
    BeamOpt,
    ChannelCandidatesOpt,
    ChannelOpt,
    ChannelWeightOpt,
    CkptsArg,
    DeviceOpt,
    DtypeOpt,
    GraphsOpt,
    LengthPenaltyOpt,
    MaxLenAOpt,
    MaxLenBOpt,
    MinLenOpt,
    NoRepeatNgramOpt,
    QuietOpt,
    SamplingOpt,
    SamplingTopkOpt,
    SamplingToppOpt,
    SeedOpt,
    TemperatureOpt,
    TerminologyOpt,
    TokenizeOpt,
    UnkPenaltyOpt,
    needs_channel,
    sampling_from,
)
from translator.cli.stdout import (
    print_result,
    reader_may_leave,
    require_stdout,
)
from translator.errors import TranslatorError


def evaluate(
    ckpt: CkptsArg,
    split: Annotated[
        Optional[str],
        typer.Option(
            "--split", show_default="test", help="Prepared split to score: valid or test."
        ),
    ] = None,
    src: Annotated[
        Optional[Path], typer.Option("--src", help="Source file (instead of a split).")
    ] = None,
    ref: Annotated[
        Optional[Path], typer.Option("--ref", help="Reference file, line-aligned with --src.")
    ] = None,
    out: Annotated[
        Optional[Path], typer.Option("--out", "-o", help="Where to write hypotheses.")
    ] = None,
    beam: BeamOpt = None,
    max_len_a: MaxLenAOpt = None,
    max_len_b: MaxLenBOpt = None,
    min_len: MinLenOpt = None,
    no_repeat_ngram_size: NoRepeatNgramOpt = None,
    unk_penalty: UnkPenaltyOpt = None,
    length_penalty: LengthPenaltyOpt = None,
    batch_tokens: BatchTokensOpt = None,
    channel: ChannelOpt = None,
    channel_weight: ChannelWeightOpt = None,
    channel_candidates: ChannelCandidatesOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    cuda_graphs: GraphsOpt = None,
    lc_tok: Annotated[
        bool,
        typer.Option(
            "--lc-tok",
            help=(
                "Also print lowercased, tokenized BLEU (as Multi30k papers report; sacreBLEU's "
                "13a tokenizer standing in for Moses')."
            ),
        ),
    ] = False,
    tokenize: TokenizeOpt = None,
    terminology: TerminologyOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Translate a test set; print sacreBLEU and chrF.

    Each score comes with its sacreBLEU signature; the hypotheses go to a file.

    \b
    Example: translator eval runs/multi30k/best.pt --split test --beam 4 \\
      --length-penalty 1.0
    An ensemble:
      translator eval runs/a/best.pt runs/b/best.pt --split test
    Reranked by a model of the reverse direction:
      translator eval runs/multi30k/best.pt --channel runs/multi30k-de-en/best.pt
    With a term list (prints how many of its targets the output holds):
      translator eval runs/multi30k/best.pt --terminology terms.tsv --beam 5
    """
    from translator import evaluate as evaluate_mod

    require_stdout("eval")
    needs_channel("eval", channel, channel_weight, channel_candidates)
    scores = evaluate_mod.run(
        ckpt,
        split=split,
        src_file=src,
        ref_file=ref,
        hyp_file=out,
        beam=beam,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        min_len=min_len,
        no_repeat_ngram_size=no_repeat_ngram_size,
        unk_penalty=unk_penalty,
        length_penalty=length_penalty,
        batch_tokens=batch_tokens,
        lc_tok=lc_tok,
        tokenize=tokenize,
        device=device,
        dtype=dtype,
        cuda_graphs=cuda_graphs,
        channel=channel or None,
        channel_weight=channel_weight,
        channel_candidates=channel_candidates,
        terminology=terminology,
        quiet=quiet,
    )
    print_result("\n".join(scores.lines()), "the scores")


def translate(
    ckpt: CkptsArg,
    beam: BeamOpt = None,
    nbest: Annotated[
        Optional[int],
        typer.Option(
            "--nbest",
            min=1,
            help=(
                "Print up to N best as TSV: line (from 0), text, score (1 too: the best with "
                "its score); the beam widens to N if narrower; with --sampling, N draws."
            ),
        ),
    ] = None,
    max_len_a: MaxLenAOpt = None,
    max_len_b: MaxLenBOpt = None,
    min_len: MinLenOpt = None,
    no_repeat_ngram_size: NoRepeatNgramOpt = None,
    unk_penalty: UnkPenaltyOpt = None,
    length_penalty: LengthPenaltyOpt = None,
    batch_tokens: BatchTokensOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    cuda_graphs: GraphsOpt = None,
    alignments: Annotated[
        bool,
        typer.Option(
            "--alignments",
            help=(
                "Append a TAB and the source-target word alignment read from cross-attention, "
                "as Pharaoh pairs (0-0 1-2 ...)."
            ),
        ),
    ] = False,
    alignment_layer: Annotated[
        Optional[int],
        typer.Option(
            "--alignment-layer",
            show_default="-1",
            help=(
                "Decoder layer whose cross-attention (mean of heads) gives --alignments; "
                "from 0, negative from the last."
            ),
        ),
    ] = None,
    channel: ChannelOpt = None,
    channel_weight: ChannelWeightOpt = None,
    channel_candidates: ChannelCandidatesOpt = None,
    sampling: SamplingOpt = False,
    sampling_topk: SamplingTopkOpt = None,
    sampling_topp: SamplingToppOpt = None,
    temperature: TemperatureOpt = None,
    seed: SeedOpt = None,
    prefix: Annotated[
        bool,
        typer.Option(
            "--prefix",
            help=(
                "Each input line is SOURCE<TAB>PREFIX: its translation starts with PREFIX and "
                "continues it (scored with it); a line without a TAB has none."
            ),
        ),
    ] = False,
    constraints: Annotated[
        bool,
        typer.Option(
            "--constraints",
            help=(
                "Each input line is SOURCE<TAB>PHRASE<TAB>...: its translation holds every "
                "PHRASE (terminology); a beam wider than their tokens places them better."
            ),
        ),
    ] = False,
    terminology: TerminologyOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Translate stdin to stdout, one line out per line in.

    An empty line gives an empty line.

    Streams: a line typed interactively is answered at once; piped input is batched,
    with a progress bar on stderr when output goes to a file and stderr to a terminal.

    A line too long for the model is split at sentence ends or word starts, translated in pieces
    and joined, with a warning (never truncated).
    Bytes that are not UTF-8 are replaced (U+FFFD), with a warning naming the line.

    \b
    Example: echo "A man rides a bike." | \\
      translator translate runs/multi30k/best.pt
    Reranked by a model of the reverse direction: ... \\
      --channel runs/multi30k-de-en/best.pt
    Sampled, for back-translation: ... --sampling --sampling-topk 10 --seed 1
    A translator's first words, continued (SOURCE<TAB>PREFIX):
      printf 'A man rides a bike.\\tEin Mann' | translator translate \\
      runs/multi30k/best.pt --prefix
    Terms the translation must hold (SOURCE<TAB>PHRASE<TAB>...):
      printf 'A man rides a bike.\\tFahrrad' | translator translate \\
      runs/multi30k/best.pt --constraints --beam 5
    Terms from a list: ... --terminology terms.tsv --beam 5
    """
    from translator import stream

    if alignment_layer is not None and not alignments:
        raise TranslatorError(
            "--alignment-layer without --alignments", "translate", "add --alignments"
        )
    layer = None  # no alignment pass
    if alignments:
        layer = -1 if alignment_layer is None else alignment_layer
    if prefix and constraints:
        raise TranslatorError(
            "--prefix and --constraints both read the text after a TAB",
            "translate",
            "give one of them",
        )
    if (constraints or terminology) and (prefix or sampling):
        raise TranslatorError(
            "constraints do not combine with --prefix or --sampling",
            "--terminology" if terminology else "--constraints",
            "give one of them",
        )
    needs_channel("translate", channel, channel_weight, channel_candidates)
    drawn = sampling_from(sampling, sampling_topk, sampling_topp, temperature, seed, beam, channel)
    with reader_may_leave():  # `translate < in | head`: stops at once, exit 0
        stream.run(
            ckpt,
            nbest=nbest,
            beam=beam,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            min_len=min_len,
            no_repeat_ngram_size=no_repeat_ngram_size,
            unk_penalty=unk_penalty,
            length_penalty=length_penalty,
            batch_tokens=batch_tokens,
            cuda_graphs=cuda_graphs,
            device=device,
            dtype=dtype,
            alignment_layer=layer,
            channel=channel or None,
            channel_weight=channel_weight,
            channel_candidates=channel_candidates,
            sampling=drawn,
            prefix=prefix,
            constraints=constraints,
            terminology=terminology,
            quiet=quiet,
        )
