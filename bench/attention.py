"""Cost of training's attention diagnostics against the validation they follow.

    .venv/bin/python -m bench.attention runs/tiny/best.pt --repeats 3

Loads a checkpoint with its config (the prepared data must be where the config says) and the
default `diagnostics` settings, then
alternates the validation `translator train` runs (loss over the valid split, BLEU of
train.valid_bleu_sentences decoded sentences) and the attention diagnostics that follow it
(train/attention.py: entropy and diversity of diagnostics.sentences sentences, figures),
rendering into a throw-away TensorBoard directory. Reports the median of each and their ratio.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bench.machine import cpu_model, load_average
from translator import checkpoint
from translator.config import DiagnosticsConfig
from translator.files import atomic_write
from translator.train.attention import AttentionMonitor
from translator.train.metrics import Metrics
from translator.train.validate import validate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--bleu-sentences",
        type=int,
        nargs="+",
        default=[],
        help="train.valid_bleu_sentences values to measure (default: the checkpoint's)",
    )
    parser.add_argument(
        "--out", default="docs/benchmarks/attention.md", help="page to write ('': none)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, cfg, tokenizer = checkpoint.load(args.ckpt)
    # what a run gets by default, whatever the checkpoint was trained with
    cfg.diagnostics = DiagnosticsConfig()
    monitor = AttentionMonitor(cfg, tokenizer)
    d_cfg = cfg.diagnostics
    bleu = " ".join(map(str, args.bleu_sentences or []))
    lines = [
        "# Attention diagnostics during training: cost per validation",
        "",
        f"`python -m bench.attention {args.ckpt} --repeats {args.repeats} --threads {args.threads}"
        f"{' --bleu-sentences ' + bleu if bleu else ''}`, "
        f"{datetime.date.today()}, {cpu_model()}, {torch.get_num_threads()} thread, "
        f"fp32, wall-clock seconds; {load_average()}.",
        "",
        f"Model: {cfg.model.n_encoder_layers}+{cfg.model.n_decoder_layers} layers, d_model "
        f"{cfg.model.d_model}, {cfg.model.n_heads} heads. Validation: loss over the valid split, "
        "then BLEU of the first N sentences decoded "
        f"(beam {cfg.train.valid_beam_size or cfg.decode.beam_size}). Diagnostics (default "
        f"settings): {d_cfg.sentences} sentences teacher-forced, entropy and divergence of every "
        f"head, heatmap images of {d_cfg.image_sentences} (first and last layer of each kind), "
        "a divergence image per kind; one untimed call first (it imports matplotlib once per run).",
        "",
        "| BLEU sentences N | validation, median s | diagnostics, median s | ratio "
        "| runs: validation / diagnostics (s) |",
        "| ---: | ---: | ---: | ---: | --- |",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Metrics(Path(tmp), 1, 0, quiet=True)
        monitor.log(model, 0, metrics)
        for n in args.bleu_sentences or [cfg.train.valid_bleu_sentences]:
            cfg.train.valid_bleu_sentences = n
            valid_s, diag_s = [], []
            for _ in range(args.repeats):
                began = time.time()
                validate(model, tokenizer, cfg, None)
                valid_s.append(time.time() - began)
                diag_s.append(monitor.log(model, 0, metrics))
            v, d = statistics.median(valid_s), statistics.median(diag_s)
            runs = ", ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(valid_s, diag_s))
            lines.append(f"| {n or 'all'} | {v:.2f} | {d:.2f} | **{100 * d / v:.1f}%** | {runs} |")
        metrics.close()
    state = checkpoint.read(args.ckpt)["state"].get("train", {})
    lines += [
        "",
        f"Checkpoint: update {state.get('step', '?')} of a `{cfg.data.name}` run trained with "
        f"train.precision={cfg.train.precision}.",
        "",
        "Target: the diagnostics cost at most 5% of a validation.",
        "",
    ]
    print("\n".join(lines))
    if args.out:
        with atomic_write(args.out) as handle:
            handle.write("\n".join(lines))


if __name__ == "__main__":
    main()
