"""Attention options on Multi30k en->de (issue 21): what each costs and buys at one training budget.

    .venv/bin/python -m bench.attention_options                  # the recipe's budget: 48 min each
    .venv/bin/python -m bench.attention_options --minutes 0 --set train.max_updates=1059  # updates
    .venv/bin/python -m bench.attention_options --minutes 1 --sentences 100 --max-length 1024
    .venv/bin/python -m bench.attention_options --step-rounds 4 --max-length 0  # step cost only

For each option (a row), the Multi30k en->de recipe (`configs/multi30k-en-de.yaml`, issue 17) with
sinusoidal positions (as it was before it took RoPE from this table) and the option's one field
changed trains on the local files in a fresh process for `--minutes` of wall clock
(train.max_minutes: the loop validates and saves when it runs out; 0 = no limit), then
`translator eval`'s code scores best.pt on valid and test2016 with the recipe's beam (5), and the
average of the newest `--average` step checkpoints (the recipe's AVERAGE, 3) on valid: the recipe
keeps that average when valid prefers it. Reported: the updates done, best.pt's update, BLEU on
both and the average's valid BLEU, training target tokens/s (the mean of the logged rates after
the first), decoding sentences/s (the test2016 eval: load excluded, search and detokenisation
included), and the process's peak memory (CUDA: max allocated; CPU: peak RSS, training and
decoding together). Then the encoder alone, softmax against linear attention: the time of one
forward pass of the recipe's encoder over one source of 128 ... `--max-length` tokens (0: none).
Each option's training log is kept beside the table (`OUT.OPTION.train.log`).
`--step-rounds N` trains nothing: the options' training steps, interleaved in one process on the
same batches, N rounds (a cost the machine's drift cannot bias).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.machine import cpu_model, memory_mib
from translator import averaging, checkpoint, config, evaluate, prepare
from translator.device import resolve_device
from translator.files import atomic_write, read_lines
from translator.model.transformer import Transformer
from translator.prepared import prepared_dir

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
RECIPE = REPO / "configs" / "multi30k-en-de.yaml"
RECIPE_MINUTES = 48.0  # `make multi30k`'s BUDGET
DATA = [
    f"data.source={SHARED / 'multi30k'}",
    "data.splits.valid=valid",
    "data.splits.test=test2016",
    "data.data_dir=data",
    "data.name=bench-multi30k-8000",  # shared with bench/train.py's prepared copy
]
OPTIONS = {  # row name -> model overrides
    "sinusoidal": [],
    "learned": ["model.positions=learned"],
    "rope": ["model.positions=rope"],
    "relative": ["model.positions=relative"],
    "window 8": ["model.attention_window=8"],
    "window 16": ["model.attention_window=16"],
    "linear encoder": ["model.attention=linear"],
}


def bench_cfg(
    option: str,
    minutes: float,
    device: str,
    run_dir: Path,
    sentences: int = 0,
    log_every: int = 10,
    extra: tuple[str, ...] = (),
    average: int = 0,
) -> config.Config:
    overrides = [
        *DATA,
        "model.positions=sinusoidal",  # each row changes one field of the sinusoidal model
        *OPTIONS[option],
        *extra,  # --set, e.g. train.seed=2 for the spread between runs
        f"train.run_dir={run_dir}",
        f"train.device={device}",
        f"train.max_minutes={minutes}",
        f"train.log_every={log_every}",  # tokens/s comes from these points
        f"train.keep_last={average}",  # the step checkpoints to average, no more
        "diagnostics.enabled=false",  # their cost is not the option's
    ]
    if sentences:  # the validations choosing best.pt, else the recipe's 300
        overrides.append(f"train.valid_bleu_sentences={sentences}")
    return config.load(RECIPE, overrides)


def run_option(option: str, args) -> dict:
    """Train, evaluate and measure one option in this process -> its row."""
    from translator.train import loop  # the heavy imports only in the worker

    device = resolve_device(args.device)
    with tempfile.TemporaryDirectory(prefix="bench-attention-") as tmp:
        cfg = bench_cfg(
            option,
            args.minutes,
            str(device),
            Path(tmp) / "run",
            args.sentences,
            args.log_every,
            tuple(args.set),
            args.average,
        )
        began = time.time()
        loop.run(cfg, quiet=True)
        trained_s = time.time() - began
        run_dir = Path(cfg.train.run_dir)
        # the run's validations outlive its temporary directory, beside the table
        out = REPO / args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        kept = out.with_suffix(f".{option.replace(' ', '-')}.train.log")  # window-8
        shutil.copyfile(run_dir / "train.log", kept)

        def score(ckpt: Path, split: str) -> tuple[float, float]:
            """BLEU of `ckpt` on the split's first `--sentences` lines, and sentences/s."""
            src, ref = split_files(cfg, split, args.sentences, Path(tmp))
            began = time.time()
            done = evaluate.run(
                ckpt, src_file=src, ref_file=ref, hyp_file=Path(tmp) / "hyp", quiet=True
            )
            return done.bleu, len(read_lines(src)) / (time.time() - began)

        (valid, _), (test, sent_per_s) = (score(run_dir / "best.pt", s) for s in ("valid", "test"))
        valid_avg = None
        if args.average:  # the recipe's step: average the newest checkpoints, score on valid
            averaged = Path(tmp) / "avg.pt"
            averaging.average(checkpoint.step_files(run_dir)[-args.average :], averaged)
            valid_avg = score(averaged, "valid")[0]
        rates = train_rates(run_dir / "tensorboard")
        updates, best_update = (
            checkpoint.read(run_dir / name)["state"]["train"]["step"]
            for name in ("last.pt", "best.pt")
        )
    peak = (
        torch.cuda.max_memory_allocated(device)
        if device.type == "cuda"
        else memory_mib("VmHWM") * 2**20  # not ru_maxrss: a child's starts at its parent's peak
    )
    return {
        "option": option,
        "valid_bleu": valid,
        "test_bleu": test,
        "valid_bleu_avg": valid_avg,
        "train_tok_s": statistics.mean(rates[1:] or rates) if rates else None,
        "decode_sent_s": sent_per_s,
        "peak_mib": peak / 2**20,
        "trained_s": trained_s,
        "updates": updates,
        "best_update": best_update,
        "beam": cfg.decode.beam_size,
    }


