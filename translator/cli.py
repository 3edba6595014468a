"""The `translator` command line: thin typer commands; each loads a config and makes one call.

torch is imported inside the command bodies so that `--help` stays instant.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from translator import __version__
from translator.errors import TranslatorError

app = typer.Typer(
    name="translator",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Train, evaluate and serve encoder-decoder Transformers for machine translation.",
)

# the usage errors of the click that typer runs on (its own copy in recent versions): the
# bases of the BadParameter it exports
UsageError = typer.BadParameter.__base__
ClickException = UsageError.__base__

ConfigArg = Annotated[
    Path, typer.Argument(help="YAML config, e.g. configs/multi30k.yaml.", show_default=False)
]
CkptArg = Annotated[
    Path, typer.Argument(help="Checkpoint written by `translator train`.", show_default=False)
]
CkptsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Checkpoint written by `translator train`; several: decoded as one ensemble "
        "(the mean of their next-token probabilities; one vocabulary).",
        show_default=False,
    ),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        "-s",
        metavar="KEY=VALUE",
        help="Override a config value, e.g. train.lr=5e-4 (repeatable).",
    ),
]
DataOpt = Annotated[
    Optional[str],
    typer.Option(
        "--data",
        metavar="PATH_OR_HF",
        help=(
            "Data source: hf:NAME[:CONFIG], or a directory of {split}.{lang}[.gz] / {split}.tsv / "
            "{split}.jsonl files or a save_to_disk dataset."
        ),
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No progress bars or log lines (warnings about the input still print).",
    ),
]
BeamOpt = Annotated[
    Optional[int],
    typer.Option("--beam", min=1, help="Beam size (1 = greedy); default from the checkpoint."),
]
LengthPenaltyOpt = Annotated[
    Optional[float],
    typer.Option("--length-penalty", help="GNMT length-penalty alpha (0 = none)."),
]
ChannelOpt = Annotated[
    Optional[list[Path]],
    typer.Option(
        "--channel",
        help="Checkpoint of the reverse direction (repeat: an ensemble): reranks each n-best by "
        "how well it reads the source back (noisy channel).",
        show_default=False,
    ),
]
ChannelWeightOpt = Annotated[
    Optional[float],
    typer.Option(
        "--channel-weight",
        min=0,
        help="Weight of the --channel score; default from the checkpoint (decode.channel_weight).",
    ),
]
ChannelCandidatesOpt = Annotated[
    Optional[int],
    typer.Option(
        "--channel-candidates",
        min=2,
        help="n-best size --channel reranks; default from the checkpoint.",
    ),
]
MaxLenAOpt = Annotated[
    Optional[float],
    typer.Option("--max-len-a", min=0, help="Output length limit a*|src|+b: a."),
]
MaxLenBOpt = Annotated[
    Optional[int], typer.Option("--max-len-b", min=0, help="Output length limit: b.")
]
MinLenOpt = Annotated[
    Optional[int], typer.Option("--min-len", min=0, help="Output tokens before EOS is allowed.")
]
BatchTokensOpt = Annotated[
    Optional[int], typer.Option("--batch-tokens", min=1, help="Source tokens per batch.")
]
DeviceOpt = Annotated[
    Optional[str],
    typer.Option(
        "--device",
        show_default="checkpoint's decode.device: auto",
        help="auto (CUDA when present), cpu, cuda or cuda:N.",
    ),
]
DtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--dtype",
        show_default="checkpoint's decode.dtype: auto",
        help="auto (bf16 where the GPU or CPU has it natively, fp16 on older GPUs, else fp32), "
        "fp32, bf16, fp16, or int8 (CPU: linear layers in dynamic int8).",
    ),
]
GraphsOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--cuda-graphs/--no-cuda-graphs",
        show_default="checkpoint's decode.cuda_graphs: on",
        help="On CUDA, replay each decoding step as one CUDA graph.",
    ),
]


def _config(path: Path, overrides: list[str] | None, data: str | None):
    from translator import config

    cfg = config.load(path, overrides or [])
    # a path or hub name taken literally (through --set it would be parsed as YAML: "a #2" is "a")
    if data:
        cfg.data = dataclasses.replace(cfg.data, source=data)
    return cfg


def _version(value: bool) -> None:
    if value:
        typer.echo(f"translator {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Train, evaluate and serve encoder-decoder Transformers for machine translation."""


