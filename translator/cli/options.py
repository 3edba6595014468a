"""What the commands share: their common arguments and options, and loading a config."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from translator.errors import TranslatorError

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
        help="Override a config value, e.g. train.lr=5e-4 (repeatable; `translator keys` lists "
        "them).",
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
TerminologyOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--terminology",
        help=(
            "A term list, SOURCE<TAB>TARGET a line: a line holding a source term (a whole word, "
            "any case) gets its target as a constraint."
        ),
    ),
]
BeamOpt = Annotated[
    Optional[int],
    typer.Option("--beam", min=1, help="Beam size (1 = greedy); default from the checkpoint."),
]
LengthPenaltyOpt = Annotated[
    Optional[float],
    # the ranges here are decode.*'s (config/decode.py), so that the help shows them
    typer.Option("--length-penalty", min=-10, max=10, help="GNMT length-penalty alpha (0 = none)."),
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
        max=100,
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
    typer.Option("--max-len-a", min=0, max=1000, help="Output length limit a*|src|+b: a."),
]
MaxLenBOpt = Annotated[
    Optional[int], typer.Option("--max-len-b", min=0, help="Output length limit: b.")
]
MinLenOpt = Annotated[
    Optional[int], typer.Option("--min-len", min=0, help="Output tokens before EOS is allowed.")
]
NoRepeatNgramOpt = Annotated[
    Optional[int],
    typer.Option(
        "--no-repeat-ngram-size",
        min=0,
        metavar="N",
        help="No n-gram of output tokens (subword pieces) twice; 0: off.",
    ),
]
UnkPenaltyOpt = Annotated[
    Optional[float],
    typer.Option(
        "--unk-penalty",
        min=-1000,
        max=1000,
        help="Taken from <unk>'s log-prob each step (fewer <unk>; 100: none); in the scores.",
    ),
]
BatchTokensOpt = Annotated[
    Optional[int],
    typer.Option(
        "--batch-tokens",
        min=1,
        help="Source tokens per batch, padding included; default from the checkpoint.",
    ),
]
ScoreBatchTokensOpt = Annotated[
    Optional[int],
    typer.Option(
        "--batch-tokens",
        min=1,
        help="Tokens per batch: rows x (the longer side + 1), padding included; default from "
        "the checkpoint.",
    ),
]
SamplingOpt = Annotated[
    bool,
    typer.Option(
        "--sampling",
        help=(
            "Draw each token from the model's distribution instead of searching (varied "
            "back-translations); reproducible per line with --seed."
        ),
    ),
]
SamplingTopkOpt = Annotated[
    Optional[int],
    typer.Option(
        "--sampling-topk", min=0, show_default="0: all", help="Draw from the K most likely."
    ),
]
SamplingToppOpt = Annotated[
    Optional[float],
    typer.Option(
        "--sampling-topp",
        min=0.0,
        max=1.0,
        show_default="1",
        help="Draw from the most likely tokens holding probability P (nucleus).",
    ),
]
TemperatureOpt = Annotated[
    Optional[float],
    typer.Option(
        "--temperature",
        min=0.01,  # decode/sampling.py's TEMPERATURES, shown in the help
        max=100.0,
        show_default="1",
        help="Divide the log-probabilities by T before drawing (<1 sharper).",
    ),
]
SeedOpt = Annotated[
    Optional[int],
    typer.Option("--seed", min=0, show_default="0", help="Seed of --sampling's draws."),
]


def _device_name(value: str | None) -> str | None:
    """--device checked as the command line is read (a usage error), before any model loads."""
    if value is not None and not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise typer.BadParameter(f"{value!r} is not auto, cpu, cuda or cuda:N")
    return value


def _dtype_name(value: str | None) -> str | None:
    """--dtype checked as the command line is read (a usage error), before any model loads."""
    if value is None:
        return value
    from translator.device import DTYPES

    names = ["auto", *DTYPES, "int8"]
    if value not in names:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(names)}")
    return value


def _bleu_tokenizer(value: str | None) -> str | None:
    """--tokenize checked as the command line is read (a usage error), before any model loads."""
    if value is None:
        return value
    from typing import get_args

    from translator.config.train import BleuTokenizer

    names = [name for name in get_args(BleuTokenizer) if name]
    if value not in names:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(names)}")
    return value


TokenizeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--tokenize",
        callback=_bleu_tokenizer,
        show_default="checkpoint's train.valid_bleu_tokenize, else by the target language",
        help="sacreBLEU's BLEU tokenizer: 13a, intl, char, zh, ja-mecab, ko-mecab or none (by "
        "the target language, as sacrebleu -l does: zh, ja-mecab, ko-mecab, else 13a; char suits "
        "Thai, Lao, Burmese and Khmer, which no language code maps).",
    ),
]
DeviceOpt = Annotated[
    Optional[str],
    typer.Option(
        "--device",
        callback=_device_name,
        show_default="checkpoint's decode.device: auto",
        help="auto (CUDA when present), cpu, cuda or cuda:N.",
    ),
]
DtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--dtype",
        callback=_dtype_name,
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


def load_config(path: Path, overrides: list[str] | None, data: str | None):
    """The config at path with --set overrides and --data applied."""
    from translator import config
    from translator.config.checks import data_source

    cfg = config.load(path, overrides or [])
    # a path or hub name taken literally (through --set it would be parsed as YAML: "a #2" is "a")
    if data is not None:  # "" too: an unset $DATA in `--data "$DATA"` is refused, not ignored
        cfg.data = dataclasses.replace(cfg.data, source=data_source(data, "--data"))
    return cfg


def needs_channel(command: str, channel, weight, candidates) -> None:
    """--channel-weight and --channel-candidates mean nothing without --channel: refuse them."""
    for flag, value in (("--channel-weight", weight), ("--channel-candidates", candidates)):
        if value is not None and not channel:
            raise TranslatorError(f"{flag} without --channel", command, "add --channel CKPT")


def sampling_from(
    sampling: bool,
    top_k: int | None,
    top_p: float | None,
    temperature: float | None,
    seed: int | None,
    beam: int | None,
    channel: list | None,
):
    """translate's --sampling and its settings -> decode.sampling.Sampling, or None; its settings
    without --sampling, or a beam or channel beside it, are refused."""
    from translator.decode.sampling import Sampling
    from translator.translate import check_sampling

    given = {
        "--sampling-topk": top_k,
        "--sampling-topp": top_p,
        "--temperature": temperature,
        "--seed": seed,
    }
    if not sampling:
        for flag, value in given.items():
            if value is not None:
                raise TranslatorError(f"{flag} without --sampling", "translate", "add --sampling")
        return None
    if beam is not None and beam > 1:
        raise TranslatorError(
            "--sampling draws one token a step, --beam searches", "translate", "give one of them"
        )
    check_sampling(bool(channel))  # before the model loads
    return Sampling(
        temperature=1.0 if temperature is None else temperature,
        top_k=top_k or 0,
        top_p=1.0 if top_p is None else top_p,
        seed=seed or 0,
    )
