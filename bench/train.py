"""Training throughput (target tokens per second) and peak memory of the tiny, multi30k and base
configs.

    .venv/bin/python -m bench.train        # CUDA (bf16) when present, else a short CPU run
    .venv/bin/python -m bench.train --configs tiny --updates 5 --threads 1

Each config runs in its own process: real token batches from prepared data (Multi30k for tiny and
multi30k, the WMT newstest files standing in for WMT14 for base, with the model's vocabulary at the
config's 32000), the training step of `translator train` (AdamW, label smoothing, autocast,
clipping), warm-up updates first, then timed updates. Memory: torch.cuda.max_memory_allocated on
CUDA; on CPU the process's peak resident set (VmHWM, reset just before the model is built), with
the resident set at that moment shown beside it. On CUDA the model FLOPs utilisation is reported:
the forward and backward matmul FLOPs of the real (non-padding) tokens, over the time, over the
GPU's dense bf16 peak.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.machine import cpu_model, load_average, memory_mib, reset_peak_memory
from translator import config, prepare
from translator.config import Config, ModelConfig
from translator.data.batching import Batch
from translator.data.tokenizer import PAD_ID
from translator.device import resolve_device
from translator.files import atomic_write
from translator.model.transformer import count_parameters
from translator.train.batches import TrainBatches
from translator.train.distributed import Dist
from translator.train.loop import train_step
from translator.train.precision import amp_dtype, grad_scaler
from translator.train.session import Session, make_optimizer, training_model
from translator.train.state import TrainState

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
MULTI30K = [
    f"data.source={SHARED / 'multi30k'}",
    "data.splits.valid=valid",
    "data.splits.test=test2016",
]
# newstest2013 (3000 pairs) stands in for WMT14 training text: WMT-like sentence lengths, offline
WMT = [
    f"data.source={SHARED / 'wmt'}",
    "data.splits.train=newstest2013",
    "data.splits.valid=newstest2014",
    "data.splits.test=newstest2014",
    "data.name=bench-wmt-newstest",
    "data.vocab_size=8000",
]
CONFIGS = {
    "tiny": ["data.name=bench-multi30k-4000", *MULTI30K],
    "multi30k": ["data.name=bench-multi30k-8000", *MULTI30K],
    "base": WMT,
}
CPU_MAX_TOKENS = {"tiny": 4096, "multi30k": 4096, "base": 1024}
# base's real vocabulary; ids of the smaller bench tokenizer fit in it
MODEL_VOCAB = {"base": 32000}
# dense bf16 tensor-core peaks (no sparsity), FLOP/s, by a substring of torch.cuda.get_device_name()
PEAK_BF16 = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10G": 70e12,
    "A10": 125e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
}


NOTES = """\
tgt tokens/s counts target tokens that are not padding, over the timed updates only (warm-up
excluded, CUDA synchronised before reading the clock). TFLOP/s = model FLOPs of those updates /
time: 3 x the forward matmul FLOPs of the real tokens (encoder and decoder projections and
feed-forward layers, the output projection, attention scores and values; recomputation by gradient
checkpointing not counted). MFU = TFLOP/s / the GPU's dense bf16 peak (table in bench/train.py;
`n/a` for an unknown GPU or a CPU)."""
NOTES_CPU = """\
Memory on CPU is the process's peak resident set (VmHWM, reset just before the model is built),
which includes the Python and torch libraries; the resident set at that moment is the baseline to
subtract. Not yet
measured: the CUDA path (bf16, the config's max_tokens and grad_accum_steps, 5 warm-up + 20 timed
updates, `torch.cuda.max_memory_allocated`, MFU); no GPU was available for this run."""
NOTES_CUDA = """\
Memory on CUDA is `torch.cuda.max_memory_allocated` over the timed updates: weights, gradients,
AdamW state and the step's activations (tensor bytes; the caching allocator reserves more)."""


