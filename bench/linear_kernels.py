"""A CPU decoding step's fp32 products, kernel by kernel: how near the CPU's peak they run.

    .venv/bin/python -m bench.linear_kernels --rows 128 --rounds 5

The base model's linears as beam 4 over 32 sentences meets them (128 rows: d 512 -> 512,
512 -> 2048, 2048 -> 512, and the 512 -> 32000 output projection), each through three kernels:
`F.linear` (PyTorch's CPU fp32 path, MKL's sgemm: what Hugging Face's model runs), oneDNN with
its weight packed once (ours: translator/model/inference.py) and MKL's packed sgemm (the one
`torch.ops.mkl._mkl_linear` offers). Rounds alternate the kernels; a round's figure is its best
of `--calls` calls. Prints GFLOP/s (2 x rows x in x out a call) per kernel, median over rounds,
and the rate of a 2048^3 matmul as the CPU's reachable peak.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench.machine import cpu_model

SHAPES = [(512, 512), (512, 2048), (2048, 512), (512, 32000)]  # (in, out), base size
PEAK = 2048  # the square matmul whose rate stands for the CPU's reachable fp32 peak


def kernels(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The three ways to compute x w^T + b; each returns the same values (up to rounding)."""
    rows = x.shape[0]
    onednn_w = torch.ops.mkldnn._reorder_linear_weight(w, rows)
    mkl_w = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
    onednn = torch.ops.mkldnn._linear_pointwise
    return {
        "F.linear (MKL sgemm)": lambda: F.linear(x, w, b),
        "oneDNN, packed": lambda: onednn(x, onednn_w, b, "none", [], ""),
        "MKL, packed": lambda: torch.ops.mkl._mkl_linear(x, mkl_w, w, b, rows),
    }


def best_seconds(call: Callable[[], object], calls: int) -> float:
    call()  # warm: first-touch of the output, caches
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=128, help="batch x beam rows of a step")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"{cpu_model()}, {args.threads} threads, torch {torch.__version__}, rows {args.rows}\n")
    print("| in -> out | " + " | ".join(kernels(*_inputs(args.rows, 8, 8)).keys()) + " |")
    print("|---|---:|---:|---:|")
    with torch.inference_mode():
        for n_in, n_out in SHAPES:
            calls = kernels(*_inputs(args.rows, n_in, n_out))
            rates: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(args.rounds):
                for name, call in calls.items():
                    flops = 2 * args.rows * n_in * n_out
                    rates[name].append(flops / best_seconds(call, args.calls) / 1e9)
            cells = [f"{statistics.median(r):.0f}" for r in rates.values()]
            print(f"| {n_in} -> {n_out} | " + " | ".join(cells) + " |")
        # what the CPU reaches on a product large enough to run at its best: the peak to compare
        x, w, _ = _inputs(PEAK, PEAK, PEAK)
        peak = 2 * PEAK**3 / best_seconds(lambda: x @ w, args.calls) / 1e9
    print(f"\nreachable peak: {peak:.0f} GFLOP/s (a {PEAK}^3 fp32 matmul, best of {args.calls})")


def _inputs(rows: int, n_in: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(rows, n_in), torch.randn(n_out, n_in) * 0.02, torch.randn(n_out)


if __name__ == "__main__":
    main()
