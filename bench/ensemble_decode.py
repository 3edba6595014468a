"""An ensemble's step: members combined in place (model/ensemble.py) against the stacked form.

    .venv/bin/python -m bench.ensemble_decode A.pt B.pt ../shared/data/multi30k/valid.en --rounds 2

The stacked form (the members' log-softmaxes in one (M, N, T, V) tensor, then a logsumexp) was
the ensemble's step until 2026-12-04. Both decode the file as `translator translate` batches it,
alternating within each round, with one model alone beside them; per round the seconds of each,
and whether both ways found the same outputs.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from translator.loading import load_models
from translator.model.ensemble import Ensemble
from translator.translate import translate_lines


def stacked_decode(self: Ensemble, tgt, memory, src_mask, cache) -> torch.Tensor:
    memories = memory.split(self.widths, dim=-1)
    log_probs = torch.stack(
        [
            m.decode(tgt, mem, src_mask, kv).float().log_softmax(dim=-1)
            for m, mem, kv in zip(self.members, memories, cache.members)
        ]
    )  # (M, N, T, V)
    return torch.logsumexp(log_probs, dim=0) - math.log(len(self.members))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpts", nargs="+")
    parser.add_argument("src")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    ensemble, cfg, tokenizer = load_models(args.ckpts)
    single = load_models(args.ckpts[0])[0]
    lines = open(args.src, encoding="utf-8").read().splitlines()
    in_place = Ensemble.decode
    ways = {"in place": (ensemble, in_place), "stacked": (ensemble, stacked_decode)}
    ways["one model"] = (single, in_place)
    outputs = {}
    for r in range(args.rounds):
        times = []
        for name, (model, decode) in ways.items():
            Ensemble.decode = decode
            start = time.perf_counter()
            outputs[name] = [
                h[0][0] for h in translate_lines(model, tokenizer, lines, cfg.decode, data=cfg.data)
            ]
            times.append(f"{name} {time.perf_counter() - start:.1f} s")
        Ensemble.decode = in_place
        same = sum(a == b for a, b in zip(outputs["in place"], outputs["stacked"]))
        print(f"round {r + 1}: " + ", ".join(times) + f"; same outputs {same}/{len(lines)}")


if __name__ == "__main__":
    main()