def batch_flops(m: ModelConfig, batch: Batch) -> float:
    """Forward + backward matmul FLOPs of one batch, counting real tokens only (3 x forward)."""
    d, kv = m.d_model, (m.n_kv_heads or m.n_heads) * (m.d_model // m.n_heads)
    src_len = (batch.src != PAD_ID).sum(1).double()  # (B,)
    tgt_len = (batch.tgt_out != PAD_ID).sum(1).double()  # (B,)
    S, T = float(src_len.sum()), float(tgt_len.sum())
    encoder = m.n_encoder_layers * (
        S * (2 * d * d + 2 * d * kv + 2 * d * m.d_ff) + float((src_len**2).sum()) * 2 * d
    )
    decoder = m.n_decoder_layers * (
        T * (4 * d * d + 2 * d * kv + 2 * d * m.d_ff)
        + S * 2 * d * kv
        + float((tgt_len**2 + tgt_len * src_len).sum()) * 2 * d
    )
    return 3 * 2 * (encoder + decoder + T * d * m.vocab_size)


def bench_config(name: str, device: torch.device, args) -> dict:
    """Prepare (cached), build, warm up, time `args.updates` updates; one JSON-able result."""
    on_cuda = device.type == "cuda"
    cfg = bench_cfg(name, device, args.max_tokens)
    cfg.model.vocab_size = MODEL_VOCAB.get(name) or cfg.data.vocab_size
    reset_peak_memory()  # the peak counts from here: not imports, data loading or a parent's
    rss_before = memory_mib("VmRSS")
    s = build(cfg, device)
    data, state = TrainBatches(cfg, s.dist), TrainState()
    tokens = flops = 0.0
    for update in range(args.warmup + args.updates):
        if update == args.warmup:
            sync(device)
            start, tokens, flops = time.perf_counter(), 0.0, 0.0
            if on_cuda:
                torch.cuda.reset_peak_memory_stats(device)
        group = data.take(state, cfg.train.grad_accum_steps if on_cuda else 1)
        n = float(sum(b.n_tgt_tokens for b in group))
        train_step(s, group, n)
        tokens += n
        flops += sum(batch_flops(cfg.model, b) for b in group)
    sync(device)
    seconds = time.perf_counter() - start
    peak = PEAK_BF16.get(
        next((k for k in PEAK_BF16 if on_cuda and k in torch.cuda.get_device_name(device)), "")
    )
    return {
        "config": name,
        "params": count_parameters(s.model),
        "precision": str(s.dtype or torch.float32),
        "max_tokens": cfg.train.max_tokens,
        "accum": cfg.train.grad_accum_steps if on_cuda else 1,
        "updates": args.updates,
        "seconds": seconds,
        "tgt_tokens_per_s": tokens / seconds,
        "peak_mib": (
            torch.cuda.max_memory_allocated(device) / 2**20 if on_cuda else memory_mib("VmHWM")
        ),
        "rss_before_mib": rss_before,
        "tflops": flops / seconds / 1e12,
        "mfu": flops / seconds / peak if peak else None,
    }


def bench_cfg(name: str, device: torch.device, max_tokens: int) -> Config:
    """The config file with bench data (under data/, names starting bench-) and a CPU-sized
    batch; its data prepared (a cache hit, milliseconds, once any bench has prepared it)."""
    on_cuda = device.type == "cuda"
    max_tokens = max_tokens or (0 if on_cuda else CPU_MAX_TOKENS[name])
    overrides = [*CONFIGS[name], "data.data_dir=data", f"train.device={device}"]
    overrides += [f"train.max_tokens={max_tokens}"] if max_tokens else []
    overrides += ["train.precision=bf16"] if on_cuda else []
    cfg = config.load(REPO / "configs" / f"{name}.yaml", overrides)
    prepare.run(cfg, log=lambda message: None)
    return cfg


def build(cfg: Config, device: torch.device) -> Session:
    """The objects `translator train` builds for one process, without a run directory."""
    torch.manual_seed(cfg.train.seed)
    model = training_model(cfg.model, device, compiled=cfg.train.compile)
    return session_of(cfg, model, make_optimizer(model, cfg.train), device)


def session_of(
    cfg: Config, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> Session:
    """A one-process Session around a built model and optimizer."""
    dtype = amp_dtype(cfg.train.precision, device)
    return Session(
        cfg=cfg,
        model=model,
        net=torch.compile(model) if cfg.train.compile else model,
        optimizer=optimizer,
        scaler=grad_scaler(device, dtype),
        tokenizer=None,
        dist=Dist(device),
        dtype=dtype,
        run_dir=Path("."),
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_rates(
    sessions: dict[str, Session], cfg: Config, device: torch.device, rounds: int, steps: int
) -> dict[str, list[float]]:
    """Per session, its `train_step`'s target tokens/s in each timed round: every session steps
    through the same `steps` batches, the order rotating each round (round 0 warms up), so the
    machine's drift moves all alike within a round and per-round ratios cancel it."""
    data, state = TrainBatches(cfg, Dist(device)), TrainState()
    names = list(sessions)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):
        batches = data.take(state, steps)
        tokens = sum(b.n_tgt_tokens for b in batches)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            sync(device)
            began = time.perf_counter()
            for batch in batches:
                train_step(sessions[name], [batch], float(batch.n_tgt_tokens))
            sync(device)
            if r:
                rates[name].append(tokens / (time.perf_counter() - began))
        print(f"round {r} done", file=sys.stderr)
    return rates


def report(args, device: torch.device, results: list[dict]) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    on_cuda = device.type == "cuda"
    machine = (
        torch.cuda.get_device_name(device)
        if on_cuda
        else f"CPU ({cpu_model()}), torch threads: {args.threads}; {args.load_average}"
    )
    memory = "peak allocated (MiB)" if on_cuda else "peak RSS (MiB) | RSS before the model (MiB)"
    lines = [
        "# Training benchmark: throughput and memory",
        "",
        "Command: `" + shlex.join([".venv/bin/python", "-m", "bench.train", *args.argv]) + "`  ",
        f"Date: {when}  ",
        f"Machine: {machine}; torch {torch.__version__}  ",
        f"Each config: {args.warmup} warm-up + {args.updates} timed updates of the "
        "`translator train` step on real batches (Multi30k; for base the WMT newstest2013 text, "
        "model vocabulary 32000)",
        "",
        f"| config | parameters | precision | max_tokens x accum | tgt tokens/s | {memory} | "
        "TFLOP/s | MFU |",
        "|---|---:|---|---:|---:|---:|" + "---:|" * (2 if on_cuda else 3),
    ]
    for r in results:
        mem = f"{r['peak_mib']:.0f}" + ("" if on_cuda else f" | {r['rss_before_mib']:.0f}")
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        lines.append(
            f"| {r['config']} | {r['params'] / 1e6:.1f}M "
            f"| {r['precision'].replace('torch.', '')} | "
            f"{r['max_tokens']} x {r['accum']} | {r['tgt_tokens_per_s']:,.0f} | {mem} | "
            f"{r['tflops']:.3f} | {mfu} |"
        )
    lines += ["", NOTES_CUDA if on_cuda else NOTES_CPU, "", NOTES]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument(
        "--updates", type=int, default=0, help="timed updates; default 20 on CUDA, 3 on CPU"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed updates first; default 5 on CUDA, 1 on CPU",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=0, help="override train.max_tokens (CPU default: small)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: on a busy shared machine more threads wait on each other)",
    )
    parser.add_argument(
        "--peer-configs",
        nargs="*",
        default=["multi30k", "base"],
        help="configs run side by side with HF MarianMTModel (bench/train_peer.py); none: skip",
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds with the peer")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], help="with the peer")
    parser.add_argument(
        "--out", default="docs/benchmarks/train.md", help="page to write ('': none)"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one config, print JSON
    args = parser.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    args.load_average = load_average()  # before this run adds its own load
    device = resolve_device(args.device)
    args.updates = args.updates or (20 if device.type == "cuda" else 3)
    if args.warmup is None:  # 0 is a choice: no warm-up
        args.warmup = 5 if device.type == "cuda" else 1
    torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(bench_config(args.one, device, args)))
        return
    results = []
    for name in args.configs:  # a fresh process each, so peak memory is that config's alone
        bench_cfg(name, device, args.max_tokens)  # prepares here, not in the children at once
        cmd = [
            sys.executable,
            "-m",
            "bench.train",
            "--one",
            name,
            "--device",
            str(device),
            "--updates",
            str(args.updates),
            "--warmup",
            str(args.warmup),
            "--threads",
            str(args.threads),
            "--max-tokens",
            str(args.max_tokens),
        ]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{name}: {results[-1]['tgt_tokens_per_s']:,.0f} tgt tokens/s", file=sys.stderr)
    text = report(args, device, results)
    if args.peer_configs:
        from bench import train_peer

        text += train_peer.section(device, args)
    print(text)  # first: a failed write loses nothing
    if args.out:
        write_keeping_notes(REPO / args.out, text)


KEEP_BELOW = "<!-- bench.train writes what is above this line and keeps what is below -->"


def write_keeping_notes(path: Path, text: str) -> None:
    """Write `text`, then the hand-written sections of the old file (below the marker, or else
    from its first `## ` heading on)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if KEEP_BELOW in old:
        kept = old.split(KEEP_BELOW, 1)[1].lstrip("\n")
    else:
        kept = old[old.index("\n## ") + 1 :] if "\n## " in old else ""
    with atomic_write(path) as handle:
        handle.write(text + "\n" + KEEP_BELOW + "\n\n" + kept)


if __name__ == "__main__":
    main()
