"""Our training step side by side with Hugging Face MarianMTModel's, same sizes, same token batches.

    .venv/bin/python -m bench.train_peer --configs multi30k --rounds 3  # also run by bench.train

Both models are built from the config's ModelConfig (bench/hf_marian.py's `marian_config` maps
every choice Marian has; where it has none the difference is named in NOT_MAPPED). Each round takes
the next `--steps` prepared batches and runs them through both systems, the order alternating from
round to round, so a slow spell of a shared machine hits both; the ratio is taken per round. Both
losses are the label-smoothed sum over the logits (HF's the plain `token_loss`, as MarianMTModel
computes it; ours on CPU the chunked one that `translator train` runs); both optimizers are torch's
fused AdamW with the config's settings (HF's Trainer builds it so by default with torch >= 2.8).
Peak memory: each system again in its own short subprocess (`--memory SYSTEM`), as the process's
peak resident set above the resident set before the model was built (CPU), or
torch.cuda.max_memory_allocated (CUDA).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.hf_marian import NOT_MAPPED, build_peer, peer_step
from bench.train import REPO, bench_cfg, build, sync
from translator.config import Config
from translator.device import cpu_native_bf16
from translator.train.batches import TrainBatches
from translator.train.distributed import Dist
from translator.train.loop import train_step
from translator.train.state import TrainState

SYSTEMS = {"ours": "ours (`train_step`)", "hf": "HF MarianMTModel"}


def peer_cfg(name: str, device: torch.device, precision: str, max_tokens: int) -> Config:
    cfg = bench_cfg(name, device, max_tokens)
    cfg.train.precision = precision
    from bench.train import MODEL_VOCAB

    cfg.model.vocab_size = MODEL_VOCAB.get(name) or cfg.data.vocab_size
    return cfg


def steppers(cfg: Config, device: torch.device, systems: list[str]) -> dict:
    """system -> (step(batch, tokens), its model), each system built from the same seed."""
    from translator.train.precision import amp_dtype

    out = {}
    for system in systems:
        if system == "ours":
            s = build(cfg, device)
            out[system] = (lambda batch, n, s=s: train_step(s, [batch], n)), s.model
        else:
            p = build_peer(cfg, device, amp_dtype(cfg.train.precision, device))
            out[system] = (lambda batch, n, p=p: peer_step(p, batch, n)), p.model
    return out


def interleaved(cfg: Config, device: torch.device, rounds: int, steps: int) -> list[dict]:
    """Per timed round: each system's target tokens/s over the same `steps` batches."""
    step = steppers(cfg, device, list(SYSTEMS))
    data, state = TrainBatches(cfg, Dist(device)), TrainState()
    results = []
    for r in range(rounds + 1):  # round 0 warms both up and is not kept
        group = data.take(state, steps)
        tokens = float(sum(b.n_tgt_tokens for b in group))
        seconds = {}
        for system in list(SYSTEMS)[:: 1 if r % 2 else -1]:
            sync(device)
            start = time.perf_counter()
            for batch in group:
                step[system][0](batch, float(batch.n_tgt_tokens))
            sync(device)
            seconds[system] = time.perf_counter() - start
        if r:
            rate = {k: tokens / v for k, v in seconds.items()}
            results.append({**rate, "ratio": rate["ours"] / rate["hf"], "tokens": tokens})
            print(
                f"  round {r}: ours {rate['ours']:,.0f}, HF {rate['hf']:,.0f} tgt tok/s, "
                f"ours/HF {results[-1]['ratio']:.2f}",
                file=sys.stderr,
            )
    if shift := ratio_shift(results):
        print(f"  warning: {shift}", file=sys.stderr)
    return results