def step_costs(args, device: torch.device) -> dict[str, list[float]]:
    """Per option, its training step's target tokens/s in each timed round (bench.train's
    interleaved_rates: the options alternate on the same batches, so the machine's drift, which
    a wall-clock budget's update count carries, cancels in the per-round ratios)."""
    from bench.train import build, interleaved_rates

    unused = REPO / "runs" / "unused"
    cfgs = {
        o: bench_cfg(o, args.minutes, str(device), unused, extra=tuple(args.set))
        for o in args.options
    }
    for cfg in cfgs.values():  # the joint vocabulary (training reads it from the tokenizer)
        cfg.model.vocab_size = cfg.data.vocab_size
    sessions = {o: build(cfg, device) for o, cfg in cfgs.items()}  # as `translator train` builds
    return interleaved_rates(sessions, cfgs[args.options[0]], device, args.step_rounds, args.steps)


def split_files(cfg: config.Config, split: str, limit: int, tmp: Path) -> tuple[Path, Path]:
    """The prepared split's source and reference text, cut to its first `limit` lines (0 = all)."""
    folder = prepared_dir(cfg.data)
    src, ref = (folder / f"{split}.{lang}" for lang in (cfg.data.src_lang, cfg.data.tgt_lang))
    if not limit:
        return src, ref
    cut = []
    for path in (src, ref):
        cut.append(tmp / f"{split}-{limit}.{path.suffix[1:]}")
        cut[-1].write_text("".join(line + "\n" for line in read_lines(path)[:limit]), "utf-8")
    return cut[0], cut[1]


