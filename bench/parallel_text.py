"""What the benchmarks on a model and real parallel text share: their arguments (a checkpoint, a
source file and its references) and reading them."""

from __future__ import annotations

import argparse

import torch

from translator.loading import load


def parser(description: str) -> argparse.ArgumentParser:
    """CKPT SOURCE REFERENCE [--lines N] [--beam K] [--threads T]; add a benchmark's own after."""
    made = argparse.ArgumentParser(description=description)
    made.add_argument("ckpt")
    made.add_argument("source", help="a text file, one sentence per line")
    made.add_argument("reference", help="its translations, line by line")
    made.add_argument("--lines", type=int, default=0, help="the first N lines (0: all)")
    made.add_argument("--beam", type=int, default=5)
    made.add_argument("--threads", type=int, default=2)
    return made


def model_and_text(args: argparse.Namespace):
    """(model, cfg, tokenizer) in fp32 on the CPU with args.threads threads, and the first
    args.lines source lines with their references."""
    torch.set_num_threads(args.threads)
    model, cfg, tokenizer = load(args.ckpt, device="cpu", dtype="fp32")
    with open(args.source, encoding="utf-8") as src, open(args.reference, encoding="utf-8") as ref:
        sources = src.read().splitlines()[: args.lines or None]
        references = ref.read().splitlines()[: len(sources)]
    return (model, cfg, tokenizer), sources, references
