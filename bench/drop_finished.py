"""Searches on real text: finished sentences leaving the batch against every row stepped to the end.

    .venv/bin/python -m bench.drop_finished runs/multi30k-en-de/avg.pt \
        ../shared/data/multi30k/valid.en --beam 5 --rounds 3

bench.decode forces every sentence of a batch to one length (its models have random weights), so
no sentence ends early there and dropping finished ones cannot show. Here a trained checkpoint
decodes a text file as `translator translate` batches it (sorted by length, `decode.batch_tokens`
per batch, the CPU conversion applied), once with `drop_finished=False` and once with the default,
alternating within each round after one untimed pass; per round the time of each, their ratio, and
whether the two found the same hypotheses.
"""

from __future__ import annotations

import argparse
import time

import torch

from translator.decode.search import search
from translator.loading import load
from translator.translate import length_batches, with_overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("source", help="a text file, one sentence per line")
    parser.add_argument("--lines", type=int, default=0, help="the first N lines (0: all)")
    parser.add_argument("--beam", type=int, default=5, help="1: greedy search")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, cfg, tokenizer = load(args.ckpt, device="cpu", dtype="fp32")
    with open(args.source, encoding="utf-8") as handle:
        lines = handle.read().splitlines()[: args.lines or None]
    ids = [row for row in tokenizer.encode(lines) if row]
    batches = list(length_batches([len(row) for row in ids], cfg.decode.batch_tokens))
    decode_cfg = with_overrides(cfg.decode, beam_size=args.beam)

    def decode(drop: bool) -> tuple[float, list]:
        began, found = time.perf_counter(), []
        for rows in batches:
            hyps = search(model, [ids[i] for i in rows], decode_cfg, drop_finished=drop)
            found += [(best[0].tokens, round(best[0].score, 4)) for best in hyps]
        return time.perf_counter() - began, found

    print(
        f"{len(ids)} sentences in {len(batches)} batches of <= {cfg.decode.batch_tokens} tokens, "
        f"beam {args.beam}, {torch.get_num_threads()} threads, fp32"
    )
    decode(True)  # untimed: the first pass warms the allocator and oneDNN's kernels
    for round_ in range(args.rounds):
        order = (False, True) if round_ % 2 == 0 else (True, False)
        timed = {drop: decode(drop) for drop in order}
        (stepped, every), (dropped, kept) = timed[False], timed[True]
        same = sum(a[0] == b[0] for a, b in zip(every, kept))
        print(
            f"round {round_}: every row stepped {stepped:.2f} s, finished dropped {dropped:.2f} s: "
            f"{stepped / dropped:.2f}x; same hypotheses {same}/{len(every)}"
        )


if __name__ == "__main__":
    main()