@app.command()
def prepare(
    config: ConfigArg,
    set: SetOpt = None,
    data: DataOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Prepare again even if up to date.")
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Clean the corpus, train SentencePiece, write id arrays to data/<name>/ (cached by config).

    A rerun with the same data config is a cache hit. `train` does this itself when the data is
    missing; run it alone to prepare on one machine and train on another.

    Example: translator prepare configs/multi30k.yaml --data ../shared/data/multi30k \\
    --set data.splits.valid=valid --set data.splits.test=test2016
    """
    from translator import prepare as prepare_mod

    prepare_mod.run(_config(config, set, data), force=force, quiet=quiet)


@app.command()
def train(
    config: ConfigArg, set: SetOpt = None, data: DataOpt = None, quiet: QuietOpt = False
) -> None:
    """Train a Transformer; checkpoints, log and TensorBoard events go to train.run_dir.

    Prepares the data first (as `translator prepare` does) when data/<name>/ has none;
    data prepared with other data settings is refused, never replaced.
    Fine-tune with --set train.init_from=CKPT: its weights, architecture and SentencePiece model(s).
    Resumes exactly from run_dir/last.pt when it exists; Ctrl-C or SIGTERM saves last.pt and exits
    with 130 or 143, as an interrupted program does.
    Several GPUs (or CPU processes): torchrun --nproc_per_node 4 -m translator train CONFIG
    (rank 0 prepares, the others wait)

    Example: translator train configs/multi30k.yaml --data ../shared/data/multi30k \\
    --set data.splits.valid=valid --set data.splits.test=test2016
    """
    from translator.train import loop

    loop.run(_config(config, set, data), quiet=quiet)


@app.command("eval")
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
            "--lc-tok", help="Also print lowercased, tokenized BLEU (as Multi30k papers report)."
        ),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Translate a test set and print sacreBLEU (with signature) and chrF; hypotheses go to a file.

    Example: translator eval runs/multi30k/best.pt --split test --beam 4 --length-penalty 1.0
    (an ensemble: translator eval runs/a/best.pt runs/b/best.pt --split test; reranked by a
    model of the reverse direction: ... --channel runs/multi30k-de-en/best.pt)
    """
    from translator import evaluate as evaluate_mod

    _needs_channel("eval", channel, channel_weight, channel_candidates)
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
        length_penalty=length_penalty,
        batch_tokens=batch_tokens,
        lc_tok=lc_tok,
        device=device,
        dtype=dtype,
        cuda_graphs=cuda_graphs,
        channel=channel or None,
        channel_weight=channel_weight,
        channel_candidates=channel_candidates,
        quiet=quiet,
    )
    typer.echo("\n".join(scores.lines()))


@app.command()
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
                "its score); the beam widens to N if narrower."
            ),
        ),
    ] = None,
    max_len_a: MaxLenAOpt = None,
    max_len_b: MaxLenBOpt = None,
    min_len: MinLenOpt = None,
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
    quiet: QuietOpt = False,
) -> None:
    """Translate stdin to stdout: one output line per input line; an empty line gives an empty line.

    Streams: a line typed interactively is answered at once; piped input is batched,
    with a progress bar on stderr when output goes to a file and stderr to a terminal.

    A line too long for the model is split at sentence ends or word starts, translated in pieces
    and joined, with a warning (never truncated).
    Bytes that are not UTF-8 are replaced (U+FFFD), with a warning naming the line.

    Example: echo "A man rides a bike." | translator translate runs/multi30k/best.pt
    (reranked by a model of the reverse direction: ... --channel runs/multi30k-de-en/best.pt)
    """
    from translator import stream

    if alignment_layer is not None and not alignments:
        raise TranslatorError(
            "--alignment-layer without --alignments", "translate", "add --alignments"
        )
    layer = None  # no alignment pass
    if alignments:
        layer = -1 if alignment_layer is None else alignment_layer
    _needs_channel("translate", channel, channel_weight, channel_candidates)
    stream.run(
        ckpt,
        nbest=nbest,
        beam=beam,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        min_len=min_len,
        length_penalty=length_penalty,
        batch_tokens=batch_tokens,
        cuda_graphs=cuda_graphs,
        device=device,
        dtype=dtype,
        alignment_layer=layer,
        channel=channel or None,
        channel_weight=channel_weight,
        channel_candidates=channel_candidates,
        quiet=quiet,
    )


@app.command()
def attention(
    ckpt: CkptArg,
    sentences: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Source sentences; without any, stdin (one a line).", show_default=False
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
                "Directory for PNG heatmaps (sentenceI-KIND-layerL.png) "
                "and head divergences (diversity-KIND.png)."
            ),
        ),
    ] = None,
    html: Annotated[
        Optional[Path],
        typer.Option(
            "--html", help="Write one self-contained, offline HTML page to explore the maps."
        ),
    ] = None,
    words: Annotated[
        bool,
        typer.Option("--words", help="Merge SentencePiece pieces into words in figures and page."),
    ] = False,
    beam: BeamOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
) -> None:
    """Show a model's attention for a few sentences: per-head entropy table, heatmaps, an HTML page.

    Encoder self-, decoder self- and cross-attention of every layer; flags near-uniform,
    near-one-hot and near-duplicate heads (thresholds: the checkpoint's diagnostics.* config).

    Example: translator attention runs/multi30k/best.pt "A dog runs on the beach." \\
    -o attn/ --html attn.html
    """
    from translator import attention as attention_mod
    from translator import translate as translate_mod

    model, cfg, tokenizer = translate_mod.load(ckpt, device, dtype)
    lines = sentences or [line for line in sys.stdin.read().splitlines() if line.strip()]
    decode = translate_mod.with_overrides(cfg.decode, beam_size=beam)
    typer.echo(
        attention_mod.run(
            model, tokenizer, cfg.diagnostics, decode, lines, target, out, html, words
        )
    )