def memory_pass(system: str, cfg: Config, device: torch.device, steps: int) -> dict:
    """Run `steps` updates of one system; its peak memory (this process must hold nothing else).

    On CPU the kernel's peak resident set (VmHWM) is reset just before the model is built
    (/proc/self/clear_refs), so imports and data loading do not set the peak.
    """
    import transformers  # noqa: F401  (both baselines include the library, so they compare)

    data, state = TrainBatches(cfg, Dist(device)), TrainState()
    group = data.take(state, steps)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = proc_status("VmRSS")
    step, _ = steppers(cfg, device, [system])[system]
    for batch in group:
        step(batch, float(batch.n_tgt_tokens))
    if device.type == "cuda":
        return {"peak_mib": torch.cuda.max_memory_allocated(device) / 2**20, "before_mib": 0.0}
    return {"peak_mib": (proc_status("VmHWM") - before) / 2**20, "before_mib": before / 2**20}


def proc_status(field: str) -> float:
    """A memory field of /proc/self/status in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1]) * 1024  # kB
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_memory(name: str, device: torch.device, precision: str, args) -> dict:
    """system -> its memory pass's result, each in a fresh subprocess."""
    out = {}
    for system in SYSTEMS:
        cmd = [sys.executable, "-m", "bench.train_peer", "--memory", system, "--configs", name]
        cmd += ["--device", str(device), "--precisions", precision, "--threads", str(args.threads)]
        cmd += ["--max-tokens", str(args.max_tokens), "--steps", str(args.steps)]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True)
        out[system] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def precisions(device: torch.device, asked: list[str]) -> tuple[list[str], str]:
    """The precisions to run and a note on any skipped (bf16 on a CPU that only emulates it)."""
    if device.type == "cpu" and "bf16" in asked and not cpu_native_bf16():
        note = (
            "bf16 skipped: this CPU has no native bf16 (AVX512-BF16, AMX or Arm BF16), so oneDNN "
            "emulates it and its numbers would say nothing; run the bench where the CPU has it"
        )
        return [p for p in asked if p != "bf16"], note
    return asked, ""


def run(device: torch.device, args) -> tuple[list[dict], str]:
    """Every (config, precision): interleaved rounds and both memory passes."""
    chosen, note = precisions(device, args.precisions)
    rows = []
    for name in args.configs:
        for precision in chosen:
            cfg = peer_cfg(name, device, precision, args.max_tokens)
            print(f"{name} {precision}: {args.rounds} interleaved rounds", file=sys.stderr)
            rounds = interleaved(cfg, device, args.rounds, args.steps)
            memory = measure_memory(name, device, precision, args)
            rows.append(
                {"config": name, "precision": precision, "max_tokens": cfg.train.max_tokens}
                | {"rounds": rounds, "memory": memory}
            )
    return rows, note


# a step in the per-round ratio smaller than this is not named, however clean
RATIO_SHIFT = 0.10


def ratio_shift(rounds: list[dict]) -> str:
    """A sentence naming a step in the ours / HF ratio, "" where there is none.

    The machine's drift slows both systems alike and leaves the ratio; a step is one system's
    speed changing on its own, so that the run's median mixes two states. A step: a split of
    the rounds, at least 2 on each side, where every ratio on one side lies above every ratio on
    the other, the gap between the sides is wider than either side's own spread (noise does not
    make two such levels), and the sides' medians differ by more than RATIO_SHIFT.
    """
    ratios = [r["ratio"] for r in rounds]
    steps = []
    for k in range(2, len(ratios) - 1):
        before, after = ratios[:k], ratios[k:]
        low, high = sorted((before, after), key=max)
        gap = min(high) - max(low)
        spread = max(max(side) - min(side) for side in (before, after))
        shift = statistics.median(high) / statistics.median(low) - 1
        if gap > spread and shift > RATIO_SHIFT:
            steps.append((gap, k))
    if not steps:
        return ""
    k = max(steps)[1]
    first, second = rounds[:k], rounds[k:]
    moves = ", ".join(
        f"{label} {statistics.median(r[s] for r in first):,.0f} -> "
        f"{statistics.median(r[s] for r in second):,.0f} tgt tok/s"
        for s, label in (("ours", "ours"), ("hf", "HF"))
    )
    return (
        f"ours / HF stepped from {statistics.median(ratios[:k]):.2f} (rounds 1-{k}) to "
        f"{statistics.median(ratios[k:]):.2f} (rounds {k + 1}-{len(ratios)}): one system's "
        f"speed changed on its own ({moves}), so the median mixes two states; rerun"
    )