def train_rates(events_dir: Path) -> list[float]:
    """The tokens/s that training logged to TensorBoard, in the order of its updates."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(events_dir)).Reload()
    tags = [t for t in events.Tags()["scalars"] if t.endswith("tokens_per_s")]
    points = sorted((e.step, e.value) for tag in tags for e in events.Scalars(tag))
    return [value for _, value in points]


def encoder_seconds(attention: str, length: int, device: torch.device, repeats: int) -> float:
    """Median seconds of one encoder forward pass over one source of `length` tokens."""
    cfg = config.load(RECIPE, ["data.data_dir=data"]).model
    cfg.vocab_size, cfg.max_positions, cfg.attention = 8000, max(length, 1024), attention
    cfg.n_decoder_layers = 1  # unused here
    torch.manual_seed(0)
    model = Transformer(cfg).to(device).eval()
    src = torch.randint(4, 8000, (1, length), device=device)
    mask = torch.ones(1, 1, 1, length, dtype=torch.bool, device=device)
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first is a warm-up
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            began = time.perf_counter()
            model.encode(src, mask)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - began)
    return statistics.median(times[1:])


def fmt(value, pattern: str) -> str:
    return "n/a" if value is None else format(value, pattern)


def report(
    args, device: torch.device, rows: list[dict], scaling: list[tuple], costs: dict | None = None
) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    on_cuda = device.type == "cuda"
    machine = torch.cuda.get_device_name(device) if on_cuda else f"CPU ({cpu_model()})"
    memory = "peak allocated MiB" if on_cuda else "peak RSS MiB"
    lines = [
        "Command: `"
        + shlex.join([".venv/bin/python", "-m", "bench.attention_options", *args.argv])
        + "`  ",
        f"Date: {when}; machine: {machine}, torch {torch.__version__}, {torch.get_num_threads()} "
        "threads"
        + (
            f"; budget {args.minutes} min of training per option; BLEU on "
            + (f"the first {args.sentences} sentences" if args.sentences else "all sentences")
            + f" of each split, beam {rows[0]['beam']}"
            if rows
            else "; no options trained"
            + (" (the training steps' cost only)" if costs else " (the encoder timing only)")
        ),
    ]
    if rows:
        lines += [
            "",
            "| option | updates | best.pt at | valid BLEU | test2016 BLEU "
            f"| valid BLEU, average of the newest {args.average} | train tok/s "
            f"| decode sent/s | {memory} |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    for r in rows:
        lines.append(
            f"| {r['option']} | {r['updates']:,} | {r['best_update']:,} | {r['valid_bleu']:.2f} "
            f"| {r['test_bleu']:.2f} | {fmt(r.get('valid_bleu_avg'), '.2f')} | "
            f"{fmt(r['train_tok_s'], ',.0f')} | {r['decode_sent_s']:.1f} | {r['peak_mib']:,.0f} |"
        )
    if costs:
        base = next(iter(costs))
        lines += [
            "",
            f"Training step, the options interleaved ({args.step_rounds} rounds of {args.steps} "
            f"batches), target tokens/s per round and the ratio to {base}:",
            "",
            f"| option | tgt tokens/s per round | vs {base} per round | median |",
            "|---|---|---|---:|",
        ]
        for option, values in costs.items():
            ratios = [v / b for v, b in zip(values, costs[base])]
            lines.append(
                f"| {option} | {', '.join(f'{v:,.0f}' for v in values)} | "
                f"{', '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f} |"
            )
    if not scaling:  # --max-length 0: no encoder timing
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "Encoder forward pass (the recipe's 3 layers, one source), ms:",
        "",
        "| source tokens | softmax | linear | softmax / linear |",
        "|---:|---:|---:|---:|",
    ]
    for length, softmax, linear in scaling:
        lines.append(
            f"| {length} | {1e3 * softmax:.1f} | {1e3 * linear:.1f} | {softmax / linear:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=RECIPE_MINUTES, help="training per option")
    # `--options` with none: only the encoder's softmax-against-linear timing (minutes, not hours)
    parser.add_argument("--options", nargs="*", default=list(OPTIONS), choices=list(OPTIONS))
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every option")
    parser.add_argument("--sentences", type=int, default=0, help="score the first N (0 = all)")
    parser.add_argument(
        "--max-length", type=int, default=4096, help="longest encoder source (0 = no timing)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed encoder passes per length")
    parser.add_argument(
        "--average", type=int, default=3, help="newest step checkpoints to average (0 = none)"
    )
    parser.add_argument("--log-every", type=int, default=10, help="updates between rate points")
    parser.add_argument(
        "--step-rounds", type=int, default=0, help="interleaved rounds of step cost, not training"
    )
    parser.add_argument("--steps", type=int, default=3, help="batches per step-cost round")
    parser.add_argument("--out", default="docs/benchmarks/attention-options.md")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one option, print JSON
    args = parser.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    if args.one:
        print(json.dumps(run_option(args.one, args)))
        return
    device = resolve_device(args.device)
    if args.options:
        unused = REPO / "runs" / "unused"
        prepare.run(
            bench_cfg("sinusoidal", args.minutes, str(device), unused, extra=tuple(args.set))
        )
    costs = step_costs(args, device) if args.step_rounds else None  # then no option trains
    rows = []
    for option in [] if costs else args.options:  # a fresh process each: its own peak memory
        cmd = [sys.executable, "-m", "bench.attention_options", "--one", option, *args.argv]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{option}: failed\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{option}: {rows[-1]}", file=sys.stderr)
    lengths = [n for n in (128, 256, 512, 1024, 2048, 4096) if n <= args.max_length]
    scaling = [
        (n, *(encoder_seconds(a, n, device, args.repeats) for a in ("softmax", "linear")))
        for n in lengths
    ]
    text = report(args, device, rows, scaling, costs)
    with atomic_write(REPO / args.out) as handle:
        handle.write(text)
    print(text)


if __name__ == "__main__":
    main()
