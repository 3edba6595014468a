"""Each CPU speed-up of our training step against the plain step, interleaved on the same batches.

    .venv/bin/python -m bench.train_ablation --config multi30k --rounds 3
    .venv/bin/python -m bench.train_ablation --config multi30k --rounds 3 --allocator default
    .venv/bin/python -m bench.train_ablation --config multi30k --max-tokens 1024 --compile

Variants of our `train_step` in one process: plain (nn.Dropout, per-parameter AdamW), each change
alone, and both; with `--compile`, both again under `torch.compile` (`train.compile`). The
allocator setting (train/allocator.py) is process-wide, so it is compared by running the whole
table once with it (`keep`, what training does) and once without (`default`, glibc's own
thresholds).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch

from bench.train import interleaved_rates, session_of
from bench.train_peer import peer_cfg
from translator.model.transformer import Transformer
from translator.train.allocator import keep_freed_memory
from translator.train.dropout import use_bits_dropout
from translator.train.session import Session, make_optimizer

# name -> (BitsDropout, fused AdamW)
VARIANTS = {
    "plain": (False, False),
    "+ BitsDropout": (True, False),
    "+ fused AdamW": (False, True),
    "both": (True, True),
}


def session(cfg, device: torch.device, bits: bool, fused_adamw: bool, compiled: bool) -> Session:
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, compile=compiled))
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model).to(device)
    if bits:
        use_bits_dropout(model)
    return session_of(cfg, model, make_optimizer(model, cfg.train, fused=fused_adamw), device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="multi30k")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=0)
    parser.add_argument("--allocator", choices=["keep", "default"], default="keep")
    parser.add_argument("--compile", action="store_true", help="add both + torch.compile")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if args.allocator == "keep":
        keep_freed_memory()
    cfg = peer_cfg(args.config, device, args.precision, args.max_tokens)
    variants = {name: (*flags, False) for name, flags in VARIANTS.items()}
    if args.compile:
        variants["both + compile"] = (True, True, True)
    sessions = {name: session(cfg, device, *flags) for name, flags in variants.items()}
    rates = interleaved_rates(sessions, cfg, device, args.rounds, steps=1)
    plain = rates["plain"]
    print(
        f"| variant (allocator: {args.allocator}) | tgt tokens/s per round | vs plain per round |"
    )
    print("|---|---|---|")
    for name, values in rates.items():
        ratios = [v / p for v, p in zip(values, plain)]
        print(
            f"| {name} | {', '.join(f'{v:,.0f}' for v in values)} | "
            f"{', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}) |"
        )


if __name__ == "__main__":
    main()