def table(rows: list[dict], on_cuda: bool) -> list[str]:
    """Markdown: one line per (config, precision, system), then the per-round ratios."""
    memory = "peak allocated (MiB)" if on_cuda else "peak RSS above the start (MiB)"
    lines = [
        f"| config | precision | system | tgt tokens/s per round | median | {memory} |",
        "|---|---|---|---|---:|---:|",
    ]
    for row in rows:
        for system, label in SYSTEMS.items():
            rates = [r[system] for r in row["rounds"]]
            lines.append(
                f"| {row['config']} ({row['max_tokens']} tokens) | {row['precision']} | {label} | "
                + ", ".join(f"{x:,.0f}" for x in rates)
                + f" | {statistics.median(rates):,.0f} | {row['memory'][system]['peak_mib']:.0f} |"
            )
        ratios = [r["ratio"] for r in row["rounds"]]
        lines.append(
            "| | | **ours / HF** | "
            + ", ".join(f"{x:.2f}" for x in ratios)
            + f" | **{statistics.median(ratios):.2f}** | |"
        )
    shifts = [(row, ratio_shift(row["rounds"])) for row in rows]
    lines += [f"\n**{r['config']} {r['precision']}**: {s}." for r, s in shifts if s]
    return lines


METHOD = """\
Each round feeds the same prepared batches (`--steps` per round, `max_tokens` per side) to both
systems, in alternating order; round 0 warms both up and is not shown. Both are built from the
config's model section at its sizes (joint vocabulary, tied embeddings, sinusoidal positions, ReLU,
dropout, embedding scale); the loss of both is the label-smoothed sum, padding left out (HF's the
plain `token_loss`, as MarianMTModel computes it) and both optimizers are torch's fused AdamW with
the config's settings (HF's Trainer default since torch 2.8; the peer's AdamW was the per-parameter
loop before 2026-12-06). Ours is the `translator train` step as it runs (train/session.py: on CPU
BitsDropout, the chunked loss, fused AdamW, glibc keeping freed memory); one process, so HF's step
runs under the same allocator setting. On CUDA HF's step gets our choice of SDPA kernels too (all
but cuDNN's, whose plan for each new shape dominated short runs: docs/benchmarks/train.md). Peak
memory: each system alone in a fresh subprocess for `--steps` updates of the first batches; CPU: the
rise of the kernel's peak resident set (VmHWM, reset just before the model is built), so model,
gradients, optimizer state and activations, with allocator slack; CUDA:
torch.cuda.max_memory_allocated."""


def section(device: torch.device, args) -> str:
    """The side-by-side part of docs/benchmarks/train.md, for bench.train's main()."""
    peer_args = argparse.Namespace(
        configs=args.peer_configs,
        precisions=args.precisions,
        rounds=args.rounds,
        steps=2,
        threads=args.threads,
        max_tokens=args.max_tokens,
    )
    rows, note = run(device, peer_args)
    lines = ["", "## Side by side with Hugging Face MarianMTModel (bench/train_peer.py)", ""]
    lines += [METHOD, "", f"Not the same in both: {NOT_MAPPED}.", ""]
    lines += table(rows, device.type == "cuda") + ([""] + [note] if note else [])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--memory", choices=list(SYSTEMS), help=argparse.SUPPRESS)  # internal
    args = parser.parse_args(argv)
    from translator.device import resolve_device

    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    if args.memory:
        cfg = peer_cfg(args.configs[0], device, args.precisions[0], args.max_tokens)
        print(json.dumps(memory_pass(args.memory, cfg, device, args.steps)))
        return
    rows, note = run(device, args)
    print("\n".join(table(rows, device.type == "cuda") + ["", note]))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", nargs="+", default=["multi30k", "base"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--rounds", type=int, default=5, help="timed interleaved rounds")
    parser.add_argument("--steps", type=int, default=2, help="updates per system per round")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=0)


if __name__ == "__main__":
    main()