@app.command()
def average(
    ckpts: Annotated[
        list[Path],
        typer.Argument(
            help="Checkpoints of one run, or with --last its run directory.", show_default=False
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Averaged checkpoint to write.")],
    last: Annotated[
        Optional[int],
        typer.Option(
            "--last", min=1, help="Average the newest N step-*.pt of the run directory given."
        ),
    ] = None,
) -> None:
    """Average the parameters of several checkpoints into one (optimizer state is dropped).

    Example: translator average runs/multi30k --last 3 -o runs/multi30k/avg.pt
    """
    from translator import checkpoint

    if last is not None and len(ckpts) != 1:
        raise TranslatorError(
            "--last takes one run directory", "average", "give the run directory alone"
        )
    paths = checkpoint.latest_steps(ckpts[0], last) if last is not None else ckpts
    count = checkpoint.average([str(p) for p in paths], out)
    typer.echo(f"averaged {count} checkpoint{'s' if count != 1 else ''} into {out}")


@app.command()
def info(
    source: Annotated[
        Path, typer.Argument(help="A YAML config or a checkpoint.", show_default=False)
    ],
    set: SetOpt = None,
) -> None:
    """Print the model architecture and its parameter count.

    Example: translator info configs/base.yaml --set model.vocab_size=37000
    """
    from translator import summary

    typer.echo(summary.describe(str(source), set or []))


@app.command()
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
    """Export a checkpoint for deployment: a CTranslate2 model directory and its SentencePiece.

    Needs the optional ctranslate2 package.

    Example: translator export runs/multi30k/best.pt -o ct2-multi30k
    """
    from translator import export as export_mod

    if format != "ctranslate2":
        raise TranslatorError(f"unknown export format {format!r}", "--format", "use ctranslate2")
    export_mod.export_ctranslate2(ckpt, out, quantization)
    typer.echo(f"exported {ckpt} to {out}")


@app.command("import-hf")
def import_hf(
    directory: Annotated[
        Path,
        typer.Argument(
            help=(
                "A MarianMT model saved in Hugging Face format "
                "(config.json, weights, source.spm, target.spm, vocab.json), "
                "e.g. an OPUS-MT download."
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
    """Import an OPUS-MT (MarianMT) model as a checkpoint: translate, eval, fine-tune it.

    Example: translator import-hf opus-mt-en-de -o runs/opus-en-de.pt
    """
    from translator import marian

    cfg = marian.import_marian(directory, out, src_lang, tgt_lang)
    typer.echo(
        f"imported {directory} ({cfg.data.src_lang}->{cfg.data.tgt_lang}, "
        f"{cfg.model.n_encoder_layers}+{cfg.model.n_decoder_layers} layers, "
        f"d_model {cfg.model.d_model}) into {out}"
    )


def _needs_channel(command: str, channel, weight, candidates) -> None:
    """--channel-weight and --channel-candidates mean nothing without --channel: refuse them."""
    for flag, value in (("--channel-weight", weight), ("--channel-candidates", candidates)):
        if value is not None and not channel:
            raise TranslatorError(f"{flag} without --channel", command, "add --channel CKPT")


def _terminate(signum, frame) -> None:
    # unwinds like Ctrl-C: temporary files and directories are removed
    raise SystemExit(128 + signum)


def main() -> None:
    """The `translator` command."""
    run_command(app)


def run_command(command: typer.Typer) -> None:
    """Run a typer app as a command (`translator`, `python -m translator.recipe`): a
    TranslatorError, or an OSError (disk full, permissions), becomes one `error: ...` line and
    exit code 1; a usage error (an unknown flag, a value out of range) one line and exit code 2.
    SIGTERM exits 143 through the same clean-ups as Ctrl-C (train installs its own handler: it
    saves first)."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        args = sys.argv[1:] or ["--help"]
        if {"-h", "--help"} & set(args) and not sys.stdout.isatty():
            # piped to a pager or a file: rich's default of 80 columns cuts option names short
            os.environ.setdefault("COLUMNS", "120")
        # not standalone: click's usage errors come here, to be printed as one line
        code = command(args=args, standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)  # an int: --help's 0, Ctrl-C's 130
    except UsageError as err:
        where = err.ctx.command_path if err.ctx else Path(sys.argv[0]).name
        typer.echo(f"error: {where}: {err.format_message()} (see `{where} -h`)", err=True)
        sys.exit(err.exit_code)
    except ClickException as err:
        typer.echo(f"error: {err.format_message()}", err=True)
        sys.exit(err.exit_code)
    except typer.Abort:  # end of input at a prompt
        sys.exit(1)
    except TranslatorError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(1)
    except OSError as err:  # click already turns a closed pipe (EPIPE) into a quiet exit
        # a bytes name too (TensorBoard)
        where = f"{os.fsdecode(err.filename)}: " if err.filename else ""
        typer.echo(
            f"error: {where}{err.strerror or err} (check the path, its permissions and free space)",
            err=True,
        )
        sys.exit(1)
    finally:
        # the work is done or cleaned up: a SIGTERM during interpreter teardown ends the process
        # as by default, not as a SystemExit that Python can only print and ignore (exit 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
